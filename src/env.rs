//! The environment contract: resolving it for this node and rendering it.

use crate::cli::EnvArgs;
use crate::error::Error;

pub fn cmd_env(_args: &EnvArgs) -> Result<i32, Error> {
    Err(Error::usage("`multinode env` is not built yet"))
}
