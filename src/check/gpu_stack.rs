//! The GPU stack of this node, for `multinode check --local`: the GPUs and
//! versions `nvidia-smi` gives, the CUDA toolkits of the image, PyTorch's
//! CUDA and where its packages are. Through a [`Probe`]; bounded in time.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::cuda::{CudaVersion, parse_nvcc, parse_torch_version_py, parse_version_json};
use super::facts::{Gpus, SmiStatus, Toolkit};
use super::probe::{Probe, RunOutput};
use crate::env_map::EnvMap;
use crate::nvidia_smi::{Inventory, first_line, inventory, parse_header, parse_query, visible};

/// `nvcc --version`.
const NVCC_TIMEOUT: Duration = Duration::from_secs(5);
/// The GPUs and versions `nvidia-smi` gives ([`inventory`], through the
/// probe's runner); the devices narrowed to those `CUDA_VISIBLE_DEVICES`
/// leaves the job.
pub(super) fn gpus(probe: &dyn Probe, cuda_visible_devices: Option<&str>) -> Gpus {
    let Inventory { query, header } =
        inventory(&|program, args, timeout| probe.run(program, args, timeout));
    let mut gpus = match query {
        RunOutput::NotFound => return Gpus::default(),
        RunOutput::TimedOut => Gpus {
            smi: SmiStatus::Timeout,
            ..Gpus::default()
        },
        RunOutput::SpawnError(e) => Gpus {
            smi: SmiStatus::Failed,
            error: Some(format!("cannot run nvidia-smi: {e}")),
            ..Gpus::default()
        },
        RunOutput::Exited {
            code: Some(0),
            stdout,
            ..
        } => match parse_query(&stdout) {
            Ok(devices) => Gpus {
                smi: SmiStatus::Ok,
                devices: visible(devices, cuda_visible_devices),
                ..Gpus::default()
            },
            Err(e) => Gpus {
                smi: SmiStatus::Failed,
                error: Some(format!("unreadable nvidia-smi output: {e}")),
                ..Gpus::default()
            },
        },
        RunOutput::Exited {
            code,
            stdout,
            stderr,
        } => {
            let how = crate::process::how_it_ended(code);
            Gpus {
                smi: SmiStatus::Failed,
                error: Some(format!("{} ({how})", first_line(&stdout, &stderr))),
                ..Gpus::default()
            }
        }
    };
    if let RunOutput::Exited {
        code: Some(0),
        stdout,
        ..
    } = header
    {
        let (driver, cuda) = parse_header(&stdout);
        gpus.cuda_version = cuda;
        gpus.driver_version = driver;
    }
    if gpus.driver_version.is_none() {
        gpus.driver_version = gpus.devices.first().map(|g| g.driver_version.clone());
    }
    gpus
}

/// The directories of `PATH`, in order.
fn path_dirs(env: &EnvMap) -> Vec<PathBuf> {
    env.get("PATH")
        .unwrap_or_default()
        .split(':')
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .collect()
}

/// The CUDA toolkit of the image (`version.json`, else `nvcc --version`,
/// else `$CUDA_VERSION`), then PyTorch's CUDA (`torch/version.py` of the
/// first `python3` on `PATH`). File reads and at most one `nvcc`: no Python.
pub(super) fn toolkits(probe: &dyn Probe, env: &EnvMap) -> Vec<Toolkit> {
    let mut out = Vec::new();
    let cuda_home = env
        .get("CUDA_HOME")
        .or_else(|| env.get("CUDA_PATH"))
        .unwrap_or("/usr/local/cuda");
    let cuda_home = Path::new(cuda_home);
    let toolkit = |source: &str, path: &Path, v: CudaVersion| Toolkit {
        source: source.to_string(),
        path: path.display().to_string(),
        version: v.to_string(),
    };
    let version_json = cuda_home.join("version.json");
    if let Some(v) = probe
        .read_file(&version_json)
        .ok()
        .as_deref()
        .and_then(parse_version_json)
    {
        out.push(toolkit("version.json", &version_json, v));
    } else if let Some(nvcc) = path_dirs(env)
        .into_iter()
        .map(|d| d.join("nvcc"))
        .chain([cuda_home.join("bin/nvcc")])
        .find(|p| probe.exists(p))
    {
        if let RunOutput::Exited { stdout, .. } =
            probe.run(&nvcc.to_string_lossy(), &["--version"], NVCC_TIMEOUT)
            && let Some(v) = parse_nvcc(&stdout)
        {
            out.push(toolkit("nvcc", &nvcc, v));
        }
    } else if let Some(v) = env.get("CUDA_VERSION").and_then(CudaVersion::parse) {
        out.push(toolkit("CUDA_VERSION", Path::new("$CUDA_VERSION"), v));
    }
    if let Some((path, v)) = torch_cuda(probe, env) {
        out.push(toolkit("torch", &path, v));
    }
    out
}

/// `__version__ = '2.5.1+cu124'` in `torch/version.py`.
pub(super) fn parse_torch_release(text: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let value = line.trim_start().strip_prefix("__version__")?;
        let value = value.split_once('=')?.1.trim();
        let unquoted = value.trim_matches(|c| c == '\'' || c == '"');
        (unquoted != value && !unquoted.is_empty()).then(|| unquoted.to_string())
    })
}

/// `ROOT/lib/python3*/{site,dist}-packages/torch/version.py` for the first
/// `python3` on `PATH` (`ROOT/bin/python3`), then `$VIRTUAL_ENV` and `$CONDA_PREFIX`.
fn torch_cuda(probe: &dyn Probe, env: &EnvMap) -> Option<(PathBuf, CudaVersion)> {
    let file = torch_packages(probe, env)?.join("torch/version.py");
    let text = probe.read_file(&file).ok()?;
    parse_torch_version_py(&text).map(|v| (file, v))
}

/// The `site-packages` (or `dist-packages`) folder that holds PyTorch, for
/// the first `python3` on `PATH` (`ROOT/bin/python3`: `ROOT/lib/python3*/`),
/// then `$VIRTUAL_ENV` and `$CONDA_PREFIX`.
pub(super) fn torch_packages(probe: &dyn Probe, env: &EnvMap) -> Option<PathBuf> {
    let mut roots: Vec<PathBuf> = path_dirs(env)
        .into_iter()
        .filter(|d| probe.exists(&d.join("python3")))
        .filter_map(|d| d.parent().map(Path::to_path_buf))
        .take(1)
        .collect();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(root) = env.get(var) {
            roots.push(PathBuf::from(root));
        }
    }
    let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
    for root in roots {
        if !seen.insert(root.clone()) {
            continue;
        }
        let lib = root.join("lib");
        for py in probe
            .list_dir(&lib)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with("python3"))
        {
            for packages in ["site-packages", "dist-packages"] {
                let dir = lib.join(&py).join(packages);
                if probe.exists(&dir.join("torch/version.py")) {
                    return Some(dir);
                }
            }
        }
    }
    None
}
