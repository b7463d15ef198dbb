//! The per-node agent: an SSH server on russh that runs the job's commands in
//! their own process groups, and the job lifecycle around it.
//!
//! - `start`: `multinode agent`: its options, the shared state, the server, the lifecycle, the end.
//! - `shared`: what every connection and command of an agent shares.
//! - `server`: accepting connections, their login deadline and TCP watch.
//! - `handler`: a connection's russh handler: logins, channels, requests.
//! - `session_channel`: a session channel's requests, then its command.
//! - `login`: the login deadline, limits on connections not logged in yet, penalties.
//! - `keeper`: the group keeper, which ends the commands' groups if the agent dies.
//! - `command`: one exec request, from spawn to exit status, with no orphans.
//!   `command_reply`: what its channel is told (output, heartbeats, exit).
//! - `control`: the agent's own requests (`#multinode:ping`, `release`, ...).
//! - `env_limit`: how much environment a channel, a connection and the agent may hold.
//! - `forward`: `direct-tcpip` channels (`ssh -L`), to the node's loopback and the job's nodes.
//!   `forward_copy`: a forward's bytes, both ways.
//! - `sftp`: the `sftp` subsystem, in-process (scp, sftp, `mn-ssh -s HOST sftp`);
//!   `sftp_handler` its requests as file operations, `sftp_bounds` its bounds.
//! - `running`: the process groups of the running commands, with their records.
//! - `snapshot`: `#multinode:snapshot`, what the running commands do now.
//! - `heap`: freed memory given back to the system.
//! - `init`: acting as PID 1 in a container (reaping, forwarding signals).
//! - `mux`: the head's connections to the nodes, shared with JOB's clients on a Unix socket.
//!   `mux_pool`: those connections, kept or made on first use.
//! - `lifecycle`: `multinode agent -- JOB`: the head waits for the workers,
//!   runs JOB and releases them; a worker serves until released.
//! - `head_wait`: the head's wait for its workers.

mod channel_lines;
mod command;
mod command_reply;
mod control;
mod env_limit;
mod forward;
mod forward_copy;
mod handler;
mod head_wait;
mod heap;
mod init;
mod keeper;
mod lifecycle;
mod login;
mod login_limits;
mod mux;
mod mux_pool;
mod plain;
mod pty;
mod running;
mod server;
mod session_bounds;
mod session_channel;
mod sftp;
mod sftp_bounds;
mod sftp_fs;
mod sftp_handler;
mod shards;
mod shared;
mod show_group;
mod snapshot;
mod start;

pub use keeper::keep_groups;
pub use start::main;
