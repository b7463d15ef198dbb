//! How a command reaches a node: `mn-ssh` and its option parsing.

pub(crate) mod algorithms;
pub mod client;
pub mod signals;
pub mod ssh;
pub mod ssh_args;
