//! Where a process's time goes, from several looks over a snapshot's
//! window (`multinode top`): how often it was asleep (and in D) by its
//! state in `/proc/PID/stat`, and, where py-spy is installed, how often
//! its Python stack was inside a collective or a wait. Classifying a stack
//! is pure.

use serde::{Deserialize, Serialize};

use super::pystack::Frame;

/// Frames of the named collectives: a rank here waits for the others, so
/// between groups of the same size it is not the odd one.
pub(super) const COLLECTIVES: &[&str] = &[
    "all_reduce",
    "allreduce",
    "all_gather",
    "allgather",
    "reduce_scatter",
    "broadcast",
    "barrier",
    "all_to_all",
    "alltoall",
    "bcast",
    "monitored_barrier",
];

/// Frames that wait for this rank's own GPU (`torch.cuda.synchronize`,
/// `.item()`). Either a rank waiting for the others (with NCCL a collective
/// runs on the GPU, and the Python thread waits for it here, not in
/// `all_reduce`) or the rank the others wait for (its GPU busy, as in a
/// CUDA loop): less a waiter than a rank in a named collective, more than
/// one that waits for nothing.
pub(super) const GPU_WAITS: &[&str] = &["synchronize", "_local_scalar_dense"];

/// What the looks at one process found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Samples {
    /// Looks at its state (`/proc/PID/stat`) over the window.
    pub looks: u32,
    /// Of them, asleep (`S` or `D`): waiting on something.
    pub asleep: u32,
    /// Of them, in `D` (uninterruptible).
    pub uninterruptible: u32,
    /// Python stacks taken (py-spy), and how many of them were inside a
    /// collective or a wait ([`waits`]).
    pub stacks: u32,
    pub stacks_waiting: u32,
}

/// Below this many py-spy stacks (3 a process a refresh), a share rests on
/// the states' looks instead: `top --once` has one or two refreshes, and 3
/// to 6 stacks give shares of 33%, 50%, 67% (a real H100 run,
/// docs/gpu.md), too coarse for the straggler rule's margin.
pub const MIN_STACKS: u32 = 10;

impl Samples {
    /// The share of the samples spent waiting, and how many samples it
    /// stands on: py-spy's stacks where there are [`MIN_STACKS`], else the
    /// states.
    pub fn wait_share(&self) -> Option<(f64, u32)> {
        if self.stacks >= MIN_STACKS {
            Some((self.stacks_waiting as f64 / self.stacks as f64, self.stacks))
        } else if self.looks > 0 {
            Some((self.asleep as f64 / self.looks as f64, self.looks))
        } else {
            None
        }
    }

    /// Adds another window's samples (a process seen twice).
    pub fn add(&mut self, other: &Samples) {
        self.looks += other.looks;
        self.asleep += other.asleep;
        self.uninterruptible += other.uninterruptible;
        self.stacks += other.stacks;
        self.stacks_waiting += other.stacks_waiting;
    }
}

/// Besides the collectives and GPU waits above: a wait on a future, a
/// thread or a lock, a socket receive (gloo, a hand-made barrier).
const OTHER_WAITS: [&str; 3] = ["wait", "recv", "acquire"];

/// Whether a stack (innermost frame first) is inside a collective or a wait.
pub(crate) fn waits(frames: &[Frame]) -> bool {
    frames.iter().any(|f| {
        let name = f.function.to_ascii_lowercase();
        COLLECTIVES
            .iter()
            .chain(GPU_WAITS)
            .chain(&OTHER_WAITS)
            .any(|w| name.contains(w))
    })
}

/// A state (`/proc/PID/stat`'s third field) as a look: asleep, in D; a
/// stopped or traced process (py-spy attached) is no look at all.
pub(crate) fn look(state: char) -> Option<(bool, bool)> {
    match state {
        'R' => Some((false, false)),
        'S' | 'I' => Some((true, false)),
        'D' => Some((true, true)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stack(names: &[&str]) -> Vec<Frame> {
        names
            .iter()
            .map(|n| Frame {
                function: n.to_string(),
                ..Frame::default()
            })
            .collect()
    }

    #[test]
    fn collectives_and_waits_against_compute() {
        assert!(waits(&stack(&["all_reduce", "train_step", "<module>"])));
        assert!(waits(&stack(&["recv_into", "barrier", "main"])));
        assert!(waits(&stack(&["synchronize", "step"])));
        assert!(waits(&stack(&["_wait_for_tstate_lock", "join"])));
        assert!(!waits(&stack(&["matmul", "forward", "train_step"])));
        assert!(!waits(&stack(&["load_batch", "main", "<module>"])));
        assert!(!waits(&[]));
    }

    #[test]
    fn share_from_stacks_before_states() {
        let s = Samples {
            looks: 10,
            asleep: 8,
            uninterruptible: 0,
            stacks: 12,
            stacks_waiting: 3,
        };
        assert_eq!(s.wait_share(), Some((0.25, 12)));
        // Too few stacks: the states tell.
        let few = Samples {
            stacks: 4,
            stacks_waiting: 1,
            ..s
        };
        assert_eq!(few.wait_share(), Some((0.8, 10)));
        let s = Samples {
            stacks: 0,
            stacks_waiting: 0,
            ..s
        };
        assert_eq!(s.wait_share(), Some((0.8, 10)));
        assert_eq!(Samples::default().wait_share(), None);
        assert_eq!(look('t'), None);
        assert_eq!(look('D'), Some((true, true)));
    }
}
