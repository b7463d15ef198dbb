//! CUDA versions: which GPU architectures a CUDA toolkit builds for, and
//! reading a toolkit's version from `nvcc --version`, `version.json` and
//! PyTorch's `torch/version.py`. Pure: text in, data out.
//!
//! A toolkit older than the GPU's architecture has no code for it: kernels
//! fail at launch with "Cuda failure 'invalid argument'" (or PyTorch's "no
//! kernel image is available for execution on the device"). A toolkit that
//! dropped an old architecture fails the same way.

use std::fmt;

use crate::nvidia_smi::parse_dotted;

/// A CUDA version, major.minor (the patch level does not change what it supports).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct CudaVersion {
    pub major: u32,
    pub minor: u32,
}

impl CudaVersion {
    pub(crate) const fn new(major: u32, minor: u32) -> Self {
        CudaVersion { major, minor }
    }

    /// `12.4`, `12.4.1`, `13.0.2.006` (NGC's `CUDA_VERSION`), `12`.
    pub(crate) fn parse(text: &str) -> Option<Self> {
        parse_dotted(text).map(|(major, minor)| CudaVersion { major, minor })
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// One GPU architecture and the CUDA versions that build for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Arch {
    /// Compute capability, (9, 0) for sm_90.
    pub cc: (u32, u32),
    pub family: &'static str,
    /// The first CUDA version that builds for it.
    pub first: CudaVersion,
    /// The first CUDA version that no longer does.
    pub removed: Option<CudaVersion>,
}

const fn arch(
    cc: (u32, u32),
    family: &'static str,
    first: (u32, u32),
    removed: Option<(u32, u32)>,
) -> Arch {
    Arch {
        cc,
        family,
        first: CudaVersion::new(first.0, first.1),
        removed: match removed {
            Some((major, minor)) => Some(CudaVersion::new(major, minor)),
            None => None,
        },
    }
}

/// Compute capability → the CUDA versions that build for it (NVIDIA's CUDA
/// release notes and the CUDA C Programming Guide; docs/check.md prints it).
pub(crate) const ARCHS: &[Arch] = &[
    arch((3, 5), "Kepler", (5, 0), Some((12, 0))),
    arch((3, 7), "Kepler", (6, 5), Some((12, 0))),
    arch((5, 0), "Maxwell", (6, 0), Some((13, 0))),
    arch((5, 2), "Maxwell", (6, 5), Some((13, 0))),
    arch((5, 3), "Maxwell", (7, 0), Some((13, 0))),
    arch((6, 0), "Pascal", (8, 0), Some((13, 0))),
    arch((6, 1), "Pascal", (8, 0), Some((13, 0))),
    arch((6, 2), "Pascal", (8, 0), Some((13, 0))),
    arch((7, 0), "Volta", (9, 0), Some((13, 0))),
    arch((7, 2), "Volta", (10, 0), Some((13, 0))),
    arch((7, 5), "Turing", (10, 0), None),
    arch((8, 0), "Ampere", (11, 0), None),
    arch((8, 6), "Ampere", (11, 1), None),
    arch((8, 7), "Ampere", (11, 4), None),
    arch((8, 9), "Ada Lovelace", (11, 8), None),
    arch((9, 0), "Hopper", (11, 8), None),
    arch((10, 0), "Blackwell", (12, 8), None),
    // sm_101 (Jetson Thor) became sm_110 in CUDA 13.0.
    arch((10, 1), "Blackwell", (12, 8), Some((13, 0))),
    arch((10, 3), "Blackwell", (12, 9), None),
    arch((11, 0), "Blackwell", (13, 0), None),
    arch((12, 0), "Blackwell", (12, 8), None),
    arch((12, 1), "Blackwell", (12, 9), None),
];

pub(crate) fn find_arch(cc: (u32, u32)) -> Option<&'static Arch> {
    ARCHS.iter().find(|a| a.cc == cc)
}

/// Whether toolkit `cuda` builds for compute capability `cc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Support {
    Yes,
    /// The toolkit predates the architecture: it needs at least this version.
    TooOld(CudaVersion),
    /// The toolkit dropped the architecture in this version.
    Dropped(CudaVersion),
    /// Not in [`ARCHS`]: newer than this table, or unheard of.
    Unknown,
}

pub(crate) fn supports(cuda: CudaVersion, cc: (u32, u32)) -> Support {
    let Some(arch) = find_arch(cc) else {
        return Support::Unknown;
    };
    if cuda < arch.first {
        return Support::TooOld(arch.first);
    }
    match arch.removed {
        Some(removed) if cuda >= removed => Support::Dropped(removed),
        _ => Support::Yes,
    }
}

/// `sm_90`.
pub(crate) fn sm(cc: (u32, u32)) -> String {
    format!("sm_{}{}", cc.0, cc.1)
}

/// `Cuda compilation tools, release 13.0, V13.0.88` → 13.0.
pub(crate) fn parse_nvcc(output: &str) -> Option<CudaVersion> {
    let start = output.find("release ")? + "release ".len();
    let version: String = output[start..]
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    CudaVersion::parse(&version)
}

/// `/usr/local/cuda/version.json`: `{"cuda": {"name": "CUDA SDK", "version": "12.4.1"}, ...}`.
pub(crate) fn parse_version_json(text: &str) -> Option<CudaVersion> {
    let value: serde_json::Value = serde_json::from_str(text).ok()?;
    CudaVersion::parse(value.get("cuda")?.get("version")?.as_str()?)
}

/// PyTorch's `torch/version.py`: `cuda: Optional[str] = '12.8'` (or `cuda = '12.1'`;
/// `None` for a CPU build, which gives `None` here).
pub(crate) fn parse_torch_version_py(text: &str) -> Option<CudaVersion> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("cuda")?;
        if !rest.starts_with([' ', ':', '=']) {
            return None;
        }
        let value = rest.split_once('=')?.1.trim();
        let unquoted = value.trim_matches(|c| c == '\'' || c == '"');
        if unquoted == value {
            return None;
        }
        CudaVersion::parse(unquoted)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32) -> CudaVersion {
        CudaVersion::new(major, minor)
    }

    #[test]
    fn the_table_is_sorted_and_consistent() {
        for pair in ARCHS.windows(2) {
            assert!(
                pair[0].cc < pair[1].cc,
                "{:?} before {:?}",
                pair[0],
                pair[1]
            );
        }
        for a in ARCHS {
            if let Some(removed) = a.removed {
                assert!(a.first < removed, "{a:?}");
            }
        }
    }

    #[test]
    fn hopper_and_blackwell() {
        assert_eq!(supports(v(11, 7), (9, 0)), Support::TooOld(v(11, 8)));
        assert_eq!(supports(v(11, 8), (9, 0)), Support::Yes);
        assert_eq!(supports(v(13, 0), (9, 0)), Support::Yes);
        assert_eq!(supports(v(12, 4), (10, 0)), Support::TooOld(v(12, 8)));
        assert_eq!(supports(v(12, 8), (10, 0)), Support::Yes);
        assert_eq!(supports(v(12, 6), (12, 0)), Support::TooOld(v(12, 8)));
        assert_eq!(supports(v(12, 8), (12, 0)), Support::Yes);
        assert_eq!(supports(v(12, 8), (10, 3)), Support::TooOld(v(12, 9)));
    }

    #[test]
    fn old_architectures_are_dropped() {
        assert_eq!(supports(v(12, 8), (7, 0)), Support::Yes);
        assert_eq!(supports(v(13, 0), (7, 0)), Support::Dropped(v(13, 0)));
        assert_eq!(supports(v(13, 0), (7, 5)), Support::Yes);
        assert_eq!(supports(v(12, 0), (3, 7)), Support::Dropped(v(12, 0)));
        assert_eq!(supports(v(13, 0), (10, 1)), Support::Dropped(v(13, 0)));
        assert_eq!(supports(v(13, 0), (13, 0)), Support::Unknown);
        assert_eq!(supports(v(13, 0), (2, 0)), Support::Unknown);
    }

    #[test]
    fn versions_parse_and_order() {
        assert_eq!(CudaVersion::parse("12.4.1"), Some(v(12, 4)));
        assert_eq!(CudaVersion::parse("13.0.2.006"), Some(v(13, 0)));
        assert_eq!(CudaVersion::parse("12"), Some(v(12, 0)));
        assert_eq!(CudaVersion::parse("twelve"), None);
        assert!(v(12, 10) > v(12, 9));
        assert_eq!(v(12, 8).to_string(), "12.8");
        assert_eq!(sm((9, 0)), "sm_90");
        assert_eq!(sm((12, 1)), "sm_121");
    }

    #[test]
    fn nvcc_output() {
        // Captured on the H200 machine.
        let out = "nvcc: NVIDIA (R) Cuda compiler driver\nCopyright (c) 2005-2025 NVIDIA Corporation\nBuilt on Wed_Aug_20_01:58:59_PM_PDT_2025\nCuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.36424714_0\n";
        assert_eq!(parse_nvcc(out), Some(v(13, 0)));
        assert_eq!(
            parse_nvcc("Cuda compilation tools, release 11.7, V11.7.99"),
            Some(v(11, 7))
        );
        assert_eq!(parse_nvcc("command not found"), None);
    }

    #[test]
    fn version_json() {
        let text = r#"{
   "cuda" : {
      "name" : "CUDA SDK",
      "version" : "12.4.1"
   },
   "cuda_cudart" : {
      "name" : "CUDA Runtime (cudart)",
      "version" : "12.4.127"
   }
}"#;
        assert_eq!(parse_version_json(text), Some(v(12, 4)));
        assert_eq!(parse_version_json("{}"), None);
        assert_eq!(parse_version_json("not json"), None);
    }

    #[test]
    fn torch_version_py() {
        let new = "__version__ = '2.8.0+cu128'\ndebug = False\ncuda: Optional[str] = '12.8'\ngit_version = 'a1cb3cc'\nhip: Optional[str] = None\n";
        assert_eq!(parse_torch_version_py(new), Some(v(12, 8)));
        let old = "__version__ = '2.1.0+cu121'\ncuda = '12.1'\n";
        assert_eq!(parse_torch_version_py(old), Some(v(12, 1)));
        let cpu = "__version__ = '2.8.0+cpu'\ncuda: Optional[str] = None\n";
        assert_eq!(parse_torch_version_py(cpu), None);
        assert_eq!(parse_torch_version_py("cudnn = '9'\n"), None);
    }
}
