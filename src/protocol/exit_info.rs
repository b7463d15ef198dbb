//! What a node tells a client of its command's end, beyond the exit status
//! (OOM kills, a core file; measured by `crate::exit_info`): asked for with
//! the `env` request [`crate::vars::EXIT_INFO`], sent by the agent as one JSON message on
//! extended data stream [`EXT_EXIT_INFO`], after the output and before the
//! exit status. An extended data stream, because russh's client drops
//! channel requests it does not know; asked for, because OpenSSH's `ssh`
//! logs "bad ext data" for a stream it does not know.

use serde::{Deserialize, Serialize};

/// The extended data type code that carries the [`ExitInfo`] (stderr is 1;
/// RFC 4254 leaves the others to implementations).
pub const EXT_EXIT_INFO: u32 = 0x6d6e_0001;
/// The most bytes of an [`ExitInfo`] message a client accepts.
pub const MAX_MESSAGE: usize = 16 * 1024;

/// How a command's node saw it end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// OOM kills counted in the node's cgroup while the command ran
    /// (`oom_kill`, after minus before); `None`: not readable.
    pub oom_kills: Option<u64>,
    /// The file that was read (`memory.events` or `memory.oom_control`).
    pub cgroup: Option<String>,
    /// A core file written while the command ran, or where the kernel piped
    /// it (`core_pattern` `|HANDLER`).
    pub core: Option<String>,
}

impl ExitInfo {
    pub fn to_message(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("ExitInfo serialises")
    }

    pub fn from_message(bytes: &[u8]) -> Option<ExitInfo> {
        serde_json::from_slice(bytes).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_round_trips() {
        let info = ExitInfo {
            oom_kills: Some(1),
            cgroup: Some("/sys/fs/cgroup/memory.events".into()),
            core: None,
        };
        assert_eq!(ExitInfo::from_message(&info.to_message()), Some(info));
        assert_eq!(ExitInfo::from_message(b"not json"), None);
    }
}
