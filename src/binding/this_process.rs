//! This process's binding, read from this machine: the mode (`--bind`,
//! else `MULTINODE_BIND`), its ranks from its launcher's variables, the
//! GPUs' layout (`nvidia-smi`'s bus ids, sysfs), what it may use now.

use std::path::{Path, PathBuf};

use tracing::warn;

use super::apply::{allowed_cpus, mems_allowed};
use super::launcher_ranks;
use super::rules::{Allowed, Binding, Mode, plan};
use super::sysfs::{self, Host, read_host, read_nodes};
use super::visible::visible;
use crate::env_map::EnvMap;
use crate::error::Error;
use crate::vars;

/// `--bind MODE`, else `MULTINODE_BIND`, else `auto`.
pub(crate) fn mode_from(flag: Option<Mode>, env: &EnvMap) -> Result<Mode, Error> {
    let mode = env.flag_or_var(
        flag,
        vars::BIND,
        "a binding mode (auto, numa, cores or none)",
        |v| v.parse().ok(),
    )?;
    Ok(mode.unwrap_or(Mode::Auto))
}

/// Where this machine's sysfs is: `/sys`, or [`crate::vars::SYSFS_ROOT`] in tests.
pub(crate) fn sysfs_root(env: &EnvMap) -> PathBuf {
    env.get(vars::SYSFS_ROOT)
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
