//! The restart policy (pure): which nodes an attempt runs on, and after a
//! failed attempt, which node is excluded, which spare takes its place, and
//! whether to run again or stop. No I/O: exec_all tells it how each attempt
//! ended and runs what it says.
//!
//! The rules (docs/restarts.md says why):
//! - a node lost or unreachable, or failing the health check, is excluded
//!   for the rest of the run, whether it failed first or not; so is a node that failed first in two
//!   attempts in a row, whatever the cause;
//! - the same exit status (or signal), first, on different nodes in two
//!   attempts in a row, with no node-level cause, is the program's fault:
//!   the run stops;
//! - any other failure (an OOM kill, a signal, a hang, NCCL's timeout) is
//!   run again without excluding anyone: a repeat then decides which of
//!   the two rules above it was;
//! - never after success, the user's SIGINT/SIGTERM or `--timeout`; never
//!   past `--max-restarts`; the head (the first node) is never excluded,
//!   and a node-level failure of the head stops the run.

use std::fmt;

/// How the first failure of an attempt happened, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The node was never reached.
    Unreachable,
    /// The node went silent or its connection broke mid-run.
    Lost,
    /// The node failed the health check before the attempt.
    HealthCheck,
    /// The program ended with this shell exit code (128+N for a signal).
    Exited(i32),
    /// No node printed anything or beat its heartbeat for `--hang-timeout`.
    Hung,
}

impl Cause {
    /// A cause that excludes its node at once.
    fn is_node_level(self) -> bool {
        matches!(self, Cause::Unreachable | Cause::Lost | Cause::HealthCheck)
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Unreachable => f.write_str("unreachable"),
            Cause::Lost => f.write_str("lost"),
            Cause::HealthCheck => f.write_str("failed the health check"),
            Cause::Exited(code) => write!(f, "exit {code}"),
            Cause::Hung => f.write_str("hung"),
        }
    }
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AttemptEnd {
    Succeeded,
    /// The first failure: the node (by its place in the hostlist), when
    /// one is known, and how; and the other nodes of the attempt that were
    /// lost or unreachable themselves meanwhile (a node that died often
    /// fails second: its peers' connections to it break at once, its own
    /// loss shows after the liveness timeout; a frozen node is lost while a
    /// hung attempt is ended), each a node-level cause of its own.
    Failed {
        node: Option<usize>,
        cause: Cause,
        lost: Vec<(usize, Cause)>,
    },
    /// Ended by the user (a signal), `--timeout`, or output closed: never run again.
    Stopped,
}

/// Why a node left the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Exclusion {
    /// Lost, unreachable or failing the health check.
    NodeLevel(Cause),
    /// It failed first in two attempts in a row.
    FailedFirstTwice,
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::NodeLevel(cause) => cause.fmt(f),
            Exclusion::FailedFirstTwice => f.write_str("failed first in two attempts in a row"),
        }
    }
}

/// Why the run stops without running again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stop {
    /// The attempt succeeded.
    Succeeded,
    /// Ended by the user or `--timeout`.
    Stopped,
    /// `--max-restarts` reached.
    NoRestartsLeft,
    /// The same exit code first on two different nodes in a row.
    ProgramFault { cause: Cause, nodes: [usize; 2] },
    /// The head failed in a node-level way: it cannot be replaced.
    HeadFailed(Exclusion),
    /// Fewer nodes than the run needs, and no spare left.
    NoSpareLeft { needed: usize, left: usize },
}

/// What to do after an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Run again on `Pool::active()`; these nodes left the run now.
    Restart {
        excluded: Vec<(usize, Exclusion)>,
    },
    Stop(Stop),
}

/// The nodes of a run, by their place in the hostlist: those the next
/// attempt runs on, the spares, and those excluded.
#[derive(Debug, Clone)]
pub(crate) struct Pool {
    /// How many nodes an attempt wants (the hostlist less the spares).
    wanted: usize,
    /// The fewest an attempt may run on (`--min-nodes`; `wanted` without it).
    min_nodes: usize,
    max_restarts: u32,
    restarts: u32,
    /// Every node's state, in hostlist order.
    state: Vec<State>,
    /// The first failure of the previous attempt, if it failed.
    previous: Option<(Option<usize>, Cause)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    Active,
    Spare,
    Excluded(Exclusion),
}

/// Options that make no valid pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PoolError {
    /// `--spares K` leaves no node for the job (the head must run it).
    TooManySpares { nodes: usize, spares: usize },
    /// `--min-nodes` is 0 or more than the nodes an attempt wants.
    MinNodes { min: usize, wanted: usize },
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::TooManySpares { nodes, spares } => write!(
                f,
                "--spares {spares} leaves no node for the job: the hostlist has {nodes} node(s) \
                 and the first one (the head) always runs it; give at most {} spare(s)",
                nodes.saturating_sub(1)
            ),
            PoolError::MinNodes { min, wanted } => write!(
                f,
                "--min-nodes {min} must be between 1 and the {wanted} node(s) the job runs on \
                 (the hostlist less the spares)"
            ),
        }
    }
}

impl Pool {
    /// `nodes` in the hostlist, the last `spares` of them kept back.
    pub(crate) fn new(
        nodes: usize,
        spares: usize,
        min_nodes: Option<usize>,
        max_restarts: u32,
    ) -> Result<Self, PoolError> {
        if spares >= nodes {
            return Err(PoolError::TooManySpares { nodes, spares });
        }
        let wanted = nodes - spares;
        let min_nodes = min_nodes.unwrap_or(wanted);
        if min_nodes == 0 || min_nodes > wanted {
            return Err(PoolError::MinNodes {
                min: min_nodes,
                wanted,
            });
        }
        let state = (0..nodes)
            .map(|i| {
                if i < wanted {
                    State::Active
                } else {
                    State::Spare
                }
            })
            .collect();
        Ok(Pool {
            wanted,
            min_nodes,
            max_restarts,
            restarts: 0,
            state,
            previous: None,
        })
    }

    /// The nodes the next attempt runs on, in hostlist order: rank `r` is
    /// the `r`-th of them.
    pub(crate) fn active(&self) -> Vec<usize> {
        self.indices(|s| *s == State::Active)
    }

    /// The spares left, in hostlist order.
    pub(crate) fn spares(&self) -> Vec<usize> {
        self.indices(|s| *s == State::Spare)
    }

    /// The nodes excluded so far, and why.
    #[cfg(test)]
    fn excluded(&self) -> Vec<(usize, Exclusion)> {
        self.state
            .iter()
            .enumerate()
            .filter_map(|(i, s)| match s {
                State::Excluded(why) => Some((i, why.clone())),
                _ => None,
            })
            .collect()
    }

    /// Restarts done so far (`MULTINODE_RESTART_COUNT` of the next attempt).
    pub(crate) fn restarts(&self) -> u32 {
        self.restarts
    }

    fn indices(&self, keep: impl Fn(&State) -> bool) -> Vec<usize> {
        (0..self.state.len())
            .filter(|&i| keep(&self.state[i]))
            .collect()
    }

    /// Before an attempt: these active nodes failed the health check. They
    /// are excluded and spares take their place. `Err` when the head is
    /// among them, or too few nodes are left.
    pub(crate) fn health_failed(&mut self, nodes: &[usize]) -> Result<(), Stop> {
        for &node in nodes {
            self.exclude(node, Exclusion::NodeLevel(Cause::HealthCheck))?;
        }
        self.fill()
    }

    /// After an attempt: what to do.
    pub(crate) fn after(&mut self, end: &AttemptEnd) -> Decision {
        let (node, cause, lost) = match end {
            AttemptEnd::Succeeded => return Decision::Stop(Stop::Succeeded),
            AttemptEnd::Stopped => return Decision::Stop(Stop::Stopped),
            AttemptEnd::Failed { node, cause, lost } => (*node, *cause, lost),
        };
        // A node lost besides the first failure may well have caused it
        // (its peers' connections to it broke first): then the first
        // failure blames no one, neither a node nor the program.
        let blame = !lost.iter().any(|&(_, why)| why.is_node_level());
        let previous = self
            .previous
            .replace((node.filter(|_| blame || cause.is_node_level()), cause));
        let mut excluded = Vec::new();
        if let Some(node) = node {
            let why = if cause.is_node_level() {
                Some(Exclusion::NodeLevel(cause))
            } else if blame && previous.is_some_and(|(before, _)| before == Some(node)) {
                Some(Exclusion::FailedFirstTwice)
            } else {
                None
            };
            if let Some(why) = why {
                if let Err(stop) = self.exclude(node, why.clone()) {
                    return Decision::Stop(stop);
                }
                excluded.push((node, why));
            } else if blame
                && let Some((Some(before), before_cause)) = previous
                && before != node
                && before_cause == cause
                && !cause.is_node_level()
            {
                return Decision::Stop(Stop::ProgramFault {
                    cause,
                    nodes: [before, node],
                });
            }
        }
        for &(other, why) in lost {
            if Some(other) == node || self.state[other] != State::Active || !why.is_node_level() {
                continue;
            }
            let why = Exclusion::NodeLevel(why);
            if let Err(stop) = self.exclude(other, why.clone()) {
                return Decision::Stop(stop);
            }
            excluded.push((other, why));
        }
        if self.restarts >= self.max_restarts {
            return Decision::Stop(Stop::NoRestartsLeft);
        }
        if let Err(stop) = self.fill() {
            return Decision::Stop(stop);
        }
        self.restarts += 1;
        Decision::Restart { excluded }
    }

    fn exclude(&mut self, node: usize, why: Exclusion) -> Result<(), Stop> {
        if node == 0 {
            return Err(Stop::HeadFailed(why));
        }
        self.state[node] = State::Excluded(why);
        Ok(())
    }

    /// Spares take the places of excluded nodes, first spare first; past
    /// the spares the run shrinks down to `min_nodes`.
    fn fill(&mut self) -> Result<(), Stop> {
        let mut active = self.active().len();
        for i in 0..self.state.len() {
            if active >= self.wanted {
                break;
            }
            if self.state[i] == State::Spare {
                self.state[i] = State::Active;
                active += 1;
            }
        }
        if active < self.min_nodes {
            return Err(Stop::NoSpareLeft {
                needed: self.min_nodes,
                left: active,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(node: usize, cause: Cause) -> AttemptEnd {
        AttemptEnd::Failed {
            node: Some(node),
            cause,
            lost: Vec::new(),
        }
    }

    #[test]
    fn the_last_nodes_are_spares_and_a_lost_node_is_replaced_by_the_first_spare() {
        let mut pool = Pool::new(6, 2, None, 3).unwrap();
        assert_eq!(pool.active(), [0, 1, 2, 3]);
        assert_eq!(pool.spares(), [4, 5]);
        let d = pool.after(&failed(2, Cause::Lost));
        assert_eq!(
            d,
            Decision::Restart {
                excluded: vec![(2, Exclusion::NodeLevel(Cause::Lost))]
            }
        );
        // Ranks are dense over the attempt's nodes in hostlist order.
        assert_eq!(pool.active(), [0, 1, 3, 4]);
        assert_eq!(pool.spares(), [5]);
        assert_eq!(pool.restarts(), 1);
        assert_eq!(
            pool.after(&AttemptEnd::Succeeded),
            Decision::Stop(Stop::Succeeded)
        );
    }

    #[test]
    fn a_program_failing_on_whichever_node_holds_rank_2_stops_on_the_third_attempt() {
        let mut pool = Pool::new(5, 1, None, 10).unwrap();
        // Attempt 1: rank 2 is node 2.
        assert_eq!(
            pool.after(&failed(2, Cause::Exited(1))),
            Decision::Restart { excluded: vec![] }
        );
        // Attempt 2: node 2 failed first again: excluded, the spare joins.
        assert_eq!(
            pool.after(&failed(2, Cause::Exited(1))),
            Decision::Restart {
                excluded: vec![(2, Exclusion::FailedFirstTwice)]
            }
        );
        assert_eq!(pool.active(), [0, 1, 3, 4]);
        // Attempt 3: rank 2 is node 3 now, and fails the same way: the program.
        assert_eq!(
            pool.after(&failed(3, Cause::Exited(1))),
            Decision::Stop(Stop::ProgramFault {
                cause: Cause::Exited(1),
                nodes: [2, 3]
            })
        );
    }

    #[test]
    fn different_exit_codes_on_different_nodes_run_again_until_the_restarts_are_spent() {
        let mut pool = Pool::new(4, 0, None, 2).unwrap();
        assert_eq!(
            pool.after(&failed(1, Cause::Exited(3))),
            Decision::Restart { excluded: vec![] }
        );
        assert_eq!(
            pool.after(&failed(2, Cause::Exited(4))),
            Decision::Restart { excluded: vec![] }
        );
        assert_eq!(
            pool.after(&failed(3, Cause::Exited(5))),
            Decision::Stop(Stop::NoRestartsLeft)
        );
        assert_eq!(pool.restarts(), 2);
    }

    #[test]
    fn the_head_is_never_excluded_and_its_node_level_failure_stops_the_run() {
        let mut pool = Pool::new(3, 1, None, 5).unwrap();
        assert_eq!(
            pool.after(&failed(0, Cause::Lost)),
            Decision::Stop(Stop::HeadFailed(Exclusion::NodeLevel(Cause::Lost)))
        );
        let mut pool = Pool::new(3, 1, None, 5).unwrap();
        assert_eq!(
            pool.after(&failed(0, Cause::Exited(9))),
            Decision::Restart { excluded: vec![] }
        );
        assert_eq!(
            pool.after(&failed(0, Cause::Exited(9))),
            Decision::Stop(Stop::HeadFailed(Exclusion::FailedFirstTwice))
        );
        let mut pool = Pool::new(3, 1, None, 5).unwrap();
        assert_eq!(
            pool.health_failed(&[0]),
            Err(Stop::HeadFailed(Exclusion::NodeLevel(Cause::HealthCheck)))
        );
    }

    #[test]
    fn without_a_spare_the_run_stops_unless_min_nodes_lets_it_shrink() {
        let mut pool = Pool::new(3, 0, None, 5).unwrap();
        assert_eq!(
            pool.after(&failed(1, Cause::Unreachable)),
            Decision::Stop(Stop::NoSpareLeft { needed: 3, left: 2 })
        );
        let mut pool = Pool::new(3, 0, Some(2), 5).unwrap();
        assert_eq!(
            pool.after(&failed(1, Cause::Unreachable)),
            Decision::Restart {
                excluded: vec![(1, Exclusion::NodeLevel(Cause::Unreachable))]
            }
        );
        assert_eq!(pool.active(), [0, 2]);
        assert_eq!(
            pool.after(&failed(2, Cause::Lost)),
            Decision::Stop(Stop::NoSpareLeft { needed: 2, left: 1 })
        );
    }

    #[test]
    fn a_node_failing_the_health_check_is_replaced_before_the_start() {
        let mut pool = Pool::new(5, 2, None, 1).unwrap();
        assert_eq!(pool.active(), [0, 1, 2]);
        pool.health_failed(&[1, 2]).unwrap();
        assert_eq!(pool.active(), [0, 3, 4]);
        assert_eq!(pool.spares(), Vec::<usize>::new());
        assert_eq!(pool.excluded().len(), 2);
        assert_eq!(pool.restarts(), 0, "a health check is not a restart");
    }

    #[test]
    fn hangs_and_user_stops_exclude_no_one() {
        let mut pool = Pool::new(3, 1, None, 1).unwrap();
        let nowhere = AttemptEnd::Failed {
            node: None,
            cause: Cause::Hung,
            lost: Vec::new(),
        };
        assert_eq!(pool.after(&nowhere), Decision::Restart { excluded: vec![] });
        assert_eq!(pool.after(&nowhere), Decision::Stop(Stop::NoRestartsLeft));
        assert_eq!(
            pool.after(&AttemptEnd::Stopped),
            Decision::Stop(Stop::Stopped)
        );
        assert_eq!(pool.active(), [0, 1]);
    }

    #[test]
    fn nodes_lost_besides_the_first_failure_are_excluded_too() {
        // A hung attempt, ended while node 2 was frozen: lost meanwhile.
        let mut pool = Pool::new(5, 2, None, 3).unwrap();
        let hung = AttemptEnd::Failed {
            node: None,
            cause: Cause::Hung,
            lost: vec![(2, Cause::Lost)],
        };
        assert_eq!(
            pool.after(&hung),
            Decision::Restart {
                excluded: vec![(2, Exclusion::NodeLevel(Cause::Lost))]
            }
        );
        assert_eq!(pool.active(), [0, 1, 3]);
        // A dead node's peers fail first (exit 1); it is lost second: it
        // leaves, the first failure stays; a spare that was not in the
        // attempt is never excluded by it.
        let end = AttemptEnd::Failed {
            node: Some(1),
            cause: Cause::Exited(1),
            lost: vec![(3, Cause::Lost), (4, Cause::Unreachable)],
        };
        assert_eq!(
            pool.after(&end),
            Decision::Restart {
                excluded: vec![(3, Exclusion::NodeLevel(Cause::Lost))]
            }
        );
        assert_eq!(pool.active(), [0, 1, 4]);
        // The same exit first on another node, but a node lost beside it:
        // not the program's fault (the lost node may have caused it).
        let end = AttemptEnd::Failed {
            node: Some(2),
            cause: Cause::Exited(1),
            lost: vec![(4, Cause::Unreachable)],
        };
        assert_eq!(
            pool.after(&end),
            Decision::Stop(Stop::NoSpareLeft { needed: 3, left: 2 })
        );
        // And it blames no node for the next attempt's failure either.
        let mut pool = Pool::new(4, 1, None, 3).unwrap();
        let end = AttemptEnd::Failed {
            node: Some(1),
            cause: Cause::Exited(1),
            lost: vec![(2, Cause::Lost)],
        };
        assert!(matches!(pool.after(&end), Decision::Restart { .. }));
        assert_eq!(pool.active(), [0, 1, 3]);
        assert_eq!(
            pool.after(&failed(1, Cause::Exited(1))),
            Decision::Restart { excluded: vec![] },
            "node 1 failed first twice, but the first time a lost node was the likely cause"
        );
        // The head lost besides the first failure: it cannot be replaced.
        let end = AttemptEnd::Failed {
            node: Some(1),
            cause: Cause::Exited(1),
            lost: vec![(0, Cause::Lost)],
        };
        assert_eq!(
            pool.after(&end),
            Decision::Stop(Stop::HeadFailed(Exclusion::NodeLevel(Cause::Lost)))
        );
    }

    #[test]
    fn options_that_leave_no_job_are_refused_with_what_to_do() {
        let e = Pool::new(3, 3, None, 1).unwrap_err();
        assert_eq!(
            e,
            PoolError::TooManySpares {
                nodes: 3,
                spares: 3
            }
        );
        assert!(e.to_string().contains("give at most 2 spare(s)"), "{e}");
        let e = Pool::new(4, 1, Some(4), 1).unwrap_err();
        assert_eq!(e, PoolError::MinNodes { min: 4, wanted: 3 });
        assert!(Pool::new(4, 1, Some(0), 1).is_err());
    }
}
