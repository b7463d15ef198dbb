//! `nvidia-smi`: the one module that runs it and reads what it prints,
//! for topology (how many GPUs this machine has), `check` (the GPUs, the
//! driver and CUDA versions) and `snapshot` (GPU memory and utilisation by
//! process). Every run goes through the bounded runner
//! ([`crate::process::run_bounded`]): a GPU that fell off the bus can hang
//! `nvidia-smi`, which must not hang `multinode`.
//!
//! - `query`: `--query-gpu`'s CSV and the header's versions (pure).
//! - `apps`: `--query-compute-apps` joined with `--query-gpu`'s utilisation (pure).
//! - `pci`: each GPU's index, UUID and PCI bus id, for binding (pure).
//! - `health`: what `check --gpu` reads: the health query's CSV by its
//!   header (ECC, retired pages, remapped rows, PCIe link, clocks and their
//!   event reasons), `nvlink --status`, the kernel log's Xid lines (pure).
//! - `devices`: each GPU's utilisation, memory, power, clocks and the
//!   reasons they are held down, for `top` (pure).
//! - `invoke`: the invocations, each bounded.
//! - `loops`: `top`'s readings from `nvidia-smi` left running in its loop
//!   mode while `top` asks (a run each refresh costs a node far more).

mod apps;
mod devices;
mod health;
mod invoke;
mod loops;
mod pci;
mod query;

pub use apps::GpuUse;
pub use devices::GpuDevice;
#[cfg(test)]
pub(crate) use health::HEALTH_QUERY;
pub(crate) use health::{GpuHealth, NvLink, Xid, parse_health, parse_nvlink, parse_xids, same_pci};
pub(crate) use invoke::{
    Inventory, PROGRAM, Run, TIMEOUT_S, count_gpus, health_query, inventory, nvlink_status,
    pci_gpus, processes, processes_and_devices,
};
pub(crate) use loops::{TIMING, Watch};
pub(crate) use pci::PciGpu;
pub(crate) use query::{Gpu, first_line, parse_dotted, parse_header, parse_query, visible};
