//! The four ways a node's command is started, and what each gives its
//! node: the command line, the variables, and how they reach it. `plan`
//! asks a node's kind for its command and variables; a channel to an
//! agent or a stock sshd asks it what to send (`channel_request`); `leg`
//! starts a process here or a channel as the run's `Reach` says.
//!
//! | kind | started as | its variables | how they reach it |
//! | --- | --- | --- | --- |
//! | this node | a process here (`multinode supervise -- sh ...`) | the contract as this node sees it, and the attempt's | the process's environment |
//! | an external wrapper | a process here: `WRAPPER HOST 'cd DIR; export ...; CMD'` | the head's exported variables and the contract written out | the command line |
//! | an agent | a russh channel (the job's secret) | the exported ones and the contract with its hostlists folded (the agent expands them) | `env` requests, with the directory and the asks for exit info and heartbeats |
//! | a stock sshd | a russh channel (the user's keys) | the exported ones and the contract written out | the command line: sshd drops `env` requests it was not told to accept (`AcceptEnv`) |

use bytes::Bytes;

use super::options::RunOptions;
use super::script::{Script, wrapped_command};
use crate::env::Contract;
use crate::vars;

/// How a node's command is started and its messages come back (see `leg`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegKind {
    /// This node: a process here.
    Local,
    /// `WRAPPER HOST COMMAND`: a process here per node.
    Wrapper,
    /// A node's agent, in-process (job secret): variables as `env` requests.
    Agent,
    /// A stock sshd, in-process (user keys): variables in the command line.
    Sshd,
}

/// What a channel sends to start a node's command: the command line, and
/// the variables it sends as `env` requests.
pub struct ChannelRequest {
    pub command: Vec<u8>,
    pub env: Vec<(String, String)>,
}

impl LegKind {
    /// Rank `rank`'s kind: this node's (`here`), else how the others are
    /// reached (`remote`).
    pub fn of(rank: usize, here: usize, remote: LegKind) -> LegKind {
        if rank == here { LegKind::Local } else { remote }
    }

    /// The command its shell runs (one copy, shared by every node of the
    /// kind): an agent runs the script as `exec sh -s -- ARGS` itself, the
    /// others get the shell command line.
    pub fn command(self, script: &Script, args: &[std::ffi::OsString]) -> Bytes {
        Bytes::from(match self {
            LegKind::Agent => script.agent_command(args),
            LegKind::Local | LegKind::Wrapper | LegKind::Sshd => script.shell_command(args),
        })
    }

    /// Rank `rank`'s variables: this node gets the attempt's and the
    /// contract as it sees it; the others the head's exported ones
    /// (`exported`, the attempt's among them) and the contract, folded for
    /// an agent (which expands it), written out for the others.
    pub fn vars(
        self,
        rank: usize,
        options: &RunOptions,
        exported: &[(String, String)],
        contract: &Contract,
    ) -> Vec<(String, String)> {
        let (mut vars, node) = match self {
            LegKind::Local => (options.attempt_env.clone(), contract.for_rank(rank)),
            LegKind::Agent => (exported.to_vec(), contract.wire_for_rank(rank)),
            LegKind::Wrapper | LegKind::Sshd => (exported.to_vec(), contract.remote_for_rank(rank)),
        };
        vars.extend(node);
        vars
    }

    /// What a channel to a node of this kind sends: an agent takes the
    /// variables, the directory (`cwd`) and the asks for exit info and, when
    /// watched, heartbeats as `env` requests and runs `command` as it is; a
    /// stock sshd drops `env` requests, so its variables and directory go in
    /// the command line. `vars` hold the node's address as it was reached.
    pub fn channel_request(
        self,
        command: &[u8],
        mut vars: Vec<(String, String)>,
        cwd: &str,
        heartbeats: bool,
    ) -> ChannelRequest {
        match self {
            LegKind::Agent => {
                vars.push((vars::CWD.to_string(), cwd.to_string()));
                vars.push((vars::EXIT_INFO.to_string(), "1".to_string()));
                if heartbeats {
                    vars.push((vars::HEARTBEAT.to_string(), "1".to_string()));
                }
                ChannelRequest {
                    command: command.to_vec(),
                    env: vars,
                }
            }
            LegKind::Local | LegKind::Wrapper | LegKind::Sshd => ChannelRequest {
                command: wrapped_command(command, cwd.as_bytes(), &vars),
                env: Vec::new(),
            },
        }
    }
}
