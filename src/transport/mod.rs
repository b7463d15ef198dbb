//! How a command reaches a node: `mn-ssh` and its option parsing, our own
//! SSH client, connection sharing through the head's agent (`mux`), and
//! `mn-ssh -L`'s local port forwarding (`forward`).

mod auth;
pub mod channel;
pub(crate) mod choice;
pub mod client;
mod control_requests;
pub(crate) use control_requests::ControlError;
pub(crate) mod forward;
mod lost_after;
pub mod mux;
pub mod mux_frames;
pub(crate) mod ssh;
pub(crate) mod ssh_args;
#[cfg(test)]
mod ssh_args_clients;
pub(crate) mod ssh_invocation;
mod target;
mod tcp_health;
pub mod tty;
