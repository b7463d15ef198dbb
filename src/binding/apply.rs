//! A binding put into effect on this process: `sched_setaffinity(2)` and
//! `set_mempolicy(2)`, both inherited by children and kept across `execve`,
//! so a binding made just before exec is the program's from its first
//! instruction (threads made before a bind from inside the program keep the
//! old mask: NVIDIA/TensorRT-LLM#18117). And what the process may use to
//! begin with: `sched_getaffinity(2)`, the cpuset's memory nodes.

use std::io;

use super::cpus::CpuSet;
use super::rules::Binding;

/// `MPOL_PREFERRED` of `<linux/mempolicy.h>` (the libc crate does not define it).
const MPOL_PREFERRED: libc::c_int = 1;

/// The CPUs this process may run on (`sched_getaffinity(2)`): what its
/// launcher, cgroup cpuset or `taskset` left it.
pub(crate) fn allowed_cpus() -> io::Result<CpuSet> {
    // The kernel refuses a mask shorter than its CPU count: grow until it fits.
    let mut words = 16;
    loop {
        let mut mask = vec![0 as libc::c_ulong; words];
        // SAFETY: the kernel writes at most `len` bytes into `mask`, which holds them.
        let written = unsafe {
            libc::syscall(
                libc::SYS_sched_getaffinity,
                0,
                std::mem::size_of_val(mask.as_slice()),
                mask.as_mut_ptr(),
            )
        };
        if written >= 0 {
            return Ok(CpuSet::from_mask(&mask));
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) || words >= 1 << 14 {
            return Err(e);
        }
        words *= 2;
    }
}

/// `Mems_allowed_list` of `/proc/self/status`: the memory nodes this
/// process's cpuset allows. `None` when the line is missing or unreadable.
pub(crate) fn mems_allowed(status: &str) -> Option<CpuSet> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Mems_allowed_list:"))
        .and_then(|v| CpuSet::parse(v).ok())
}

/// A binding as the two system calls take it, made before any fork so that
/// [`Prepared::apply`] allocates nothing: it may run in a child between
/// fork and exec.
#[derive(Debug, Clone, Default)]
pub(crate) struct Prepared {
    cpus: Option<Vec<libc::c_ulong>>,
    memory: Option<Vec<libc::c_ulong>>,
}

/// The call that failed and its errno (no allocation: it may be made
/// between fork and exec).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ApplyError {
    pub call: &'static str,
    pub errno: i32,
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {}",
            self.call,
            io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl Prepared {
    pub(crate) fn new(binding: &Binding) -> Prepared {
        Prepared {
            cpus: binding.cpus.as_ref().map(CpuSet::to_mask),
            memory: binding
                .memory_node
                .map(|n| std::iter::once(n).collect::<CpuSet>().to_mask()),
        }
    }

    /// Sets this process's CPUs, then its memory policy (preferred, not
    /// strict: docs/binding.md says why). Both are tried; the first failure
    /// is returned. Async-signal-safe: two system calls on memory made before.
    pub(crate) fn apply(&self) -> Result<(), ApplyError> {
        let mut result = Ok(());
        if let Some(mask) = &self.cpus {
            // SAFETY: the kernel reads `len` bytes from `mask`, which holds them.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_sched_setaffinity,
                    0,
                    std::mem::size_of_val(mask.as_slice()),
                    mask.as_ptr(),
                )
            };
            if rc != 0 {
                result = Err(ApplyError {
                    call: "sched_setaffinity",
                    errno: errno(),
                });
            }
        }
        if let Some(mask) = &self.memory {
            // `maxnode` counts one more bit than the mask holds: the kernel
            // takes one off (as numactl passes it).
            let maxnode =
                mask.len() as libc::c_ulong * libc::c_ulong::from(libc::c_ulong::BITS) + 1;
            // SAFETY: the kernel reads `maxnode - 1` bits from `mask`, which holds them.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_set_mempolicy,
                    MPOL_PREFERRED,
                    mask.as_ptr(),
                    maxnode,
                )
            };
            if rc != 0 && result.is_ok() {
                result = Err(ApplyError {
                    call: "set_mempolicy",
                    errno: errno(),
                });
            }
        }
        result
    }
}

/// This thread's `errno`, without allocating.
fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mems_allowed_is_read_from_status() {
        let status = "Name:\tcat\nCpus_allowed_list:\t0-1\nMems_allowed:\t00000000,00000003\nMems_allowed_list:\t0-1\n";
        assert_eq!(
            mems_allowed(status).map(|m| m.to_string()).as_deref(),
            Some("0-1")
        );
        assert_eq!(mems_allowed("Name:\tcat\n"), None);
    }

    #[test]
    fn this_process_may_use_what_proc_says() {
        let status = std::fs::read_to_string("/proc/self/status").expect("status");
        let listed = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .expect("Cpus_allowed_list");
        assert_eq!(
            allowed_cpus().expect("sched_getaffinity"),
            CpuSet::parse(listed).expect("a list")
        );
    }
}
