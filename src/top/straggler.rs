//! Which rank holds the job back, from one refresh's rows (pure). The rule
//! (docs/top.md says why each number):
//!
//! 1. **Blocked**: the rank was in `D` in at least half of its state
//!    looks this refresh (at least [`MIN_LOOKS`] of them): a read of a
//!    file system that does not answer, a device, a vfork.
//! 2. **Output stopped**: its last line is older than 3 times the median
//!    age of the others' last lines, plus 5 s (ranks that never printed
//!    are left out: often only rank 0 prints).
//! 3. **Slow steps** (`--progress`): its step rate, plus one step over the
//!    rate's window (the step is read at a refresh, so a rate is only good
//!    to a step), is below 0.8 times the median of the others' rates.
//! 4. **Waits least while the others wait**: in a synchronous job the
//!    slow rank is the one the others wait for, so its share of samples
//!    inside a collective or a wait is the lowest: it is flagged when the
//!    median of the others' shares is at least 0.3 and its own is 0.25 or
//!    more below it, each share standing on at least [`MIN_SAMPLES`] samples.
//!    With `--progress`, a rank whose step rate is above the median of
//!    the others' by more than a step over the rate's window (more than
//!    the rate's noise) is ahead, not slow: it is never named by this
//!    rule (a loop without collectives, where the fastest rank waits least).
//!
//! A flagged rank's GPUs are compared with the median of all the ranks'
//! GPUs: an SM clock below 0.9 times the median, and throttle reasons the
//! others do not have, are added to its line. Ranks that are even get "no
//! straggler": each rule compares a rank with the others, by a margin
//! wider than one refresh's noise.

use serde::Serialize;

use super::rows::Row;

/// State looks a rank needs before its `D` counts.
pub(crate) const MIN_LOOKS: u32 = 5;
/// Samples a wait share needs before it counts.
pub(crate) const MIN_SAMPLES: u32 = 8;
const STOPPED_TIMES: f64 = 3.0;
const STOPPED_PLUS_S: f64 = 5.0;
const RATE_MARGIN: f64 = 0.8;
const OTHERS_WAIT: f64 = 0.3;
const WAIT_GAP: f64 = 0.25;
const CLOCK_MARGIN: f64 = 0.9;

/// One rank the rule flagged.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    pub rank: usize,
    pub host: String,
    /// Each reason, with its numbers.
    pub reasons: Vec<String>,
}

/// The verdict of a refresh.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StragglerVerdict {
    /// Flagged ranks, the most serious reason first.
    pub stragglers: Vec<Finding>,
    /// The line printed at the top.
    pub line: String,
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    Some(if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    })
}

/// The median of `f` over the rows other than `i`.
fn others(rows: &[&Row], i: usize, f: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
    median(
        rows.iter()
            .enumerate()
            .filter(|(j, _)| *j != i)
            .filter_map(|(_, r)| f(r))
            .collect(),
    )
}

fn share(r: &Row) -> Option<f64> {
    r.wait_share.filter(|_| r.wait_samples >= MIN_SAMPLES)
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Whether `row`'s step rate is above the median of the others' by more
/// than a step over its window (the rate is only good to a step).
fn ahead(row: &Row, live: &[&Row], i: usize) -> bool {
    match (
        row.step_rate,
        row.rate_window_s,
        others(live, i, |r| r.step_rate),
    ) {
        (Some(rate), Some(window), Some(typical)) if window > 0.0 => rate - 1.0 / window > typical,
        _ => false,
    }
}

/// The GPU facts worth adding to a flagged rank's line.
fn gpu_notes(row: &Row, all: &[&Row]) -> Vec<String> {
    let mut notes = Vec::new();
    let clock = |r: &Row| {
        let c: Vec<f64> = r
            .gpus
            .iter()
            .filter_map(|g| g.sm_clock_mhz)
            .map(f64::from)
            .collect();
        median(c)
    };
    if let (Some(mine), Some(typical)) = (
        clock(row),
        median(all.iter().filter_map(|r| clock(r)).collect()),
    ) && mine < CLOCK_MARGIN * typical
    {
        notes.push(format!("SM clock {mine:.0} MHz vs median {typical:.0} MHz"));
    }
    let mut odd: Vec<&str> = Vec::new();
    for gpu in &row.gpus {
        for reason in &gpu.throttle {
            let common = all
                .iter()
                .filter(|r| r.gpus.iter().any(|g| g.throttle.contains(reason)))
                .count();
            if common * 2 <= all.len() && !odd.contains(&reason.as_str()) {
                odd.push(reason);
            }
        }
    }
    if !odd.is_empty() {
        notes.push(format!("throttled: {}", odd.join(", ")));
    }
    notes
}

/// The verdict over `rows` (rows without a snapshot are left out).
pub fn judge(rows: &[Row]) -> StragglerVerdict {
    let live: Vec<&Row> = rows.iter().filter(|r| r.error.is_none()).collect();
    let mut found: Vec<(u8, Finding)> = Vec::new();
    for (i, row) in live.iter().enumerate() {
        let mut reasons: Vec<(u8, String)> = Vec::new();
        if row.looks >= MIN_LOOKS && row.d_looks * 2 >= row.looks {
            reasons.push((
                0,
                format!(
                    "in D state (uninterruptible) in {} of {} looks{}",
                    row.d_looks,
                    row.looks,
                    row.place
                        .as_deref()
                        .map(|p| format!(", in {p}"))
                        .unwrap_or_default()
                ),
            ));
        }
        if let (Some(age), Some(typical)) = (row.output_age_s, others(&live, i, |r| r.output_age_s))
            && age > STOPPED_TIMES * typical + STOPPED_PLUS_S
        {
            reasons.push((
                1,
                format!("output stopped: last line {age:.0} s ago vs median {typical:.1} s"),
            ));
        }
        if let (Some(rate), Some(window), Some(typical)) = (
            row.step_rate,
            row.rate_window_s,
            others(&live, i, |r| r.step_rate),
        ) && window > 0.0
            && rate + 1.0 / window < RATE_MARGIN * typical
        {
            reasons.push((
                2,
                format!(
                    "step rate {rate:.2}/s vs median {typical:.2}/s ({:.2}x)",
                    if typical > 0.0 { rate / typical } else { 0.0 }
                ),
            ));
        }
        if let (Some(mine), Some(typical)) = (share(row), others(&live, i, share))
            && typical >= OTHERS_WAIT
            && mine <= typical - WAIT_GAP
            && !ahead(row, &live, i)
        {
            reasons.push((
                3,
                format!(
                    "waits {} of {} samples while the others wait {} (median)",
                    pct(mine),
                    row.wait_samples,
                    pct(typical)
                ),
            ));
        }
        if reasons.is_empty() {
            continue;
        }
        reasons.sort_by_key(|(k, _)| *k);
        let worst = reasons[0].0;
        let mut texts: Vec<String> = reasons.into_iter().map(|(_, t)| t).collect();
        texts.extend(gpu_notes(row, &live));
        found.push((
            worst,
            Finding {
                rank: row.rank,
                host: row.host.clone(),
                reasons: texts,
            },
        ));
    }
    found.sort_by_key(|(worst, f)| (*worst, f.rank));
    let stragglers: Vec<Finding> = found.into_iter().map(|(_, f)| f).collect();
    let line = if live.is_empty() {
        "no straggler: no rank answered".to_string()
    } else if stragglers.is_empty() && live.len() == 1 {
        "no straggler (1 rank)".to_string()
    } else if stragglers.is_empty() {
        format!("no straggler ({} ranks even)", live.len())
    } else {
        stragglers
            .iter()
            .map(|f| {
                format!(
                    "straggler: rank {} ({}): {}",
                    f.rank,
                    f.host,
                    f.reasons.join("; ")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    StragglerVerdict { stragglers, line }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::GpuDevice;

    fn row(rank: usize) -> Row {
        Row {
            rank,
            host: format!("n{rank}"),
            state: "R".into(),
            output_age_s: Some(0.4),
            step: Some(100.0),
            step_rate: Some(10.0),
            rate_window_s: Some(2.3),
            wait_share: Some(0.45),
            wait_samples: 40,
            looks: 20,
            gpus: vec![GpuDevice {
                sm_clock_mhz: Some(1980),
                ..GpuDevice::default()
            }],
            ..Row::default()
        }
    }

    fn even(n: usize) -> Vec<Row> {
        (0..n).map(row).collect()
    }

    #[test]
    fn an_even_job_has_no_straggler_through_its_noise() {
        let mut rows = even(8);
        // One refresh's noise: a step more or less, shares apart, a rank
        // that printed a second later, one refresh in D for a read.
        rows[1].step_rate = Some(9.13);
        rows[2].step_rate = Some(10.87);
        rows[3].wait_share = Some(0.3);
        rows[4].wait_share = Some(0.6);
        rows[5].output_age_s = Some(2.9);
        rows[6].d_looks = 3;
        rows[7].gpus[0].sm_clock_mhz = Some(1900);
        let v = judge(&rows);
        assert_eq!(v.stragglers, vec![], "{}", v.line);
        assert_eq!(v.line, "no straggler (8 ranks even)");
        // One rank: nothing to be even with.
        assert_eq!(judge(&even(1)).line, "no straggler (1 rank)");
        // Nobody waits much (compute-bound, no collective): the least
        // waiting rank is no straggler.
        let mut rows = even(4);
        for (r, s) in rows.iter_mut().zip([0.0, 0.1, 0.2, 0.15]) {
            r.wait_share = Some(s);
        }
        assert!(judge(&rows).stragglers.is_empty());
        // Only rank 0 prints, the others never did.
        let mut rows = even(4);
        for r in &mut rows[1..] {
            r.output_age_s = None;
        }
        rows[0].output_age_s = Some(55.0);
        assert!(judge(&rows).stragglers.is_empty());
        // Too few samples to tell.
        let mut rows = even(3);
        for r in &mut rows {
            r.wait_samples = 4;
        }
        rows[1].wait_share = Some(0.0);
        assert!(judge(&rows).stragglers.is_empty());
    }

    #[test]
    fn the_rank_that_waits_least_while_the_others_wait() {
        let mut rows = even(4);
        rows[2].wait_share = Some(0.04);
        rows[2].gpus[0].sm_clock_mhz = Some(1410);
        rows[2].gpus[0].throttle = vec!["hw_slowdown".into()];
        let v = judge(&rows);
        assert_eq!(v.stragglers.len(), 1, "{}", v.line);
        assert_eq!(v.stragglers[0].rank, 2);
        assert_eq!(
            v.line,
            "straggler: rank 2 (n2): waits 4% of 40 samples while the others wait 45% (median); \
             SM clock 1410 MHz vs median 1980 MHz; throttled: hw_slowdown"
        );
    }

    #[test]
    fn slow_steps_stopped_output_and_d_state() {
        let mut rows = even(5);
        rows[1].step_rate = Some(5.0);
        rows[3].output_age_s = Some(30.0);
        rows[4].d_looks = 20;
        rows[4].place = Some("read_fuse".into());
        let v = judge(&rows);
        let ranks: Vec<usize> = v.stragglers.iter().map(|f| f.rank).collect();
        assert_eq!(ranks, [4, 3, 1], "{}", v.line);
        assert_eq!(
            v.stragglers[0].reasons[0],
            "in D state (uninterruptible) in 20 of 20 looks, in read_fuse"
        );
        assert_eq!(
            v.stragglers[1].reasons[0],
            "output stopped: last line 30 s ago vs median 0.4 s"
        );
        assert_eq!(
            v.stragglers[2].reasons[0],
            "step rate 5.00/s vs median 10.00/s (0.50x)"
        );
        // A row without a snapshot is neither judged nor a yardstick.
        let mut rows = even(3);
        rows[0].error = Some("unreachable".into());
        rows[0].step_rate = Some(0.0);
        assert!(judge(&rows).stragglers.is_empty());
        // No rank answered: nothing is even.
        for r in &mut rows {
            r.error = Some("unreachable".into());
        }
        assert_eq!(judge(&rows).line, "no straggler: no rank answered");
    }

    #[test]
    fn a_rank_ahead_in_steps_is_never_named_for_waiting_least() {
        // A loop without collectives (issue 51): rank 2 waits least
        // because it is the fastest, 20.3 steps/s against 11.0-11.4.
        let mut rows = even(4);
        for (r, (rate, wait)) in
            rows.iter_mut()
                .zip([(11.0, 0.41), (11.4, 0.40), (20.3, 0.0), (11.2, 0.42)])
        {
            r.step_rate = Some(rate);
            r.wait_share = Some(wait);
        }
        let v = judge(&rows);
        assert!(v.stragglers.is_empty(), "{}", v.line);
        // Even rates (a synchronous job, within a step's noise): the
        // rank that waits least is still the one the others wait for.
        rows[2].step_rate = Some(11.5);
        let v = judge(&rows);
        assert_eq!(v.stragglers.len(), 1, "{}", v.line);
        assert_eq!(v.stragglers[0].rank, 2);
    }
}
