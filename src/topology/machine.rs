//! What resolution asks of this machine (files, names, interfaces, routes,
//! DNS, GPUs), behind one small trait so that every decision built on the
//! answers is tested with fixtures. [`System`] is the real machine.

use std::ffi::{CStr, CString};
use std::io;
use std::net::{IpAddr, ToSocketAddrs};
use std::path::Path;

use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;

use crate::env_map::EnvMap;

/// One address of one network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Interface {
    pub name: String,
    pub addr: IpAddr,
    /// The interface is administratively up.
    pub up: bool,
}

/// The facts about this machine that resolution needs (and `check`'s probe
/// builds on); each is I/O. `Sync`: names are looked up from several
/// threads at once ([`lookup_all`]).
pub(crate) trait Machine: Sync {
    /// A text file (a hostfile, a `/proc` file), at most
    /// [`MAX_HOSTFILE_LEN`] bytes of UTF-8.
    fn read_file(&self, path: &Path) -> io::Result<String>;
    /// `gethostname()`.
    fn hostname(&self) -> Result<String, String>;
    /// The canonical name of this machine's host name (getaddrinfo's `AI_CANONNAME`).
    fn fqdn(&self) -> Option<String>;
    /// GPUs listed by `nvidia-smi -L`, if it runs and lists any.
    fn nvidia_gpus(&self) -> Option<u32>;
    /// Every address of every interface, in the kernel's order.
    fn interfaces(&self) -> Vec<Interface>;
    /// `/proc/net/route`.
    fn route_table(&self) -> Option<String>;
    /// `/proc/net/ipv6_route`.
    fn route6_table(&self) -> Option<String>;
    /// The addresses `host` resolves to (getaddrinfo), in its order.
    fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String>;
}

/// No hostfile is read past this (`--hostfile /dev/zero` must not fill the
/// memory): 16 MiB hold a million nodes' lines.
pub(crate) const MAX_HOSTFILE_LEN: u64 = 16 * 1024 * 1024;

/// The machine this process runs on.
pub(crate) struct System;

impl Machine for System {
    fn read_file(&self, path: &Path) -> io::Result<String> {
        crate::read_limit::read_text_at_most(path, MAX_HOSTFILE_LEN)
    }

    fn hostname(&self) -> Result<String, String> {
        nix::unistd::gethostname()
            .map_err(|e| e.to_string())?
            .into_string()
            .map_err(|name| format!("'{}' is not UTF-8", name.to_string_lossy()))
    }

    fn fqdn(&self) -> Option<String> {
        canonical_name(&self.hostname().ok()?)
    }

    fn nvidia_gpus(&self) -> Option<u32> {
        crate::nvidia_smi::count_gpus()
    }

    fn interfaces(&self) -> Vec<Interface> {
        let Ok(addrs) = getifaddrs() else {
            return Vec::new();
        };
        addrs
            .filter_map(|a| {
                let storage = a.address?;
                let addr = if let Some(v4) = storage.as_sockaddr_in() {
                    IpAddr::V4(v4.ip())
                } else {
                    IpAddr::V6(storage.as_sockaddr_in6()?.ip())
                };
                Some(Interface {
                    name: a.interface_name,
                    addr,
                    up: a.flags.contains(InterfaceFlags::IFF_UP),
                })
            })
            .collect()
    }

    fn route_table(&self) -> Option<String> {
        std::fs::read_to_string("/proc/net/route").ok()
    }

    fn route6_table(&self) -> Option<String> {
        std::fs::read_to_string("/proc/net/ipv6_route").ok()
    }

    fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String> {
        let mut addrs: Vec<IpAddr> = Vec::new();
        for sa in (host, 0).to_socket_addrs().map_err(|e| e.to_string())? {
            if !addrs.contains(&sa.ip()) {
                addrs.push(sa.ip());
            }
        }
        Ok(addrs)
    }
}

/// Names looked up at once by [`lookup_all`]: getaddrinfo blocks, so each
/// lookup in flight holds a thread.
pub(crate) const MAX_LOOKUPS: usize = 64;

/// What [`Machine::lookup`] answers for one name.
pub(crate) type Lookup = Result<Vec<IpAddr>, String>;

/// [`Machine::lookup`] of every name, at most [`MAX_LOOKUPS`] at once, the
/// answers in the order of `hosts`. One after another, a DNS server that
/// takes 50 ms a name would cost 50 s at 1,000 nodes; at once, under 1 s.
pub(crate) fn lookup_all(machine: &dyn Machine, hosts: &[&str]) -> Vec<Lookup> {
    use std::sync::Mutex;
    let answers: Mutex<Vec<Option<Lookup>>> = Mutex::new(vec![None; hosts.len()]);
    lookup_each(&|host| machine.lookup(host), hosts, &|i, answer| {
        answers.lock().expect("not poisoned: no panics while held")[i] = Some(answer);
    });
    answers
        .into_inner()
        .expect("not poisoned: no panics while held")
        .into_iter()
        .map(|a| a.expect("every name was looked up"))
        .collect()
}

/// The one pool of name lookups: `lookup` of every name, at most
/// [`MAX_LOOKUPS`] at once; each answer is handed to `answer` (with the
/// name's index in `hosts`) as soon as it comes. Returns when every name
/// is answered: a caller with a deadline runs it on a thread of its own
/// (getaddrinfo cannot be cancelled) and takes what came in time.
pub(crate) fn lookup_each(
    lookup: &(dyn Fn(&str) -> Lookup + Sync),
    hosts: &[&str],
    answer: &(dyn Fn(usize, Lookup) + Sync),
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(host) = hosts.get(i) else { break };
            answer(i, lookup(host));
        }
    };
    let threads = hosts.len().min(MAX_LOOKUPS);
    if threads <= 1 {
        work();
    } else {
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(work);
            }
        });
    }
}

/// getaddrinfo's canonical name for `host` (its FQDN), if it has one.
fn canonical_name(host: &str) -> Option<String> {
    let c_host = CString::new(host).ok()?;
    // SAFETY: an all-zero addrinfo is the documented "no hints" value; the
    // fields that matter are set below.
    let mut hints: libc::addrinfo = unsafe { std::mem::zeroed() };
    hints.ai_flags = libc::AI_CANONNAME;
    hints.ai_family = libc::AF_UNSPEC;
    hints.ai_socktype = libc::SOCK_STREAM;
    let mut res: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: c_host is NUL-terminated and outlives the call, hints is
    // initialised, and res is a valid out-pointer, freed below on success.
    let rc = unsafe { libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut res) };
    if rc != 0 || res.is_null() {
        return None;
    }
    // SAFETY: res is the head of the list getaddrinfo returned; its
    // ai_canonname is null or a NUL-terminated string owned by the list, read
    // before the list is freed.
    let name = unsafe {
        let canon = (*res).ai_canonname;
        (!canon.is_null()).then(|| CStr::from_ptr(canon).to_string_lossy().into_owned())
    };
    // SAFETY: res came from a successful getaddrinfo and is freed exactly once.
    unsafe { libc::freeaddrinfo(res) };
    name.filter(|n| !n.is_empty())
}

/// This machine's GPUs: `CUDA_VISIBLE_DEVICES`, else `nvidia-smi -L`, else 1.
pub(super) fn local_slots(env: &EnvMap, machine: &dyn Machine) -> u32 {
    cuda_visible_devices(env)
        .or_else(|| machine.nvidia_gpus())
        .unwrap_or(1)
}

/// How many devices `CUDA_VISIBLE_DEVICES` lists, if any.
fn cuda_visible_devices(env: &EnvMap) -> Option<u32> {
    let listed = env
        .get("CUDA_VISIBLE_DEVICES")?
        .split(',')
        .filter(|d| !d.trim().is_empty())
        .count();
    u32::try_from(listed).ok().filter(|n| *n > 0)
}

#[cfg(test)]
pub(crate) mod fake {
    //! A machine made of fixtures.

    use std::collections::BTreeMap;

    use super::*;
    use crate::env_map::EnvMap;
    use crate::topology::{Node, Topology};

    #[derive(Debug, Clone, Default)]
    pub(crate) struct FakeMachine {
        pub files: BTreeMap<String, String>,
        pub hostname: String,
        pub fqdn: Option<String>,
        pub gpus: Option<u32>,
        pub interfaces: Vec<Interface>,
        pub route: Option<String>,
        pub route6: Option<String>,
        pub dns: BTreeMap<String, Vec<IpAddr>>,
    }

    impl FakeMachine {
        /// `gpu01` with `eth0` 10.0.0.1 (default route), `lo`, and an IPv6 address.
        pub(crate) fn gpu01() -> Self {
            FakeMachine {
                hostname: "gpu01".into(),
                interfaces: vec![
                    iface("lo", "127.0.0.1"),
                    iface("lo", "::1"),
                    iface("eth0", "10.0.0.1"),
                    iface("eth0", "fe80::1"),
                    iface("eth0", "fd00::1"),
                    iface("ib0", "192.168.0.1"),
                ],
                route: Some(ROUTE.to_string()),
                route6: Some(String::new()),
                ..FakeMachine::default()
            }
        }
    }

    pub(crate) const ROUTE: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100000A\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t0000000A\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
";

    pub(crate) fn iface(name: &str, addr: &str) -> Interface {
        Interface {
            name: name.into(),
            addr: ip(addr),
            up: true,
        }
    }

    pub(crate) fn ip(s: &str) -> IpAddr {
        s.parse().expect("test address")
    }

    /// An environment holding only `vars`.
    pub(crate) fn env(vars: &[(&str, &str)]) -> EnvMap {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// One slot on each of `hosts`.
    pub(crate) fn topology(source: &str, hosts: &[&str]) -> Topology {
        Topology {
            nodes: hosts
                .iter()
                .map(|h| Node {
                    host: h.to_string(),
                    slots: 1,
                })
                .collect(),
            source: source.to_string(),
        }
    }

    impl Machine for FakeMachine {
        fn read_file(&self, path: &Path) -> io::Result<String> {
            self.files
                .get(path.to_str().unwrap_or_default())
                .cloned()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))
        }
        fn hostname(&self) -> Result<String, String> {
            Ok(self.hostname.clone())
        }
        fn fqdn(&self) -> Option<String> {
            self.fqdn.clone()
        }
        fn nvidia_gpus(&self) -> Option<u32> {
            self.gpus
        }
        fn interfaces(&self) -> Vec<Interface> {
            self.interfaces.clone()
        }
        fn route_table(&self) -> Option<String> {
            self.route.clone()
        }
        fn route6_table(&self) -> Option<String> {
            self.route6.clone()
        }
        fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String> {
            self.dns
                .get(host)
                .cloned()
                .ok_or_else(|| "Name or service not known".to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Answers `10.0.0.N` for `nN` after 20 ms, counting lookups in flight.
    struct SlowMachine {
        in_flight: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
    }

    impl Machine for SlowMachine {
        fn read_file(&self, _: &Path) -> io::Result<String> {
            unreachable!()
        }
        fn hostname(&self) -> Result<String, String> {
            unreachable!()
        }
        fn fqdn(&self) -> Option<String> {
            unreachable!()
        }
        fn nvidia_gpus(&self) -> Option<u32> {
            unreachable!()
        }
        fn interfaces(&self) -> Vec<Interface> {
            unreachable!()
        }
        fn route_table(&self) -> Option<String> {
            unreachable!()
        }
        fn route6_table(&self) -> Option<String> {
            unreachable!()
        }
        fn lookup(&self, host: &str) -> Result<Vec<IpAddr>, String> {
            use std::sync::atomic::Ordering::SeqCst;
            let now = self.in_flight.fetch_add(1, SeqCst) + 1;
            self.most.fetch_max(now, SeqCst);
            std::thread::sleep(std::time::Duration::from_millis(20));
            self.in_flight.fetch_sub(1, SeqCst);
            let n: u8 = host
                .trim_start_matches('n')
                .parse()
                .map_err(|_| "no such name".to_string())?;
            Ok(vec![IpAddr::from([10, 0, 0, n])])
        }
    }

    #[test]
    fn names_are_looked_up_at_once_within_the_bound_and_answered_in_order() {
        let m = SlowMachine {
            in_flight: Default::default(),
            most: Default::default(),
        };
        let names: Vec<String> = (0..200)
            .map(|i| format!("n{i}"))
            .chain(["x".into()])
            .collect();
        let hosts: Vec<&str> = names.iter().map(String::as_str).collect();
        let answers = lookup_all(&m, &hosts);
        assert_eq!(answers.len(), 201);
        for (i, answer) in answers.iter().take(200).enumerate() {
            assert_eq!(answer, &Ok(vec![IpAddr::from([10, 0, 0, i as u8])]));
        }
        assert!(answers[200].is_err());
        let most = m.most.load(std::sync::atomic::Ordering::SeqCst);
        assert!(most > 1 && most <= MAX_LOOKUPS, "{most} at once");
        assert!(lookup_all(&m, &[]).is_empty());
    }

    #[test]
    fn the_real_machine_answers_without_panicking() {
        let sys = System;
        let name = sys.hostname().expect("a host name");
        assert!(!name.is_empty());
        assert!(
            sys.interfaces()
                .iter()
                .any(|i| i.addr.is_loopback() && i.name == "lo"),
            "lo has a loopback address"
        );
        assert_eq!(
            sys.lookup("127.0.0.1"),
            Ok(vec!["127.0.0.1".parse().unwrap()])
        );
        assert!(sys.lookup("no-such-host.invalid").is_err());
    }
}
