//! The clap definitions of every command, and nothing else.
//!
//! `mn-ssh`'s options are not parsed by clap: ssh's option syntax
//! (`-oKey=val`, bundled flags, options that mpirun and MPICH put before the
//! host) is parsed by `transport::ssh_args`. Its `--help` is still clap's,
//! rendered from [`SshHelp`].
//!
//! One file a family of commands: `parser.rs` the command line as a whole,
//! `topology_args.rs` (env, hosts, and the topology flags most commands
//! take), `ssh_help.rs`, `exec_all_args.rs`, `agent_args.rs` (agent,
//! keygen, supervise, keep-groups), `setup_args.rs` (demo, check,
//! install-helper, bind), `job_args.rs` (ps, top, shell),
//! `value_parsers.rs`. Defaults come from `crate::defaults`, variable names
//! from `crate::vars`.

mod agent_args;
mod exec_all_args;
mod job_args;
mod parser;
mod setup_args;
mod ssh_help;
mod topology_args;
mod value_parsers;

pub use agent_args::{AgentArgs, SuperviseArgs};
pub use exec_all_args::{ExecAllArgs, exec_all_flags};
pub use job_args::{PsArgs, ShellArgs, TopArgs, TopSort};
pub use parser::{Cli, Command};
pub use setup_args::{CheckArgs, DemoArgs};
pub use ssh_help::SshHelp;
pub use topology_args::{EnvFormat, TableFormat, TopologyArgs};
