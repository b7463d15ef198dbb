//! Binding each process to its GPU's NUMA node (docs/binding.md): the GPU
//! of local rank i is the i-th visible GPU (`CUDA_VISIBLE_DEVICES`, by index
//! or UUID, in its order), its NUMA node comes from its PCI bus id through
//! sysfs, never from `local_rank // k`; never wider than what the process was
//! given. `multinode bind -- CMD` binds itself and execs CMD; a launcher
//! that forks its processes prepares each one's [`apply::Prepared`] before the
//! fork and applies it in the child before exec.
//!
//! - `cpus`: CPU and node sets in the kernel's list format (pure).
//! - `launcher_ranks`: the local rank and local size from each launcher's variables (pure).
//! - `visible`: `CUDA_VISIBLE_DEVICES` against `nvidia-smi`'s list (pure).
//! - `sysfs`: each GPU's NUMA node and CPUs, the nodes' CPUs, SMT siblings, under a root.
//! - `plan`: the modes and the binding of one process (pure).
//! - `apply`: `sched_getaffinity`, `sched_setaffinity`, `set_mempolicy`.
//! - `this_process`: the binding of this process, read from this machine.
//! - `bind_command`: `multinode bind`, `multinode count-gpus`, the `--report-bindings` line.
//!
//! A launcher that forks its own processes (exec_all's one process a GPU)
//! reads the layout once ([`read_layout`]) and what it may use
//! ([`apply::allowed_cpus`], [`apply::mems_allowed`]), plans each local
//! rank (`rules::plan` with its [`launcher_ranks::Ranks`]), makes each
//! one's [`apply::Prepared`] before the fork, and calls
//! [`apply::Prepared::apply`] in the child (a `pre_exec` hook): it
//! allocates nothing and makes two system calls.

pub(crate) mod apply;
mod bind_command;
mod cpus;
pub(crate) mod launcher_ranks;
mod rules;
mod sysfs;
mod this_process;
mod visible;

pub(crate) use bind_command::{cmd_bind, cmd_count_gpus, reported_in};
pub(crate) use cpus::CpuSet;
pub(crate) use rules::Mode;
pub(crate) use sysfs::read_nodes;
pub(crate) use this_process::{mode_from, read_layout};

#[cfg(test)]
mod tests;
