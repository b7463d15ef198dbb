//! Keys derived from the job secret.

use crate::cli::KeygenArgs;
use crate::error::Error;

pub fn cmd_keygen(_args: &KeygenArgs) -> Result<i32, Error> {
    Err(Error::usage("`multinode keygen` is not built yet"))
}
