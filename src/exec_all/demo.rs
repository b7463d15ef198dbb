//! `multinode demo`: a real multi-node job on one machine.

use crate::cli::DemoArgs;
use crate::error::Error;

pub fn main(_args: DemoArgs) -> Result<i32, Error> {
    Err(Error::usage("`multinode demo` is not built yet"))
}
