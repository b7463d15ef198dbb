//! What each node runs: the script, its arguments, and the environment it
//! gets (like `srun --export=ALL`: the head's environment minus per-host
//! variables, plus the node's own contract).

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;

use crate::error::Error;
use crate::vars;

/// Variables that describe one host or one process and are never copied from
/// the head to the other nodes. Documented in docs/exec-all.md.
pub const PER_HOST_VARS: &[&str] = &[
    // Shell and session state.
    "HOSTNAME",
    "HOST",
    "PWD",
    "OLDPWD",
    "SHLVL",
    "_",
    "SSH_CLIENT",
    "SSH_CONNECTION",
    "SSH_TTY",
    "SSH_AUTH_SOCK",
    "DISPLAY",
    "XAUTHORITY",
    "XDG_RUNTIME_DIR",
    "XDG_SESSION_ID",
    // The head agent's socket for sharing its connections: a path on the head.
    vars::MUX_SOCKET,
    // Devices given to this host's processes.
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ZE_AFFINITY_MASK",
    // Ranks of this node or process; the node's own contract replaces them.
    "RANK",
    "LOCAL_RANK",
    "GROUP_RANK",
    vars::NODE_RANK,
    vars::LOCAL_IP,
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURMD_NODENAME",
    "SLURM_TOPOLOGY_ADDR",
    "SLURM_TOPOLOGY_ADDR_PATTERN",
    "SLURM_GTIDS",
    "PMI_RANK",
    "PMIX_RANK",
    "PMI_FD",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_NODE_RANK",
    // Kubernetes: each pod's own index or role (torchrun reads PET_NODE_RANK).
    "JOB_COMPLETION_INDEX",
    "PET_NODE_RANK",
    "K_MPI_JOB_ROLE",
    // A file of the command run on this node (its heartbeat): a path here.
    vars::HEARTBEAT_FILE,
    // The job secret stays where it is: every agent already has its own.
    vars::SECRET,
    vars::SECRET_FILE,
];

/// Which of the head's variables go to the other nodes (`--export`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Export {
    /// Everything but [`PER_HOST_VARS`].
    All,
    /// Only the contract.
    None,
    /// These names (or `NAME=VALUE` pairs) and the contract.
    Only(Vec<(String, Option<String>)>),
}

impl Export {
    pub fn parse(spec: &str) -> Result<Self, Error> {
        match spec {
            "ALL" | "all" => return Ok(Export::All),
            "NONE" | "none" => return Ok(Export::None),
            _ => {}
        }
        let mut items = Vec::new();
        for item in spec.split(',') {
            let (name, value) = match item.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (item, None),
            };
            if !is_name(name) {
                return Err(Error::usage(format!(
                    "--export {spec:?}: {name:?} is not a variable name; use ALL, NONE or NAME[=VALUE],..."
                )));
            }
            items.push((name.to_string(), value));
        }
        Ok(Export::Only(items))
    }

    /// The variables to send, from the head's environment `vars`.
    pub fn select(&self, vars: &[(String, String)]) -> Vec<(String, String)> {
        match self {
            Export::All => vars
                .iter()
                .filter(|(k, _)| !PER_HOST_VARS.contains(&k.as_str()))
                .cloned()
                .collect(),
            Export::None => Vec::new(),
            Export::Only(items) => items
                .iter()
                .filter_map(|(name, value)| match value {
                    Some(v) => Some((name.clone(), v.clone())),
                    None => vars.iter().find(|(k, _)| k == name).cloned(),
                })
                .collect(),
        }
    }
}

/// A name `sh` can `export`.
pub fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// How the script reaches the nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Script {
    /// `-`: the script was read from exec_all's stdin and goes to each node's
    /// `sh -s` on stdin.
    Stdin(Vec<u8>),
    /// A file or `-c CMD`: the text goes in the command line (`sh -c`), and
    /// exec_all's own stdin goes to the script's stdin.
    Inline(Vec<u8>),
}

/// Inline scripts travel as one argument: Linux limits one to 128 KiB.
pub const MAX_INLINE_SCRIPT: usize = 100 * 1024;
/// No script is read past this, from a file or from stdin (`exec_all - <
/// /dev/zero` must not fill the memory).
pub const MAX_SCRIPT: usize = 16 * 1024 * 1024;

impl Script {
    /// The `sh` invocation that runs the script with `args` as `$1`...
    pub fn shell_command(&self, args: &[OsString]) -> Vec<u8> {
        let mut cmd = match self {
            Script::Stdin(_) => b"exec sh -s --".to_vec(),
            Script::Inline(text) => {
                let mut c = b"exec sh -c ".to_vec();
                c.extend_from_slice(&crate::sh::quote(text));
                c.extend_from_slice(b" sh");
                c
            }
        };
        for arg in args {
            cmd.push(b' ');
            cmd.extend_from_slice(&crate::sh::quote(arg.as_bytes()));
        }
        cmd
    }

    /// What a `multinode agent` runs. The agent always hands a command to
    /// `/bin/sh -c`, so an inline script runs in that shell itself, its
    /// arguments set by `set --`: one `sh` exec fewer per node (about a third
    /// of an agent's CPU for a short command). A stdin script still needs
    /// `sh -s`. Other servers run the command with the user's login shell,
    /// which need not be `sh`: they get [`Script::shell_command`].
    pub fn agent_command(&self, args: &[OsString]) -> Vec<u8> {
        match self {
            Script::Stdin(_) => self.shell_command(args),
            // Without arguments the script is the command as it is, so
            // that a plain one (`hostname`) needs no shell on the agent.
            Script::Inline(text) if args.is_empty() => text.clone(),
            Script::Inline(text) => {
                let mut cmd = b"set --".to_vec();
                for arg in args {
                    cmd.push(b' ');
                    cmd.extend_from_slice(&crate::sh::quote(arg.as_bytes()));
                }
                cmd.push(b'\n');
                cmd.extend_from_slice(text);
                cmd
            }
        }
    }

    /// The argv of the same, for a local `sh` (no extra shell in between).
    pub fn local_argv(&self, args: &[OsString]) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["sh".into()];
        match self {
            Script::Stdin(_) => {
                argv.push("-s".into());
                argv.push("--".into());
            }
            Script::Inline(text) => {
                argv.push("-c".into());
                argv.push(std::ffi::OsStr::from_bytes(text).to_os_string());
                argv.push("sh".into());
            }
        }
        argv.extend(args.iter().cloned());
        argv
    }

    /// What each node gets on stdin before exec_all's own stdin (if any).
    pub fn stdin_prefix(&self) -> Option<&[u8]> {
        match self {
            Script::Stdin(text) => Some(text),
            Script::Inline(_) => None,
        }
    }
}

/// The command line for an external wrapper, which can only pass a command
/// string: change directory, export the variables, then run the script.
pub fn wrapped_command(shell_command: &[u8], cwd: &[u8], env: &[(String, String)]) -> Vec<u8> {
    let mut out = b"cd ".to_vec();
    out.extend_from_slice(&crate::sh::quote(cwd));
    out.extend_from_slice(b" 2>/dev/null || echo \"mn-exec-all: warning: no directory ");
    out.extend_from_slice(&crate::sh::quote(cwd));
    out.extend_from_slice(b" on $(hostname)\" >&2; ");
    let exported: Vec<&(String, String)> = env.iter().filter(|(k, _)| is_name(k)).collect();
    if !exported.is_empty() {
        out.extend_from_slice(b"export");
        for (k, v) in exported {
            out.push(b' ');
            out.extend_from_slice(k.as_bytes());
            out.push(b'=');
            out.extend_from_slice(&crate::sh::quote(v.as_bytes()));
        }
        out.extend_from_slice(b"; ");
    }
    out.extend_from_slice(shell_command);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn the_default_export_is_every_variable() {
        assert_eq!(Export::parse(crate::defaults::EXPORT).unwrap(), Export::All);
    }

    fn vars(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn export_all_drops_per_host_variables() {
        let head = vars(&[
            ("PATH", "/a"),
            ("NCCL_DEBUG", "INFO"),
            ("CUDA_VISIBLE_DEVICES", "0"),
            ("MULTINODE_SECRET", "s"),
            ("RANK", "0"),
            ("JOB_COMPLETION_INDEX", "0"),
            ("PET_NODE_RANK", "0"),
            ("PET_NNODES", "4"),
        ]);
        let sent = Export::All.select(&head);
        assert_eq!(
            sent,
            vars(&[("PATH", "/a"), ("NCCL_DEBUG", "INFO"), ("PET_NNODES", "4")])
        );
        assert!(Export::None.select(&head).is_empty());
        let only = Export::parse("NCCL_DEBUG,X=1").unwrap().select(&head);
        assert_eq!(only, vars(&[("NCCL_DEBUG", "INFO"), ("X", "1")]));
        assert!(Export::parse("A,1B").is_err());
    }

    fn run_sh(command: &[u8], stdin: &[u8]) -> String {
        use std::io::Write;
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(command))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        String::from_utf8(child.wait_with_output().unwrap().stdout).unwrap()
    }

    #[test]
    fn arguments_arrive_byte_for_byte() {
        let args: Vec<OsString> = ["a b", "it's", "$HOME", "back\\slash", "new\nline", "é", ""]
            .iter()
            .map(OsString::from)
            .collect();
        let printer = b"for a in \"$@\"; do printf '[%s]' \"$a\"; done; printf '%s' \"$#\"";
        let expected = "[a b][it's][$HOME][back\\slash][new\nline][é][]7";
        let stdin_script = Script::Stdin(printer.to_vec());
        assert_eq!(
            run_sh(&stdin_script.shell_command(&args), printer),
            expected
        );
        let inline = Script::Inline(printer.to_vec());
        assert_eq!(run_sh(&inline.shell_command(&args), b""), expected);
        assert_eq!(run_sh(&inline.agent_command(&args), b""), expected);
        assert_eq!(
            run_sh(&stdin_script.agent_command(&args), printer),
            expected
        );
        // No arguments: $# is 0, and a script's own `set --` and `exit` work.
        let own = Script::Inline(b"echo $#; set -- x y; echo $#; exit 3; echo no".to_vec());
        let out = Command::new("sh")
            .arg("-c")
            .arg(std::ffi::OsStr::from_bytes(&own.agent_command(&[])))
            .output()
            .unwrap();
        assert_eq!(
            (out.stdout.as_slice(), out.status.code()),
            (&b"0\n2\n"[..], Some(3))
        );
    }

    #[test]
    fn wrapped_command_sets_directory_and_environment() {
        let env = vars(&[
            ("A", "x'y z"),
            ("not-a-name", "skipped"),
            ("B", "$(echo no)"),
        ]);
        let cmd = wrapped_command(b"printf '%s|%s|' \"$A\" \"$B\"; pwd", b"/tmp", &env);
        assert_eq!(run_sh(&cmd, b""), "x'y z|$(echo no)|/tmp\n");
    }
}
