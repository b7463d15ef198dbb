//! What a run says on stderr while it runs, besides its nodes' output: the
//! progress line of the nodes started, and the snapshots of every node (on
//! SIGUSR1, and before `--timeout` or `--hang-timeout` ends the run). The
//! dispatcher decides when; this writes, through the run's one writer.

use super::writer::{Stream, Writer};
use crate::snapshot::survey::{RunNodes, render_both};

/// The run's own lines on stderr.
pub struct Live {
    writer: Writer,
    /// The progress line is shown (a terminal, several nodes, some still connecting).
    progress: bool,
}

impl Live {
    pub fn new(writer: Writer, progress: bool) -> Self {
        Live { writer, progress }
    }

    /// Whether the progress line is still shown.
    pub fn progress_on(&self) -> bool {
        self.progress
    }

    /// The progress line: `running` of `total` started, the rest
    /// connecting; gone once none is connecting.
    pub async fn progress(&mut self, running: usize, total: usize) {
        let connecting = total - running;
        if connecting == 0 {
            self.end_progress().await;
        } else {
            self.writer
                .progress(format!(
                    "{}: {running}/{total} nodes started, {connecting} connecting",
                    crate::logging::program()
                ))
                .await;
        }
    }

    /// One line of the run's own on stderr (`PROGRAM: LINE`), the progress
    /// line cleared first.
    pub async fn say(&mut self, line: String) {
        self.end_progress().await;
        self.writer
            .text(
                Stream::Err,
                format!("{}: {line}\n", crate::logging::program()),
            )
            .await;
    }

    /// The progress line, cleared.
    pub async fn end_progress(&mut self) {
        if std::mem::take(&mut self.progress) {
            self.writer.progress(String::new()).await;
        }
    }

    /// SIGUSR1: what every node is doing, printed when the snapshot is
    /// taken; the run goes on meanwhile.
    pub fn snapshot_asked(&self, nodes: RunNodes, since_start_s: f64) {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            let (table, _) = render_both(&nodes.take().await);
            writer
                .text(
                    Stream::Err,
                    format!(
                        "{}: snapshot on SIGUSR1, {since_start_s:.1}s into the run:\n{table}",
                        crate::logging::program()
                    ),
                )
                .await;
        });
    }

    /// A limit caught the nodes still running: what each was doing, under
    /// the line that says which limit (`said`); the snapshot as JSON for the report.
    pub async fn caught(&self, said: &str, nodes: &RunNodes) -> serde_json::Value {
        let (table, json) = render_both(&nodes.take().await);
        self.writer
            .text(
                Stream::Err,
                format!(
                    "{}: {said}; what every node was doing:\n{table}",
                    crate::logging::program()
                ),
            )
            .await;
        json
    }
}
