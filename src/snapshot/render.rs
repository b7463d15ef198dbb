//! The snapshot for people (a headline, the folded groups, then the
//! processes of one node of each group) and for programs (JSON). Pure.
//!
//! What a job chose (command lines, process names, stack frames, and what
//! an agent says) is put in the table through [`printable`]: its control
//! characters are shown as escapes, never sent to the operator's terminal.
//! The JSON has it as it is (JSON escapes it).

use std::fmt::Write as _;

use serde::Serialize;

use super::fold::Group;
use super::{NodeSnapshot, Proc};
use crate::table::printable;
use crate::topology::nodeset::fold_ranks;

/// The JSON document of `--format json` and of the report's `snapshot`.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    pub nodes: usize,
    /// Folded, the odd ones first.
    pub groups: &'a [Group],
    /// Every node's snapshot, in rank order.
    pub snapshots: &'a [NodeSnapshot],
}

pub(crate) fn render_json(groups: &[Group], snaps: &[NodeSnapshot]) -> String {
    let doc = Document {
        nodes: snaps.len(),
        groups,
        snapshots: snaps,
    };
    let mut s = serde_json::to_string_pretty(&doc).expect("plain data serialises");
    s.push('\n');
    s
}

/// The headline: who is odd, and what the others do.
pub(crate) fn headline(groups: &[Group], snaps: &[NodeSnapshot]) -> String {
    let host = |rank: usize| {
        snaps
            .iter()
            .find(|s| s.rank == rank)
            .map(|s| s.host.as_str())
            .unwrap_or("?")
    };
    let who = |g: &Group| match g.rank_list.as_slice() {
        [one] => format!("rank {one} ({})", host(*one)),
        _ => format!("ranks {}", g.ranks),
    };
    match groups {
        [] => "no nodes".to_string(),
        [all] => format!(
            "all {} node{}: {}",
            all.rank_list.len(),
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

/// How to get onto the first odd node: `shell into it: multinode shell 5`.
/// Only where its agent answered: one that did not is no way in.
pub(crate) fn shell_hint(groups: &[Group], snaps: &[NodeSnapshot]) -> Option<String> {
    let odd = groups.first().filter(|g| g.odd)?;
    let rank = *odd.rank_list.first()?;
    let snap = snaps.iter().find(|s| s.rank == rank)?;
    if snap.error.is_some() {
        return None;
    }
    let whom = if odd.rank_list.len() == 1 {
        "it"
    } else {
        "one of them"
    };
    Some(format!("shell into {whom}: multinode shell {rank}"))
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

/// One node's processes, indented, a stack under each Python process.
fn processes(out: &mut String, snap: &NodeSnapshot) {
    if let Some(e) = &snap.error {
        let _ = writeln!(out, "  no snapshot: {}", printable(e));
        return;
    }
    if snap.processes.is_empty() {
        let _ = writeln!(out, "  no process of the job is running");
        return;
    }
    let rows: Vec<[String; 8]> = snap
        .processes
        .iter()
        .map(|p| {
            [
                p.pid.to_string(),
                printable(&p.state).into_owned(),
                format!("{:.0}", p.cpu_pct),
                size_kib(p.rss_kib),
                duration(p.elapsed_s),
                p.wchan
                    .as_deref()
                    .map_or_else(|| "-".into(), |w| printable(w).into_owned()),
                gpu_text(p),
                shorten(&printable(&p.cmdline_or_comm()), 70),
            ]
        })
        .collect();
    let head = [
        "PID", "S", "CPU%", "RSS", "ELAPSED", "WAIT", "GPU", "COMMAND",
    ];
    let head = head.map(String::from);
    let all: Vec<&[String; 8]> = std::iter::once(&head).chain(&rows).collect();
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
pub(crate) fn render_table(groups: &[Group], snaps: &[NodeSnapshot]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{}", printable(&headline(groups, snaps)));
    if let Some(hint) = shell_hint(groups, snaps) {
        let _ = writeln!(out, "{hint}");
    }
    let _ = writeln!(out);
    let ranks_w = groups
        .iter()
        .map(|g| g.ranks.len())
        .max()
        .unwrap_or(0)
        .max("RANKS".len());
    let _ = writeln!(out, "{:<ranks_w$}  NODES  WHAT", "RANKS");
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
        let _ = writeln!(out, "rank {first} ({}){also}:", printable(&snap.host));
        processes(&mut out, snap);
    }
    let notes: Vec<String> = snaps
        .iter()
        .filter_map(|s| {
            let note = s.gpu_note.as_deref()?;
            Some(format!("rank {}: {}", s.rank, printable(note)))
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
    use crate::snapshot::{Frame, GpuUse, fold};

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
            }],
            ..NodeSnapshot::default()
        }
    }

    #[test]
    fn a_table_that_names_the_odd_rank() {
        let snaps = vec![
            snap(0, &["all_reduce", "train_step"], 100),
            snap(1, &["hang", "<module>"], 0),
        ];
        let groups = fold(&snaps);
        let table = render_table(&groups, &snaps);
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
            serde_json::from_str(&render_json(&groups, &snaps)).expect("json");
        assert_eq!(json["nodes"], 2);
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
        let groups = fold(&snaps);
        let table = render_table(&groups, &snaps);
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
            serde_json::from_str(&render_json(&groups, &snaps)).expect("json");
        assert_eq!(
            json["snapshots"][0]["processes"][0]["cmdline"],
            "\x1b]0;PWNED\x07\x1b[2J sleep 25\nrank 9: fake"
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
