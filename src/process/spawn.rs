//! Starting a command as the leader of a new session without copying this
//! process: `clone(CLONE_VM | CLONE_VFORK)`, as glibc's `posix_spawn` does,
//! with what `posix_spawn` cannot do (the open-file limit this process
//! started with, a hook such as the keeper's registration) done in the child
//! before `execve`.
//!
//! Why not `fork`: a forked multi-threaded runtime write-protects every page
//! it has, and each page it touches afterwards costs it a copy-on-write
//! fault (~90 a command in the agent, about a third of its CPU a command,
//! `bench/node_split.sh`). Why not `std`'s `posix_spawn` path: it is taken
//! only without `pre_exec`, and a new session, the limit and the hook need
//! one.
//!
//! The child shares this process's memory until `execve`, with the calling
//! thread suspended; it makes system calls only (no allocation, no lock),
//! on a stack of its own, with every signal blocked until it has put every
//! disposition back to the default.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::{CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The child's stack: the few system calls before `execve` need little.
const STACK_SIZE: usize = 64 * 1024;

/// What the child does with its standard streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stdio {
    /// This process's own stdin, stdout and stderr.
    Inherit,
    /// A new pipe for each of the three.
    Piped,
    /// A pty's slave (the caller keeps it open until the spawn returns) as
    /// 0, 1 and 2 and as the controlling terminal of the new session.
    Terminal(RawFd),
}

/// A command to start as a session leader: a program given by its path
/// (there is no `PATH` lookup), its argv, the environment of this process
/// with changes, a directory, and what to do with its standard streams.
pub struct Spawn {
    program: OsString,
    argv: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    cwd: Option<OsString>,
    stdio: Stdio,
    hook: Option<(fn(RawFd), RawFd)>,
}

impl Spawn {
    /// `program` is a path; `argv[0]` is `program` until [`Spawn::arg0`].
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        let program = program.as_ref().to_os_string();
        Spawn {
            argv: vec![program.clone()],
            program,
            env: Vec::new(),
            cwd: None,
            stdio: Stdio::Inherit,
            hook: None,
        }
    }

    /// Builds one from a `std` command's program, arguments, changed
    /// variables and directory (its other settings are not read).
    pub fn from_std(cmd: &std::process::Command) -> Self {
        let mut spawn = Spawn::new(cmd.get_program());
        spawn.args(cmd.get_args());
        for (name, value) in cmd.get_envs() {
            if let Some(value) = value {
                spawn.env(name, value);
            }
        }
        if let Some(dir) = cmd.get_current_dir() {
            spawn.current_dir(dir);
        }
        spawn
    }

    pub fn arg0(&mut self, arg0: impl AsRef<OsStr>) -> &mut Self {
        self.argv[0] = arg0.as_ref().to_os_string();
        self
    }

    pub fn arg(&mut self, arg: impl AsRef<OsStr>) -> &mut Self {
        self.argv.push(arg.as_ref().to_os_string());
        self
    }

    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(&mut self, args: I) -> &mut Self {
        for arg in args {
            self.arg(arg);
        }
        self
    }

    /// Sets a variable over this process's environment (the last one set wins).
    pub fn env(&mut self, name: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> &mut Self {
        self.env
            .push((name.as_ref().to_os_string(), value.as_ref().to_os_string()));
        self
    }

    pub fn envs<I, K, V>(&mut self, vars: I) -> &mut Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (name, value) in vars {
            self.env(name, value);
        }
        self
    }

    pub fn current_dir(&mut self, dir: impl AsRef<Path>) -> &mut Self {
        self.cwd = Some(dir.as_ref().as_os_str().to_os_string());
        self
    }

    pub fn stdio(&mut self, stdio: Stdio) -> &mut Self {
        self.stdio = stdio;
        self
    }

    /// Runs `hook(fd)` in the child just before it becomes a session leader.
    ///
    /// # Safety
    /// The hook runs in a `vfork`-like child that shares this process's
    /// memory: it may make async-signal-safe system calls only, must not
    /// allocate, take a lock or unwind.
    pub unsafe fn before_exec(&mut self, hook: fn(RawFd), fd: RawFd) -> &mut Self {
        self.hook = Some((hook, fd));
        self
    }
}

/// A started child: its pid and this side of its pipes.
pub(super) struct Spawned {
    pub pid: libc::pid_t,
    pub stdin: Option<OwnedFd>,
    pub stdout: Option<OwnedFd>,
    pub stderr: Option<OwnedFd>,
}

/// Everything the child reads, laid out before the clone so that it only
/// makes system calls.
struct ChildArgs {
    program: *const libc::c_char,
    argv: *const *const libc::c_char,
    envp: *const *const libc::c_char,
    cwd: *const libc::c_char,
    /// The fds that become 0, 1 and 2 (-1: keep ours).
    stdio: [RawFd; 3],
    /// fd 0 becomes the session's controlling terminal.
    ctty: bool,
    hook: Option<(fn(RawFd), RawFd)>,
    nofile: Option<libc::rlimit>,
    /// Set by the child when a step fails: the errno.
    error: i32,
}

thread_local! {
    /// One stack a thread: the calling thread is suspended while its child
    /// uses it, so no two children share one.
    static STACK: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(STACK_SIZE));
}

fn cstring(bytes: &OsStr) -> io::Result<CString> {
    nul_terminated(bytes.as_bytes().to_vec())
}

/// `NAME=VALUE` for `envp`, in one allocation.
fn env_pair(name: &OsStr, value: &OsStr) -> io::Result<CString> {
    let (name, value) = (name.as_bytes(), value.as_bytes());
    let mut pair = Vec::with_capacity(name.len() + value.len() + 2);
    pair.extend_from_slice(name);
    pair.push(b'=');
    pair.extend_from_slice(value);
    nul_terminated(pair)
}

fn nul_terminated(bytes: Vec<u8>) -> io::Result<CString> {
    CString::new(bytes).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a NUL byte in {:?}: it cannot be passed to a program",
                String::from_utf8_lossy(&e.into_vec())
            ),
        )
    })
}

/// A pipe whose both ends are above 2 (so that no dup2 onto 0, 1 or 2
/// overwrites another end) and close on exec.
fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let above_stdio = |fd: OwnedFd| -> io::Result<OwnedFd> {
        if fd.as_raw_fd() > 2 {
            return Ok(fd);
        }
        // SAFETY: F_DUPFD_CLOEXEC on a valid fd returns a new fd we own.
        let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
        if new < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `new` is a fresh descriptor that nothing else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(new) })
    };
    Ok((above_stdio(r)?, above_stdio(w)?))
}

/// Starts `spec`; returns once the child has called `execve` (or failed to).
pub(super) fn start(spec: &Spawn, nofile: Option<libc::rlimit>) -> io::Result<Spawned> {
    let program = cstring(&spec.program)?;
    let argv = spec
        .argv
        .iter()
        .map(|a| cstring(a))
        .collect::<io::Result<Vec<_>>>()?;
    // Ours, then the spec's over them, sorted by name; each `NAME=VALUE`
    // copied once, into the string the child gets (a command's variables
    // include both hostlists, tens of KiB on a large job).
    let own: Vec<(OsString, OsString)> = std::env::vars_os().collect();
    let mut vars: BTreeMap<&OsStr, &OsStr> = own
        .iter()
        .map(|(name, value)| (name.as_os_str(), value.as_os_str()))
        .collect();
    for (name, value) in &spec.env {
        vars.insert(name, value);
    }
    let envp = vars
        .into_iter()
        .map(|(name, value)| env_pair(name, value))
        .collect::<io::Result<Vec<_>>>()?;
    let cwd = spec.cwd.as_deref().map(cstring).transpose()?;
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut envp_ptrs: Vec<*const libc::c_char> = envp.iter().map(|e| e.as_ptr()).collect();
    envp_ptrs.push(std::ptr::null());

    let (ours, theirs) = match spec.stdio {
        Stdio::Inherit | Stdio::Terminal(_) => ([None, None, None], [None, None, None]),
        Stdio::Piped => {
            let (in_r, in_w) = pipe()?;
            let (out_r, out_w) = pipe()?;
            let (err_r, err_w) = pipe()?;
            (
                [Some(in_w), Some(out_r), Some(err_r)],
                [Some(in_r), Some(out_w), Some(err_w)],
            )
        }
    };
    let fd_of = |fd: &Option<OwnedFd>| fd.as_ref().map_or(-1, |fd| fd.as_raw_fd());
    let mut args = ChildArgs {
        program: program.as_ptr(),
        argv: argv_ptrs.as_ptr(),
        envp: envp_ptrs.as_ptr(),
        cwd: cwd.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
        stdio: match spec.stdio {
            Stdio::Terminal(slave) => [slave; 3],
            _ => [fd_of(&theirs[0]), fd_of(&theirs[1]), fd_of(&theirs[2])],
        },
        ctty: matches!(spec.stdio, Stdio::Terminal(_)),
        hook: spec.hook,
        nofile,
        error: 0,
    };

    let pid = STACK.with(|stack| {
        let mut stack = stack.borrow_mut();
        if stack.capacity() < STACK_SIZE {
            stack.reserve_exact(STACK_SIZE);
        }
        // The stack grows down from its end, 16-byte aligned.
        let top = (stack.as_mut_ptr() as usize + stack.capacity()) & !15;
        // SAFETY: all signals are blocked around the clone so that none of
        // this process's handlers runs in the child, which shares our memory;
        // the child only reads `args` (alive until it has exec'd or exited:
        // CLONE_VFORK suspends us until then) and writes `args.error`.
        unsafe {
            let mut all: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
            let pid = libc::clone(
                child_main,
                top as *mut libc::c_void,
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                (&raw mut args).cast(),
            );
            let clone_error = io::Error::last_os_error();
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
            if pid < 0 { Err(clone_error) } else { Ok(pid) }
        }
    })?;
    drop(theirs);
    // SAFETY: the child has exec'd or exited: nothing writes `error` any more.
    let error = unsafe { std::ptr::read_volatile(&raw const args.error) };
    if error != 0 {
        // It exited at once: reap it, then report why.
        let mut status = 0;
        // SAFETY: waitpid on our own child, with a valid status pointer.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        return Err(io::Error::from_raw_os_error(error));
    }
    let [stdin, stdout, stderr] = ours;
    Ok(Spawned {
        pid,
        stdin,
        stdout,
        stderr,
    })
}

/// The child, on its own stack, sharing our memory: system calls only.
extern "C" fn child_main(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's ChildArgs, alive and unaliased while we run.
    let args = unsafe { &mut *arg.cast::<ChildArgs>() };
    let fail = |args: &mut ChildArgs| -> libc::c_int {
        // SAFETY: errno of this (shared) thread; _exit never returns.
        unsafe {
            let errno = *libc::__errno_location();
            std::ptr::write_volatile(
                &raw mut args.error,
                if errno == 0 { libc::EIO } else { errno },
            );
            libc::_exit(127)
        }
    };
    // SAFETY: async-signal-safe system calls on values prepared by the parent.
    unsafe {
        if let Some((hook, fd)) = args.hook {
            hook(fd);
        }
        if libc::setsid() < 0 {
            return fail(args);
        }
        for (target, fd) in args.stdio.iter().enumerate() {
            if *fd < 0 {
                continue;
            }
            // dup2 clears close-on-exec on the copy; the pipe's fds are above 2.
            if libc::dup2(*fd, target as RawFd) < 0 {
                return fail(args);
            }
        }
        // A session leader without a controlling terminal takes this one.
        if args.ctty && libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return fail(args);
        }
        if !args.cwd.is_null() && libc::chdir(args.cwd) < 0 {
            return fail(args);
        }
        if let Some(limit) = &args.nofile {
            libc::setrlimit(libc::RLIMIT_NOFILE, limit);
        }
        // Default dispositions first, while everything is blocked; then the
        // empty mask the program starts with.
        super::child_setup::reset_signals();
        libc::execve(args.program, args.argv, args.envp);
        fail(args)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::super::{GroupChild, Outcome};
    use super::*;

    async fn output(spawn: &mut Spawn) -> (String, Outcome, i32) {
        let mut child = GroupChild::spawn(spawn.stdio(Stdio::Piped)).unwrap();
        let pid = child.pgid().as_raw();
        let (_, out, _) = child.take_stdio();
        let mut text = String::new();
        out.unwrap().read_to_string(&mut text).await.unwrap();
        let outcome = child.wait().await.unwrap();
        child.disarm();
        (text, outcome, pid)
    }

    #[tokio::test]
    async fn a_session_leader_with_its_argv_env_and_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut spawn = Spawn::new("/bin/sh");
        spawn
            .arg0("custom-name")
            .arg("-c")
            .arg(r#"echo "$0|$MN_SPAWN_TEST|$(pwd)|$(cut -d' ' -f6 /proc/$$/stat)|$HOME""#)
            .env("MN_SPAWN_TEST", "one")
            .env("MN_SPAWN_TEST", "two")
            .current_dir(dir.path());
        let (text, outcome, pid) = output(&mut spawn).await;
        let home = std::env::var("HOME").unwrap_or_default();
        assert_eq!(
            text.trim_end(),
            format!("custom-name|two|{}|{pid}|{home}", dir.path().display())
        );
        assert_eq!(outcome, Outcome::Exited(0));
    }

    #[tokio::test]
    async fn variables_pass_whole_and_a_nul_in_one_is_an_error() {
        let long = "gpu-node-00001:8,".repeat(6_000);
        let mut spawn = Spawn::new("/bin/sh");
        spawn
            .arg("-c")
            .arg(r#"printf '%s|%s|%s' "${#MN_LONG}" "${MN_EMPTY-unset}" "$MN_EQ""#)
            .env("MN_LONG", &long)
            .env("MN_EMPTY", "")
            .env("MN_EQ", "a=b");
        let (text, outcome, _) = output(&mut spawn).await;
        assert_eq!(text, format!("{}||a=b", long.len()));
        assert_eq!(outcome, Outcome::Exited(0));
        let mut bad = Spawn::new("/bin/true");
        bad.env("MN_BAD", OsStr::from_bytes(b"x\0y"));
        let Err(err) = start(&bad, None) else {
            panic!("a NUL in a value started");
        };
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
        assert!(
            err.to_string().contains("a NUL byte in \"MN_BAD=x\\0y\""),
            "{err}"
        );
    }

    #[tokio::test]
    async fn stdin_reaches_the_program_and_stderr_is_its_own_pipe() {
        let mut spawn = Spawn::new("/bin/sh");
        spawn
            .arg("-c")
            .arg("tr a-z A-Z; echo done >&2")
            .stdio(Stdio::Piped);
        let mut child = GroupChild::spawn(&spawn).unwrap();
        let (stdin, stdout, stderr) = child.take_stdio();
        let mut stdin = stdin.unwrap();
        stdin.write_all(b"bytes\0through\n").await.unwrap();
        drop(stdin);
        let (mut out, mut err) = (Vec::new(), String::new());
        stdout.unwrap().read_to_end(&mut out).await.unwrap();
        stderr.unwrap().read_to_string(&mut err).await.unwrap();
        assert_eq!(out, b"BYTES\0THROUGH\n");
        assert_eq!(err, "done\n");
        assert_eq!(child.wait().await.unwrap(), Outcome::Exited(0));
        child.disarm();
    }

    #[tokio::test]
    async fn a_program_that_cannot_start_is_an_error_and_no_zombie() {
        let dir = tempfile::tempdir().unwrap();
        let missing = GroupChild::spawn(&Spawn::new(dir.path().join("missing"))).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        // A script without `#!`: exec says ENOEXEC (the agent then tries sh).
        let script = dir.path().join("script");
        std::fs::write(&script, "echo hi\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let noexec = GroupChild::spawn(&Spawn::new(&script)).unwrap_err();
        assert_eq!(noexec.raw_os_error(), Some(libc::ENOEXEC));
        let nul = GroupChild::spawn(Spawn::new("/bin/true").arg("a\0b")).unwrap_err();
        assert_eq!(nul.kind(), io::ErrorKind::InvalidInput);
        let mut status = 0;
        // SAFETY: waitpid with a valid pointer; -1: any child of ours.
        let left = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        assert_eq!(left, -1, "a child was left to reap");
    }

    /// What the hook below writes to: its fd.
    fn write_pid(fd: RawFd) {
        let pid = std::process::id().to_ne_bytes();
        // SAFETY: writes 4 bytes of a stack array.
        unsafe { libc::write(fd, pid.as_ptr().cast(), pid.len()) };
    }

    #[tokio::test]
    async fn the_hook_runs_in_the_child_before_exec() {
        let (r, w) = nix::unistd::pipe().unwrap();
        let mut spawn = Spawn::new("/bin/true");
        // SAFETY: write_pid makes one write of a stack buffer.
        unsafe { spawn.before_exec(write_pid, w.as_raw_fd()) };
        let mut child = GroupChild::spawn(&spawn).unwrap();
        drop(w);
        let mut got = [0u8; 4];
        nix::unistd::read(&r, &mut got).unwrap();
        // getpid in the child is the child's pid, not ours.
        assert_eq!(i32::from_ne_bytes(got), child.pgid().as_raw());
        assert_eq!(child.wait().await.unwrap(), Outcome::Exited(0));
        child.disarm();
    }

    #[tokio::test]
    async fn a_dropped_child_is_killed_and_reaped() {
        let mut spawn = Spawn::new("/bin/sleep");
        spawn.arg("1000");
        let child = GroupChild::spawn(&spawn).unwrap();
        let pid = child.pgid().as_raw();
        drop(child);
        let proc = format!("/proc/{pid}");
        for _ in 0..100 {
            if !Path::new(&proc).exists() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{proc} is still there (alive or a zombie)");
    }
}
