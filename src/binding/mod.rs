//! Binding each process to its GPU's NUMA node (docs/binding.md): the GPU
//! of local rank i is the i-th visible GPU (`CUDA_VISIBLE_DEVICES`, by index
//! or UUID, in its order), its NUMA node comes from its PCI bus id through
//! sysfs, never from `local_rank // k`; never wider than what the process was
//! given. `multinode bind -- CMD` binds itself and execs CMD; a launcher
//! that forks its processes prepares each one's [`Prepared`] before the
//! fork and applies it in the child before exec.
//!
//! - `cpus`: CPU and node sets in the kernel's list format (pure).
//! - `launcher_ranks`: the local rank and local size from each launcher's variables (pure).
//! - `visible`: `CUDA_VISIBLE_DEVICES` against `nvidia-smi`'s list (pure).
//! - `sysfs`: each GPU's NUMA node and CPUs, the nodes' CPUs, SMT siblings, under a root.
//! - `plan`: the modes and the binding of one process (pure).
//! - `apply`: `sched_getaffinity`, `sched_setaffinity`, `set_mempolicy`.
//! - here: the binding of this process, read from this machine, and `multinode bind`.
//!
//! A launcher that forks its own processes (exec_all's one process a GPU)
//! reads the layout once ([`read_layout`]) and what it may use
//! ([`allowed_cpus`], [`mems_allowed`]), plans each local rank ([`plan`]
//! with its [`launcher_ranks::Ranks`]), makes each one's [`Prepared`] before the fork,
//! and calls [`Prepared::apply`] in the child (a `pre_exec` hook): it
//! allocates nothing and makes two system calls.

pub(crate) mod apply;
mod cpus;
pub(crate) mod launcher_ranks;
mod rules;
mod sysfs;
mod visible;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use tracing::{info, warn};

pub(crate) use apply::{Prepared, allowed_cpus, mems_allowed};
pub(crate) use cpus::CpuSet;
pub(crate) use rules::{Allowed, Binding, Mode, plan};
pub(crate) use sysfs::{Host, read_host, read_nodes};
pub(crate) use visible::visible;

use crate::env_map::EnvMap;
use crate::error::Error;

/// `MULTINODE_BIND`: `--bind`'s mode when the flag is not given.
pub(crate) const BIND_VAR: &str = "MULTINODE_BIND";

/// For tests only: read sysfs under this folder instead of `/sys` (a
/// fixture tree of a machine with other GPUs and NUMA nodes).
pub(crate) const SYSFS_ROOT_VAR: &str = "MULTINODE_SYSFS_ROOT";

/// `--bind MODE`, else `MULTINODE_BIND`, else `auto`.
pub(crate) fn mode_from(flag: Option<Mode>, env: &EnvMap) -> Result<Mode, Error> {
    if let Some(mode) = flag {
        return Ok(mode);
    }
    match env.get(BIND_VAR) {
        None => Ok(Mode::Auto),
        Some(v) => v
            .parse()
            .map_err(|e| Error::usage(format!("{BIND_VAR}: {e}; fix it or unset it"))),
    }
}

/// Where this machine's sysfs is: `/sys`, or [`SYSFS_ROOT_VAR`] in tests.
pub(crate) fn sysfs_root(env: &EnvMap) -> PathBuf {
    env.get(SYSFS_ROOT_VAR)
        .map_or_else(|| PathBuf::from("/sys"), PathBuf::from)
}

/// The visible GPUs' layout on this machine: `nvidia-smi`'s bus ids
/// (through `run`), `CUDA_VISIBLE_DEVICES` from `env`, sysfs under `root`
/// read through `read`. `Ok(None)` when `nvidia-smi` is not installed.
pub(crate) fn read_layout(
    run: crate::nvidia_smi::Run<'_>,
    read: sysfs::Read<'_>,
    root: &Path,
    env: &EnvMap,
) -> Result<Option<Host>, String> {
    let Some(gpus) = crate::nvidia_smi::pci_gpus(run)? else {
        return Ok(None);
    };
    // Set but empty hides every GPU from CUDA: not "unset" here.
    let cvd = env.0.get("CUDA_VISIBLE_DEVICES").map(String::as_str);
    Ok(Some(read_host(root, read, &visible(&gpus, cvd))))
}

/// The binding of this process: its ranks from `env`, this machine's
/// layout, what it may use now.
pub(crate) fn this_process(mode: Mode, env: &EnvMap, node: &str) -> Result<Binding, Error> {
    let ranks = launcher_ranks::from_env(env)?;
    let allowed = Allowed {
        cpus: allowed_cpus()
            .map_err(|e| Error::Failed(format!("cannot read this process's CPUs: {e}")))?,
        mems: std::fs::read_to_string("/proc/self/status")
            .ok()
            .as_deref()
            .and_then(mems_allowed),
    };
    if mode == Mode::None {
        return plan(&Host::default(), mode, ranks, &allowed, node);
    }
    let read = |p: &Path| std::fs::read_to_string(p);
    let root = sysfs_root(env);
    if mode == Mode::Auto {
        // One NUMA node: nothing to bind, and no nvidia-smi to wait for.
        let nodes = read_nodes(&root, &read);
        if nodes.len() <= 1 {
            let host = Host {
                nodes,
                ..Host::default()
            };
            return plan(&host, mode, ranks, &allowed, node);
        }
    }
    let run =
        |program: &str, args: &[&str], timeout| crate::process::run_bounded(program, args, timeout);
    let host = match read_layout(&run, &read, &root, env) {
        Ok(Some(host)) => host,
        Ok(None) if mode != Mode::Auto => {
            return Err(Error::usage(format!(
                "--bind {mode} binds each process to its GPU's NUMA node, and nvidia-smi is not on PATH to list the GPUs: put it on PATH, or use --bind none"
            )));
        }
        Ok(None) => Host::default(),
        Err(e) if mode != Mode::Auto => {
            return Err(Error::Failed(format!(
                "cannot bind: {e}; --bind none runs the command unbound"
            )));
        }
        Err(e) => {
            warn!("cannot bind: {e}; running unbound");
            Host::default()
        }
    };
    plan(&host, mode, ranks, &allowed, node)
}

/// What `--report-bindings`' line starts with.
const REPORT_PREFIX: &str = "multinode bind: ";

/// The binding a process reported (`--report-bindings`) in the first lines
/// of its stderr, `block`: the line, without its prefix.
pub(crate) fn reported_in(block: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(block);
    text.lines()
        .find_map(|l| l.strip_prefix(REPORT_PREFIX))
        .map(str::to_string)
}

/// `multinode count-gpus` (internal, for `--nproc-per-node gpu`): how many
/// GPUs this node's processes see, one number on stdout: `nvidia-smi`'s
/// list, as `CUDA_VISIBLE_DEVICES` narrows it (by index or UUID, up to its
/// first unknown entry, as CUDA reads it).
pub(crate) fn cmd_count_gpus() -> Result<i32, Error> {
    let env = EnvMap::from_process();
    let run =
        |program: &str, args: &[&str], timeout| crate::process::run_bounded(program, args, timeout);
    let gpus = crate::nvidia_smi::pci_gpus(&run)
        .map_err(Error::Failed)?
        .ok_or_else(|| Error::Failed("nvidia-smi is not on PATH to count the GPUs".into()))?;
    let cvd = env.0.get("CUDA_VISIBLE_DEVICES").map(String::as_str);
    crate::stdio::print_stdout(&format!("{}\n", visible(&gpus, cvd).len()))
}

/// `multinode bind [--bind MODE] [--report-bindings] -- CMD ARGS...`: binds
/// this process, then execs CMD (no parent left: its exit code and signals
/// are CMD's). Returns only when CMD could not be run: 127 when it is not
/// found, 126 otherwise.
pub(crate) fn cmd_bind(
    flag: Option<Mode>,
    report: bool,
    command: Vec<OsString>,
) -> Result<i32, Error> {
    use std::os::unix::process::CommandExt;
    let env = EnvMap::from_process();
    let mode = mode_from(flag, &env)?;
    let node = nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "this node".into());
    let mut binding = this_process(mode, &env, &node)?;
    match &binding.cpus {
        Some(cpus) => {
            info!(%cpus, memory_node = ?binding.memory_node, note = ?binding.note, "bound")
        }
        None => info!(
            note = binding.note.as_deref().unwrap_or_default(),
            "left unbound"
        ),
    }
    if let Err(e) = Prepared::new(&binding).apply() {
        warn!("binding not fully applied: {e}");
        let note = format!("not applied: {e}");
        binding.note = Some(match binding.note.take() {
            Some(n) => format!("{n}; {note}"),
            None => note,
        });
    }
    if report {
        crate::stdio::eprint(&format!("{REPORT_PREFIX}{}\n", binding.report_line(&node)));
    }
    let Some((program, args)) = command.split_first() else {
        return Err(Error::usage(
            "no command given: multinode bind -- CMD ARGS...",
        ));
    };
    let e = std::process::Command::new(program).args(args).exec();
    crate::stdio::eprint(&format!(
        "multinode: error: cannot run {}: {e}\n",
        program.to_string_lossy()
    ));
    Ok(if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        crate::exit_code::CANNOT_EXECUTE
    })
}

#[cfg(test)]
mod tests;
