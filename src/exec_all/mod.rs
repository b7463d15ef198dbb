//! exec_all: one script on every node.

pub mod demo;

use crate::cli::ExecAllArgs;
use crate::error::Error;

pub fn main(_args: ExecAllArgs) -> Result<i32, Error> {
    Err(Error::usage("`mn-exec-all` is not built yet"))
}
