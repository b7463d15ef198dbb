//! `#multinode:show-group PGID PIDNS`: a process group the agent did not
//! start (exec_all's own node) shown in its snapshots while the channel
//! lasts, with what the client tells of its output. Only a live group of
//! this agent's user, in its PID namespace, that no command of the agent
//! leads, and at most `running::SHOWN_GROUPS_MAX` at once.

use russh::server::Msg;
use russh::{ChannelReadHalf, ChannelWriteHalf};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use super::channel_lines::Lines;
use super::shared::Shared;
use crate::snapshot::watch::{PASSED_ON_MAX, PassedOn, Watched};

/// Serves one show-group channel until it, its connection or the agent
/// ends; the exit status to answer with (1 and a line on stderr when the
/// group is not shown).
pub(super) async fn serve(
    pgid: i32,
    pid_ns: u64,
    rx: &mut ChannelReadHalf,
    tx: &ChannelWriteHalf<Msg>,
    shared: &Shared,
    conn: &CancellationToken,
) -> u32 {
    let refused = if crate::snapshot::pid_namespace() != Some(pid_ns) {
        Err("is not in this agent's PID namespace".to_string())
    } else if !crate::snapshot::is_own_group(std::path::Path::new("/proc"), pgid) {
        Err("is not a live process group of this agent's user".to_string())
    } else {
        let pid = nix::unistd::Pid::from_raw(pgid);
        shared
            .running
            .add_shown(pid, |keeps_tail| Watched::of_shown_group(pgid, keeps_tail))
    };
    let watched = match refused {
        Ok(watched) => watched,
        Err(why) => {
            let msg = format!("multinode agent: process group {pgid} {why}: not shown\n");
            debug!(pgid, "show-group refused: {}", msg.trim_end());
            let _ = tx.extended_data_bytes(1, msg.into_bytes()).await;
            return 1;
        }
    };
    let pid = nix::unistd::Pid::from_raw(pgid);
    debug!(pgid, "a client's process group shown in snapshots");
    // Shown while the client holds the channel; never signalled: the
    // client owns that group.
    tokio::select! {
        () = shared.shutdown.cancelled() => {}
        () = conn.cancelled() => {}
        // What it tells of the group's output (`watch::PassedOn`).
        () = async {
            let mut lines = Lines::new(rx, PASSED_ON_MAX);
            while let Some(line) = lines.next().await {
                match serde_json::from_slice::<PassedOn>(&line) {
                    Ok(passed_on) => watched.take_passed_on(passed_on),
                    Err(e) => debug!(error = %e, "show-group: an unreadable line"),
                }
            }
        } => {}
    }
    shared.running.remove(pid);
    debug!(pgid, "a client's process group no longer shown");
    0
}
