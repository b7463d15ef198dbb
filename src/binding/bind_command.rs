//! `multinode bind` (bind this process, then exec the command) and
//! `multinode count-gpus`; the `--report-bindings` line a process prints,
//! and reading it back.

use std::ffi::OsString;

use tracing::{info, warn};

use super::apply::Prepared;
use super::rules::Mode;
use super::this_process::{mode_from, this_process};
use super::visible::visible;
use crate::env_map::EnvMap;
use crate::error::Error;

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
