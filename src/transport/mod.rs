//! How a command reaches a node: `mn-ssh` and its option parsing, our own
//! SSH client, and connection sharing through the head's agent (`mux`).

pub mod channel;
pub(crate) mod choice;
pub mod client;
pub mod mux;
pub mod mux_frames;
pub(crate) mod ssh;
pub(crate) mod ssh_args;
pub mod tty;
