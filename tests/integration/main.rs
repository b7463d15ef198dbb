//! One integration-test binary: every module starts the real binaries.

mod util;

mod agent;
mod mpi;
mod openssh;
