//! What an `ssh`-style command line asks for ([`SshInvocation`], which
//! `ssh_args.rs` parses): the destination, the options, the variables to
//! send (ssh_config's patterns, [`glob_match`]), and when to ask for a
//! terminal ([`RequestTty`]).

use std::net::IpAddr;
use std::path::PathBuf;

use super::forward::ForwardOptions;

/// What an `ssh`-style command line asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SshInvocation {
    pub host: String,
    pub user: Option<String>,
    pub port: Option<u16>,
    /// `-b ADDR`, `-o BindAddress=ADDR`: the source address of the connection.
    pub bind_address: Option<IpAddr>,
    pub identities: Vec<PathBuf>,
    /// `-o Key=Value` options, keys lowercased, in order.
    pub options: Vec<(String, String)>,
    /// `-n`: stdin from /dev/null.
    pub no_stdin: bool,
    pub verbose: u8,
    pub quiet: bool,
    /// `-s`: the command is the name of a subsystem (`sftp`).
    pub subsystem: bool,
    /// `-G`: print the configuration and exit, as git's probe expects.
    pub print_config: bool,
    /// `-o SendEnv=PATTERN ...`: local variables to send (`*` and `?` match).
    pub send_env: Vec<String>,
    /// `-o SetEnv=NAME=VALUE ...`: variables to send with these values.
    pub set_env: Vec<(String, String)>,
    /// `-t`, `-tt`, `-T`, `-o RequestTTY=...`: whether to ask for a terminal.
    pub tty: RequestTty,
    /// `-L`, `-g`, `-o LocalForward`, `-o ExitOnForwardFailure`.
    pub forward: ForwardOptions,
    /// `-N`, `-o SessionType=none`: no command, only the forwards.
    pub no_command: bool,
    /// The remote command line: the words joined by spaces (may be empty).
    pub command: Vec<u8>,
}

/// When to ask the remote side for a terminal, as OpenSSH's `RequestTTY`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RequestTty {
    /// When there is no command (a shell) and stdin is a terminal.
    #[default]
    Auto,
    /// `-T`: never.
    No,
    /// `-t`: when stdin is a terminal.
    Yes,
    /// `-tt`: always.
    Force,
}

impl RequestTty {
    /// Whether to ask for one, given the command and whether stdin is a
    /// terminal (`-n` counts as not one, as in OpenSSH).
    pub fn wanted(self, has_command: bool, stdin_is_tty: bool) -> bool {
        match self {
            RequestTty::No => false,
            RequestTty::Force => true,
            RequestTty::Yes => stdin_is_tty,
            RequestTty::Auto => !has_command && stdin_is_tty,
        }
    }
}

impl SshInvocation {
    /// The last value of `-o name=...` (case-insensitive name).
    pub fn option(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.options
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The variables to send before the command: `SetEnv` ones, then the
    /// variables of `env` that a `SendEnv` pattern names (sorted by name).
    pub fn env_to_send<'a>(
        &self,
        env: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Vec<(String, String)> {
        let mut out = self.set_env.clone();
        let mut sent: Vec<(String, String)> = env
            .into_iter()
            .filter(|(name, _)| self.send_env.iter().any(|p| glob_match(p, name)))
            .filter(|(name, _)| !out.iter().any(|(n, _)| n == name))
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect();
        sent.sort();
        out.extend(sent);
        out
    }
}

/// ssh_config's patterns: `*` is any run of characters, `?` one character.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    // Iterative matching with backtracking to the last `*`.
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some((i, j));
            i += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}
