//! What the user reads at the end of a run: `--group`'s outputs, why output
//! stopped, the failure table, and `--report FILE`.

use std::path::Path;

use super::options::Role;
use super::record::RunResult;
use crate::error::Error;

/// The end of exec-all's run: a relay's record back to its head on
/// stderr; else `--report FILE`, `--group`'s outputs, and the last lines.
/// Returns the exit code.
pub(super) fn end(
    mut result: RunResult,
    attempts: Option<Vec<super::run_report::AttemptReport>>,
    role: &Role,
) -> Result<i32, Error> {
    let head = match role {
        Role::Head(head) => head,
        Role::Relay => {
            // This exec_all runs a group for a head: its record goes back on stderr.
            super::relay::emit_record(&result);
            return Ok(result.exit_code);
        }
    };
    if let Some(path) = &head.report {
        write_report(&result, attempts, path)?;
    }
    if head.group
        && let Err(code) = print_groups(&result)
        && result.exit_code == 0
    {
        result.exit_code = code;
    }
    finish_output(&result);
    Ok(result.exit_code)
}

/// `--report FILE`: the run's report as JSON.
fn write_report(
    result: &RunResult,
    attempts: Option<Vec<super::run_report::AttemptReport>>,
    path: &Path,
) -> Result<(), Error> {
    let mut report = super::run_report::build(result);
    // Each node's health check before the last attempt, in its timeline too.
    if let Some(last) = attempts.as_ref().and_then(|a| a.last()) {
        for node in &mut report.nodes {
            node.timeline.health_check_s = last.health_check_s.get(&node.host).copied();
        }
    }
    report.attempts = attempts;
    let text = serde_json::to_string_pretty(&report).expect("the report serialises");
    std::fs::write(path, text + "\n").map_err(|e| {
        Error::Failed(format!(
            "cannot write the report to {}: {e}",
            path.display()
        ))
    })
}

/// `--group`: every node's gathered stdout, then stderr, grouped by content.
/// A stdout that cannot be written is exit code 141, as for live output.
fn print_groups(result: &RunResult) -> Result<(), i32> {
    use crate::stdio::{Fd, write_all};
    let nodes = |err: bool| -> Vec<super::grouped_output::NodeOutput<'_>> {
        result
            .nodes
            .iter()
            .map(|n| {
                let (bytes, total) = if err {
                    (&n.stats.captured_err, n.stats.bytes_err)
                } else {
                    (&n.stats.captured_out, n.stats.bytes_out)
                };
                super::grouped_output::NodeOutput {
                    rank: n.rank,
                    host: &n.host,
                    bytes,
                    cut: total > bytes.len() as u64,
                }
            })
            .collect()
    };
    let out = write_all(
        Fd::Out,
        &super::grouped_output::render(&nodes(false), super::sink::CAPTURE_MAX),
    );
    let _ = write_all(
        Fd::Err,
        &super::grouped_output::render(&nodes(true), super::sink::CAPTURE_MAX),
    );
    out.map_err(|e| {
        if let Some(line) = crate::stdio::failure_line(crate::logging::program(), Fd::Out, &e) {
            crate::stdio::eprint(&line);
        }
        crate::stdio::failure_code()
    })
}

/// What the user reads last: why output stopped (unless a pipe was simply
/// closed), and the failure table. Neither panics on a closed stderr.
pub(crate) fn finish_output(result: &RunResult) {
    if let Some(line) = &result.output_failure {
        crate::stdio::eprint(line);
    }
    for node in &result.nodes {
        if let Some(why) = &node.stats.file_failure {
            crate::stdio::eprint(&format!("{}: warning: {why}\n", crate::logging::program()));
        }
    }
    if result.exit_code != 0 {
        crate::stdio::eprint(&super::run_report::table(result));
    }
}
