//! The per-node agent: an SSH server on russh, and the job lifecycle.

use crate::cli::AgentArgs;
use crate::error::Error;

pub fn main(_args: AgentArgs) -> Result<i32, Error> {
    Err(Error::usage("`multinode agent` is not built yet"))
}
