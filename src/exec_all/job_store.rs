//! The job's c10d store, hosted by exec_all for the whole run
//! (`--nproc-per-node`, `--store auto`; docs/torchrun.md): a `python3`
//! of the head's `PATH` that imports torch and serves a
//! `torch.distributed.TCPStore` at the head's address and `MASTER_PORT`,
//! so that rank 0's death does not end the rendezvous and a restart
//! keeps its port. The store is torch's own (no wire protocol of ours);
//! the workers connect to it as clients (`TORCHELASTIC_USE_AGENT_STORE=True`).
//!
//! One process a run, under `multinode supervise` (ended with exec_all,
//! even killed) in a group of its own, ended by [`StoreLink::end`] (or its
//! drop) on every path. Before each restart its keys are emptied
//! ([`StoreLink::fresh`]: a new server on the same listening address, in
//! the same process): torch 2.15's `_create_c10d_store` gives the workers
//! of an agent store no per-attempt key prefix, and gloo would read the
//! last attempt's addresses. Where it cannot start (no `python3`, no torch,
//! the port taken), one line says why and rank 0's process hosts the
//! store, as before.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::pipe;
use tokio::sync::Mutex;

use crate::env::Job;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::process::{GroupChild, Spawn, Stdio};
use crate::signals::Stops;

/// `--store`: whether exec_all hosts the job's store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreMode {
    /// Where the head's `python3` has torch.
    Auto,
    /// Never: rank 0's process hosts it.
    Off,
}

impl FromStr for StoreMode {
    type Err = String;

    fn from_str(text: &str) -> Result<StoreMode, String> {
        match text.trim() {
            "auto" => Ok(StoreMode::Auto),
            "off" => Ok(StoreMode::Off),
            _ => Err(format!("'{text}' is not a store mode: give auto or off")),
        }
    }
}

/// How long the store's Python may take to import torch and listen.
pub(crate) const START_LIMIT: Duration = Duration::from_secs(60);
/// How long emptying its keys may take.
const FRESH_LIMIT: Duration = Duration::from_secs(10);
/// What its lines begin with.
const TAG: &str = "multinode-store ";

/// The store's program: `python3 -c STORE_PY HOST PORT`. It says
/// `listening PORT`, then for each line on stdin serves a new, empty
/// store on the same address and says `fresh LINE`; it ends at EOF.
const STORE_PY: &str = r#"
import sys
def say(line):
    sys.stdout.write("multinode-store " + line + "\n")
    sys.stdout.flush()
try:
    import datetime, gc, socket
    import torch
    import torch.distributed as dist
    dist.TCPStore
except BaseException as e:
    say("error python3 cannot import torch.distributed (%s: %s)" % (type(e).__name__, e))
    sys.exit(3)
host, port = sys.argv[1], int(sys.argv[2])
def serve():
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(socket.SOMAXCONN)
    limit = datetime.timedelta(seconds=60)
    try:
        return dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                             timeout=limit, master_listen_fd=sock.fileno())
    except TypeError:
        sock.close()
        return dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=limit)
    finally:
        sock.detach()
def start():
    try:
        return serve()
    except BaseException as e:
        say("error cannot serve a store at %s port %d (%s: %s)" % (host, port, type(e).__name__, e))
        sys.exit(3)
store = start()
say("listening %d torch %s" % (port, torch.__version__))
for line in sys.stdin:
    del store
    gc.collect()
    store = start()
    say("fresh " + line.strip())
"#;

/// The running store: its group, its stdin and its stdout's lines.
struct JobStore {
    child: GroupChild,
    stdin: pipe::Sender,
    lines: Lines<BufReader<pipe::Receiver>>,
}

impl JobStore {
    /// The next line of the store's, within `limit`: what follows the tag,
    /// or why there is none.
    async fn line(&mut self, limit: Duration) -> Result<String, String> {
        match tokio::time::timeout(limit, self.lines.next_line()).await {
            Err(_) => Err(format!("no answer within {} s", limit.as_secs())),
            Ok(Ok(Some(line))) => match line.strip_prefix(TAG) {
                Some(said) => Ok(said.to_string()),
                None => Err(format!("it printed {line:?}")),
            },
            Ok(Ok(None)) | Ok(Err(_)) => {
                let how = match self.child.wait().await {
                    Ok(crate::process::Outcome::Exited(code)) => format!("exit {code}"),
                    Ok(crate::process::Outcome::Signaled { signal, .. }) => {
                        crate::process::signal_name(signal)
                    }
                    Err(e) => e.to_string(),
                };
                Err(format!("python3 ended ({how}) before it served"))
            }
        }
    }
}

/// The store of a run, shared by its attempts: started by the first
/// ([`StoreLink::serve`]), emptied for each next one, ended at the run's end.
#[derive(Clone)]
pub(crate) struct StoreLink(Arc<Mutex<State>>);

enum State {
    NotStarted,
    Running(Box<JobStore>),
    /// Ended, or it could not start.
    Gone,
}

impl fmt::Debug for StoreLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("StoreLink")
    }
}

impl PartialEq for StoreLink {
    fn eq(&self, other: &StoreLink) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for StoreLink {}

impl StoreLink {
    /// A store not started yet (`--store auto`).
    pub fn new() -> StoreLink {
        StoreLink(Arc::new(Mutex::new(State::NotStarted)))
    }

    /// Whether the store serves, started here the first time (at
    /// `job`'s head address and `port`): false, with one line saying why
    /// that first time, where it cannot. A stop signal meanwhile ends the run.
    pub async fn serve(
        &self,
        job: &Job,
        env: &EnvMap,
        port: u16,
        stops: &mut Stops,
    ) -> Result<bool, Error> {
        let mut held = self.0.lock().await;
        if let State::NotStarted = *held {
            *held = match start(job, env, port, stops).await? {
                Some(store) => State::Running(Box::new(store)),
                None => State::Gone,
            };
        }
        Ok(matches!(*held, State::Running(_)))
    }

    /// Empties the store before attempt `attempt`: true once it serves
    /// again on the same port; false (the store ended, one line saying
    /// why) when it cannot, or it was ended already.
    pub async fn fresh(&self, attempt: u32) -> bool {
        let mut held = self.0.lock().await;
        let State::Running(store) = &mut *held else {
            return false;
        };
        let asked = store
            .stdin
            .write_all(format!("{attempt}\n").as_bytes())
            .await;
        let answer = match asked {
            Ok(()) => store.line(FRESH_LIMIT).await,
            Err(e) => Err(format!("it does not read its stdin: {e}")),
        };
        match answer {
            Ok(said) if said == format!("fresh {attempt}") => true,
            answer => {
                let why = answer.map_or_else(|e| e, |said| said.replace("error ", ""));
                tracing::warn!(
                    "the job's store could not be emptied for attempt {attempt}: {why}; \
                     rank 0's process hosts the store from here on"
                );
                if let State::Running(mut store) = std::mem::replace(&mut *held, State::Gone) {
                    let _ = store.child.terminate(Duration::from_secs(1)).await;
                }
                false
            }
        }
    }

    /// Ends the store (its whole group) and waits for it.
    pub async fn end(&self) {
        let mut held = self.0.lock().await;
        if let State::Running(mut store) = std::mem::replace(&mut *held, State::Gone) {
            let _ = store.child.terminate(Duration::from_secs(1)).await;
        }
    }
}

/// Starts the store at the head's address and `port` where the head's
/// `python3` can; else one line says why and `None`.
async fn start(
    job: &Job,
    env: &EnvMap,
    port: u16,
    stops: &mut Stops,
) -> Result<Option<JobStore>, Error> {
    let started = match (job.rank, find_python(env)) {
        (0, Some(python)) => {
            let starting = spawn(job.bin.as_ref(), &python, job.head_ip, port);
            tokio::select! {
                started = starting => started,
                signo = stops.next() => {
                    return Err(Error::Failed(format!(
                        "stopped by signal {signo} while the job's store started"
                    )));
                }
            }
        }
        (0, None) => Err("no python3 on PATH".to_string()),
        (rank, _) => Err(format!("exec_all runs on rank {rank}, not on the head")),
    };
    match started {
        Ok(store) => Ok(Some(store)),
        Err(why) => {
            tracing::warn!(
                "the job's store is not exec_all's: {why}; rank 0's process hosts it (--store off says nothing)"
            );
            Ok(None)
        }
    }
}

/// `python3` on `PATH`, as the job's script would find it.
fn find_python(env: &EnvMap) -> Option<PathBuf> {
    let path = env.get("PATH")?;
    std::env::split_paths(path)
        .map(|dir| dir.join("python3"))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// The store's process, serving once it said so.
async fn spawn(
    bin: &std::path::Path,
    python: &std::path::Path,
    host: IpAddr,
    port: u16,
) -> Result<JobStore, String> {
    let argv = [
        python.as_os_str().to_owned(),
        "-c".into(),
        STORE_PY.into(),
        host.to_string().into(),
        port.to_string().into(),
    ];
    let mut cmd = Spawn::from_std(&crate::supervise::wrap(
        bin,
        Duration::from_secs(1),
        None,
        &argv,
    ));
    cmd.stdio(Stdio::Piped);
    let mut child = GroupChild::spawn(&cmd).map_err(|e| format!("cannot start python3: {e}"))?;
    let (stdin, stdout, stderr) = child.take_stdio();
    let (Some(stdin), Some(stdout)) = (stdin, stdout) else {
        return Err("python3 has no pipes".to_string());
    };
    if let Some(stderr) = stderr {
        tokio::spawn(log_stderr(stderr));
    }
    let mut store = JobStore {
        child,
        stdin,
        lines: BufReader::new(stdout).lines(),
    };
    let said = store.line(START_LIMIT).await?;
    match said.strip_prefix("listening ") {
        Some(what) => {
            tracing::info!(%host, port, pid = store.child.pgid().as_raw(), what, "the job's store is up");
            Ok(store)
        }
        None => Err(said.strip_prefix("error ").unwrap_or(&said).to_string()),
    }
}

/// The store's stderr (torch's warnings), for `-v`.
async fn log_stderr(stderr: pipe::Receiver) {
    let mut lines = BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        tracing::debug!(line, "the job's store");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_is_auto_or_off_and_nothing_else() {
        assert_eq!("auto".parse(), Ok(StoreMode::Auto));
        assert_eq!(" off".parse(), Ok(StoreMode::Off));
        for bad in ["", "on", "yes", "Auto"] {
            let e = bad.parse::<StoreMode>().unwrap_err();
            assert!(e.contains("give auto or off"), "{bad}: {e}");
        }
    }
}
