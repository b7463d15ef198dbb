//! `top`'s GPU readings from `nvidia-smi` kept running in its loop mode
//! (`--loop-ms`): a run of `nvidia-smi` costs a node tens of milliseconds
//! of a CPU (its start and NVML's), a sample of a loop already running far
//! less, and `top` asks every refresh (issue 42: a job's step rate lowered
//! by less than 1% while `top` runs).
//!
//! A first reading, or one after the loops ended, is [`invoke`]'s two runs;
//! when both answered, two loops start, the devices' query (the fields the
//! driver answered) and the compute processes', each printing a sample
//! every [`Timing::period`]. A sample is a burst of lines (one a GPU, one a
//! process) printed at once: lines closer than [`Timing::gap`] are one.
//! A later reading takes each loop's last sample: the devices' while it is
//! younger than [`Timing::stale`] (else both loops are ended and it reads
//! by runs again, which also tells a hung `nvidia-smi`), the processes'
//! while younger than two periods, else none (the loop prints nothing when
//! the GPUs run no compute process). Loops that have printed nothing yet
//! are left to start; that reading is by runs. Loops that fail (end by
//! themselves, or go stale) [`GIVE_UP`] times are not started again: an
//! `nvidia-smi` without a loop mode, or one that hangs, is read by runs.
//!
//! Readings by runs are single-flight: askers that come while runs are
//! under way (200 `top`s asking one agent at once) wait for them and share
//! their reading, rather than starting two runs each.
//!
//! A loop's output is read a line of at most [`LINE_BYTES`] at a time (the
//! rest of a longer line is dropped: a line without end holds no more),
//! and a sample keeps at most [`SAMPLE_LINES`] lines and [`SAMPLE_BYTES`].
//!
//! The loops end when no reading was asked for [`Timing::idle`], when the
//! watch is dropped or the agent ends, and when the agent dies, even by
//! SIGKILL: the kernel kills them then (`PR_SET_PDEATHSIG`; it fires when
//! the thread that started them ends: an agent's connection threads live
//! as long as the agent). A loop is ended by its process group (SIGKILL),
//! not its leader alone: a site's `nvidia-smi` that is a script running the
//! tool as its child leaves no child behind. No `nvidia-smi` outlives its
//! asker.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::debug;

use super::apps::{self, APPS_QUERY, GpuReading};
use super::devices::{GpuDevice, parse_devices};
use super::invoke;
use crate::process::RunOutput;

/// How the loops run and their samples are read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// Between two samples of a loop.
    pub period: Duration,
    /// Lines closer than this are one sample.
    pub gap: Duration,
    /// A devices' sample older than this: the loop is hung or gone.
    pub stale: Duration,
    /// The loops end when no reading was asked for this long.
    pub idle: Duration,
}

/// The agent's: a sample a second (half `top`'s default interval), ended
/// 10 s after the last refresh asked.
pub(crate) const TIMING: Timing = Timing {
    period: Duration::from_secs(1),
    gap: Duration::from_millis(100),
    stale: Duration::from_secs(3),
    idle: Duration::from_secs(10),
};

/// `nvidia-smi`'s loops for one asker (an agent), started by the first
/// reading.
pub(crate) struct Watch {
    program: String,
    timing: Timing,
    loops: Mutex<Option<Loops>>,
    /// How many times the loops failed (ended by themselves: an
    /// `nvidia-smi` without the loop mode, or failing in it; or went
    /// stale): at [`GIVE_UP`], readings are runs from then on.
    failed: std::sync::atomic::AtomicU32,
    /// Held while runs read the GPUs; the last runs' reading and when they
    /// ended, for the askers that waited.
    runs: tokio::sync::Mutex<Option<(Instant, Reading)>>,
    /// The same for a snapshot's reading ([`Watch::processes`]).
    snapshot_runs: tokio::sync::Mutex<Option<(Instant, GpuReading)>>,
}

/// Loops failed this many times: no more are started.
const GIVE_UP: u32 = 3;

/// What the loops give a reading.
enum Sampled {
    Read(Reading),
    /// Runs this time: the loops, just started, have printed nothing yet.
    Runs,
    /// Runs, and new loops: none run, or they ended or went stale.
    Restart,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("program", &self.program)
            .finish_non_exhaustive()
    }
}

/// The two loops running: each one's samples, when a reading was last
/// asked, and (dropped) their end.
struct Loops {
    devices: Arc<Mutex<Feed>>,
    apps: Arc<Mutex<Feed>>,
    asked: Arc<Mutex<Instant>>,
    started: Instant,
    _end: DropGuard,
}

/// A burst of lines: one sample.
#[derive(Debug, Clone)]
struct Burst {
    first: Instant,
    last: Instant,
    lines: Vec<String>,
    /// The bytes of `lines`.
    bytes: usize,
}

/// What one loop printed: the sample it prints now and the one before.
#[derive(Debug, Default)]
struct Feed {
    now: Option<Burst>,
    before: Option<Burst>,
    /// Its `nvidia-smi` ended, and why.
    end: Option<End>,
}

/// Why a loop ended.
#[derive(Debug, Clone, Copy, PartialEq)]
enum End {
    /// By itself (or it could not start): a failure ([`GIVE_UP`]).
    Itself,
    /// Ended here: no reading asked for a while, or the watch went.
    Here,
}

/// A sample keeps at most this many lines (a line a GPU, a line a compute
/// process); one printed without pause is cut there, not kept whole.
const SAMPLE_LINES: usize = 4096;
/// And at most this many bytes (an H100's GPU line is about 100 bytes, a
/// compute process's about 70).
const SAMPLE_BYTES: usize = 256 * 1024;
/// A line keeps at most this many bytes; the rest of it is dropped.
const LINE_BYTES: usize = 1024;

impl Feed {
    /// A line printed at `at`: the current sample's, or the first of the next.
    fn push(&mut self, line: String, at: Instant, gap: Duration) {
        if let Some(now) = &mut self.now
            && at.duration_since(now.last) < gap
        {
            now.last = at;
            if now.lines.len() < SAMPLE_LINES && now.bytes + line.len() <= SAMPLE_BYTES {
                now.bytes += line.len();
                now.lines.push(line);
            }
            return;
        }
        self.before = self.now.take();
        self.now = Some(Burst {
            first: at,
            last: at,
            bytes: line.len(),
            lines: vec![line],
        });
    }

    /// The last whole sample at `at`: when its first line came, and its text.
    fn sample(&self, at: Instant, gap: Duration) -> Option<(Instant, String)> {
        let whole = match &self.now {
            Some(now) if at.duration_since(now.last) >= gap => Some(now),
            _ => self.before.as_ref(),
        };
        whole.map(|b| (b.first, b.lines.join("\n") + "\n"))
    }
}

/// A reading: the processes joined with the GPUs, and each GPU's state.
pub(crate) type Reading = (GpuReading, Result<Vec<GpuDevice>, String>);

impl Watch {
    /// Reads `program` (`nvidia-smi`, a fake in tests) with `timing`.
    pub(crate) fn new(program: &str, timing: Timing) -> Self {
        Watch {
            program: program.to_string(),
            timing,
            loops: Mutex::new(None),
            failed: std::sync::atomic::AtomicU32::new(0),
            runs: tokio::sync::Mutex::new(None),
            snapshot_runs: tokio::sync::Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Loops>> {
        self.loops
            .lock()
            .expect("not poisoned: no panics while held")
    }

    /// What `top` asks each refresh: the loops' last samples, or two runs
    /// (each at most `timeout`) that start the loops when both answered.
    /// Runs under way are waited for and their reading shared.
    pub(crate) async fn processes_and_devices(&self, timeout: Duration) -> Reading {
        let asked = Instant::now();
        let restart = match self.sampled() {
            Sampled::Read(reading) => return reading,
            Sampled::Runs => false,
            Sampled::Restart => true,
        };
        let mut last = self.runs.lock().await;
        if let Some((ended, reading)) = &*last
            && *ended >= asked
        {
            return reading.clone();
        }
        let (apps, gpus, fields) = invoke::top_runs(&self.program, timeout).await;
        let answered = |out: &RunOutput| matches!(out, RunOutput::Exited { code: Some(0), .. });
        let both = answered(&apps) && answered(&gpus);
        let reading = invoke::reading(&apps, &gpus, timeout);
        let devices = invoke::read_devices(gpus, timeout);
        let gave_up = self.failed.load(std::sync::atomic::Ordering::Relaxed) >= GIVE_UP;
        if restart && both && !gave_up {
            *self.lock() = Some(self.start(fields));
        }
        *last = Some((Instant::now(), (reading.clone(), devices.clone())));
        (reading, devices)
    }

    /// What a snapshot (`ps`) asks, [`invoke::processes`]' two runs,
    /// single-flight too: askers while they run share their reading.
    pub(crate) async fn processes(&self, timeout: Duration) -> GpuReading {
        let asked = Instant::now();
        let mut last = self.snapshot_runs.lock().await;
        if let Some((ended, reading)) = &*last
            && *ended >= asked
        {
            return reading.clone();
        }
        let reading = invoke::processes(&self.program, timeout).await;
        *last = Some((Instant::now(), reading.clone()));
        reading
    }

    /// The loops' last samples, when they are fresh; else ends them.
    fn sampled(&self) -> Sampled {
        let mut loops = self.lock();
        let Some(running) = loops.as_ref() else {
            return Sampled::Restart;
        };
        let (now, t) = (Instant::now(), self.timing);
        *running
            .asked
            .lock()
            .expect("not poisoned: no panics while held") = now;
        let feed = |f: &Arc<Mutex<Feed>>| {
            let f = f.lock().expect("not poisoned: no panics while held");
            (f.end, f.sample(now, t.gap))
        };
        let devices = match feed(&running.devices) {
            (None, Some((first, text))) if now.duration_since(first) < t.stale => text,
            (None, None) if now.duration_since(running.started) < t.stale => {
                return Sampled::Runs;
            }
            (end, last) => {
                self.count_failed(end != Some(End::Here));
                let age = last.map(|(first, _)| now.duration_since(first));
                debug!(
                    ?end,
                    ?age,
                    "nvidia-smi's loops ended or stale: read by runs"
                );
                *loops = None;
                return Sampled::Restart;
            }
        };
        let apps = match feed(&running.apps) {
            (None, Some((first, text))) if now.duration_since(first) < t.period * 2 => text,
            (None, _) => String::new(),
            (end, _) => {
                self.count_failed(end == Some(End::Itself));
                *loops = None;
                return Sampled::Restart;
            }
        };
        // Both printed, as runs that answered: parsed as theirs are.
        let reading = GpuReading {
            by_pid: apps::parse(&apps, &devices),
            note: None,
        };
        Sampled::Read((reading, Ok(parse_devices(&devices))))
    }

    /// Loops that `failed` count towards [`GIVE_UP`].
    fn count_failed(&self, failed: bool) {
        if failed {
            let n = 1 + self
                .failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            debug!(times = n, "nvidia-smi's loops failed");
        }
    }

    /// Both loops, the devices' asking `fields`.
    fn start(&self, fields: &str) -> Loops {
        let end = CancellationToken::new();
        let asked = Arc::new(Mutex::new(Instant::now()));
        let devices_query = format!("--query-gpu={fields}");
        let feed = |query: &str| {
            let feed = Arc::new(Mutex::new(Feed::default()));
            let how = Loop {
                program: self.program.clone(),
                query: query.to_string(),
                timing: self.timing,
                feed: feed.clone(),
                asked: asked.clone(),
                end: end.clone(),
            };
            if let Err(e) = how.spawn() {
                debug!(error = %e, "nvidia-smi's loop did not start");
                feed.lock().expect("not poisoned: no panics while held").end = Some(End::Itself);
            }
            feed
        };
        let (devices, apps) = (feed(&devices_query), feed(APPS_QUERY));
        Loops {
            devices,
            apps,
            asked,
            started: Instant::now(),
            _end: end.drop_guard(),
        }
    }
}

/// One loop of `nvidia-smi`: what it asks and where its samples go.
struct Loop {
    program: String,
    query: String,
    timing: Timing,
    feed: Arc<Mutex<Feed>>,
    asked: Arc<Mutex<Instant>>,
    end: CancellationToken,
}

impl Loop {
    /// Starts it, and a task that reads it until it ends, no one asked for
    /// [`Timing::idle`], or `end`; then kills it and waits for it.
    fn spawn(self) -> std::io::Result<()> {
        let mut cmd = tokio::process::Command::new(&self.program);
        let ms = format!("--loop-ms={}", self.timing.period.as_millis());
        cmd.args([self.query.as_str(), "--format=csv,noheader,nounits", &ms])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        crate::process::dies_with_its_parent(cmd.as_std_mut());
        let mut child = cmd.spawn()?;
        // Its whole group is killed when the task ends, or is dropped with
        // its runtime.
        let group = crate::process::KillGroup::new(child.id());
        let stdout = child.stdout.take().expect("piped above");
        tokio::spawn(async move {
            let mut out = BufReader::new(stdout);
            let mut line = Vec::new();
            let mut look = tokio::time::interval(self.timing.idle / 4);
            let end = loop {
                tokio::select! {
                    () = self.end.cancelled() => break End::Here,
                    whole = next_line(&mut out, &mut line) => match whole {
                        Ok(true) => {
                            let text = String::from_utf8_lossy(&line).into_owned();
                            line.clear();
                            self.feed
                                .lock()
                                .expect("not poisoned: no panics while held")
                                .push(text, Instant::now(), self.timing.gap);
                        }
                        Ok(false) | Err(_) => break End::Itself,
                    },
                    _ = look.tick() => {
                        let asked = *self.asked.lock().expect("not poisoned: no panics while held");
                        if asked.elapsed() >= self.timing.idle {
                            break End::Here;
                        }
                    }
                }
            };
            self.feed
                .lock()
                .expect("not poisoned: no panics while held")
                .end = Some(end);
            drop(group);
            let status = child.wait().await;
            debug!(query = %self.query, ?status, "nvidia-smi's loop ended");
        });
        Ok(())
    }
}

/// Reads up to the end of the next line into `line` (which keeps the start
/// of one cut short by a cancel: the future may be dropped between bytes
/// and called again): `true` with a whole line (without its newline), cut
/// at [`LINE_BYTES`]; `false` at the end of the output.
async fn next_line(
    out: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<bool> {
    loop {
        let buf = out.fill_buf().await?;
        if buf.is_empty() {
            return Ok(false);
        }
        let (upto, whole) = match buf.iter().position(|b| *b == b'\n') {
            Some(at) => (at, true),
            None => (buf.len(), false),
        };
        let room = LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&buf[..upto.min(room)]);
        out.consume(upto + usize::from(whole));
        if whole {
            return Ok(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UUID: &str = "GPU-5f0e6b1c-0000-0000-0000-000000000000";

    /// A fake `nvidia-smi` that logs each start (its arguments, its pid) to
    /// `starts`; run once it prints one sample, in loop mode one every
    /// `--loop-ms` (as an H100's driver prints them: a line a GPU, a line a
    /// compute process; no line when it runs none). The processes' query
    /// lists pid 4242 while the file `apps` exists; `hang` (a file) makes
    /// every loop stop printing after its first sample, `slow` wait 1 s
    /// before it; `slow_runs` makes a run take 0.5 s; `endless` makes a
    /// loop print 64 KiB chunks with no newline; `wrapper` makes a loop a
    /// wrapper that runs its samples in a child ignoring SIGPIPE (its pid
    /// in `children`), as a site's script that does not `exec`.
    fn fake(dir: &std::path::Path) -> String {
        let path = dir.join("nvidia-smi");
        let d = dir.display();
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"$$ $*\" >> {d}/starts\n\
                 sample() {{ case \"$1\" in\n\
                 --query-compute-apps=*) if [ -e {d}/apps ]; then echo '4242, 40210, {UUID}'; fi;;\n\
                 --query-gpu=*) echo '0, {UUID}, 97, 40213, 81559, 512.33, 1980, 1980, 0x0000000000000000'\n\
                 echo '1, GPU-other, 3, 13, 81559, 70.1, 345, 1980, 0x0000000000000001';;\n\
                 esac; }}\n\
                 case \"$3\" in\n\
                 --loop-ms=*) ms=${{3#--loop-ms=}}; [ -e {d}/slow ] && sleep 1\n\
                   if [ -e {d}/endless ]; then while :; do head -c 65536 /dev/zero | tr '\\0' x; done; fi\n\
                   if [ -e {d}/wrapper ]; then sh -c 'echo $$ >> {d}/children; trap \"\" PIPE\n\
                     while :; do echo 0, {UUID}, 97, 40213, 81559, 512.33, 1980, 1980, 0x0; sleep 0.2; done'; exit; fi\n\
                   while :; do sample \"$1\"; [ -e {d}/hang ] && exec sleep 1000; sleep $(awk \"BEGIN {{ print $ms / 1000 }}\"); done;;\n\
                 *) [ -e {d}/slow_runs ] && sleep 0.5; sample \"$1\";;\n\
                 esac\n"
            ),
        )
        .expect("write");
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        path.to_str().expect("utf-8").to_string()
    }

    /// The fake's starts: (pid, arguments) each.
    fn starts(dir: &std::path::Path) -> Vec<(i32, String)> {
        std::fs::read_to_string(dir.join("starts"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let (pid, args) = l.split_once(' ').expect("pid and arguments");
                (pid.parse().expect("a pid"), args.to_string())
            })
            .collect()
    }

    /// How many of the fake's starts were loops.
    fn loops_started(dir: &std::path::Path) -> usize {
        starts(dir)
            .iter()
            .filter(|(_, a)| a.contains("--loop-ms"))
            .count()
    }

    fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    /// Samples 5 times a second; stale after 3 s (a loaded machine's shell
    /// may be late), ended 1.5 s after the last reading.
    const FAST: Timing = Timing {
        period: Duration::from_millis(200),
        gap: Duration::from_millis(50),
        stale: Duration::from_secs(3),
        idle: Duration::from_millis(1500),
    };

    /// A reading's GPUs, which must have answered (5 s at most).
    async fn gpus(watch: &Watch) -> usize {
        let (_, devices) = watch.processes_and_devices(Duration::from_secs(5)).await;
        devices.expect("answered").len()
    }

    async fn wait_until(what: &str, done: impl Fn() -> bool) {
        let start = std::time::Instant::now();
        while !done() {
            assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[test]
    fn lines_closer_than_the_gap_are_one_sample() {
        let (t0, gap) = (Instant::now(), Duration::from_millis(100));
        let ms = |n| t0 + Duration::from_millis(n);
        let mut feed = Feed::default();
        feed.push("0, a".into(), ms(0), gap);
        feed.push("1, b".into(), ms(30), gap);
        // Its last line is too recent to know the sample whole: none yet.
        assert_eq!(feed.sample(ms(60), gap), None);
        assert_eq!(
            feed.sample(ms(130), gap),
            Some((ms(0), "0, a\n1, b\n".into()))
        );
        feed.push("0, c".into(), ms(1000), gap);
        // The next sample is being printed: the one before it is read.
        assert_eq!(
            feed.sample(ms(1010), gap),
            Some((ms(0), "0, a\n1, b\n".into()))
        );
        feed.push("1, d".into(), ms(1020), gap);
        assert_eq!(
            feed.sample(ms(1200), gap),
            Some((ms(1000), "0, c\n1, d\n".into()))
        );
        // Lines without pause: one sample, kept to its bound.
        for n in 0..2 * SAMPLE_LINES as u64 {
            feed.push(format!("{n}, x"), ms(2000 + n / 100), gap);
        }
        let (first, text) = feed.sample(ms(3000), gap).expect("a sample");
        assert_eq!((first, text.lines().count()), (ms(2000), SAMPLE_LINES));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn after_the_first_reading_every_refresh_reads_the_loops_and_no_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = Watch::new(&fake(dir.path()), FAST);
        std::fs::write(dir.path().join("apps"), "").expect("touch");
        let timeout = Duration::from_secs(5);
        for refresh in 0..6 {
            let (reading, devices) = watch.processes_and_devices(timeout).await;
            let used = &reading.by_pid[&4242];
            assert_eq!(
                (used.index, used.utilization_pct, used.memory_mib),
                (Some(0), Some(97), Some(40210)),
                "refresh {refresh}"
            );
            let devices = devices.expect("answered");
            assert_eq!(devices.len(), 2, "refresh {refresh}");
            assert_eq!(devices[1].sm_clock_mhz, Some(345));
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        // Two runs (the first refresh) and two loops, whatever the refreshes.
        let started = starts(dir.path());
        let loops: Vec<_> = started
            .iter()
            .filter(|(_, a)| a.contains("--loop-ms=200"))
            .collect();
        assert_eq!((started.len(), loops.len()), (4, 2), "{started:?}");
        assert!(loops.iter().all(|(pid, _)| alive(*pid)));

        // A process that ended: gone from the next samples, the loops unchanged.
        std::fs::remove_file(dir.path().join("apps")).expect("rm");
        tokio::time::sleep(Duration::from_millis(700)).await;
        let (reading, devices) = watch.processes_and_devices(timeout).await;
        assert!(reading.by_pid.is_empty(), "{reading:?}");
        assert_eq!(devices.expect("answered").len(), 2);
        assert_eq!(starts(dir.path()).len(), 4);

        // Dropped: the loops end.
        drop(watch);
        wait_until("the loops end with their watch", || {
            loops.iter().all(|(pid, _)| !alive(*pid))
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_loops_end_when_no_one_asks_and_start_again_when_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = Watch::new(&fake(dir.path()), FAST);
        let timeout = Duration::from_secs(5);
        gpus(&watch).await;
        let loops = |n| -> Vec<i32> {
            starts(dir.path())
                .into_iter()
                .filter(|(_, a)| a.contains("--loop-ms"))
                .map(|(p, _)| p)
                .skip(n)
                .collect()
        };
        wait_until("two loops start", || loops(0).len() == 2).await;
        wait_until("the loops end 1.5 s after the last reading", || {
            loops(0).iter().all(|pid| !alive(*pid))
        })
        .await;
        // Loops ended for want of readings do not count as failing: they
        // start again each time (more times than a failing loop would).
        for time in 1..=GIVE_UP + 1 {
            let (_, devices) = watch.processes_and_devices(timeout).await;
            assert_eq!(devices.expect("answered by runs again").len(), 2);
            let n = 2 * time as usize;
            wait_until("two loops start again", || loops(n).len() == 2).await;
            assert!(loops(n).iter().all(|pid| alive(*pid)));
            wait_until("they end again", || loops(n).iter().all(|pid| !alive(*pid))).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_loop_that_stops_printing_is_ended_and_read_by_runs_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stale = Duration::from_millis(800);
        let watch = Watch::new(&fake(dir.path()), Timing { stale, ..FAST });
        std::fs::write(dir.path().join("hang"), "").expect("touch");
        gpus(&watch).await;
        wait_until("two loops start", || starts(dir.path()).len() == 4).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Its first sample, still fresh.
        assert_eq!(gpus(&watch).await, 2);
        assert_eq!(starts(dir.path()).len(), 4);
        tokio::time::sleep(Duration::from_millis(900)).await;
        // Stale: the hung loops are ended and the GPUs read by runs (which answer).
        let hung: Vec<i32> = starts(dir.path()).iter().skip(2).map(|(p, _)| *p).collect();
        assert_eq!(gpus(&watch).await, 2);
        wait_until("two runs and two loops again", || {
            starts(dir.path()).len() == 8
        })
        .await;
        wait_until("the hung loops end", || hung.iter().all(|pid| !alive(*pid))).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_nvidia_smi_whose_loop_ends_at_once_is_read_by_runs_after_three_tries() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fake = dir.path().join("nvidia-smi");
        // Answers each query once, and refuses the loop mode.
        std::fs::write(
            &fake,
            format!(
                "#!/bin/sh\necho \"$$ $*\" >> {}/starts\n\
                 case \"$3\" in --loop-ms=*) echo 'Invalid combination of input arguments.'; exit 2;; esac\n\
                 case \"$1\" in --query-gpu=*) echo '0, {UUID}, 97, 40213, 81559, 512.33, 1980, 1980, 0x0';; esac\n",
                dir.path().display()
            ),
        )
        .expect("write");
        std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .expect("chmod");
        let watch = Watch::new(fake.to_str().expect("utf-8"), FAST);
        for _ in 0..6 {
            let (_, devices) = watch.processes_and_devices(Duration::from_secs(5)).await;
            assert_eq!(devices.expect("answered").len(), 1);
            // Its loops ended (read) before the next reading.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let (started, loops) = (starts(dir.path()), loops_started(dir.path()));
        // Six readings by runs; loops started three times, then no more.
        assert_eq!((started.len() - loops, loops), (12, 6), "{started:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn loops_that_printed_nothing_yet_are_left_to_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = Watch::new(&fake(dir.path()), FAST);
        std::fs::write(dir.path().join("slow"), "").expect("touch");
        gpus(&watch).await;
        wait_until("two loops start", || starts(dir.path()).len() == 4).await;
        // Nothing printed yet: runs, and the same loops.
        assert_eq!(gpus(&watch).await, 2);
        wait_until("two more runs", || starts(dir.path()).len() == 6).await;
        // Then their samples: no more starts.
        wait_until("a sample", || {
            let loops = watch.lock();
            let f = loops
                .as_ref()
                .expect("running")
                .devices
                .lock()
                .expect("not poisoned");
            f.sample(Instant::now(), FAST.gap).is_some()
        })
        .await;
        assert_eq!(gpus(&watch).await, 2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (started, loops) = (starts(dir.path()), loops_started(dir.path()));
        assert_eq!((started.len(), loops), (6, 2), "{started:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn askers_at_once_share_one_reading_by_runs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = Arc::new(Watch::new(&fake(dir.path()), FAST));
        std::fs::write(dir.path().join("slow_runs"), "").expect("touch");
        let mut askers = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let watch = watch.clone();
            askers.spawn(async move { gpus(&watch).await });
        }
        while let Some(got) = askers.join_next().await {
            assert_eq!(got.expect("asker"), 2);
        }
        // One reading's two runs (and the loops they started), not 100 runs.
        let (started, loops) = (starts(dir.path()), loops_started(dir.path()));
        println!(
            "50 askers at once: {} runs, {loops} loops",
            started.len() - loops
        );
        assert_eq!(started.len() - loops, 2, "{started:?}");
        assert!(loops <= 2, "{started:?}");
        // A snapshot's reading (`ps`) alike: 50 askers, two runs more.
        for _ in 0..50 {
            let watch = watch.clone();
            askers.spawn(async move {
                let reading = watch.processes(Duration::from_secs(5)).await;
                usize::from(reading.note.is_none()) * 2
            });
        }
        while let Some(got) = askers.join_next().await {
            assert_eq!(got.expect("asker"), 2);
        }
        let (started, loops) = (starts(dir.path()), loops_started(dir.path()));
        println!("50 snapshots at once: {} runs", started.len() - loops - 2);
        assert_eq!(started.len() - loops, 4, "{started:?}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wrappers_child_ends_with_its_loop() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = Watch::new(&fake(dir.path()), FAST);
        std::fs::write(dir.path().join("wrapper"), "").expect("touch");
        gpus(&watch).await;
        let children = || -> Vec<i32> {
            std::fs::read_to_string(dir.path().join("children"))
                .unwrap_or_default()
                .lines()
                .map(|l| l.parse().expect("a pid"))
                .collect()
        };
        wait_until("the wrappers' children start", || children().len() == 2).await;
        let (kids, loops) = (children(), starts(dir.path()));
        // No reading asked for 1.5 s: the loops end, their children too.
        wait_until("the loops end", || {
            loops.iter().skip(2).all(|(pid, _)| !alive(*pid))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let left: Vec<&i32> = kids.iter().filter(|pid| alive(**pid)).collect();
        println!("wrappers' children left after their loops: {}", left.len());
        for pid in &left {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(**pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        assert!(
            left.is_empty(),
            "a wrapper's child outlived its loop: {left:?}"
        );
    }

    /// This process's resident memory (`VmRSS`), or its peak (`VmHWM`).
    fn rss_kib(which: &str) -> u64 {
        std::fs::read_to_string("/proc/self/status")
            .expect("status")
            .lines()
            .find_map(|l| l.strip_prefix(which))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("VmRSS")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_loop_that_prints_no_newline_holds_no_more_than_a_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let watch = Watch::new(&fake(dir.path()), FAST);
        std::fs::write(dir.path().join("endless"), "").expect("touch");
        gpus(&watch).await;
        let before = rss_kib("VmRSS:");
        // Readings every 200 ms keep the loops asked for (by runs: they
        // print no line) for 3 s.
        for _ in 0..15 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            let (_, devices) = watch.processes_and_devices(Duration::from_secs(5)).await;
            assert_eq!(devices.expect("answered by runs").len(), 2);
        }
        // The peak: the loops' memory is given back once they end.
        let grew = rss_kib("VmHWM:").saturating_sub(before);
        println!("a loop printing no newline for 3 s: peak +{grew} KiB");
        assert!(grew < 16 * 1024, "the agent grew {grew} KiB");
    }

    #[tokio::test]
    async fn no_nvidia_smi_starts_no_loop() {
        let watch = Watch::new("/nonexistent/nvidia-smi", FAST);
        for _ in 0..2 {
            let (reading, devices) = watch.processes_and_devices(Duration::from_secs(1)).await;
            assert_eq!((reading, devices), (GpuReading::default(), Ok(vec![])));
        }
        assert!(watch.lock().is_none());
    }
}
