//! This node's processes from `/proc`: which belong to the commands, and
//! what each is doing. The parsers are pure; the readers treat a process
//! that vanished between two reads as gone, never as an error.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// What `/proc/PID/stat` says about a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stat {
    pub pid: i32,
    pub comm: String,
    pub state: char,
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
    /// utime + stime, in clock ticks.
    pub cpu_ticks: u64,
    /// Since boot, in clock ticks.
    pub start_ticks: u64,
    /// Resident pages.
    pub rss_pages: u64,
}

/// Parses `/proc/PID/stat` (the name may hold spaces and parentheses: it
/// ends at the last `)`).
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let comm = text.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = text.get(close + 1..)?.split_ascii_whitespace().collect();
    // rest[0] is field 3 (state) of proc(5).
    let field = |n: usize| rest.get(n - 3).copied();
    let num = |n: usize| field(n).and_then(|v| v.parse::<i64>().ok());
    Some(Stat {
        pid,
        comm,
        state: field(3)?.chars().next()?,
        ppid: num(4)? as i32,
        pgrp: num(5)? as i32,
        session: num(6)? as i32,
        cpu_ticks: (num(14)? + num(15)?).max(0) as u64,
        start_ticks: num(22)?.max(0) as u64,
        rss_pages: num(24)?.max(0) as u64,
    })
}

/// Every process whose session or process group is one of `roots`, or
/// that descends from one of them (a child that made its own session, such
/// as `multinode supervise` under exec_all), parents before children.
pub(crate) fn select(all: &[Stat], roots: &BTreeSet<i32>) -> Vec<Stat> {
    let mut children: BTreeMap<i32, Vec<&Stat>> = BTreeMap::new();
    for s in all {
        children.entry(s.ppid).or_default().push(s);
    }
    let mut chosen: BTreeSet<i32> = all
        .iter()
        .filter(|s| roots.contains(&s.pid) || roots.contains(&s.session) || roots.contains(&s.pgrp))
        .map(|s| s.pid)
        .collect();
    // Descendants of what is chosen.
    let mut queue: Vec<i32> = chosen.iter().copied().collect();
    while let Some(pid) = queue.pop() {
        for child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if chosen.insert(child.pid) {
                queue.push(child.pid);
            }
        }
    }
    // Parents before children: walk down from the chosen ones whose parent is not chosen.
    let by_pid: BTreeMap<i32, &Stat> = all.iter().map(|s| (s.pid, s)).collect();
    let mut out = Vec::with_capacity(chosen.len());
    let mut stack: Vec<i32> = chosen
        .iter()
        .copied()
        .filter(|pid| !by_pid.get(pid).is_some_and(|s| chosen.contains(&s.ppid)))
        .rev()
        .collect();
    while let Some(pid) = stack.pop() {
        if let Some(s) = by_pid.get(&pid) {
            out.push((*s).clone());
        }
        let mut kids: Vec<i32> = children
            .get(&pid)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .map(|c| c.pid)
            .filter(|p| chosen.contains(p))
            .collect();
        kids.sort_unstable();
        stack.extend(kids.into_iter().rev());
    }
    out
}

/// The first field of `/proc/PID/syscall`, named where this table knows it.
pub(crate) fn parse_syscall(text: &str) -> Option<String> {
    let first = text.split_ascii_whitespace().next()?;
    match first {
        "running" => None,
        "-1" => Some("(user space)".to_string()),
        n => {
            let nr: i64 = n.parse().ok()?;
            Some(match syscall_name(nr) {
                Some(name) => name.to_string(),
                None => format!("syscall {nr}"),
            })
        }
    }
}

/// The syscalls a waiting process is usually in.
#[cfg(target_arch = "x86_64")]
fn syscall_name(nr: i64) -> Option<&'static str> {
    Some(match nr {
        0 => "read",
        1 => "write",
        7 => "poll",
        23 => "select",
        34 => "pause",
        35 => "nanosleep",
        43 => "accept",
        45 => "recvfrom",
        47 => "recvmsg",
        61 => "wait4",
        202 => "futex",
        230 => "clock_nanosleep",
        232 => "epoll_wait",
        247 => "waitid",
        270 => "pselect6",
        271 => "ppoll",
        281 => "epoll_pwait",
        288 => "accept4",
        441 => "epoll_pwait2",
        _ => return None,
    })
}

#[cfg(target_arch = "aarch64")]
fn syscall_name(nr: i64) -> Option<&'static str> {
    Some(match nr {
        22 => "epoll_pwait",
        63 => "read",
        64 => "write",
        72 => "pselect6",
        73 => "ppoll",
        95 => "waitid",
        98 => "futex",
        101 => "nanosleep",
        115 => "clock_nanosleep",
        202 => "accept",
        207 => "recvfrom",
        212 => "recvmsg",
        242 => "accept4",
        260 => "wait4",
        _ => return None,
    })
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn syscall_name(_nr: i64) -> Option<&'static str> {
    None
}

/// `/proc/PID/wchan`: `0` or empty means none (running, or hidden).
pub(crate) fn parse_wchan(text: &str) -> Option<String> {
    let t = text.trim();
    (!t.is_empty() && t != "0").then(|| t.to_string())
}

/// `/proc/PID/cmdline`: NUL-separated arguments, joined with spaces.
pub(crate) fn parse_cmdline(bytes: &[u8]) -> String {
    let trimmed = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    String::from_utf8_lossy(trimmed).replace('\0', " ")
}

/// `Cpus_allowed_list` of `/proc/PID/status`: the CPUs it may run on, in
/// the kernel's list form (`0-23,48-71`).
pub(crate) fn parse_cpus_allowed(status: &str) -> Option<String> {
    status.lines().find_map(|line| {
        let list = line.strip_prefix("Cpus_allowed_list:")?.trim();
        (!list.is_empty()).then(|| list.to_string())
    })
}

/// `RANK` and `LOCAL_RANK` among the NUL-separated `NAME=VALUE`s of
/// `/proc/PID/environ`, when numbers.
pub(crate) fn parse_ranks(environ: &[u8]) -> (Option<usize>, Option<usize>) {
    let (mut rank, mut local_rank) = (None, None);
    for var in environ.split(|&b| b == 0) {
        let number = |v: &[u8]| std::str::from_utf8(v).ok()?.trim().parse().ok();
        if let Some(v) = var.strip_prefix(b"RANK=") {
            rank = number(v);
        } else if let Some(v) = var.strip_prefix(b"LOCAL_RANK=") {
            local_rank = number(v);
        }
    }
    (rank, local_rank)
}

/// The environment a process was started with holds at most this much
/// that is read (`MAX_ARG_STRLEN` is 128 KiB a string, the whole stack's
/// share a quarter of its limit).
const ENVIRON_MAX: u64 = 4 << 20;

/// The `RANK` and `LOCAL_RANK` process `pid` was started with (a process
/// group exec_all shows its agent: its leader, `multinode supervise`, got
/// the process's variables); none where it is gone or not readable.
pub(crate) fn read_ranks(proc: &Path, pid: i32) -> (Option<usize>, Option<usize>) {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = std::fs::File::open(proc.join(pid.to_string()).join("environ"))
        .and_then(|f| f.take(ENVIRON_MAX).read_to_end(&mut bytes));
    match read {
        Ok(_) => parse_ranks(&bytes),
        Err(_) => (None, None),
    }
}

/// The CPUs `pid` may run on ([`parse_cpus_allowed`]).
pub(crate) fn read_cpus(proc: &Path, pid: i32) -> Option<String> {
    parse_cpus_allowed(&std::fs::read_to_string(proc.join(pid.to_string()).join("status")).ok()?)
}

/// Every process of this machine (one read of each `/proc/PID/stat`).
pub(crate) fn read_all(proc: &Path) -> Vec<Stat> {
    let Ok(dir) = std::fs::read_dir(proc) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|t| parse_stat(&t))
        .collect()
}

/// The processes whose parent is `pid` (exec_all's own commands).
pub(crate) fn children_of(pid: i32) -> BTreeSet<i32> {
    read_all(Path::new("/proc"))
        .into_iter()
        .filter(|s| s.ppid == pid)
        .map(|s| s.pid)
        .collect()
}

/// `/proc/PID/stat` again, for the second CPU sample.
pub(crate) fn read_stat(proc: &Path, pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(proc.join(pid.to_string()).join("stat")).ok()?)
}

/// Whether `pgid` is a live process group of this machine led by a
/// process of this user (`#multinode:show-group` shows no other).
pub(crate) fn is_own_group(proc: &Path, pgid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let leads = read_stat(proc, pgid).is_some_and(|s| s.pgrp == pgid && s.state != 'Z');
    let owner = std::fs::metadata(proc.join(pgid.to_string())).map(|m| m.uid());
    leads && owner.is_ok_and(|uid| uid == nix::unistd::geteuid().as_raw())
}

/// Where the process waits: its wchan, or else its syscall.
pub(crate) fn read_wait(proc: &Path, pid: i32) -> Option<String> {
    let dir = proc.join(pid.to_string());
    std::fs::read_to_string(dir.join("wchan"))
        .ok()
        .and_then(|t| parse_wchan(&t))
        .or_else(|| {
            std::fs::read_to_string(dir.join("syscall"))
                .ok()
                .and_then(|t| parse_syscall(&t))
        })
}

pub(crate) fn read_cmdline(proc: &Path, pid: i32) -> String {
    use std::io::Read;
    let mut bytes = Vec::new();
    let read = std::fs::File::open(proc.join(pid.to_string()).join("cmdline"))
        .and_then(|f| f.take(CMDLINE_MAX as u64 + 1).read_to_end(&mut bytes));
    if read.is_err() {
        return String::new();
    }
    let cut = bytes.len() > CMDLINE_MAX;
    bytes.truncate(CMDLINE_MAX);
    let mut line = parse_cmdline(&bytes);
    if cut {
        line.push_str(CMDLINE_CUT);
    }
    line
}

/// The most of a command line a snapshot reads: a rank's argv may be
/// megabytes, and every answer and table would carry them.
pub(crate) const CMDLINE_MAX: usize = 4096;
/// Ends a command line cut at [`CMDLINE_MAX`] bytes.
pub(crate) const CMDLINE_CUT: &str = " …[cut at 4 KiB]";

/// Seconds since boot (`/proc/uptime`).
pub(crate) fn uptime(proc: &Path) -> Option<f64> {
    std::fs::read_to_string(proc.join("uptime"))
        .ok()?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The inode of this process's PID namespace: two processes see the same
/// PIDs when theirs are equal.
pub(crate) fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// Clock ticks per second and the page size.
pub(crate) fn clock_and_page() -> (u64, u64) {
    // SAFETY: sysconf only reads a configuration value.
    let (tck, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (
        if tck > 0 { tck as u64 } else { 100 },
        if page > 0 { page as u64 } else { 4096 },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: i32, ppid: i32, pgrp: i32, session: i32) -> Stat {
        Stat {
            pid,
            comm: format!("p{pid}"),
            state: 'S',
            ppid,
            pgrp,
            session,
            cpu_ticks: 0,
            start_ticks: 0,
            rss_pages: 0,
        }
    }

    #[test]
    fn parses_stat_with_a_hostile_name() {
        let text = "4242 (python3 (x) y) R 4200 4242 4242 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 3 0 123456 1000000 2560 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 3 0 0 0 0 0\n";
        let s = parse_stat(text).expect("parses");
        assert_eq!(s.pid, 4242);
        assert_eq!(s.comm, "python3 (x) y");
        assert_eq!(s.state, 'R');
        assert_eq!((s.ppid, s.pgrp, s.session), (4200, 4242, 4242));
        assert_eq!(s.cpu_ticks, 300);
        assert_eq!(s.start_ticks, 123456);
        assert_eq!(s.rss_pages, 2560);
        assert_eq!(parse_stat("12 (short) S 1 2"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn selects_the_trees_of_the_roots_parents_first() {
        let all = vec![
            stat(1, 0, 1, 1),
            stat(100, 1, 100, 100),   // the agent
            stat(200, 100, 200, 200), // a command (root)
            stat(201, 200, 200, 200),
            stat(300, 201, 300, 300), // a child that made its own session
            stat(301, 300, 300, 300),
            stat(400, 1, 200, 200),   // reparented to init, same session
            stat(500, 100, 500, 500), // py-spy, started by the agent: not ours
        ];
        let roots: BTreeSet<i32> = [200].into();
        let pids: Vec<i32> = select(&all, &roots).iter().map(|s| s.pid).collect();
        assert_eq!(pids, vec![200, 201, 300, 301, 400]);
        assert!(select(&all, &BTreeSet::new()).is_empty());
    }

    #[test]
    fn wait_channels_and_syscalls() {
        assert_eq!(parse_wchan("0"), None);
        assert_eq!(parse_wchan(""), None);
        assert_eq!(parse_wchan("do_select"), Some("do_select".into()));
        assert_eq!(parse_syscall("running"), None);
        assert_eq!(parse_syscall("-1 0x7ffd 0x0"), Some("(user space)".into()));
        assert_eq!(parse_syscall("99999 0x1 0x2"), Some("syscall 99999".into()));
        #[cfg(target_arch = "x86_64")]
        assert_eq!(parse_syscall("202 0x1 0x2"), Some("futex".into()));
        assert_eq!(parse_cmdline(b"python3\0-c\0x = 1\0"), "python3 -c x = 1");
    }

    #[test]
    fn cpus_and_ranks_of_a_process() {
        let status = "Name:\tpython3\nCpus_allowed:\tff\nCpus_allowed_list:\t0-23,48-71\nMems_allowed_list:\t0\n";
        assert_eq!(parse_cpus_allowed(status), Some("0-23,48-71".into()));
        assert_eq!(parse_cpus_allowed("Name:\tx\n"), None);
        assert_eq!(
            parse_ranks(b"PATH=/bin\0RANK=5\0LOCAL_RANK=1\0MY_RANK=9\0"),
            (Some(5), Some(1))
        );
        assert_eq!(parse_ranks(b"RANK=x\0GROUP_RANK=2"), (None, None));
        assert_eq!(parse_ranks(b""), (None, None));
    }

    #[test]
    fn reads_this_process() {
        let proc = Path::new("/proc");
        let me = std::process::id() as i32;
        let all = read_all(proc);
        let mine = all
            .iter()
            .find(|s| s.pid == me)
            .expect("this process is listed");
        assert_eq!(
            read_stat(proc, me).map(|s| s.start_ticks),
            Some(mine.start_ticks)
        );
        assert!(!read_cmdline(proc, me).is_empty());
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status
            .lines()
            .find(|l| l.starts_with("Cpus_allowed_list:"))
            .unwrap();
        assert_eq!(
            read_cpus(proc, me).map(|c| format!("Cpus_allowed_list:\t{c}")),
            Some(line.to_string())
        );
        assert_eq!(read_cpus(proc, -5), None);
        assert_eq!(read_ranks(proc, -5), (None, None));
        assert!(uptime(proc).is_some_and(|u| u > 0.0));
        assert_eq!(read_stat(proc, -5), None);
    }
}
