//! What `top` keeps from one refresh to the next (pure): each rank's last
//! step, for its step rate, and its last few refreshes' samples, for a
//! wait share that stands on more than one window.

use std::collections::{BTreeMap, VecDeque};

use regex_automata::meta::Regex;

use super::rows::Row;
use crate::snapshot::Samples;

/// Refreshes whose samples make a rank's wait share.
pub(crate) const SAMPLE_REFRESHES: usize = 5;

/// `--progress REGEX`: the step is the number in the first group.
#[derive(Debug)]
pub(crate) struct StepPattern {
    regex: Regex,
}

impl StepPattern {
    /// One line of error for a pattern that does not parse or has no group.
    pub(crate) fn new(pattern: &str) -> Result<StepPattern, String> {
        let regex = Regex::new(pattern).map_err(|e| format!("--progress {pattern:?}: {e}"))?;
        if regex
            .group_info()
            .group_len(regex_automata::PatternID::ZERO)
            < 2
        {
            return Err(format!(
                "--progress {pattern:?} has no group: put the step number in one, as in 'step (\\d+)'"
            ));
        }
        Ok(StepPattern { regex })
    }

    /// The largest number the pattern's first group finds in `lines` (a
    /// rank's last lines: the step only grows).
    pub(crate) fn step(&self, lines: &[String]) -> Option<f64> {
        let mut best: Option<f64> = None;
        for line in lines {
            for caps in self.regex.captures_iter(line.as_str()) {
                let Some(span) = caps.get_group(1) else {
                    continue;
                };
                // A step is a finite number: `1e999` parses as infinity.
                if let Ok(n) = line[span.range()].trim().parse::<f64>()
                    && n.is_finite()
                {
                    best = Some(best.map_or(n, |b: f64| b.max(n)));
                }
            }
        }
        best
    }
}

#[derive(Debug, Default)]
struct Seen {
    step: Option<(f64, u64)>,
    samples: VecDeque<Samples>,
}

/// Each rank's past, by rank.
#[derive(Debug, Default)]
pub(crate) struct History {
    by_rank: BTreeMap<usize, Seen>,
}

impl History {
    /// Fills each row's step, step rate and wait share from this refresh
    /// and the ones before.
    pub(crate) fn update(&mut self, rows: &mut [Row], progress: Option<&StepPattern>) {
        for row in rows.iter_mut() {
            let seen = self.by_rank.entry(row.rank).or_default();
            if row.error.is_some() {
                continue;
            }
            seen.samples.push_back(row.samples);
            while seen.samples.len() > SAMPLE_REFRESHES {
                seen.samples.pop_front();
            }
            let mut all = Samples::default();
            for s in &seen.samples {
                all.add(s);
            }
            if let Some((share, n)) = all.wait_share() {
                row.wait_share = Some((share * 1000.0).round() / 1000.0);
                row.wait_samples = n;
                row.wait_from = Some(if all.stacks > 0 { "py-spy" } else { "state" });
            }
            let Some(progress) = progress else { continue };
            row.step = progress.step(&row.tail);
            // The step is as old as the line it was read from: rank 0's
            // lines reach its agent every 500 ms (show-group), so its
            // snapshot's time alone would put its rate up to 50% off over
            // a 1 s interval.
            let at = row.taken_ms.saturating_sub(
                row.output_age_s
                    .map_or(0, |age| (age * 1000.0).round() as u64),
            );
            if let (Some(step), Some((before, then))) = (row.step, seen.step)
                && at > then
            {
                let secs = (at - then) as f64 / 1000.0;
                row.step_rate = Some((((step - before) / secs).max(0.0) * 1000.0).round() / 1000.0);
                row.rate_window_s = Some((secs * 100.0).round() / 100.0);
            }
            if let Some(step) = row.step {
                seen.step = Some((step, at));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_step_of_the_first_group() {
        let p = StepPattern::new(r"step (\d+)").expect("pattern");
        let lines = ["epoch 1 step 41 loss 2.0", "step 42 loss 1.9", "eval"].map(String::from);
        assert_eq!(p.step(&lines), Some(42.0));
        assert_eq!(p.step(&["nothing".to_string()]), None);
        // A number past f64's range is no step (`STEP inf`).
        let huge = format!("step {}", "9".repeat(400));
        assert_eq!(p.step(&[huge, "step 7".into()]), Some(7.0));
        let p = StepPattern::new(r"step (\S+)").expect("pattern");
        assert_eq!(p.step(&["step 1e999".into(), "step inf".into()]), None);
        assert!(
            StepPattern::new(r"step \d+")
                .unwrap_err()
                .contains("no group")
        );
        assert!(StepPattern::new(r"step (\d+").is_err());
    }

    #[test]
    fn a_rate_between_refreshes_and_shares_over_several() {
        let p = StepPattern::new(r"it (\d+)").expect("pattern");
        let mut history = History::default();
        let row = |step: u32, ms: u64, asleep: u32| Row {
            rank: 3,
            tail: vec![format!("it {step}")],
            taken_ms: ms,
            samples: Samples {
                looks: 10,
                asleep,
                ..Samples::default()
            },
            ..Row::default()
        };
        let mut first = [row(10, 1_000, 10)];
        history.update(&mut first, Some(&p));
        assert_eq!(first[0].step, Some(10.0));
        assert_eq!(first[0].step_rate, None);
        assert_eq!(first[0].wait_share, Some(1.0));
        let mut second = [row(20, 3_000, 0)];
        history.update(&mut second, Some(&p));
        assert_eq!(second[0].step_rate, Some(5.0));
        assert_eq!(second[0].rate_window_s, Some(2.0));
        assert_eq!(
            (second[0].wait_share, second[0].wait_samples),
            (Some(0.5), 20)
        );
        assert_eq!(second[0].wait_from, Some("state"));
        // A step read from a line 0.5 s old counts at that line's time.
        let mut third = [Row {
            output_age_s: Some(0.5),
            ..row(35, 5_500, 0)
        }];
        history.update(&mut third, Some(&p));
        assert_eq!(third[0].step_rate, Some(7.5));
        assert_eq!(third[0].rate_window_s, Some(2.0));
    }
}
