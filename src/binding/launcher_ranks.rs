//! Which process of its node this one is, as the launcher that started it
//! says: torchrun, srun, Open MPI's mpirun, MPICH's hydra. Pure over the
//! environment.
//!
//! The local rank, the number of local processes and the global rank are
//! read from one launcher's set of variables together: a torchrun inside an
//! `srun` step sees both sets, and torchrun's are those of its own workers.

use crate::env_map::{BadVar, EnvMap};
use crate::error::Error;

/// Where this process stands among its node's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Ranks {
    /// Its index among the processes of this node (local rank i uses the i-th visible GPU).
    pub local_rank: Option<usize>,
    /// How many processes the launcher starts on this node.
    pub local_size: Option<usize>,
    /// Its rank in the job (for the report only).
    pub rank: Option<usize>,
}

/// One launcher's variables: local rank, local size, global rank.
struct Launcher {
    local_rank: &'static str,
    local_size: &'static [&'static str],
    rank: &'static str,
}

/// The launchers, in the order their local rank is looked for.
const LAUNCHERS: [Launcher; 4] = [
    // torchrun.
    Launcher {
        local_rank: "LOCAL_RANK",
        local_size: &["LOCAL_WORLD_SIZE"],
        rank: "RANK",
    },
    // srun: the step's tasks on each node (`2(x3),1`), else --ntasks-per-node.
    Launcher {
        local_rank: "SLURM_LOCALID",
        local_size: &["SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"],
        rank: "SLURM_PROCID",
    },
    // Open MPI.
    Launcher {
        local_rank: "OMPI_COMM_WORLD_LOCAL_RANK",
        local_size: &["OMPI_COMM_WORLD_LOCAL_SIZE"],
        rank: "OMPI_COMM_WORLD_RANK",
    },
    // MPICH's hydra (and Intel MPI's).
    Launcher {
        local_rank: "MPI_LOCALRANKID",
        local_size: &["MPI_LOCALNRANKS"],
        rank: "PMI_RANK",
    },
];

/// The most processes a node may start (`--nproc-per-node`, and the
/// local rank and local size a launcher gives `multinode bind`): checked
/// before anything is allocated for them. A machine's GPUs, or its CPUs
/// with room to spare: 4,096.
pub(crate) const MAX_LOCAL_PROCESSES: usize = 4096;

/// The variables a local rank is read from, for messages.
pub(crate) const LOCAL_RANK_VARS: &str =
    "LOCAL_RANK, SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID";

/// The first launcher's local rank found, with its local size and rank;
/// all `None` when no launcher's local rank is set. A value that is not a
/// number is an error that names the variable.
pub(crate) fn from_env(env: &EnvMap) -> Result<Ranks, Error> {
    let Some(launcher) = LAUNCHERS.iter().find(|l| env.get(l.local_rank).is_some()) else {
        return Ok(Ranks::default());
    };
    let number = |name: &str, what: &str| -> Result<Option<usize>, Error> {
        env.get(name)
            .map(|v| {
                v.trim()
                    .parse::<usize>()
                    .map_err(|_| BadVar::new(name, v, what).into())
            })
            .transpose()
    };
    let local_rank = number(launcher.local_rank, "a local rank (0, 1, ...)")?;
    let mut local_size = None;
    for &name in launcher.local_size {
        let Some(value) = env.get(name) else {
            continue;
        };
        local_size = Some(if name == "SLURM_STEP_TASKS_PER_NODE" {
            slurm_tasks_here(value, env.get("SLURM_NODEID")).ok_or_else(|| {
                Error::usage(format!(
                    "SLURM_STEP_TASKS_PER_NODE='{value}' (SLURM_NODEID={}) gives no task count for this node; fix it or unset it",
                    env.get("SLURM_NODEID").unwrap_or("unset")
                ))
            })?
        } else {
            number(name, "a number of processes (1, 2, ...)")?.unwrap_or(0)
        });
        break;
    }
    let ranks = Ranks {
        local_rank,
        local_size,
        // Only shown in the report: a bad one is left out, not an error.
        rank: env.get(launcher.rank).and_then(|v| v.trim().parse().ok()),
    };
    if let Some(r) = ranks.local_rank.filter(|&r| r >= MAX_LOCAL_PROCESSES) {
        return Err(Error::usage(format!(
            "{}={r} is past the {MAX_LOCAL_PROCESSES} processes a node may have; fix it or unset it",
            launcher.local_rank
        )));
    }
    if let Some(n) = ranks.local_size.filter(|&n| n > MAX_LOCAL_PROCESSES) {
        return Err(Error::usage(format!(
            "{} says {n} processes on this node, past the {MAX_LOCAL_PROCESSES} a node may have; fix it or unset it",
            launcher.local_size.join(" or ")
        )));
    }
    if let (Some(r), Some(n)) = (ranks.local_rank, ranks.local_size)
        && r >= n
    {
        return Err(Error::usage(format!(
            "{}={r} but {} says {n} processes on this node; fix them or unset them",
            launcher.local_rank,
            launcher.local_size.join(" or ")
        )));
    }
    Ok(ranks)
}

/// This node's count in Slurm's `2(x3),1` (three nodes of 2 tasks, then
/// one of 1), by `SLURM_NODEID` (0 when unset).
fn slurm_tasks_here(list: &str, node_id: Option<&str>) -> Option<usize> {
    let mut index: usize = node_id.map_or(Some(0), |v| v.trim().parse().ok())?;
    for item in list.split(',') {
        let (count, repeat) = match item.trim().strip_suffix(')') {
            Some(head) => {
                let (count, repeat) = head.split_once("(x")?;
                (count, repeat.parse::<usize>().ok()?)
            }
            None => (item.trim(), 1),
        };
        let count = count.parse::<usize>().ok().filter(|c| *c > 0)?;
        if index < repeat {
            return Some(count);
        }
        index -= repeat;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(vars: &[(&str, &str)]) -> EnvMap {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_launchers_variables() {
        let cases: [(&[(&str, &str)], Ranks); 5] = [
            (
                &[
                    ("LOCAL_RANK", "3"),
                    ("LOCAL_WORLD_SIZE", "8"),
                    ("RANK", "11"),
                ],
                Ranks {
                    local_rank: Some(3),
                    local_size: Some(8),
                    rank: Some(11),
                },
            ),
            (
                &[
                    ("SLURM_LOCALID", "1"),
                    ("SLURM_STEP_TASKS_PER_NODE", "4(x2),2"),
                    ("SLURM_NODEID", "2"),
                    ("SLURM_PROCID", "9"),
                ],
                Ranks {
                    local_rank: Some(1),
                    local_size: Some(2),
                    rank: Some(9),
                },
            ),
            (
                &[("SLURM_LOCALID", "0"), ("SLURM_NTASKS_PER_NODE", "8")],
                Ranks {
                    local_rank: Some(0),
                    local_size: Some(8),
                    rank: None,
                },
            ),
            (
                &[
                    ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                    ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                    ("OMPI_COMM_WORLD_RANK", "1"),
                ],
                Ranks {
                    local_rank: Some(1),
                    local_size: Some(2),
                    rank: Some(1),
                },
            ),
            (
                &[("MPI_LOCALRANKID", "0"), ("MPI_LOCALNRANKS", "4")],
                Ranks {
                    local_rank: Some(0),
                    local_size: Some(4),
                    rank: None,
                },
            ),
        ];
        for (vars, want) in cases {
            assert_eq!(from_env(&env(vars)).expect("ranks"), want, "{vars:?}");
        }
        assert_eq!(from_env(&env(&[])).expect("none"), Ranks::default());
    }

    #[test]
    fn torchruns_variables_win_inside_an_srun_step() {
        let ranks = from_env(&env(&[
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "1(x4)"),
            ("LOCAL_RANK", "5"),
            ("LOCAL_WORLD_SIZE", "8"),
        ]))
        .expect("ranks");
        assert_eq!((ranks.local_rank, ranks.local_size), (Some(5), Some(8)));
    }

    #[test]
    fn garbage_names_the_variable() {
        let e = from_env(&env(&[("LOCAL_RANK", "one")])).expect_err("garbage");
        assert_eq!(
            e.to_string(),
            "LOCAL_RANK='one' is not a local rank (0, 1, ...); fix it or unset it"
        );
        assert_eq!(e.exit_code(), 2);
        let e = from_env(&env(&[("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "-1")]))
            .expect_err("garbage");
        assert!(e.to_string().starts_with("LOCAL_WORLD_SIZE='-1'"), "{e}");
        let e = from_env(&env(&[("LOCAL_RANK", "8"), ("LOCAL_WORLD_SIZE", "8")]))
            .expect_err("past the end");
        assert_eq!(
            e.to_string(),
            "LOCAL_RANK=8 but LOCAL_WORLD_SIZE says 8 processes on this node; fix them or unset them"
        );
        let e = from_env(&env(&[
            ("SLURM_LOCALID", "0"),
            ("SLURM_STEP_TASKS_PER_NODE", "2(x2)"),
            ("SLURM_NODEID", "2"),
        ]))
        .expect_err("no such node");
        assert!(e.to_string().contains("gives no task count"), "{e}");
    }

    #[test]
    fn a_huge_local_rank_or_size_is_one_line() {
        let e = from_env(&env(&[("LOCAL_RANK", "18446744073709551615")])).expect_err("huge");
        assert_eq!(
            e.to_string(),
            "LOCAL_RANK=18446744073709551615 is past the 4096 processes a node may have; fix it or unset it"
        );
        assert_eq!(e.exit_code(), 2);
        let e =
            from_env(&env(&[("LOCAL_RANK", "0"), ("LOCAL_WORLD_SIZE", "4097")])).expect_err("huge");
        assert!(e.to_string().contains("past the 4096"), "{e}");
        let ok = from_env(&env(&[
            ("LOCAL_RANK", "4095"),
            ("LOCAL_WORLD_SIZE", "4096"),
        ]));
        assert_eq!(ok.expect("the cap").local_rank, Some(4095));
    }

    #[test]
    fn slurm_lists() {
        assert_eq!(slurm_tasks_here("8", None), Some(8));
        assert_eq!(slurm_tasks_here("2(x3),1", Some("3")), Some(1));
        assert_eq!(slurm_tasks_here("2(x3),1", Some("2")), Some(2));
        assert_eq!(slurm_tasks_here("2(x3),1", Some("4")), None);
        assert_eq!(slurm_tasks_here("2(x", Some("0")), None);
        assert_eq!(slurm_tasks_here("0", None), None);
    }
}
