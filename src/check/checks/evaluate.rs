//! Every check run, in the order of the report (the GPU health checks
//! last, with `--gpu`), and the report's exit status.

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Status};
use super::{affinity, connectivity, fabric, gpu, gpu_state, launch, limits, speed};

/// Runs every check, in the order of the report.
pub(crate) fn evaluate(inputs: &CheckInputs) -> Vec<CheckResult> {
    let mut rows = vec![
        connectivity::nodes(inputs),
        connectivity::version(inputs),
        connectivity::environment(inputs),
        connectivity::head_address(inputs),
        connectivity::rendezvous_port(inputs),
        connectivity::rendezvous_connect(inputs),
        connectivity::host_names(inputs),
        connectivity::clock(inputs),
        limits::memlock(inputs),
        fabric::infiniband(inputs),
        fabric::nccl_ib_hca(inputs),
        fabric::nccl_socket_ifname(inputs),
        fabric::gloo_socket_ifname(inputs),
        gpu::gpu_count(inputs),
        gpu::gpu_driver(inputs),
        gpu::cuda_arch(inputs),
        affinity::gpu_numa_order(inputs),
        affinity::cpu_mask(inputs),
        affinity::omp_affinity(inputs),
        launch::mpi_launcher(inputs),
        launch::dev_shm(inputs),
        launch::same_settings(inputs),
    ];
    if inputs.head.gpu {
        rows.extend([
            gpu_state::health_query(inputs),
            gpu_state::ecc(inputs),
            gpu_state::remapped_rows(inputs),
            gpu_state::persistence(inputs),
            gpu_state::pcie(inputs),
            gpu_state::clocks(inputs),
            gpu_state::xid(inputs),
            gpu_state::nvlink(inputs),
            speed::gpu_speed(inputs),
        ]);
    }
    rows
}

/// The exit status of a report: any fail (or, with `strict`, any warn) is a failure.
pub(crate) fn failed(results: &[CheckResult], strict: bool) -> bool {
    results
        .iter()
        .any(|r| r.status == Status::Fail || (strict && r.status == Status::Warn))
}
