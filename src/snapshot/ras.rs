//! NCCL's RAS service (NCCL 2.24 and later) on this node: every NCCL
//! process listens on `localhost:28028` (`NCCL_RAS_ADDR` moves it) and
//! answers a client with the job's health as text, as NCCL's own `ncclras`
//! client asks it (`src/ras/client.cc` of NVIDIA/nccl): `CLIENT PROTOCOL 2`,
//! `TIMEOUT SECS`, `STATUS`, then text until the service closes.
//!
//! Asked only where the job's user listens on this node's loopback
//! (`ras_owner.rs`): `localhost` is `127.0.0.1` and `::1` alike, and the
//! one another user holds is passed over. Quiet and bounded: no service
//! there (no NCCL, an older one, RAS off) is `None`, never an error; the
//! whole exchange gets [`LIMIT`], the text [`TEXT_MAX`] bytes. An agent
//! asks in the background, one ask at a time, and a refresh shows the last
//! answer ([`Answers`]). Reading the text is `top`'s (`top::ras`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::defaults;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;
use tracing::debug;

use super::ras_owner;

/// The variable that moves it.
pub(crate) const ADDR_VAR: &str = "NCCL_RAS_ADDR";
/// The whole exchange, connection included (in the background: a refresh
/// waits at most [`WAIT`]).
pub(crate) const LIMIT: Duration = Duration::from_secs(4);
/// How long a refresh waits for an answer when it has none of the last
/// [`FRESH`]; else it waits no longer than [`AGAIN`] (within its own
/// snapshot's window) and shows the last one.
pub(crate) const WAIT: Duration = Duration::from_secs(1);
/// How long a refresh waits for the ask it started when it has an answer.
const AGAIN: Duration = Duration::from_millis(200);
/// An answer older than this is not shown.
const FRESH: Duration = Duration::from_secs(30);
/// How long the service may wait for the other processes' answers (the
/// `TIMEOUT` request; NCCL's default is 5 s a leg).
const GATHER_SECS: u32 = 2;
/// The most text kept (a job of thousands of ranks prints a few KiB unless
/// many are in trouble; each is one line then).
pub(crate) const TEXT_MAX: usize = 256 * 1024;

/// The status text of the RAS service at `addr` (`host:port`), or `None`:
/// only a loopback listener of this process's user is asked, each within
/// [`LIMIT`], the first that answers as a RAS service kept.
pub(crate) async fn status(addr: &str) -> Option<String> {
    let dests = match ras_owner::destinations(addr) {
        Ok(dests) => dests,
        Err(why) => {
            debug!(addr, %why, "NCCL RAS service not asked");
            return None;
        }
    };
    let (listening, me) = (ras_owner::listeners(), nix::unistd::geteuid().as_raw());
    for dest in dests {
        if !ras_owner::held_by(dest, &listening, me) {
            debug!(%dest, "no NCCL RAS service of this user there");
            continue;
        }
        match tokio::time::timeout(LIMIT, ask(dest)).await {
            Ok(Ok(text)) => return Some(text),
            Ok(Err(e)) => debug!(%dest, error = %e, "no NCCL RAS service"),
            Err(_) => debug!(%dest, "the NCCL RAS service did not answer in time"),
        }
    }
    None
}

/// The last answer of this node's RAS service, shared by every `top` that
/// asks the agent: one ask at a time, in the background, so a listener
/// that never answers holds no refresh longer than [`WAIT`] once.
#[derive(Default)]
pub(crate) struct Answers {
    state: Arc<Mutex<AskState>>,
}

#[derive(Default)]
struct AskState {
    /// The last ask that ended: where, when, and what it got.
    last: Option<(String, Instant, Option<String>)>,
    /// The ask under way: where, when it started, and its end (sent `true`).
    asking: Option<(String, Instant, tokio::sync::watch::Receiver<bool>)>,
}

impl Answers {
    fn lock(&self) -> std::sync::MutexGuard<'_, AskState> {
        self.state
            .lock()
            .expect("not poisoned: no panics while held")
    }

    /// The service at `addr`'s last answer: an ask is started unless one
    /// is under way, and waited for up to [`WAIT`] after it started when
    /// there is no answer of the last [`FRESH`] from `addr`, else (and at
    /// least) [`AGAIN`].
    pub(crate) async fn latest(&self, addr: &str) -> Option<String> {
        let fresh = |st: &AskState| {
            st.last
                .as_ref()
                .filter(|(at, when, _)| at == addr && when.elapsed() < FRESH)
                .map(|(_, _, text)| text.clone())
        };
        let (started, mut done, had) = {
            let mut st = self.lock();
            let (started, done) = match &st.asking {
                Some((at, started, done)) if at == addr => (*started, done.clone()),
                _ => {
                    let (tx, rx) = tokio::sync::watch::channel(false);
                    let started = Instant::now();
                    st.asking = Some((addr.to_string(), started, rx.clone()));
                    let (state, addr) = (self.state.clone(), addr.to_string());
                    tokio::spawn(async move {
                        let text = status(&addr).await;
                        let mut st = state.lock().expect("not poisoned: no panics while held");
                        if st.asking.as_ref().is_some_and(|(_, at, _)| *at == started) {
                            st.asking = None;
                        }
                        st.last = Some((addr, Instant::now(), text));
                        let _ = tx.send(true);
                    });
                    (started, rx)
                }
            };
            (started, done, fresh(&st).is_some())
        };
        let mut until = Instant::now() + AGAIN;
        if !had {
            until = until.max(started + WAIT);
        }
        let _ = tokio::time::timeout_at(until, done.wait_for(|d| *d)).await;
        fresh(&self.lock()).flatten()
    }
}

async fn ask(addr: std::net::SocketAddr) -> std::io::Result<String> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read.take(TEXT_MAX as u64));
    let mut line = String::new();
    write.write_all(b"CLIENT PROTOCOL 2\n").await?;
    read.read_line(&mut line).await?;
    if !line.to_ascii_uppercase().starts_with("SERVER PROTOCOL ") {
        return Err(std::io::Error::other(format!(
            "not a RAS service: {:?}",
            line.trim_end()
        )));
    }
    write
        .write_all(format!("TIMEOUT {GATHER_SECS}\n").as_bytes())
        .await?;
    line.clear();
    read.read_line(&mut line).await?;
    write.write_all(b"STATUS\n").await?;
    let mut bytes = Vec::new();
    read.read_to_end(&mut bytes).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Where this node's RAS service listens: `NCCL_RAS_ADDR` as the job set
/// it (a command's variables first, then the agent's), else NCCL's default.
pub(crate) fn address<'a>(vars: impl IntoIterator<Item = Option<&'a str>>) -> String {
    vars.into_iter()
        .flatten()
        .map(str::trim)
        .find(|a| !a.is_empty())
        .unwrap_or(defaults::NCCL_RAS_ADDR)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn no_service_is_none_and_quick() {
        // A port nobody listens on: refused at once.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        drop(listener);
        let t = std::time::Instant::now();
        assert_eq!(status(&addr).await, None);
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    /// A RAS service in Python on 127.0.0.1, run as `user` (through
    /// `setpriv`) or this one: it answers as NCCL's does with `text`, or
    /// (`text` empty) takes the connection and says nothing. Its port, and
    /// the file where it writes `asked` on each connection.
    fn python_service(
        dir: &std::path::Path,
        user: Option<&str>,
        text: &str,
    ) -> (std::process::Child, String, std::path::PathBuf) {
        let log = dir.join("asked");
        let script = format!(
            "import socket, sys\n\
             s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n\
             print(s.getsockname()[1], flush=True)\n\
             held = []\n\
             while True:\n    c = s.accept()[0]; held.append(c)\n    open({log:?}, 'a').write('asked\\n')\n    \
             if {text:?}:\n        c.recv(64); c.sendall(b'SERVER PROTOCOL 2\\n'); c.recv(64); c.sendall(b'OK\\n'); c.recv(64)\n        \
             c.sendall({text:?}.encode()); c.close()\n",
            log = log.display().to_string(),
        );
        let mut cmd = match user {
            Some(user) => {
                let mut cmd = std::process::Command::new("setpriv");
                cmd.args([
                    &format!("--reuid={user}"),
                    &format!("--regid={user}"),
                    "--clear-groups",
                    "/usr/bin/python3",
                ]);
                cmd
            }
            None => std::process::Command::new("/usr/bin/python3"),
        };
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .expect("chmod");
        let mut child = cmd
            .args(["-c", &script])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let mut port = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().expect("piped")),
            &mut port,
        )
        .expect("its port");
        (child, format!("127.0.0.1:{}", port.trim()), log)
    }

    #[tokio::test]
    async fn a_listener_of_another_user_is_never_asked() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut other, addr, log) =
            python_service(dir.path(), Some("65534"), "Job summary\nforged\n");
        assert_eq!(status(&addr).await, None);
        let asked = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = other.kill();
        let _ = other.wait();
        assert_eq!(asked, "", "another user's listener was connected to");
        // The same service of this user is asked.
        let (mut mine, addr, _) = python_service(dir.path(), None, "Job summary\nreal\n");
        let got = status(&addr).await;
        let _ = mine.kill();
        let _ = mine.wait();
        assert_eq!(got.as_deref(), Some("Job summary\nreal\n"));
        // Not this node's loopback: refused before any connection.
        let t = std::time::Instant::now();
        assert_eq!(status("169.254.169.254:28028").await, None);
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_silent_service_holds_a_refresh_at_most_a_second_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut silent, addr, log) = python_service(dir.path(), None, "");
        let answers = Answers::default();
        let t = std::time::Instant::now();
        assert_eq!(answers.latest(&addr).await, None);
        let first = t.elapsed();
        // Asked again while the first ask waits: no second connection, and
        // no wait past the short one.
        let t = std::time::Instant::now();
        for _ in 0..5 {
            assert_eq!(answers.latest(&addr).await, None);
        }
        let again = t.elapsed();
        let asked = std::fs::read_to_string(&log).unwrap_or_default();
        let _ = silent.kill();
        let _ = silent.wait();
        assert!(first < WAIT + Duration::from_millis(300), "{first:?}");
        assert!(again < Duration::from_millis(5 * 200 + 300), "{again:?}");
        assert_eq!(asked.lines().count(), 1, "one ask at a time: {asked:?}");
    }

    #[tokio::test]
    async fn speaks_as_ncclras_does() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let service = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.expect("accept");
            let (read, mut write) = stream.into_split();
            let mut read = BufReader::new(read);
            let mut asked = Vec::new();
            let mut line = String::new();
            read.read_line(&mut line).await.expect("protocol");
            asked.push(line.clone());
            write.write_all(b"SERVER PROTOCOL 2\n").await.expect("w");
            line.clear();
            read.read_line(&mut line).await.expect("timeout");
            asked.push(line.clone());
            write.write_all(b"OK\n").await.expect("w");
            line.clear();
            read.read_line(&mut line).await.expect("status");
            asked.push(line.clone());
            write
                .write_all(b"Job summary\n===========\n")
                .await
                .expect("w");
            asked
        });
        assert_eq!(
            status(&addr).await.as_deref(),
            Some("Job summary\n===========\n")
        );
        assert_eq!(
            service.await.expect("service"),
            ["CLIENT PROTOCOL 2\n", "TIMEOUT 2\n", "STATUS\n"]
        );
        assert_eq!(
            address([None, Some(""), Some("10.0.0.1:2000")]),
            "10.0.0.1:2000"
        );
        assert_eq!(address([None]), defaults::NCCL_RAS_ADDR);
    }
}
