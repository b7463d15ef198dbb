//! Everything `multinode check --local` asks of its machine, behind one small
//! trait so that the gathering is tested with fixtures. [`SystemProbe`] is
//! the real machine; every call is bounded in time.

use std::collections::BTreeMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::facts::{Limit, Memlock, NetInterface, Rendezvous, Resolution};
pub(crate) use crate::process::{RunOutput, run_bounded};
use crate::topology::machine::{Interface, Machine, System, lookup_each};

/// The facts of this machine that the checks need beyond those resolution
/// needs ([`Machine`]: files, the host name, interfaces, name lookups);
/// each is I/O.
pub(crate) trait Probe: Machine {
    /// UNIX time in milliseconds.
    fn now_ms(&self) -> u64;
    fn read_link(&self, path: &Path) -> Option<String>;
    /// The names in a folder, sorted; `None` when it does not exist.
    fn list_dir(&self, path: &Path) -> Option<Vec<String>>;
    fn exists(&self, path: &Path) -> bool;
    fn memlock(&self) -> Memlock;
    /// Runs `program args` with no stdin, for at most `timeout`.
    fn run(&self, program: &str, args: &[&str], timeout: Duration) -> RunOutput;
    /// Resolves every host; those not done within `deadline` are left out.
    fn resolve_all(&self, hosts: &[String], deadline: Duration) -> BTreeMap<String, Resolution>;
    /// Connects to the rendezvous address (and reads the head's clock line).
    fn connect(&self, addr: SocketAddr, timeout: Duration) -> Rendezvous;
}

/// This machine.
pub(crate) struct SystemProbe;

pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Probe for SystemProbe {
    fn now_ms(&self) -> u64 {
        unix_ms()
    }

    fn read_link(&self, path: &Path) -> Option<String> {
        std::fs::read_link(path)
            .ok()
            .map(|p| p.to_string_lossy().into_owned())
    }

    fn list_dir(&self, path: &Path) -> Option<Vec<String>> {
        let mut names: Vec<String> = std::fs::read_dir(path)
            .ok()?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Some(names)
    }

    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }

    fn memlock(&self) -> Memlock {
        use nix::sys::resource::{RLIM_INFINITY, Resource, getrlimit};
        let limit = |v: u64| {
            if v == RLIM_INFINITY {
                Limit::Unlimited
            } else {
                Limit::Bytes(v)
            }
        };
        match getrlimit(Resource::RLIMIT_MEMLOCK) {
            Ok((soft, hard)) => Memlock {
                soft: Some(limit(soft)),
                hard: Some(limit(hard)),
                error: None,
            },
            Err(e) => Memlock {
                soft: None,
                hard: None,
                error: Some(format!("getrlimit: {e}")),
            },
        }
    }

    fn run(&self, program: &str, args: &[&str], timeout: Duration) -> RunOutput {
        run_bounded(program, args, timeout)
    }

    fn resolve_all(&self, hosts: &[String], deadline: Duration) -> BTreeMap<String, Resolution> {
        resolve_within(hosts, Arc::new(|h: &str| System.lookup(h)), deadline)
    }

    fn connect(&self, addr: SocketAddr, timeout: Duration) -> Rendezvous {
        super::rendezvous::connect(addr, timeout, &unix_ms)
    }
}

/// The real machine's facts are [`System`]'s.
impl Machine for SystemProbe {
    fn read_file(&self, path: &Path) -> io::Result<String> {
        System.read_file(path)
    }
    fn hostname(&self) -> Result<String, String> {
        System.hostname()
    }
    fn fqdn(&self) -> Option<String> {
        System.fqdn()
    }
    fn nvidia_gpus(&self) -> Option<u32> {
        System.nvidia_gpus()
    }
    fn interfaces(&self) -> Vec<Interface> {
        System.interfaces()
    }
    fn route_table(&self) -> Option<String> {
        System.route_table()
    }
    fn route6_table(&self) -> Option<String> {
        System.route6_table()
    }
    fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        System.lookup(host)
    }
}

/// One entry per interface (in the kernel's order), its addresses together.
pub(crate) fn group_interfaces(addrs: Vec<Interface>) -> Vec<NetInterface> {
    let mut out: Vec<NetInterface> = Vec::new();
    for a in addrs {
        match out.iter_mut().find(|i| i.name == a.name) {
            Some(i) => {
                i.up |= a.up;
                i.addrs.push(a.addr);
            }
            None => out.push(NetInterface {
                name: a.name,
                up: a.up,
                addrs: vec![a.addr],
            }),
        }
    }
    out
}

type LookupFn = Arc<dyn Fn(&str) -> Result<Vec<IpAddr>, String> + Send + Sync>;

/// Resolves `hosts` through topology's lookup pool ([`lookup_each`]) on a
/// thread of its own; what is not resolved within `deadline` is left out
/// (its lookups finish in the background: getaddrinfo cannot be cancelled).
pub(crate) fn resolve_within(
    hosts: &[String],
    lookup: LookupFn,
    deadline: Duration,
) -> BTreeMap<String, Resolution> {
    let end = Instant::now() + deadline;
    let (tx, rx) = mpsc::channel::<(usize, Resolution)>();
    let names = hosts.to_vec();
    std::thread::spawn(move || {
        let hosts: Vec<&str> = names.iter().map(String::as_str).collect();
        let tx = Mutex::new(tx);
        lookup_each(&*lookup, &hosts, &|i, answer| {
            let res = match answer {
                Ok(addrs) => Resolution { addrs, error: None },
                Err(e) => Resolution {
                    addrs: Vec::new(),
                    error: Some(e),
                },
            };
            // The receiver is gone past the deadline: nothing to tell.
            let _ = tx.lock().map(|tx| tx.send((i, res)));
        });
    });
    let mut out = BTreeMap::new();
    while out.len() < hosts.len() {
        let wait = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(wait) {
            Ok((i, res)) => {
                out.insert(hosts[i].clone(), res);
            }
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod fake {
    //! A machine made of fixtures.

    use std::collections::BTreeMap;
    use std::net::SocketAddr;
    use std::path::Path;
    use std::time::Duration;

    use std::io;
    use std::net::IpAddr;

    use super::{Probe, RunOutput};
    use crate::check::facts::{Memlock, NetInterface, Rendezvous, Resolution};
    use crate::topology::machine::{Interface, Machine};

    #[derive(Debug, Default)]
    pub(crate) struct FakeProbe {
        pub now_ms: u64,
        pub hostname: String,
        pub files: BTreeMap<String, String>,
        pub links: BTreeMap<String, String>,
        /// Folders and their entries.
        pub dirs: BTreeMap<String, Vec<String>>,
        pub memlock: Memlock,
        pub interfaces: Vec<NetInterface>,
        /// `program args...` joined by spaces → what it does.
        pub programs: BTreeMap<String, RunOutput>,
        pub dns: BTreeMap<String, Resolution>,
        pub rendezvous: Option<Rendezvous>,
        /// Every program run, in the order they started (`program args...`).
        pub ran: std::sync::Mutex<Vec<String>>,
    }

    impl FakeProbe {
        pub(crate) fn file(mut self, path: &str, text: &str) -> Self {
            self.files.insert(path.into(), text.into());
            self
        }

        pub(crate) fn dir(mut self, path: &str, entries: &[&str]) -> Self {
            self.dirs
                .insert(path.into(), entries.iter().map(|e| e.to_string()).collect());
            self
        }

        pub(crate) fn program(mut self, command: &str, output: RunOutput) -> Self {
            self.programs.insert(command.into(), output);
            self
        }
    }

    /// A program that printed `stdout` and exited 0.
    pub(crate) fn printed(stdout: &str) -> RunOutput {
        RunOutput::Exited {
            code: Some(0),
            stdout: stdout.into(),
            stderr: String::new(),
        }
    }

    impl Machine for FakeProbe {
        fn read_file(&self, path: &Path) -> io::Result<String> {
            path.to_str()
                .and_then(|p| self.files.get(p))
                .cloned()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn hostname(&self) -> Result<String, String> {
            Ok(self.hostname.clone())
        }
        fn fqdn(&self) -> Option<String> {
            None
        }
        fn nvidia_gpus(&self) -> Option<u32> {
            None
        }
        /// Each of `interfaces`' addresses, as the kernel lists them.
        fn interfaces(&self) -> Vec<Interface> {
            self.interfaces
                .iter()
                .flat_map(|i| {
                    i.addrs.iter().map(|&addr| Interface {
                        name: i.name.clone(),
                        addr,
                        up: i.up,
                    })
                })
                .collect()
        }
        fn route_table(&self) -> Option<String> {
            None
        }
        fn route6_table(&self) -> Option<String> {
            None
        }
        fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String> {
            match self.dns.get(host) {
                Some(Resolution { error: Some(e), .. }) => Err(e.clone()),
                Some(r) => Ok(r.addrs.clone()),
                None => Err("Name or service not known".into()),
            }
        }
    }

    impl Probe for FakeProbe {
        fn now_ms(&self) -> u64 {
            self.now_ms
        }
        fn read_link(&self, path: &Path) -> Option<String> {
            self.links.get(path.to_str()?).cloned()
        }
        fn list_dir(&self, path: &Path) -> Option<Vec<String>> {
            self.dirs.get(path.to_str()?).cloned()
        }
        fn exists(&self, path: &Path) -> bool {
            let Some(p) = path.to_str() else { return false };
            self.files.contains_key(p)
                || self.dirs.contains_key(p)
                || self.programs.keys().any(|c| c.split(' ').next() == Some(p))
        }
        fn memlock(&self) -> Memlock {
            self.memlock.clone()
        }
        fn run(&self, program: &str, args: &[&str], _timeout: Duration) -> RunOutput {
            let mut key = program.to_string();
            for a in args {
                key.push(' ');
                key.push_str(a);
            }
            if let Ok(mut ran) = self.ran.lock() {
                ran.push(key.clone());
            }
            self.programs
                .get(&key)
                .cloned()
                .unwrap_or(RunOutput::NotFound)
        }
        fn resolve_all(
            &self,
            hosts: &[String],
            _deadline: Duration,
        ) -> BTreeMap<String, Resolution> {
            hosts
                .iter()
                .filter_map(|h| Some((h.clone(), self.dns.get(h)?.clone())))
                .collect()
        }
        fn connect(&self, addr: SocketAddr, _timeout: Duration) -> Rendezvous {
            self.rendezvous.clone().unwrap_or(Rendezvous {
                addr: addr.to_string(),
                connected: false,
                error: Some("connection refused".into()),
                elapsed_ms: 0,
                clock: None,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_run_with_a_time_limit() {
        let got = run_bounded(
            "sh",
            &["-c", "echo out; echo err >&2; exit 3"],
            Duration::from_secs(5),
        );
        assert_eq!(
            got,
            RunOutput::Exited {
                code: Some(3),
                stdout: "out\n".into(),
                stderr: "err\n".into()
            }
        );
        let start = Instant::now();
        assert_eq!(
            run_bounded("sleep", &["5"], Duration::from_millis(200)),
            RunOutput::TimedOut
        );
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(
            run_bounded("/nonexistent/nvidia-smi", &[], Duration::from_secs(1)),
            RunOutput::NotFound
        );
    }

    #[test]
    fn a_grandchild_holding_the_pipe_does_not_hang_the_probe() {
        let start = Instant::now();
        let got = run_bounded(
            "sh",
            &["-c", "sleep 5 & echo started"],
            Duration::from_millis(500),
        );
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert!(
            matches!(got, RunOutput::Exited { code: Some(0), .. }),
            "{got:?}"
        );
    }

    #[test]
    fn slow_lookups_are_left_out_at_the_deadline() {
        let hosts: Vec<String> = ["fast1", "slow", "fast2"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let lookup: LookupFn = Arc::new(|h: &str| {
            if h == "slow" {
                std::thread::sleep(Duration::from_secs(3));
            }
            if h == "fast2" {
                return Err("Name or service not known".into());
            }
            Ok(vec!["10.0.0.1".parse().expect("ip")])
        });
        let start = Instant::now();
        let got = resolve_within(&hosts, lookup, Duration::from_millis(300));
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(got.keys().collect::<Vec<_>>(), ["fast1", "fast2"]);
        assert_eq!(
            got["fast2"].error.as_deref(),
            Some("Name or service not known")
        );
        assert_eq!(
            got["fast1"].addrs,
            vec!["10.0.0.1".parse::<IpAddr>().expect("ip")]
        );
    }

    #[test]
    fn many_lookups_share_few_threads() {
        let hosts: Vec<String> = (0..300).map(|i| format!("n{i}")).collect();
        let got = resolve_within(&hosts, Arc::new(|_| Ok(vec![])), Duration::from_secs(5));
        assert_eq!(got.len(), 300);
        assert!(resolve_within(&[], Arc::new(|_| Ok(vec![])), Duration::from_secs(1)).is_empty());
    }

    #[test]
    fn the_real_machine_answers() {
        let p = SystemProbe;
        assert!(p.now_ms() > 1_600_000_000_000);
        assert!(!p.hostname().expect("a host name").is_empty());
        let m = p.memlock();
        assert!(
            m.soft.is_some() && m.hard.is_some() && m.error.is_none(),
            "{m:?}"
        );
        let lo = group_interfaces(p.interfaces())
            .into_iter()
            .find(|i| i.name == "lo")
            .expect("lo");
        assert!(lo.addrs.iter().any(IpAddr::is_loopback));
        assert!(
            p.list_dir(Path::new("/proc/self"))
                .is_some_and(|e| e.contains(&"status".to_string()))
        );
        assert_eq!(p.list_dir(Path::new("/nonexistent")), None);
        assert!(
            p.read_link(Path::new("/proc/self/ns/net"))
                .is_some_and(|l| l.starts_with("net:["))
        );
    }
}
