//! Hostlist expansion compared with ClusterShell's `nodeset -e`, the reference.
//!
//! `nodeset` sorts and removes duplicates, so expansions are compared as sorted
//! sets, and the expressions never repeat a host. Padding is generated only in
//! the forms where Slurm and `nodeset` agree: no leading zeros, or a range
//! whose ends are written with the same width (`[08-11]`). Slurm also accepts
//! `[1-010]` and `[008-11]`, which `nodeset` refuses.

use std::collections::BTreeMap;
use std::process::Command;

use crate::runner::{hosts, run_usage_error};

const NODESET: &str = "nodeset";

/// `nodeset -e EXPR...` as one sorted list of hosts. Missing `nodeset` fails
/// the test: CI installs ClusterShell.
fn nodeset(exprs: &[String]) -> Vec<String> {
    let out = Command::new(NODESET)
        .arg("-e")
        .args(exprs)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run ClusterShell's `{NODESET}` ({e}): the hostlist reference test needs it; install it (apt-get install clustershell, or pip install ClusterShell)"
            )
        });
    assert!(
        out.status.success(),
        "nodeset -e {exprs:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut hosts: Vec<String> = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .split_whitespace()
        .map(String::from)
        .collect();
    hosts.sort();
    hosts
}

/// Our expansion of `expr` (as `SLURM_JOB_NODELIST`, Slurm's syntax), sorted.
fn ours(expr: &str) -> Vec<String> {
    let mut hosts: Vec<String> = hosts(&[], &[("SLURM_JOB_NODELIST", expr)])
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    hosts.sort();
    hosts
}

#[test]
fn corpus_matches_nodeset() {
    let corpus = [
        "gpu[01-04,07]",
        "node[1-2]-ib",
        "rack[1-2]-node[01-02]",
        "a[08-11]",
        "a[8-11]",
        "n[0-9],a",
        "h[00-10]",
        "h[001-120]",
        "x[1,3,5-7]y",
        "10.0.0.[1-4]",
        "c[1-3],a,b[5-6]",
        "s[9-11]",
        "a[1-2]b[3-4]c[5-6]",
        "[1-3]",
        "a-b[1-2]",
        "a.b[1-2].c",
        "node_[1-3]",
        "gpu[1-100]",
        "q[007]",
        "z[0]",
        "m[98-102]",
        "p[0-1]q[0-1]r[0-1]",
        "gpu[0001-0003,0100]",
        "cn[1-2]-[5-6]",
    ];
    for expr in corpus {
        assert_eq!(ours(expr), nodeset(&[expr.to_string()]), "{expr}");
    }
}

/// SplitMix64: a small seeded generator, so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// One bracket group: distinct numbers, as singles and ranges, with one width.
/// Returns the text inside the brackets and the number of values.
fn group(rng: &mut Rng) -> (String, u64) {
    let width = if rng.below(3) == 0 {
        2 + rng.below(2) as usize
    } else {
        0
    };
    let top = if width == 0 {
        150
    } else {
        10u64.pow(width as u32)
    };
    let mut values: Vec<u64> = (0..1 + rng.below(8)).map(|_| rng.below(top)).collect();
    values.sort_unstable();
    values.dedup();
    let fmt = |n: u64| format!("{n:0width$}");
    let mut items = Vec::new();
    let mut i = 0;
    while i < values.len() {
        // Extend a run of consecutive numbers, sometimes by a stretch.
        let lo = values[i];
        let mut hi = lo;
        if rng.below(2) == 0 {
            hi = (lo + rng.below(6)).min(top - 1);
        }
        while i < values.len() && values[i] <= hi {
            i += 1;
        }
        items.push(if hi == lo {
            fmt(lo)
        } else {
            format!("{}-{}", fmt(lo), fmt(hi))
        });
    }
    // Shuffle-free but not always ascending: Slurm keeps the written order.
    if rng.below(4) == 0 {
        items.reverse();
    }
    let count = items
        .iter()
        .map(|it| match it.split_once('-') {
            Some((a, b)) => b.parse::<u64>().unwrap_or(0) - a.parse::<u64>().unwrap_or(0) + 1,
            None => 1,
        })
        .sum();
    (items.join(","), count)
}

/// An expression whose hosts all start with `t{case}e{element}n`, so that one
/// `nodeset` call can expand every case and the hosts be told apart again.
fn expression(rng: &mut Rng, case: usize) -> String {
    let separators = ["-", "x", ".", "_", "n-", "ab", "-r"];
    let suffixes = ["-ib", ".local", "x", "_a", "-eth0"];
    let elements = 1 + rng.below(3);
    let mut out = Vec::new();
    for e in 0..elements {
        let mut element = format!("t{case}e{e}n");
        let mut size = 1;
        for g in 0..rng.below(4) {
            if g > 0 {
                element.push_str(rng.pick(&separators));
            }
            let (text, count) = group(rng);
            if size * count > 400 {
                break;
            }
            size *= count;
            element.push_str(&format!("[{text}]"));
        }
        if rng.below(3) == 0 {
            element.push_str(rng.pick(&suffixes));
        }
        out.push(element);
    }
    out.join(",")
}

#[test]
fn random_expressions_match_nodeset() {
    const CASES: usize = 300;
    let mut rng = Rng(0x6d75_6c74_696e_6f64);
    let exprs: Vec<String> = (0..CASES).map(|case| expression(&mut rng, case)).collect();
    // One run of each side for all cases, then split by case prefix.
    let by_case = |hosts: Vec<String>| {
        let mut cases: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for h in hosts {
            let case = h[1..h.find('e').expect("case prefix")]
                .parse()
                .expect("case number");
            cases.entry(case).or_default().push(h);
        }
        cases
    };
    let theirs = by_case(nodeset(&exprs));
    let mine = by_case(ours(&exprs.join(",")));
    for (case, expr) in exprs.iter().enumerate() {
        assert_eq!(mine.get(&case), theirs.get(&case), "case {case}: {expr}");
    }
    assert_eq!(mine.len(), CASES);
}

#[test]
fn what_nodeset_refuses_slurm_pads_by_the_start() {
    // Outside the reference's agreement: Slurm's own rule, checked here.
    assert_eq!(ours("a[008-11]"), ["a008", "a009", "a010", "a011"]);
    assert_eq!(ours("a[1-010]").len(), 10);
    assert_eq!(
        run_usage_error(
            &["hosts", "--no-resolve"],
            &[("SLURM_JOB_NODELIST", "a[1-3,2]")]
        ),
        "SLURM_JOB_NODELIST: duplicate host 'a2' at positions 2 and 4 in 'a[1-3,2]'"
    );
}
