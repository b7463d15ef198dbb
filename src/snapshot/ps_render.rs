//! The snapshot for people (a headline, the folded groups, then the
//! processes of one node of each group) and for programs (JSON). Pure.
//!
//! What a job chose (command lines, process names, stack frames, and what
//! an agent says) is put in the table through [`printable`]: its control
//! characters are shown as escapes, never sent to the operator's terminal.
//! The JSON has it as it is (JSON escapes it).

use std::fmt::Write as _;

use serde::Serialize;

use super::alike::Alike;
use super::node_snapshot::{NodeSnapshot, Proc};
use super::ranks::Units;
use crate::table::{printable, printable_once};
use crate::topology::nodeset::fold_ranks;

/// The JSON document of `--format json` and of the report's `snapshot`.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    pub nodes: usize,
    /// Whether a node runs several processes: then the groups fold ranks
    /// (global ones), not nodes, and each process of a rank's tree has its
    /// `rank` and `local_rank`.
    pub per_process: bool,
    /// Folded, the odd ones first.
    pub groups: &'a [Alike],
    /// Every node's snapshot, in rank order.
    pub snapshots: &'a [NodeSnapshot],
}

pub(crate) fn render_json(groups: &[Alike], units: &Units) -> String {
    let doc = Document {
        nodes: units.nodes.len(),
        per_process: units.by_rank,
        groups,
        snapshots: units.nodes,
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("plain data serialises");
    s.push('\n');
    s
}

/// The headline: who is odd, and what the others do; first, with
/// several processes a node, the nodes that have no rank to show.
pub(crate) fn headline(groups: &[Alike], units: &Units) -> String {
    let apart: Vec<String> = units
        .apart
        .iter()
        .map(|s| {
            format!(
                "node {} ({}): {}",
                s.rank,
                s.host,
                super::alike::signature(s)
            )
        })
        .collect();
    let folded = folded_headline(groups, &units.units);
    if apart.is_empty() {
        folded
    } else if groups.is_empty() {
        apart.join("; ")
    } else {
        format!("{}; {folded}", apart.join("; "))
    }
}

fn folded_headline(groups: &[Alike], snaps: &[NodeSnapshot]) -> String {
    let host = |rank: usize| {
        snaps
            .iter()
            .find(|s| s.rank == rank)
            .map(|s| s.host.as_str())
            .unwrap_or("?")
    };
    let who = |g: &Alike| match g.rank_list.as_slice() {
        [one] => format!("rank {one} ({})", host(*one)),
        _ => format!("ranks {}", g.ranks),
    };
    match groups {
        [] => "no nodes".to_string(),
        [all] => format!(
            "all {} {}{}: {}",
            all.rank_list.len(),
            if snaps.iter().any(|s| s.node_rank.is_some()) {
                "rank"
            } else {
                "node"
            },
            if all.rank_list.len() == 1 { "" } else { "s" },
            all.summary
        ),
        [odd @ .., most] => {
            let odd: Vec<String> = odd
                .iter()
                .map(|g| format!("{}: {}", who(g), g.summary))
                .collect();
            format!(
                "{}; the others, {}: {}",
                odd.join("; "),
                who(most),
                most.summary
            )
        }
    }
}

/// How to get onto the first odd node: `shell into it: multinode shell 5`,
/// or onto the first odd rank's node: `multinode shell --rank 5`. Only
/// where its agent answered: one that did not is no way in.
pub(crate) fn shell_hint(groups: &[Alike], units: &Units) -> Option<String> {
    let odd = groups.first().filter(|g| g.odd)?;
    let rank = *odd.rank_list.first()?;
    let snap = units.units.iter().find(|s| s.rank == rank)?;
    if snap.error.is_some() {
        return None;
    }
    let whom = if odd.rank_list.len() == 1 {
        "it"
    } else {
        "one of them"
    };
    let flag = if units.by_rank { "--rank " } else { "" };
    Some(format!("shell into {whom}: multinode shell {flag}{rank}"))
}

/// `1h02m`, `3m07s`, `12.5s`.
fn duration(secs: f64) -> String {
    let s = secs.max(0.0);
    if s < 60.0 {
        format!("{s:.1}s")
    } else if s < 3600.0 {
        format!("{}m{:02}s", (s / 60.0) as u64, (s % 60.0) as u64)
    } else {
        format!(
            "{}h{:02}m",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        )
    }
}

/// `812K`, `1.2G`.
fn size_kib(kib: u64) -> String {
    let k = kib as f64;
    if k < 1024.0 {
        format!("{kib}K")
    } else if k < 1024.0 * 1024.0 {
        format!("{:.0}M", k / 1024.0)
    } else {
        format!("{:.1}G", k / 1024.0 / 1024.0)
    }
}

fn gpu_text(p: &Proc) -> String {
    let Some(g) = &p.gpu else { return "-".into() };
    let mut s = g
        .index
        .map_or_else(|| "gpu".to_string(), |i| format!("gpu{i}"));
    if let Some(m) = g.memory_mib {
        let _ = write!(s, " {m}MiB");
    }
    if let Some(u) = g.utilization_pct {
        let _ = write!(s, " {u}%");
    }
    s
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// One node's processes, indented, a stack under each Python process;
/// with `cpus`, the CPUs each may run on.
fn processes(out: &mut String, snap: &NodeSnapshot, cpus: bool) {
    if let Some(e) = &snap.error {
        let _ = writeln!(out, "  no snapshot: {}", printable_once(e));
        return;
    }
    if snap.processes.is_empty() {
        let _ = writeln!(out, "  no process of the job is running");
        return;
    }
    let rows: Vec<Vec<String>> = snap
        .processes
        .iter()
        .map(|p| {
            let mut row = vec![
                p.pid.to_string(),
                printable(&p.state).into_owned(),
                format!("{:.0}", p.cpu_pct),
                size_kib(p.rss_kib),
                duration(p.elapsed_s),
                p.wchan
                    .as_deref()
                    .map_or_else(|| "-".into(), |w| printable(w).into_owned()),
            ];
            if cpus {
                row.push(p.cpus.clone().unwrap_or_else(|| "-".into()));
            }
            row.push(gpu_text(p));
            row.push(shorten(&printable(&p.cmdline_or_comm()), 70));
            row
        })
        .collect();
    let mut head = vec!["PID", "S", "CPU%", "RSS", "ELAPSED", "WAIT"];
    if cpus {
        head.push("CPUS");
    }
    head.extend(["GPU", "COMMAND"]);
    let head: Vec<String> = head.into_iter().map(String::from).collect();
    let all: Vec<&[String]> = std::iter::once(&head)
        .chain(&rows)
        .map(Vec::as_slice)
        .collect();
    let columns = crate::table::Columns::fit(&all);
    let line = |out: &mut String, cells: &[&str]| {
        let _ = writeln!(out, "  {}", columns.line(cells));
    };
    let head_cells: Vec<&str> = head.iter().map(String::as_str).collect();
    line(out, &head_cells);
    for (p, r) in snap.processes.iter().zip(&rows) {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(out, &cells);
        if let Some(frames) = &p.stack {
            let idle = match p.stack_idle {
                Some(true) => " (idle)",
                Some(false) => " (active)",
                None => "",
            };
            let _ = writeln!(
                out,
                "      python stack of {}{idle}, innermost first:",
                p.pid
            );
            for f in frames.iter().take(12) {
                let _ = writeln!(
                    out,
                    "        {} ({}:{})",
                    printable(&f.function),
                    printable(&f.file),
                    f.line
                );
            }
            if frames.len() > 12 {
                let _ = writeln!(out, "        ... {} more", frames.len() - 12);
            }
        } else if let Some(note) = &p.stack_note {
            let _ = writeln!(out, "      no python stack: {}", printable(note));
        }
    }
    if snap.processes_left_out > 0 {
        let _ = writeln!(out, "  {}", left_out(snap.processes_left_out));
    }
}

/// `... and 5 more processes, not shown (a snapshot holds 1024)`.
pub(crate) fn left_out(n: usize) -> String {
    format!(
        "... and {n} more process{}, not shown (a snapshot holds {})",
        if n == 1 { "" } else { "es" },
        super::take::PROCESSES_MAX
    )
}

impl Proc {
    fn cmdline_or_comm(&self) -> String {
        if self.cmdline.is_empty() {
            format!("[{}]", self.comm)
        } else {
            self.cmdline.clone()
        }
    }
}

/// The table for people: the headline, one line per group, then each
/// group's first node in detail (odd groups first).
/// With several processes a node, the groups fold ranks: each rank's
/// block names its node and local rank, and shows each process's CPUs.
pub(crate) fn render_table(groups: &[Alike], units: &Units) -> String {
    let snaps = &units.units;
    let mut out = String::new();
    let _ = writeln!(out, "{}", printable(&headline(groups, units)));
    if let Some(hint) = shell_hint(groups, units) {
        let _ = writeln!(out, "{hint}");
    }
    // Two processes that claim one rank are both shown, and said to be.
    for (rank, claims) in super::ranks::claimed_twice(units.nodes) {
        let _ = writeln!(out, "{}", super::ranks::claimed_line(rank, &claims));
    }
    let _ = writeln!(out);
    let ranks_w = groups
        .iter()
        .map(|g| g.ranks.len())
        .max()
        .unwrap_or(0)
        .max("RANKS".len());
    let count = if units.by_rank { "PROCS" } else { "NODES" };
    let _ = writeln!(out, "{:<ranks_w$}  {count}  WHAT", "RANKS");
    for g in groups {
        let _ = writeln!(
            out,
            "{:<ranks_w$}  {:<5}  {}",
            g.ranks,
            g.rank_list.len(),
            printable(&g.summary)
        );
    }
    for g in groups {
        let Some(first) = g.rank_list.first() else {
            continue;
        };
        let Some(snap) = snaps.iter().find(|s| s.rank == *first) else {
            continue;
        };
        let _ = writeln!(out);
        let also = if g.rank_list.len() > 1 {
            format!(
                " (shown for the {} ranks {} alike)",
                g.rank_list.len(),
                fold_ranks(&g.rank_list)
            )
        } else {
            String::new()
        };
        let place = match (snap.node_rank, snap.local_rank) {
            (Some(node), Some(local)) => format!(": node {node}, local rank {local}"),
            (Some(node), None) => format!(": node {node}"),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "rank {first} ({}{place}){also}:",
            printable(&snap.host)
        );
        processes(&mut out, snap, units.by_rank);
    }
    for snap in &units.apart {
        let _ = writeln!(out);
        let _ = writeln!(out, "node {} ({}):", snap.rank, printable(&snap.host));
        processes(&mut out, snap, units.by_rank);
    }
    let who = if units.by_rank { "node" } else { "rank" };
    let notes: Vec<String> = units
        .nodes
        .iter()
        .filter_map(|s| {
            let note = s.gpu_note.as_deref()?;
            Some(format!("{who} {}: {}", s.rank, printable(note)))
        })
        .collect();
    if !notes.is_empty() {
        let _ = writeln!(out);
        for n in notes {
            let _ = writeln!(out, "{n}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvidia_smi::GpuUse;
    use crate::snapshot::fold;
    use crate::snapshot::pystack::Frame;

    fn snap(rank: usize, frames: &[&str], util: u32) -> NodeSnapshot {
        NodeSnapshot {
            rank,
            host: format!("127.0.0.{}", rank + 2),
            processes: vec![Proc {
                pid: 100 + rank as i32,
                ppid: 1,
                pgid: 100,
                state: "S".into(),
                cpu_pct: 0.4,
                rss_kib: 2_500_000,
                wchan: Some("do_select".into()),
                elapsed_s: 75.0,
                comm: "python3".into(),
                cmdline: "python3 /workspace/train.py".into(),
                gpu: Some(GpuUse {
                    index: Some(rank as u32),
                    memory_mib: Some(1024),
                    utilization_pct: Some(util),
                }),
                stack: Some(
                    frames
                        .iter()
                        .map(|f| Frame {
                            function: f.to_string(),
                            file: "train.py".into(),
                            line: 12,
                        })
                        .collect(),
                ),
                stack_idle: Some(true),
                stack_note: None,
                samples: None,
                cpus: None,
                rank: None,
                local_rank: None,
            }],
            ..NodeSnapshot::default()
        }
    }

    #[test]
    fn processes_past_a_snapshots_bound_are_counted_under_the_node() {
        let mut one = snap(0, &["train_step"], 50);
        one.processes_left_out = 79;
        let snaps = vec![one];
        let units = Units::of(&snaps);
        let groups = fold(&units.units);
        let table = render_table(&groups, &units);
        assert!(
            table.contains("\n  ... and 79 more processes, not shown (a snapshot holds 1024)\n"),
            "{table}"
        );
        let doc: serde_json::Value = serde_json::from_str(&render_json(&groups, &units)).unwrap();
        assert_eq!(doc["snapshots"][0]["processes_left_out"], 79);
    }

    #[test]
    fn a_table_that_names_the_odd_rank() {
        let snaps = vec![
            snap(0, &["all_reduce", "train_step"], 100),
            snap(1, &["hang", "<module>"], 0),
        ];
        let units = Units::of(&snaps);
        let groups = fold(&units.units);
        let table = render_table(&groups, &units);
        let first = table.lines().next().expect("a headline");
        assert_eq!(
            first,
            "rank 1 (127.0.0.3): python3 sleeping in hang <- <module>; the others, rank 0 (127.0.0.2): python3 sleeping in all_reduce <- train_step"
        );
        assert_eq!(
            table.lines().nth(1),
            Some("shell into it: multinode shell 1")
        );
        assert!(table.contains("\nRANKS  NODES  WHAT\n1      1      python3 sleeping in hang <- <module>\n0      1      python3 sleeping in all_reduce"), "{table}");
        assert!(table.contains("  101  S  0     2.4G  1m15s    do_select  gpu1 1024MiB 0%  python3 /workspace/train.py"), "{table}");
        assert!(
            table.contains(
                "      python stack of 101 (idle), innermost first:\n        hang (train.py:12)\n"
            ),
            "{table}"
        );
        // Rank 1's block comes before rank 0's.
        assert!(table.find("rank 1 (127.0.0.3):") < table.find("rank 0 (127.0.0.2):"));
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&groups, &units)).expect("json");
        assert_eq!(json["nodes"], 2);
        assert_eq!(json["per_process"], false);
        assert_eq!(json["groups"][0]["ranks"], "1");
        assert_eq!(json["groups"][0]["odd"], true);
        assert_eq!(
            json["snapshots"][0]["processes"][0]["gpu"]["utilization_pct"],
            100
        );
    }

    /// A job's command lines, names, frames and wait channels are its own
    /// to choose: their control characters (a terminal's title, a cleared
    /// screen, a line feed that makes a fake line) reach the operator's
    /// terminal escaped; the JSON keeps them as they are.
    #[test]
    fn control_characters_of_the_job_reach_the_terminal_escaped() {
        let mut one = snap(0, &["hang\x1b[2J", "<module>"], 0);
        let p = &mut one.processes[0];
        p.cmdline = "\x1b]0;PWNED\x07\x1b[2J sleep 25\nrank 9: fake".into();
        p.comm = "sle\u{9b}ep".into();
        p.wchan = Some("do\rselect".into());
        if let Some(frames) = p.stack.as_mut() {
            frames[1].file = "t\x7f.py".into();
        }
        let snaps = vec![one];
        let units = Units::of(&snaps);
        let groups = fold(&units.units);
        let table = render_table(&groups, &units);
        let raw: Vec<char> = table
            .chars()
            .filter(|c| c.is_control() && *c != '\n')
            .collect();
        assert!(raw.is_empty(), "{raw:?} in {table}");
        for shown in [
            r"\e]0;PWNED\x07\e[2J sleep 25\nrank 9: fake",
            r"do\rselect",
            r"sle\u009bep sleeping in hang\e[2J <- <module>",
            r"<module> (t\x7f.py:12)",
        ] {
            assert!(table.contains(shown), "{shown} in {table}");
        }
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&groups, &units)).expect("json");
        assert_eq!(
            json["snapshots"][0]["processes"][0]["cmdline"],
            "\x1b]0;PWNED\x07\x1b[2J sleep 25\nrank 9: fake"
        );
    }

    /// Two nodes of two processes each, labelled as `ranks::label` does:
    /// rank 3 (node 1, local rank 1) hangs outside the collective.
    #[test]
    fn with_several_processes_a_node_the_table_folds_ranks_with_their_cpus() {
        let snaps: Vec<NodeSnapshot> = (0..2)
            .map(|node| {
                let mut snap = snap(node, &[], 0);
                snap.processes = (0..2)
                    .map(|local| {
                        let rank = 2 * node + local;
                        let mut p = snap.processes[0].clone();
                        p.pid = 100 + rank as i32;
                        p.rank = Some(rank);
                        p.local_rank = Some(local);
                        p.cpus = Some(format!("{}-{}", 8 * local, 8 * local + 7));
                        p.gpu = None;
                        p.stack = Some(vec![Frame {
                            function: if rank == 3 { "hang" } else { "all_reduce" }.into(),
                            file: "train.py".into(),
                            line: 12,
                        }]);
                        p
                    })
                    .collect();
                snap
            })
            .collect();
        let units = Units::of(&snaps);
        let groups = fold(&units.units);
        let table = render_table(&groups, &units);
        let mut lines = table.lines();
        assert_eq!(
            lines.next(),
            Some(
                "rank 3 (127.0.0.3): python3 sleeping in hang; the others, ranks 0-2: python3 sleeping in all_reduce"
            )
        );
        assert_eq!(
            lines.next(),
            Some("shell into it: multinode shell --rank 3")
        );
        assert!(
            table.contains(
                "\nRANKS  PROCS  WHAT\n3      1      python3 sleeping in hang\n0-2    3  "
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "\nrank 3 (127.0.0.3: node 1, local rank 1):\n  PID  S  CPU%  RSS   ELAPSED  WAIT       CPUS  GPU  COMMAND\n  103  S  0     2.4G  1m15s    do_select  8-15  -    python3 /workspace/train.py\n"
            ),
            "{table}"
        );
        assert!(
            table.contains(
                "\nrank 0 (127.0.0.2: node 0, local rank 0) (shown for the 3 ranks 0-2 alike):\n"
            ),
            "{table}"
        );
        let json: serde_json::Value =
            serde_json::from_str(&render_json(&groups, &units)).expect("json");
        assert_eq!(json["per_process"], true);
        assert_eq!(json["nodes"], 2);
        assert_eq!(json["groups"][0]["ranks"], "3");
        let p = &json["snapshots"][1]["processes"][1];
        assert_eq!(
            (&p["rank"], &p["local_rank"], &p["cpus"]),
            (&3.into(), &1.into(), &"8-15".into())
        );
    }

    #[test]
    fn a_node_with_no_rank_to_show_stands_apart() {
        let mut ranked = snap(0, &["all_reduce"], 0);
        ranked.processes[0].rank = Some(0);
        ranked.processes[0].local_rank = Some(0);
        let snaps = vec![
            ranked,
            NodeSnapshot {
                rank: 1,
                host: "127.0.0.3".into(),
                error: Some("connection refused".into()),
                ..NodeSnapshot::default()
            },
        ];
        let units = Units::of(&snaps);
        let groups = fold(&units.units);
        let table = render_table(&groups, &units);
        assert!(
            table.starts_with(
                "node 1 (127.0.0.3): no snapshot: connection refused; all 1 rank: python3 sleeping in all_reduce\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("\nnode 1 (127.0.0.3):\n  no snapshot: connection refused\n"),
            "{table}"
        );
    }

    #[test]
    fn two_processes_that_claim_one_rank_are_said_to() {
        let mut snaps: Vec<NodeSnapshot> =
            (0..2).map(|node| snap(node, &["all_reduce"], 0)).collect();
        for (node, s) in snaps.iter_mut().enumerate() {
            s.commands = vec![crate::snapshot::CommandInfo {
                pgid: 40 + node as i32,
                rank: Some(1),
                ..Default::default()
            }];
        }
        let units = Units::of(&snaps);
        let groups = fold(&units.units);
        let table = render_table(&groups, &units);
        assert!(
            table.contains(
                "\nrank 1 is claimed by 2 processes: node 0 (127.0.0.2, group 40), node 1 (127.0.0.3, group 41)\n"
            ),
            "{table}"
        );
    }

    #[test]
    fn units() {
        assert_eq!(duration(12.54), "12.5s");
        assert_eq!(duration(187.0), "3m07s");
        assert_eq!(duration(3720.0), "1h02m");
        assert_eq!(size_kib(812), "812K");
        assert_eq!(size_kib(20480), "20M");
        assert_eq!(shorten("abcdef", 4), "abc…");
    }
}
