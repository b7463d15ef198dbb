//! One integration-test binary: every module starts the real `multinode` binary.
