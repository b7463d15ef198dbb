//! A command's heartbeat: progress without output. A client that wants it
//! sends the `env` request [`crate::vars::HEARTBEAT`]; the agent then gives the command
//! a file of its own, named by [`crate::vars::HEARTBEAT_FILE`], watches its modification time
//! (`crate::heartbeat`), and after each look that finds it touched sends one
//! message on extended data stream [`EXT_HEARTBEAT`] (its bytes say nothing).
//!
//! Why an extended data stream: a channel request of our own with
//! `want_reply` false would be ignored by an unaware OpenSSH client
//! (`client_input_channel_req` answers only what it knows, and a request
//! that wants no reply gets none), but russh's client drops every channel
//! request it does not know before a `Channel` sees it (it logs "Unknown
//! channel request"), so our own client could not read it either. Extended
//! data reaches russh's `Channel` whatever its code, and passes the head
//! agent's shared connections (`protocol::mux` frames carry the code).
//! OpenSSH's `ssh` logs "bad ext data" for a stream it does not know: hence
//! only when asked, which OpenSSH's `ssh`, `mn-ssh` and mpirun never do.

/// The extended data type code of a heartbeat (stderr is 1, exit info
/// `0x6d6e_0001`).
pub const EXT_HEARTBEAT: u32 = 0x6d6e_0002;
/// A heartbeat's bytes: one, since an empty message may not be sent at all.
pub const MESSAGE: &[u8] = b".";
