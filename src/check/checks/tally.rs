//! One check's result: how it came out (`Status`), its row
//! (`CheckResult`), and the findings a node that fold into it (`Tally`);
//! sizes and lists as the details write them.

use std::collections::BTreeSet;

use serde::Serialize;

use super::check_inputs::CheckInputs;
use crate::topology::nodeset::fold;

/// How a check came out; the order is the severity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Ok,
    Warn,
    Fail,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Warn => "warn",
            Status::Fail => "fail",
        }
    }
}

/// One row of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct CheckResult {
    /// The check's name: `memlock`, `rendezvous-connect`, ...
    pub check: &'static str,
    pub status: Status,
    /// The nodes with that status, in rank order (every node checked when ok).
    pub nodes: Vec<String>,
    /// What was found, one line.
    pub detail: String,
    /// How to fix it, one line; `None` when ok.
    pub fix: Option<String>,
}

#[derive(Debug, Clone)]
struct Finding {
    rank: usize,
    status: Status,
    detail: String,
    fix: String,
}

/// The findings of one check, folded into its row by [`Tally::finish`].
pub(super) struct Tally<'a> {
    inputs: &'a CheckInputs,
    check: &'static str,
    checked: BTreeSet<usize>,
    findings: Vec<Finding>,
}

impl<'a> Tally<'a> {
    pub(super) fn new(inputs: &'a CheckInputs, check: &'static str) -> Self {
        Tally {
            inputs,
            check,
            checked: BTreeSet::new(),
            findings: Vec::new(),
        }
    }

    /// Node `rank` was checked and is fine.
    pub(super) fn ok(&mut self, rank: usize) {
        self.checked.insert(rank);
    }

    pub(super) fn warn(&mut self, rank: usize, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(rank, Status::Warn, detail.into(), fix.into());
    }

    pub(super) fn fail(&mut self, rank: usize, detail: impl Into<String>, fix: impl Into<String>) {
        self.add(rank, Status::Fail, detail.into(), fix.into());
    }

    fn add(&mut self, rank: usize, status: Status, detail: String, fix: String) {
        self.checked.insert(rank);
        self.findings.push(Finding {
            rank,
            status,
            detail,
            fix,
        });
    }

    /// The row: `ok_detail` when nothing was found, else the worst findings
    /// grouped by detail (`detail on node[01-03]; other on node07`), then
    /// the milder ones (`also warn: ...`).
    pub(super) fn finish(self, ok_detail: impl Into<String>) -> CheckResult {
        let worst = self
            .findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok);
        if worst == Status::Ok {
            return CheckResult {
                check: self.check,
                status: Status::Ok,
                nodes: self
                    .checked
                    .iter()
                    .map(|r| self.inputs.host(*r).to_string())
                    .collect(),
                detail: ok_detail.into(),
                fix: None,
            };
        }
        let of = |status: Status| -> Vec<&Finding> {
            self.findings
                .iter()
                .filter(|f| f.status == status)
                .collect()
        };
        let worst_findings = of(worst);
        let ranks: BTreeSet<usize> = worst_findings.iter().map(|f| f.rank).collect();
        let mut detail = self.grouped(&worst_findings);
        if worst == Status::Fail {
            let milder = of(Status::Warn);
            if !milder.is_empty() {
                detail.push_str("; also warn: ");
                detail.push_str(&self.grouped(&milder));
            }
        }
        let mut fixes: Vec<&str> = Vec::new();
        for f in &worst_findings {
            if !fixes.contains(&f.fix.as_str()) {
                fixes.push(&f.fix);
            }
        }
        CheckResult {
            check: self.check,
            status: worst,
            nodes: ranks
                .iter()
                .map(|r| self.inputs.host(*r).to_string())
                .collect(),
            detail,
            fix: Some(fixes.join("; ")),
        }
    }

    /// `detail on node[01-02]; other on node03`, details in order of first appearance.
    fn grouped(&self, findings: &[&Finding]) -> String {
        let mut groups: Vec<(&str, Vec<usize>)> = Vec::new();
        for f in findings {
            match groups.iter_mut().find(|(d, _)| *d == f.detail) {
                Some((_, ranks)) => {
                    if !ranks.contains(&f.rank) {
                        ranks.push(f.rank);
                    }
                }
                None => groups.push((&f.detail, vec![f.rank])),
            }
        }
        groups
            .iter()
            .map(|(detail, ranks)| {
                let hosts: Vec<&str> = ranks.iter().map(|r| self.inputs.host(*r)).collect();
                format!("{detail} on {}", fold(&hosts))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// `8 MiB`, `64 KiB`, `1.5 GiB`, `100 B`.
pub(crate) fn bytes(n: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, size) in UNITS {
        if n >= size {
            return if n.is_multiple_of(size) {
                format!("{} {unit}", n / size)
            } else {
                format!("{:.1} {unit}", n as f64 / size as f64)
            };
        }
    }
    format!("{n} B")
}

/// `a, b, c`, or `none`.
pub(super) fn list_or_none<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        "none".to_string()
    } else {
        items
            .iter()
            .map(|s| s.as_ref())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
