//! A refresh for people (the table under the straggler line) and for
//! programs (one JSON object a refresh; docs/top.md gives its schema).
//! Pure.

use serde::Serialize;

use super::ras_status::RasFacts;
use super::rows::Row;
use super::start_line::Start;
use super::straggler::StragglerVerdict;
use crate::cli::TopSort;
use crate::table::{printable, printable_once};

/// One refresh, as `--format json` prints it (one line).
#[derive(Debug, Serialize)]
pub struct Refresh<'a> {
    /// When it was gathered (ms since the Unix epoch, this machine's clock).
    pub time_ms: u64,
    /// Ranks shown (rows).
    pub ranks: usize,
    pub straggler: &'a StragglerVerdict,
    /// While the ranks start, and a while after (`start_line.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start: Option<&'a Start>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ras: Option<&'a RasFacts>,
    /// Each rank that more than one process claims (started with its
    /// `RANK`), as a line: both are shown, neither is guessed.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub claimed_twice: &'a [String],
    pub rows: &'a [Row],
}

/// The JSON line of a refresh.
pub(crate) fn json(refresh: &Refresh<'_>) -> String {
    let mut line = serde_json::to_string(refresh).expect("a plain struct serialises");
    line.push('\n');
    line
}

/// Rows in `sort`'s order (rank breaks ties).
pub(crate) fn sort(rows: &mut [Row], sort: TopSort) {
    let key = |r: &Row| -> f64 {
        match sort {
            TopSort::Rank => 0.0,
            TopSort::Wait => r.wait_share.unwrap_or(f64::MAX),
            TopSort::Rate => r.step_rate.unwrap_or(f64::MAX),
            TopSort::Cpu => -r.cpu_pct,
            TopSort::Output => -r.output_age_s.unwrap_or(-1.0),
        }
    };
    rows.sort_by(|a, b| key(a).total_cmp(&key(b)).then(a.rank.cmp(&b.rank)));
}

fn age(secs: Option<f64>) -> String {
    match secs {
        None => "-".into(),
        Some(s) if s < 10.0 => format!("{s:.1}s"),
        Some(s) if s < 120.0 => format!("{s:.0}s"),
        Some(s) if s < 7200.0 => format!("{:.0}m", s / 60.0),
        Some(s) => format!("{:.0}h", s / 3600.0),
    }
}

fn size(kib: u64) -> String {
    if kib >= 1024 * 1024 {
        format!("{:.1}G", kib as f64 / 1024.0 / 1024.0)
    } else {
        format!("{}M", kib / 1024)
    }
}

/// Each GPU's cell of one column, joined with `,`; `-` without a GPU.
fn gpu_cell(row: &Row, f: impl Fn(&crate::snapshot::GpuDevice) -> String) -> String {
    if row.gpus.is_empty() {
        return "-".into();
    }
    row.gpus.iter().map(f).collect::<Vec<_>>().join(",")
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "?".to_string(), |v| v.to_string())
}

/// The table: the title line, the straggler line(s), NCCL's RAS line, the rows.
pub(crate) fn table(title: &str, refresh: &Refresh<'_>, ras_line: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(title);
    out.push('\n');
    out.push_str(&printable(&refresh.straggler.line));
    out.push('\n');
    if let Some(start) = refresh.start {
        out.push_str(&printable(&start.line));
        out.push('\n');
    }
    if let Some(ras) = ras_line {
        out.push_str(&printable(ras));
        out.push('\n');
    }
    for line in refresh.claimed_twice {
        out.push_str(line);
        out.push('\n');
    }
    let progress = refresh.rows.iter().any(|r| r.step.is_some());
    let mut header = vec!["RANK", "HOST", "ST", "UP", "CPU%", "RSS", "WAIT"];
    if progress {
        header.extend(["STEP", "STEP/S"]);
    }
    header.extend([
        "OUT", "BEAT", "GPU", "UTIL", "MEM", "POWER", "SM MHZ", "THROTTLE", "WHERE",
    ]);
    let mut lines: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for r in refresh.rows {
        if let Some(e) = &r.error {
            // Every cell through `printable`: a host's name and an error
            // (a server's words, an agent's) are text from outside.
            let mut cells = vec![
                r.rank.to_string(),
                printable(&r.host).into_owned(),
                "?".into(),
            ];
            cells.resize(header.len() - 1, String::new());
            cells.push(format!("no snapshot: {}", printable_once(e)));
            lines.push(cells);
            continue;
        }
        let mut cells = vec![
            r.rank.to_string(),
            r.host.clone(),
            if r.state.is_empty() {
                "-".into()
            } else {
                r.state.clone()
            },
            age(r.up_s),
            // A sum that rounds to nothing, or a clock that went back, is 0, never `-0`.
            format!("{:.0}", if r.cpu_pct > 0.0 { r.cpu_pct } else { 0.0 }),
            size(r.rss_kib),
            r.wait_share
                .map_or("-".into(), |w| format!("{:.0}%", w * 100.0)),
        ];
        if progress {
            cells.push(r.step.map_or("-".into(), |s| format!("{s}")));
            cells.push(r.step_rate.map_or("-".into(), |s| format!("{s:.2}")));
        }
        cells.extend([
            age(r.output_age_s),
            age(r.heartbeat_age_s),
            gpu_cell(r, |g| g.index.to_string()),
            gpu_cell(r, |g| format!("{}%", opt(g.utilization_pct))),
            gpu_cell(r, |g| {
                format!(
                    "{}/{}G",
                    g.memory_used_mib
                        .map_or("?".into(), |m| format!("{:.0}", m as f64 / 1024.0)),
                    g.memory_total_mib
                        .map_or("?".into(), |m| format!("{:.0}", m as f64 / 1024.0))
                )
            }),
            gpu_cell(r, |g| g.power_w.map_or("?".into(), |p| format!("{p:.0}W"))),
            gpu_cell(r, |g| {
                format!("{}/{}", opt(g.sm_clock_mhz), opt(g.sm_clock_max_mhz))
            }),
            gpu_cell(r, |g| {
                if g.throttle.is_empty() {
                    "-".into()
                } else {
                    g.throttle.join("+")
                }
            }),
            r.place
                .as_deref()
                .map_or_else(|| r.comm.clone(), |p| format!("{} {p}", r.comm)),
        ]);
        lines.push(
            cells
                .into_iter()
                .map(|c| printable(&c).into_owned())
                .collect(),
        );
    }
    out.push_str(&crate::table::render(&lines));
    let mut told = std::collections::BTreeSet::new();
    for r in refresh.rows.iter().filter(|r| r.processes_left_out > 0) {
        if told.insert(r.node_rank) {
            let n = crate::snapshot::left_out(r.processes_left_out);
            out.push_str(&format!(
                "node {} ({}): {n}\n",
                r.node_rank,
                printable(&r.host)
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::GpuDevice;

    #[test]
    fn a_table_with_its_straggler_line_and_gpu_columns() {
        let rows = vec![
            Row {
                rank: 0,
                host: "gpu1".into(),
                state: "S".into(),
                cpu_pct: 12.0,
                rss_kib: 3 * 1024 * 1024,
                wait_share: Some(0.5),
                output_age_s: Some(0.4),
                up_s: Some(125.0),
                comm: "python3".into(),
                place: Some("all_reduce <- train_step <- <module>".into()),
                gpus: vec![GpuDevice {
                    index: 0,
                    utilization_pct: Some(99),
                    memory_used_mib: Some(40 * 1024),
                    memory_total_mib: Some(80 * 1024),
                    power_w: Some(512.3),
                    sm_clock_mhz: Some(1980),
                    sm_clock_max_mhz: Some(1980),
                    ..GpuDevice::default()
                }],
                ..Row::default()
            },
            Row {
                rank: 1,
                host: "gpu2".into(),
                error: Some("the agent did not answer within 8 s".into()),
                ..Row::default()
            },
        ];
        let verdict = StragglerVerdict {
            stragglers: vec![],
            line: "no straggler (1 rank)".into(),
        };
        let refresh = Refresh {
            time_ms: 1,
            ranks: 2,
            straggler: &verdict,
            start: None,
            ras: None,
            claimed_twice: &[],
            rows: &rows,
        };
        let text = table("multinode top: 2 ranks", &refresh, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "no straggler (1 rank)");
        assert!(lines[2].starts_with("RANK  HOST"), "{text}");
        assert!(
            lines[3].contains("0     gpu1  S   2m  12    3.0G  50%   0.4s  -     0    99%   40/80G  512W   1980/1980  -         python3 all_reduce"),
            "{text}"
        );
        assert!(
            lines[4].ends_with("no snapshot: the agent did not answer within 8 s"),
            "{text}"
        );
        let doc: serde_json::Value = serde_json::from_str(&json(&refresh)).expect("json");
        assert_eq!(doc["rows"][0]["gpus"][0]["sm_clock_mhz"], 1980);
        assert_eq!(doc["straggler"]["stragglers"], serde_json::json!([]));
    }

    #[test]
    fn processes_past_a_snapshots_bound_are_counted_under_the_table() {
        let row = |rank: usize, left_out: usize| Row {
            rank,
            node_rank: 1,
            host: "gpu\x1b]0;x".into(),
            processes_left_out: left_out,
            ..Row::default()
        };
        let rows = vec![row(0, 0), row(8, 79), row(9, 79)];
        let verdict = StragglerVerdict {
            stragglers: vec![],
            line: String::new(),
        };
        let refresh = Refresh {
            time_ms: 1,
            ranks: 3,
            straggler: &verdict,
            start: None,
            ras: None,
            claimed_twice: &[],
            rows: &rows,
        };
        let text = table("t", &refresh, None);
        let said: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("more processes"))
            .collect();
        assert_eq!(
            said,
            ["node 1 (gpu\\e]0;x): ... and 79 more processes, not shown (a snapshot holds 1024)"]
        );
        let doc: serde_json::Value = serde_json::from_str(&json(&refresh)).unwrap();
        assert_eq!(doc["rows"][1]["processes_left_out"], 79);
        assert_eq!(doc["rows"][0].get("processes_left_out"), None);
    }

    #[test]
    fn an_error_row_is_escaped_in_every_cell_and_cpu_is_never_minus_zero() {
        let rows = vec![
            Row {
                rank: 0,
                host: "n0".into(),
                cpu_pct: -0.3,
                ..Row::default()
            },
            Row {
                rank: 3,
                host: "n\x1b]0;x\x07".into(),
                error: Some("\x1b[2J\x1b[H\x1b[31mrank 3: all good\x1b[0m\nFAKE \u{202e}".into()),
                ..Row::default()
            },
        ];
        let verdict = StragglerVerdict {
            stragglers: vec![],
            line: "no straggler (1 rank)".into(),
        };
        let claimed = [
            "rank 0 is claimed by 2 processes: node 0 (n0, group 5), node 1 (n1, group 9)"
                .to_string(),
        ];
        let refresh = Refresh {
            time_ms: 1,
            ranks: 2,
            straggler: &verdict,
            start: None,
            ras: None,
            claimed_twice: &claimed,
            rows: &rows,
        };
        let text = table("multinode top: 2 ranks", &refresh, None);
        assert!(!text.contains(['\x1b', '\x07', '\u{202e}']), "{text:?}");
        assert_eq!(text.lines().nth(2), Some(claimed[0].as_str()), "{text}");
        assert_eq!(text.lines().count(), 6, "{text}");
        assert!(text.contains("no snapshot: \\e[2J\\e[H"), "{text}");
        assert!(text.contains("n\\e]0;x\\x07"), "{text}");
        let cpu = text.lines().nth(4).expect("rank 0's row");
        assert!(!cpu.contains("-0"), "{cpu}");
    }

    #[test]
    fn sorted_by_wait_the_least_waiting_first() {
        let mut rows: Vec<Row> = [(0, 0.5), (1, 0.05), (2, 0.4)]
            .iter()
            .map(|&(rank, w)| Row {
                rank,
                wait_share: Some(w),
                ..Row::default()
            })
            .collect();
        sort(&mut rows, TopSort::Wait);
        assert_eq!(rows.iter().map(|r| r.rank).collect::<Vec<_>>(), [1, 2, 0]);
        sort(&mut rows, TopSort::Rank);
        assert_eq!(rows.iter().map(|r| r.rank).collect::<Vec<_>>(), [0, 1, 2]);
    }
}
