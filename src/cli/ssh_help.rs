//! `multinode ssh` (`mn-ssh`): its words taken whole, and `SshHelp`, the
//! options `transport::ssh_args` understands, rendered by clap for `--help`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{Args, Parser};

use crate::{defaults, vars};

#[derive(Debug, Args)]
pub struct SshArgs {
    /// ssh-style options, then [user@]HOST, then COMMAND [ARGS...].
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, num_args = 0..)]
    pub args: Vec<OsString>,
}

/// `mn-ssh --help`: the options `transport::ssh_args` understands, for clap
/// to render. Never used to parse (ssh's syntax is not clap's).
#[derive(Debug, Parser)]
#[command(
    name = "mn-ssh",
    version,
    about = "Run COMMAND on HOST with ssh semantics: through the job's `multinode agent` when \
MULTINODE_SECRET (or MULTINODE_SECRET_FILE) is set, else through the host's OpenSSH server \
with your keys",
    override_usage = "mn-ssh [OPTIONS] [USER@]HOST [COMMAND [ARGS...]]",
    after_help = "Also accepted, as mpirun, MPICH, scp, sftp, rsync and git pass them: -x, -T, \
-F FILE and the other flags that change nothing here. Refused, with a message: forwarding \
other than -L (-R, -D, -W, -A, -X, -Y), -J, -f, -O.\n\nExit code: the remote command's; 128+N \
when it died of signal N; 255 when the connection failed."
)]
pub struct SshHelp {
    #[arg(short = 'p', value_name = "PORT", help = format!(
        "Port [default: an agent's {}, else {}; OpenSSH: 22]",
        vars::AGENT_PORT,
        defaults::AGENT_PORT
    ))]
    pub port: Option<u16>,
    /// Remote user (OpenSSH; an agent runs commands as its own user).
    #[arg(short = 'l', value_name = "USER")]
    pub user: Option<String>,
    /// Private key for OpenSSH [default: ~/.ssh/id_ed25519, id_ecdsa, id_rsa].
    #[arg(short = 'i', value_name = "KEY")]
    pub identity: Vec<PathBuf>,
    /// Port, User, IdentityFile, ConnectTimeout, StrictHostKeyChecking,
    /// UserKnownHostsFile, SendEnv, SetEnv.
    #[arg(short = 'o', value_name = "KEY=VALUE")]
    pub option: Vec<String>,
    /// Forward a local port through the node: connections to [BIND:]PORT
    /// go to HOST:HOSTPORT as the node sees it (its loopback, or a node of the job).
    #[arg(short = 'L', value_name = "[BIND:]PORT:HOST:HOSTPORT")]
    pub local_forward: Vec<String>,
    /// No command: keep the connection and its forwards until a signal.
    #[arg(short = 'N')]
    pub no_command: bool,
    /// COMMAND names a subsystem (`mn-ssh -s HOST sftp`, as scp and sftp run it).
    #[arg(short = 's')]
    pub subsystem: bool,
    /// Print the host, user and port that would be used, and exit (git's probe).
    #[arg(short = 'G')]
    pub print_config: bool,
    /// Read stdin from /dev/null.
    #[arg(short = 'n')]
    pub no_stdin: bool,
    /// Quiet.
    #[arg(short = 'q')]
    pub quiet: bool,
    /// More log output on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short = 'v', action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// [USER@]HOST, then the command and its arguments (joined by spaces, run by the remote shell).
    #[arg(value_name = "HOST", num_args = 0..)]
    pub rest: Vec<OsString>,
}
