//! Requests of the agent protocol itself, sent as exec commands that start
//! with `#multinode:` (a comment, should one ever reach a shell). Only an
//! authenticated client of this job can send them. The agent answers them
//! (`agent/control.rs`); the client sends them (`transport/client.rs`).
//!
//! - `#multinode:ping`: prints one JSON line (version, host, rank, pid).
//! - `#multinode:release`: the job is over; the agent ends its commands and exits.
//! - `#multinode:wait-release`: answers exit 0 once this agent is released
//!   (a worker holds one of these open to the head to notice it leave).
//! - `#multinode:snapshot`: prints one JSON line, the snapshot of the
//!   commands this agent runs (`agent/snapshot.rs`).

const PREFIX: &[u8] = b"#multinode:";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Ping,
    Release,
    WaitRelease,
    Snapshot,
}

pub fn parse(command: &[u8]) -> Option<Control> {
    let rest = command.strip_prefix(PREFIX)?;
    match rest.trim_ascii() {
        b"ping" => Some(Control::Ping),
        b"release" => Some(Control::Release),
        b"wait-release" => Some(Control::WaitRelease),
        b"snapshot" => Some(Control::Snapshot),
        _ => None,
    }
}

/// The exec command of a control request.
pub fn command(control: Control) -> &'static str {
    match control {
        Control::Ping => "#multinode:ping",
        Control::Release => "#multinode:release",
        Control::WaitRelease => "#multinode:wait-release",
        Control::Snapshot => "#multinode:snapshot",
    }
}

/// What `#multinode:ping` answers.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct PingReply {
    pub version: String,
    pub host: String,
    pub rank: Option<usize>,
    pub pid: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_known_requests() {
        assert_eq!(parse(b"#multinode:ping"), Some(Control::Ping));
        assert_eq!(parse(b"#multinode:release\n"), Some(Control::Release));
        assert_eq!(
            parse(b"#multinode:wait-release"),
            Some(Control::WaitRelease)
        );
        assert_eq!(parse(b"#multinode:rm -rf"), None);
        assert_eq!(parse(b"echo #multinode:ping"), None);
        for c in [
            Control::Ping,
            Control::Release,
            Control::WaitRelease,
            Control::Snapshot,
        ] {
            assert_eq!(parse(command(c).as_bytes()), Some(c));
        }
    }
}
