//! How a command reaches a node: `mn-ssh` and its option parsing.

pub mod client;
pub(crate) mod route;
pub(crate) mod ssh;
pub(crate) mod ssh_args;
