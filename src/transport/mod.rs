//! How a command reaches a node: `mn-ssh` and its option parsing.

pub mod client;
pub mod route;
pub mod ssh;
pub mod ssh_args;
