//! `#multinode:snapshot`: what the commands this agent runs are doing now.
//! The snapshot covers the trees of the groups the agent keeps
//! (`running.rs`), through `crate::snapshot::take`.

use super::shared::Shared;
use crate::snapshot::{NodeSnapshot, Options};

/// Snapshots (`snapshot`, `top`) an agent takes at once, each held from
/// its first look to its answer sent; more askers wait their turn. With
/// py-spy's own bound (`take::PY_SPY_AT_ONCE`), what a burst of askers
/// costs the node is bounded, not one set of tools an asker.
pub(crate) const SNAPSHOTS_AT_ONCE: usize = 4;
static SNAPSHOT_SLOTS: tokio::sync::Semaphore =
    tokio::sync::Semaphore::const_new(SNAPSHOTS_AT_ONCE);

/// A turn to take a snapshot and send it, waited for.
pub(crate) async fn slot() -> tokio::sync::SemaphorePermit<'static> {
    SNAPSHOT_SLOTS
        .acquire()
        .await
        .expect("never closed: a static semaphore")
}

/// The snapshot of every running command of this agent, with each
/// command's record (its `RANK` and `LOCAL_RANK`, its output's age; no
/// tail): with several processes a node, the asker labels each tree.
pub(crate) async fn take(shared: &Shared) -> NodeSnapshot {
    // The GPUs read once for the askers at once (`nvidia_smi::Watch`).
    let opts = Options {
        gpu_watch: Some(shared.gpus.clone()),
        ..Options::from_env()
    };
    let mut snap = crate::snapshot::take(&shared.running.groups(), &opts).await;
    snap.rank = shared.rank.unwrap_or(0);
    if !shared.host.is_empty() {
        snap.host = shared.host.clone();
    }
    snap.commands = shared.running.commands(false);
    snap
}

/// `#multinode:ranks`: each running command's record alone, at once (no
/// look at the processes): where a rank runs (`multinode shell --rank`).
pub(crate) fn ranks(shared: &Shared) -> NodeSnapshot {
    NodeSnapshot {
        rank: shared.rank.unwrap_or(0),
        host: shared.host.clone(),
        taken_ms: crate::snapshot::unix_ms(),
        commands: shared.running.commands(false),
        ..NodeSnapshot::default()
    }
}

/// `top`'s snapshot: sampled over a longer window, each GPU, each
/// command's record (its last lines with `tail`), and NCCL's RAS status on
/// this node with `ras` (at `NCCL_RAS_ADDR` as a command or this agent
/// has it; its last answer, asked in the background: `snapshot::ras`).
pub(crate) async fn take_for_top(shared: &Shared, tail: bool, ras: bool) -> NodeSnapshot {
    let ras_text = async {
        if !ras {
            return None;
        }
        let agent_var = shared
            .base_env
            .iter()
            .find(|(k, _)| k == crate::snapshot::ras::ADDR_VAR)
            .map(|(_, v)| v.as_str());
        let vars = shared.running.ras_addrs();
        let addr =
            crate::snapshot::ras::address(vars.iter().map(|v| Some(v.as_str())).chain([agent_var]));
        shared.ras.latest(&addr).await
    };
    let opts = Options {
        gpu_watch: Some(shared.gpus.clone()),
        ..Options::for_top()
    };
    let groups = shared.running.groups();
    let (mut snap, ras) = tokio::join!(crate::snapshot::take(&groups, &opts), ras_text);
    snap.rank = shared.rank.unwrap_or(0);
    if !shared.host.is_empty() {
        snap.host = shared.host.clone();
    }
    snap.commands = shared.running.commands(tail);
    snap.ras = ras;
    snap.runs = shared.runs.aged(crate::snapshot::unix_ms());
    snap
}
