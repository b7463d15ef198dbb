//! One integration-test binary: every module starts the real `multinode` binary.

mod env;
mod nodeset;
mod topology;
mod util;
