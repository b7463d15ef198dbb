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
//! - `#multinode:ranks`: prints one JSON line, a snapshot with no
//!   process: each running command's `RANK`, `LOCAL_RANK` and process group
//!   (`multinode shell --rank`). An agent older than it runs it as a shell
//!   comment: status 0 and no output.
//! - `#multinode:top [tail] [ras]`: as `snapshot`, taken for `multinode
//!   top` (a longer window sampled several times, each GPU's state, each
//!   command's rank and output ages); `tail` adds each command's last
//!   lines, `ras` NCCL's RAS status on that node. An agent older than `top`
//!   runs it as a shell comment: status 0 and no output.
//! - `#multinode:show-group PGID PIDNS`: while this channel is open, the
//!   agent's snapshots also cover process group PGID of its machine, which
//!   it did not start (exec_all's own node, run outside any agent). PIDNS is
//!   the inode of the client's PID namespace: an agent in another namespace
//!   (another container of the pod) refuses, since PGID means nothing there.
//!   The agent never signals that group; it answers when the channel closes.
//!   Meanwhile the client may send lines of JSON on the channel: what that
//!   group printed, when (`snapshot::watch::PassedOn`), for `top`.
//! - `#multinode:show-start`: while this channel is open, the agent's `top`
//!   snapshots also carry where the start of the client's run went (an
//!   exec_all of this machine: each node's connect, login, spawn and first
//!   line, `snapshot::run_start::RunStart`), which the client sends as lines
//!   of JSON each time it changed. An agent older than it runs it as a
//!   shell comment: status 0, and the channel ends at once.

const PREFIX: &[u8] = b"#multinode:";

/// The largest answer a client reads of a request (a `top` snapshot of a
/// node at every agent bound is well below it): past it the answer is
/// that node's error, not memory without bound.
pub const ANSWER_MAX: usize = 64 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    Ping,
    Release,
    WaitRelease,
    Snapshot,
    Ranks,
    Top { tail: bool, ras: bool },
    ShowGroup { pgid: i32, pid_ns: u64 },
    ShowStart,
}

const SHOW_GROUP: &str = "show-group";
const TOP: &str = "top";

pub fn parse(command: &[u8]) -> Option<Control> {
    let rest = command.strip_prefix(PREFIX)?;
    match rest.trim_ascii() {
        b"ping" => Some(Control::Ping),
        b"release" => Some(Control::Release),
        b"wait-release" => Some(Control::WaitRelease),
        b"snapshot" => Some(Control::Snapshot),
        b"ranks" => Some(Control::Ranks),
        b"show-start" => Some(Control::ShowStart),
        other => {
            let mut words = std::str::from_utf8(other).ok()?.split(' ');
            let first = words.next()?;
            if first == TOP {
                let (mut tail, mut ras) = (false, false);
                for word in words {
                    match word {
                        "tail" if !tail => tail = true,
                        "ras" if !ras => ras = true,
                        _ => return None,
                    }
                }
                return Some(Control::Top { tail, ras });
            }
            if first != SHOW_GROUP {
                return None;
            }
            let pgid = words.next()?.parse().ok().filter(|&p: &i32| p > 0)?;
            let pid_ns = words.next()?.parse().ok()?;
            words
                .next()
                .is_none()
                .then_some(Control::ShowGroup { pgid, pid_ns })
        }
    }
}

/// The exec command of a control request.
pub fn command(control: Control) -> String {
    match control {
        Control::Ping => "#multinode:ping".to_string(),
        Control::Release => "#multinode:release".to_string(),
        Control::WaitRelease => "#multinode:wait-release".to_string(),
        Control::Snapshot => "#multinode:snapshot".to_string(),
        Control::Ranks => "#multinode:ranks".to_string(),
        Control::Top { tail, ras } => format!(
            "#multinode:{TOP}{}{}",
            if tail { " tail" } else { "" },
            if ras { " ras" } else { "" }
        ),
        Control::ShowGroup { pgid, pid_ns } => format!("#multinode:{SHOW_GROUP} {pgid} {pid_ns}"),
        Control::ShowStart => "#multinode:show-start".to_string(),
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
        for bad in [
            &b"#multinode:show-group"[..],
            b"#multinode:show-group 12",
            b"#multinode:show-group 0 4026531836",
            b"#multinode:show-group -12 4026531836",
            b"#multinode:show-group 12 4026531836 1",
            b"#multinode:show-group x 4026531836",
            b"#multinode:top tail tail",
            b"#multinode:top all",
            b"#multinode:show-start 1",
        ] {
            assert_eq!(parse(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        for c in [
            Control::Ping,
            Control::Release,
            Control::WaitRelease,
            Control::Snapshot,
            Control::Ranks,
            Control::Top {
                tail: false,
                ras: false,
            },
            Control::Top {
                tail: true,
                ras: true,
            },
            Control::Top {
                tail: false,
                ras: true,
            },
            Control::ShowGroup {
                pgid: 4242,
                pid_ns: 4026531836,
            },
            Control::ShowStart,
        ] {
            assert_eq!(parse(command(c).as_bytes()), Some(c));
        }
    }
}
