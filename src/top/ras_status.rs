//! NCCL's RAS status text, read for what `top` shows (pure): the job's
//! processes and communicator ranks that did not answer or are dead, and
//! (NCCL 2.28 and later) the ranks whose collective operation counts differ
//! from the others'. The lines are those of NCCL's `src/ras/client_support.cc`
//! (`rasOutAppend` calls); anything else is passed over.

use serde::Serialize;

/// A process or rank the RAS service names.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RasEntry {
    /// The communicator (`#0-0`: its largest, where a rank is the job's
    /// rank); absent for the job's processes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// `missing`, `dead`, or an operation count: `AllReduce 1177`.
    pub what: String,
}

/// What the status text says that `top` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RasFacts {
    pub entries: Vec<RasEntry>,
    /// The headline numbers (`Missing communicator data from 2 job
    /// processes`, `1 job process is considered dead ...`), as NCCL words them.
    pub notes: Vec<String>,
}

/// The words between `prefix` and ` -- ` or the end.
fn after<'a>(line: &'a str, prefix: &str) -> Option<&'a str> {
    line.strip_prefix(prefix)
}

/// `Process 4242 on node n3 managing GPU 0` / `... GPUs 0,1`.
fn process(line: &str) -> Option<(u32, String)> {
    let rest = after(line, "Process ")?;
    let (pid, rest) = rest.split_once(" on node ")?;
    let node = rest.split(" managing GPU").next()?;
    Some((pid.trim().parse().ok()?, node.trim().to_string()))
}

/// `... managed by process 4242 on node n3`.
fn managed(line: &str) -> (Option<u32>, Option<String>) {
    let Some((_, rest)) = line.split_once("managed by process ") else {
        return (None, None);
    };
    let (pid, node) = match rest.split_once(" on node ") {
        Some((pid, node)) => (pid, Some(node.trim().to_string())),
        None => (rest, None),
    };
    (pid.trim().parse().ok(), node)
}

/// `Rank 5 ...`: the rank.
fn rank_of(line: &str) -> Option<usize> {
    after(line, "Rank ")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

#[derive(Debug, Clone, PartialEq)]
enum Section {
    None,
    JobIncomplete,
    JobDead,
    CommIncomplete(String),
    CommMismatch(String),
}

/// Reads the status text.
pub fn parse(text: &str) -> RasFacts {
    let mut facts = RasFacts::default();
    let mut section = Section::None;
    // Under MISMATCH: the operation whose counts differ, and the count of
    // the `N ranks have launched up to operation K` line above.
    let mut op: Option<String> = None;
    let mut count: Option<u64> = None;
    for raw in text.lines() {
        let line = raw.trim();
        if !raw.starts_with(' ') {
            section = match line {
                "INCOMPLETE" => Section::JobIncomplete,
                "DEAD" => Section::JobDead,
                _ if line.starts_with('#') && line.ends_with(" INCOMPLETE") => {
                    Section::CommIncomplete(line.split(' ').next().unwrap_or("").to_string())
                }
                _ if line.starts_with('#') && line.ends_with(" MISMATCH") => {
                    Section::CommMismatch(line.split(' ').next().unwrap_or("").to_string())
                }
                _ => Section::None,
            };
            op = None;
            count = None;
            continue;
        }
        match &section {
            Section::None => {}
            Section::JobIncomplete | Section::JobDead => {
                let what = if section == Section::JobDead {
                    "dead"
                } else {
                    "missing"
                };
                if let Some((pid, node)) = process(line) {
                    facts.entries.push(RasEntry {
                        pid: Some(pid),
                        node: Some(node),
                        what: what.to_string(),
                        ..RasEntry::default()
                    });
                } else if line.starts_with("Missing ") || line.contains("considered dead") {
                    facts.notes.push(line.to_string());
                }
            }
            Section::CommIncomplete(comm) => {
                if let Some(rank) = rank_of(line) {
                    let (pid, node) = managed(line);
                    facts.entries.push(RasEntry {
                        comm: Some(comm.clone()),
                        rank: Some(rank),
                        pid,
                        node,
                        what: "missing".to_string(),
                    });
                } else if line.starts_with("Missing ") {
                    facts.notes.push(format!("{comm}: {line}"));
                }
            }
            Section::CommMismatch(comm) => {
                if let Some(rest) = after(line, "Communicator ranks have different ") {
                    op = rest.strip_suffix(" operation counts").map(str::to_string);
                    count = None;
                } else if line.starts_with("Communicator ranks have different status")
                    || line.contains(" have status ")
                {
                    op = None;
                } else if let Some(rest) = line.split_once(" ranks have launched up to operation ")
                {
                    count = rest.1.trim().parse().ok();
                } else if line.ends_with(" ranks have not launched any operations") {
                    count = Some(0);
                } else if let (Some(rank), Some(op)) = (rank_of(line), &op) {
                    let explicit = line
                        .split_once(" has launched up to operation ")
                        .and_then(|(_, r)| r.split(' ').next()?.parse().ok())
                        .or(line
                            .contains(" has not launched any operations")
                            .then_some(0));
                    if let Some(n) = explicit.or(count) {
                        let (pid, node) = managed(line);
                        facts.entries.push(RasEntry {
                            comm: Some(comm.clone()),
                            rank: Some(rank),
                            pid,
                            node,
                            what: format!("{op} {n}"),
                        });
                    }
                }
            }
        }
    }
    facts
}

impl RasFacts {
    /// One line for the table's head; `None` when NCCL reports nothing wrong.
    pub fn line(&self) -> Option<String> {
        if self.entries.is_empty() && self.notes.is_empty() {
            return None;
        }
        let named: Vec<String> = self
            .entries
            .iter()
            .take(8)
            .map(|e| {
                let who = match (e.rank, &e.comm) {
                    (Some(r), Some(c)) => format!("rank {r} of {c}"),
                    _ => format!(
                        "pid {} on {}",
                        e.pid.map(|p| p.to_string()).unwrap_or_default(),
                        e.node.as_deref().unwrap_or("?")
                    ),
                };
                format!("{who}: {}", e.what)
            })
            .collect();
        let more = self.entries.len().saturating_sub(8);
        let mut line = format!("NCCL RAS: {}", named.join("; "));
        if more > 0 {
            line.push_str(&format!("; {more} more"));
        }
        if named.is_empty() {
            line = format!("NCCL RAS: {}", self.notes.join("; "));
        }
        Some(line)
    }

    /// What RAS says of the job's rank `rank` (its largest communicator).
    pub fn of_rank(&self, rank: usize) -> Option<String> {
        let said: Vec<&str> = self
            .entries
            .iter()
            .filter(|e| {
                e.rank == Some(rank) && e.comm.as_deref().is_some_and(|c| c.starts_with("#0-"))
            })
            .map(|e| e.what.as_str())
            .collect();
        (!said.is_empty()).then(|| said.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job of 8 ranks on 2 nodes where one process stopped answering
    /// (rank 5) and another lags one AllReduce behind (rank 2), as NCCL
    /// 2.28's RAS service prints it: every line below follows a format
    /// string of `src/ras/client_support.cc` (NVIDIA/nccl at 5067397c:
    /// "Job summary", the communicators' table, "Errors", "INCOMPLETE",
    /// "#%d-%d (%016lx) INCOMPLETE", "Rank %d -- GPU %s managed by process
    /// %d on node %s", "Warnings", "#%d-%d (%016lx) MISMATCH",
    /// "Communicator ranks have different %s operation counts", "%d ranks
    /// have launched up to operation %ld", "Rank %d has launched up to
    /// operation %ld -- GPU %s managed by process %d on node %s").
    const STATUS: &str = "\
NCCL version 2.28.3
CUDA runtime version 12090, driver version 12090

Job summary
===========

  Nodes  Processes         GPUs  Processes     GPUs
(total)   per node  per process    (total)  (total)
      2          4            1          8        8

Gathering data about the RAS network (timeout 2s)... obtained a result in 0.012s
 Warning: missing data from 1 process (received from 7, expected 8)
  The missing process:
  Process 52215 on node 10.0.0.2 managing GPU 1

Gathering data about the NCCL communicators (timeout 2s)... (2.004s)
=============

Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors
    #  in group  per comm  per node  per comm  in group
    0         1         2         4         8         8   RUNNING  INCOMPLETE,MISMATCH

Errors
======

INCOMPLETE
  Missing communicator data from 1 job process
  Process 52215 on node 10.0.0.2 managing GPU 1

#0-0 (9e2ab2f8c3d1a6b0) INCOMPLETE
  Missing communicator data from 1 rank
  Rank 5 -- GPU 1 managed by process 52215 on node 10.0.0.2

Warnings
========

#0-0 (9e2ab2f8c3d1a6b0) MISMATCH
  Communicator ranks have different AllReduce operation counts
  6 ranks have launched up to operation 1178
  Rank 2 has launched up to operation 1177 -- GPU 2 managed by process 51987 on node 10.0.0.1

";

    #[test]
    fn missing_ranks_and_collective_counts() {
        let facts = parse(STATUS);
        assert_eq!(
            facts.entries,
            vec![
                RasEntry {
                    pid: Some(52215),
                    node: Some("10.0.0.2".into()),
                    what: "missing".into(),
                    ..RasEntry::default()
                },
                RasEntry {
                    comm: Some("#0-0".into()),
                    rank: Some(5),
                    pid: Some(52215),
                    node: Some("10.0.0.2".into()),
                    what: "missing".into(),
                },
                RasEntry {
                    comm: Some("#0-0".into()),
                    rank: Some(2),
                    pid: Some(51987),
                    node: Some("10.0.0.1".into()),
                    what: "AllReduce 1177".into(),
                },
            ]
        );
        assert_eq!(
            facts.notes,
            [
                "Missing communicator data from 1 job process",
                "#0-0: Missing communicator data from 1 rank"
            ]
        );
        assert_eq!(facts.of_rank(5).as_deref(), Some("missing"));
        assert_eq!(facts.of_rank(2).as_deref(), Some("AllReduce 1177"));
        assert_eq!(facts.of_rank(0), None);
        assert_eq!(
            facts.line().as_deref(),
            Some(
                "NCCL RAS: pid 52215 on 10.0.0.2: missing; rank 5 of #0-0: missing; rank 2 of #0-0: AllReduce 1177"
            )
        );
    }

    #[test]
    fn a_healthy_job_and_an_outlier_group() {
        // A healthy job: a summary and the table, no Errors or Warnings.
        let healthy = STATUS.split("Errors\n").next().unwrap_or_default();
        assert_eq!(parse(healthy), RasFacts::default());
        assert_eq!(parse(healthy).line(), None);
        // A count under its group line (the outliers listed without their own count).
        let text = "#0-0 (00000000000000aa) MISMATCH\n  Communicator ranks have different AllGather operation counts\n  \
                    2 ranks have not launched any operations\n  Rank 6 -- GPU 0 managed by process 7 on node n1\n";
        let facts = parse(text);
        assert_eq!(facts.entries.len(), 1);
        assert_eq!(facts.entries[0].what, "AllGather 0");
        assert_eq!(facts.entries[0].rank, Some(6));
    }
}
