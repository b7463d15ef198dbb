//! How a command reaches a node: `mn-ssh` and its option parsing.

pub mod ssh;
