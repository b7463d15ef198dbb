//! `mn-ssh`: run a command on a host with ssh semantics.

use std::ffi::OsString;

use crate::error::Error;

pub fn main(_args: Vec<OsString>) -> Result<i32, Error> {
    Err(Error::usage("`mn-ssh` is not built yet"))
}
