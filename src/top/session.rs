//! `multinode top`'s refreshes: every node asked at once (`#multinode:top`;
//! rank 0's node also for NCCL's RAS status), the rows made, the history
//! updated, the straggler judged, and the result printed: once
//! (`--once`), one after another on a pipe (a table or a JSON line each),
//! or full screen on a terminal.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::signal::unix::{SignalKind, signal};

use super::history::{History, StepPattern};
use super::ras_status::{self, RasFacts};
use super::refresh_render::{self, Refresh};
use super::rows::{self, Row};
use super::screen::{self, Key, Screen};
use super::start_line::{self, Start};
use super::straggler::{self, StragglerVerdict};
use crate::cli::{TableFormat, TopArgs, TopSort};
use crate::env::resolve_job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::keys::{JobKeys, Secret};
use crate::protocol::control::Control;
use crate::snapshot::run_start::by_rank;
use crate::snapshot::survey::{Ask, Kept, ask_each, job_agents};
use crate::snapshot::{claimed_line, claimed_twice};
use crate::transport::client::{Auth, Connector};

/// The order `s` cycles through.
const SORTS: [TopSort; 5] = [
    TopSort::Rank,
    TopSort::Wait,
    TopSort::Rate,
    TopSort::Cpu,
    TopSort::Output,
];

/// One refresh, judged.
struct Judged {
    rows: Vec<Row>,
    verdict: StragglerVerdict,
    start: Option<Start>,
    ras: Option<RasFacts>,
    /// Each rank more than one process claims, as a line.
    claimed_twice: Vec<String>,
    unanswered: usize,
    time_ms: u64,
}

/// What every refresh asks and keeps.
struct Session {
    connector: Connector,
    nodes: Vec<Ask>,
    progress: Option<StepPattern>,
    history: History,
    /// One connection a node, open from one refresh to the next.
    kept: Kept,
}

impl Session {
    async fn refresh(&mut self) -> Judged {
        let tail = self.progress.is_some();
        // One node's RAS service speaks for the whole job: rank 0's.
        let first = self.nodes.first().map(|a| a.rank);
        let snaps = ask_each(
            &self.connector,
            self.nodes.clone(),
            |ask| Control::Top {
                tail,
                ras: Some(ask.rank) == first,
            },
            Some(&mut self.kept),
        )
        .await;
        let ras = snaps
            .iter()
            .find_map(|s| s.ras.as_deref())
            .map(ras_status::parse);
        let mut rows = rows::rows(&snaps);
        self.history.update(&mut rows, self.progress.as_ref());
        if let Some(facts) = &ras {
            for row in &mut rows {
                row.ras = facts.of_rank(row.rank);
            }
        }
        let verdict = straggler::judge(&rows);
        let starts = by_rank(snaps.iter().flat_map(|s| &s.runs));
        let start = start_line::judge(&rows, &starts);
        let claimed_twice = claimed_twice(&snaps)
            .iter()
            .map(|(rank, claims)| claimed_line(*rank, claims))
            .collect();
        Judged {
            rows,
            verdict,
            start,
            ras,
            claimed_twice,
            unanswered: snaps.iter().filter(|s| s.error.is_some()).count(),
            time_ms: crate::snapshot::unix_ms(),
        }
    }
}

fn text(judged: &mut Judged, sort: TopSort, interval: Duration, live: bool) -> (String, String) {
    refresh_render::sort(&mut judged.rows, sort);
    let refresh = Refresh {
        time_ms: judged.time_ms,
        ranks: judged.rows.len(),
        straggler: &judged.verdict,
        start: judged.start.as_ref(),
        ras: judged.ras.as_ref(),
        claimed_twice: &judged.claimed_twice,
        rows: &judged.rows,
    };
    let when = humantime::format_rfc3339_seconds(
        std::time::UNIX_EPOCH + Duration::from_millis(judged.time_ms),
    );
    let keys = if live { "; q quits, s sorts" } else { "" };
    let title = format!(
        "multinode top: {} ranks, {when}, every {} s{keys} (by {})",
        judged.rows.len(),
        interval.as_secs_f64(),
        format!("{sort:?}").to_lowercase(),
    );
    let ras_line = judged.ras.as_ref().and_then(RasFacts::line);
    (
        refresh_render::table(&title, &refresh, ras_line.as_deref()),
        refresh_render::json(&refresh),
    )
}

/// `multinode top`.
pub fn main(args: TopArgs) -> Result<i32, Error> {
    let progress = args
        .progress
        .as_deref()
        .map(StepPattern::new)
        .transpose()
        .map_err(Error::Usage)?;
    let env = EnvMap::from_process();
    let job = resolve_job(&args.topology.inputs(), &env)?;
    let secret = Secret::require(args.secret_file.as_deref(), &env, "multinode top")?;
    let connector = Connector::new(
        Auth::Agent(Arc::new(JobKeys::derive(&secret))),
        args.connect_timeout,
    );
    let nodes = job_agents(&job);
    let mut session = Session {
        connector,
        nodes,
        progress,
        history: History::default(),
        kept: Kept::default(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::Failed(format!("cannot start the runtime: {e}")))?;
    let code = runtime.block_on(run(&mut session, &args));
    runtime.shutdown_background();
    code
}

async fn run(session: &mut Session, args: &TopArgs) -> Result<i32, Error> {
    let json = args.format == TableFormat::Json;
    if args.once {
        let mut judged = session.refresh().await;
        if session.progress.is_some() {
            // A step rate needs a second sample, --interval later.
            tokio::time::sleep(args.interval).await;
            judged = session.refresh().await;
        }
        let (table, line) = text(&mut judged, args.sort, args.interval, false);
        crate::stdio::print_stdout(if json { &line } else { &table })?;
        return Ok(if judged.unanswered == 0 {
            crate::exit_code::SUCCESS
        } else {
            crate::exit_code::CONNECTION_FAILED
        });
    }
    let mut term = signal(SignalKind::terminate())
        .map_err(|e| Error::Failed(format!("cannot handle SIGTERM: {e}")))?;
    let mut hup = signal(SignalKind::hangup())
        .map_err(|e| Error::Failed(format!("cannot handle SIGHUP: {e}")))?;
    let mut int = signal(SignalKind::interrupt())
        .map_err(|e| Error::Failed(format!("cannot handle SIGINT: {e}")))?;
    let live = !json && std::io::stdout().is_terminal();
    let screen = if live { Screen::enter() } else { None };
    let mut keys = if screen.is_some() {
        screen::keys()
    } else {
        tokio::sync::mpsc::channel(1).1
    };
    let mut sort = args.sort;
    loop {
        let next = Instant::now() + args.interval;
        let mut judged = session.refresh().await;
        let (table, line) = text(&mut judged, sort, args.interval, screen.is_some());
        match &screen {
            Some(screen) => screen.draw(&table),
            None => {
                let out = if json { line } else { format!("{table}\n") };
                // Written off the runtime: a reader that stopped reading
                // (a full pipe) must not keep a signal from ending top.
                let write = tokio::task::spawn_blocking(move || crate::stdio::print(&out));
                let written = tokio::select! {
                    written = write => written.unwrap_or_else(|e| Err(std::io::Error::other(e))),
                    _ = term.recv() => return Ok(crate::exit_code::SUCCESS),
                    _ = hup.recv() => return Ok(crate::exit_code::SUCCESS),
                    _ = int.recv() => return Ok(crate::exit_code::SUCCESS),
                };
                if let Err(e) = written {
                    // A closed pipe (`| head`) ends top as it ends ps.
                    return if crate::stdio::is_closed_pipe(&e) {
                        Ok(crate::exit_code::SUCCESS)
                    } else {
                        Err(Error::Failed(format!("cannot write to stdout: {e}")))
                    };
                }
            }
        }
        // Until the next refresh: a key may sort again or end it.
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => break,
                _ = term.recv() => return Ok(crate::exit_code::SUCCESS),
                _ = hup.recv() => return Ok(crate::exit_code::SUCCESS),
                _ = int.recv() => return Ok(crate::exit_code::SUCCESS),
                key = keys.recv(), if screen.is_some() => match key {
                    Some(Key::Quit) | None => return Ok(crate::exit_code::SUCCESS),
                    Some(Key::Refresh) => break,
                    Some(Key::Sort) => {
                        let at = SORTS.iter().position(|s| *s == sort).unwrap_or(0);
                        sort = SORTS[(at + 1) % SORTS.len()];
                        if let Some(screen) = &screen {
                            screen.draw(&text(&mut judged, sort, args.interval, true).0);
                        }
                    }
                },
            }
        }
    }
}
