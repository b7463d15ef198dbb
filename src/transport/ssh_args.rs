//! ssh(1)'s command line, as mpirun, MPICH and people write it.
//!
//! Options come before the destination and, as in OpenSSH, again right after
//! it (`ssh host -p 2222 cmd`); the first word that is not an option after the
//! destination starts the command. The command's words are joined by single
//! spaces and run by the remote shell, byte for byte.
//!
//! What scp, sftp, rsync and git pass is understood (`-s` for a subsystem,
//! `-G` to probe, `-o SendEnv=...`, `-oForwardX11 no`, ...); what asks for
//! something `mn-ssh` does not do (remote or dynamic port forwarding, agent
//! or X11 forwarding, a proxy, multiplexing, going to the background) is
//! refused with a line that says so, rather than silently ignored. Local
//! port forwarding (`-L`, `-N`) is `forward.rs`'s.

use std::ffi::OsString;
use std::net::IpAddr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use super::forward;
use super::ssh_invocation::{RequestTty, SshInvocation};

/// Flags without a value (`ssh -46AaCfGgKkMNnqsTtVvXxYy`).
const FLAGS: &[u8] = b"46AaCfGgKkMNnqsTtVvXxYy";
/// Flags and options that ask for what `mn-ssh` does not do, and why.
const REFUSED: &[(u8, &str)] = &[
    (b'A', "agent forwarding"),
    (b'X', "X11 forwarding"),
    (b'Y', "X11 forwarding"),
    (b'f', "going to the background"),
    (b'R', "remote port forwarding"),
    (b'D', "dynamic port forwarding (SOCKS)"),
    (b'W', "stdio forwarding"),
    (b'J', "a jump host"),
    (b'O', "a control master"),
];
/// Options that take a value (`ssh -B -b -c -D -E -e -F -I -i -J -L -l -m -O -o -p -Q -R -S -W -w`).
const WITH_VALUE: &[u8] = b"BbcDEeFIiJLlmOopQRSWw";

/// A malformed command line; the message says what was wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SshArgsError(String);

fn err(msg: impl Into<String>) -> SshArgsError {
    SshArgsError(msg.into())
}

/// Parses the arguments after the program name.
pub fn parse(args: &[OsString]) -> Result<SshInvocation, SshArgsError> {
    let mut inv = SshInvocation::default();
    let mut i = 0;
    let mut destination: Option<String> = None;
    let mut terminated = false;
    while i < args.len() {
        let arg = args[i].as_bytes();
        if !terminated && arg == b"--" {
            terminated = true;
            i += 1;
            continue;
        }
        let is_option = !terminated && arg.len() > 1 && arg[0] == b'-';
        if is_option {
            i = parse_option(args, i, &mut inv)?;
            continue;
        }
        if destination.is_none() {
            let dest = std::str::from_utf8(arg)
                .map_err(|_| err("the host name is not valid UTF-8"))?
                .to_string();
            // As in OpenSSH, the first user and port given win, wherever they came from.
            set_destination(&mut inv, &dest)?;
            destination = Some(dest);
            i += 1;
            // OpenSSH reads options again right after the destination, unless `--` came first.
            continue;
        }
        // The command: every remaining word, whatever it looks like.
        let words: Vec<&[u8]> = args[i..].iter().map(|a| a.as_bytes()).collect();
        inv.command = words.join(&b' ');
        break;
    }
    if destination.is_none() {
        return Err(err(
            "no host given; usage: mn-ssh [options] [user@]HOST [COMMAND [ARGS...]]",
        ));
    }
    Ok(inv)
}

/// Parses the option word at `args[i]` (possibly bundled: `-xT`, `-p2222`,
/// `-oPort=22`); returns the index of the next word.
fn parse_option(
    args: &[OsString],
    i: usize,
    inv: &mut SshInvocation,
) -> Result<usize, SshArgsError> {
    let arg = args[i].as_bytes();
    let mut next = i + 1;
    let mut j = 1;
    while j < arg.len() {
        let c = arg[j];
        if let Some((_, what)) = REFUSED.iter().find(|(f, _)| *f == c) {
            return Err(refused(&format!("-{}", c as char), what));
        }
        if FLAGS.contains(&c) {
            match c {
                b'n' => inv.no_stdin = true,
                b'q' => inv.quiet = true,
                b'v' => inv.verbose = inv.verbose.saturating_add(1),
                b's' => inv.subsystem = true,
                b'G' => inv.print_config = true,
                b't' => {
                    inv.tty = match inv.tty {
                        RequestTty::Yes | RequestTty::Force => RequestTty::Force,
                        _ => RequestTty::Yes,
                    }
                }
                b'T' => inv.tty = RequestTty::No,
                b'N' => inv.no_command = true,
                b'g' => inv.forward.gateway_ports = true,
                _ => {}
            }
            j += 1;
            continue;
        }
        if WITH_VALUE.contains(&c) {
            let value: Vec<u8> = if j + 1 < arg.len() {
                arg[j + 1..].to_vec()
            } else {
                let v = args
                    .get(next)
                    .ok_or_else(|| err(format!("option -{} needs a value", c as char)))?;
                next += 1;
                v.as_bytes().to_vec()
            };
            apply_value(c, value, inv)?;
            return Ok(next);
        }
        return Err(err(format!(
            "unknown option -{} (mn-ssh accepts ssh's options)",
            c as char
        )));
    }
    Ok(next)
}

fn apply_value(opt: u8, value: Vec<u8>, inv: &mut SshInvocation) -> Result<(), SshArgsError> {
    let text = || {
        String::from_utf8(value.clone())
            .map_err(|_| err(format!("the value of -{} is not valid UTF-8", opt as char)))
    };
    match opt {
        b'p' => {
            let port = parse_port(&text()?)?;
            inv.port.get_or_insert(port);
        }
        b'l' => {
            let user = text()?;
            inv.user.get_or_insert(user);
        }
        b'b' => {
            let t = text()?;
            let addr = parse_bind_address(&format!("-b {t}"), &t)?;
            inv.bind_address.get_or_insert(addr);
        }
        b'i' => inv
            .identities
            .push(PathBuf::from(OsString::from_vec(value))),
        b'L' => inv
            .forward
            .local
            .push(forward::parse_spec(&text()?).map_err(err)?),
        b'o' => {
            let t = text()?;
            let (k, v) =
                split_option(&t).ok_or_else(|| err(format!("-o {t:?} is not Key=Value")))?;
            match k.as_str() {
                "port" => {
                    let port = parse_port(&v)?;
                    inv.port.get_or_insert(port);
                }
                "user" => {
                    inv.user.get_or_insert_with(|| v.clone());
                }
                "bindaddress" => {
                    let addr = parse_bind_address(&format!("-o BindAddress={v}"), &v)?;
                    inv.bind_address.get_or_insert(addr);
                }
                "identityfile" => inv.identities.push(PathBuf::from(&v)),
                "sendenv" => {
                    for pattern in v.split_whitespace() {
                        match pattern.strip_prefix('-') {
                            // OpenSSH 8.7+: `-PATTERN` takes back what an earlier pattern sent.
                            Some(gone) => inv.send_env.retain(|p| p != gone),
                            None => inv.send_env.push(pattern.to_string()),
                        }
                    }
                }
                "setenv" => {
                    for pair in v.split_whitespace() {
                        let (name, value) = pair.split_once('=').ok_or_else(|| {
                            err(format!("-o SetEnv={v:?}: {pair:?} is not NAME=VALUE"))
                        })?;
                        if !inv.set_env.iter().any(|(n, _)| n == name) {
                            inv.set_env.push((name.to_string(), value.to_string()));
                        }
                    }
                }
                "stdinnull" if is_yes(&v) => inv.no_stdin = true,
                "requesttty" => {
                    inv.tty = match v.to_ascii_lowercase().as_str() {
                        "no" => RequestTty::No,
                        "yes" => RequestTty::Yes,
                        "force" => RequestTty::Force,
                        "auto" => RequestTty::Auto,
                        _ => {
                            return Err(err(format!(
                                "-o RequestTTY={v:?}: give yes, no, force or auto"
                            )));
                        }
                    }
                }
                "sessiontype" => match v.to_ascii_lowercase().as_str() {
                    "subsystem" => inv.subsystem = true,
                    "none" => inv.no_command = true,
                    _ => {}
                },
                "localforward" => inv
                    .forward
                    .local
                    .push(forward::parse_option(&v).map_err(err)?),
                "gatewayports" => inv.forward.gateway_ports = is_yes(&v),
                "exitonforwardfailure" => inv.forward.exit_on_failure = is_yes(&v),
                "clearallforwardings" if is_yes(&v) => inv.forward.local.clear(),
                _ => {
                    if let Some(what) = refused_option(&k, &v) {
                        return Err(refused(&format!("-o {k}={v}"), what));
                    }
                }
            }
            inv.options.push((k, v));
        }
        // Accepted for compatibility, not used: -F (a config file), -E, -B, -c, -m, ...
        _ => {}
    }
    Ok(())
}

fn refused(option: &str, what: &str) -> SshArgsError {
    err(format!(
        "{option} asks for {what}, which mn-ssh does not do (it runs a command, a shell or a subsystem, \
         and forwards local ports with -L); \
         use OpenSSH's ssh for that"
    ))
}

fn is_yes(value: &str) -> bool {
    matches!(value.to_ascii_lowercase().as_str(), "yes" | "true")
}

/// `-o` options that ask for what `mn-ssh` does not do; "no"/"none" values pass.
fn refused_option(key: &str, value: &str) -> Option<&'static str> {
    let off = matches!(
        value.to_ascii_lowercase().as_str(),
        "no" | "none" | "false" | ""
    );
    match key {
        "remoteforward" => Some("remote port forwarding"),
        "dynamicforward" => Some("dynamic port forwarding (SOCKS)"),
        "forwardagent" if !off => Some("agent forwarding"),
        "forwardx11" if !off => Some("X11 forwarding"),
        "proxycommand" | "proxyjump" if !off => Some("a proxy"),
        "remotecommand" if !off => Some("a remote command from the configuration"),
        "tunnel" if !off => Some("a tunnel device"),
        "forkafterauthentication" if !off => Some("going to the background"),
        _ => None,
    }
}

/// `Key=Value`, `Key Value` or `Key=Value` with spaces, as ssh_config allows.
fn split_option(option: &str) -> Option<(String, String)> {
    let option = option.trim();
    let cut = option.find(|c: char| c == '=' || c.is_whitespace())?;
    let key = option[..cut].trim().to_ascii_lowercase();
    let value = option[cut..]
        .trim_start_matches(|c: char| c == '=' || c.is_whitespace())
        .to_string();
    (!key.is_empty()).then_some((key, value))
}

/// A source address: an IP address of this machine, as `-b` takes it
/// (`option` names where it came from, for the error).
fn parse_bind_address(option: &str, value: &str) -> Result<IpAddr, SshArgsError> {
    value.parse::<IpAddr>().map_err(|_| {
        err(format!(
            "{option}: {value:?} is not an IP address; give one of this machine's addresses (for example -b 10.0.0.5)"
        ))
    })
}

fn parse_port(value: &str) -> Result<u16, SshArgsError> {
    crate::values::port(value)
        .ok_or_else(|| err(format!("bad port {value:?}: give a number 1..65535")))
}

fn set_destination(inv: &mut SshInvocation, dest: &str) -> Result<(), SshArgsError> {
    let mut dest = dest.to_string();
    if let Some(rest) = dest.strip_prefix("ssh://") {
        // ssh://[user@]host[:port]
        let (userhost, port) = match rest.rsplit_once(':') {
            Some((h, p)) if !h.ends_with(']') || p.chars().all(|c| c.is_ascii_digit()) => {
                (h.to_string(), Some(parse_port(p)?))
            }
            _ => (rest.to_string(), None),
        };
        if let Some(port) = port {
            inv.port.get_or_insert(port);
        }
        dest = userhost;
    }
    let host = match dest.rsplit_once('@') {
        Some((user, host)) => {
            if user.is_empty() {
                return Err(err(format!("empty user name in {dest:?}")));
            }
            inv.user.get_or_insert_with(|| user.to_string());
            host.to_string()
        }
        None => dest,
    };
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .map(str::to_string)
        .unwrap_or(host);
    if host.is_empty() {
        return Err(err("empty host name"));
    }
    if host.starts_with('-') {
        return Err(err(format!(
            "host name {host:?} starts with '-': refusing it (it would read as an option)"
        )));
    }
    if host
        .bytes()
        .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(err(format!("host name {host:?} contains whitespace")));
    }
    inv.host = host;
    Ok(())
}

#[cfg(test)]
fn os(s: &str) -> OsString {
    OsString::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<SshInvocation, SshArgsError> {
        parse(&args.iter().map(|a| os(a)).collect::<Vec<_>>())
    }

    #[test]
    fn open_mpi_argv_is_joined_verbatim() {
        let inv = p(&[
            "-x",
            "127.0.0.3",
            " orted",
            "-mca",
            "ess",
            "\"env\"",
            "-mca",
            "orte_hnp_uri",
            "\"2001797120.0;tcp://127.0.0.1:60705\"",
        ])
        .unwrap();
        assert_eq!(inv.host, "127.0.0.3");
        assert_eq!(
            inv.command,
            b" orted -mca ess \"env\" -mca orte_hnp_uri \"2001797120.0;tcp://127.0.0.1:60705\""
        );
    }

    #[test]
    fn mpich_argv_is_joined_verbatim() {
        let inv = p(&[
            "-x",
            "127.0.0.3",
            "\"/usr/bin/hydra_pmi_proxy\"",
            "--control-port",
            "127.0.0.1:37405",
        ])
        .unwrap();
        assert_eq!(inv.host, "127.0.0.3");
        assert_eq!(
            inv.command,
            b"\"/usr/bin/hydra_pmi_proxy\" --control-port 127.0.0.1:37405"
        );
    }

    #[test]
    fn options_before_and_after_the_host() {
        let inv = p(&[
            "-T",
            "-q",
            "-oPort=2222",
            "alice@node1",
            "-l",
            "bob",
            "-n",
            "uptime",
            "-l",
        ])
        .unwrap();
        assert_eq!(inv.host, "node1");
        assert_eq!(inv.port, Some(2222));
        // As in OpenSSH, the first user given wins.
        assert_eq!(inv.user.as_deref(), Some("alice"));
        assert!(inv.no_stdin && inv.quiet);
        // After the first command word nothing is an option.
        assert_eq!(inv.command, b"uptime -l");
    }

    #[test]
    fn bundled_flags_and_attached_values() {
        let inv = p(&[
            "-xTp2200",
            "-i",
            "/k",
            "-o",
            "StrictHostKeyChecking no",
            "h",
            "true",
        ])
        .unwrap();
        assert_eq!(inv.port, Some(2200));
        assert_eq!(inv.identities, vec![PathBuf::from("/k")]);
        assert_eq!(inv.option("StrictHostKeyChecking"), Some("no"));
    }

    #[test]
    fn accepts_config_file_and_ignores_it() {
        let inv = p(&["-F", "/etc/cfg", "h"]).unwrap();
        assert_eq!(inv.host, "h");
        assert!(inv.command.is_empty());
    }

    #[test]
    fn a_source_address_from_b_or_bind_address_and_the_first_wins() {
        let inv = p(&["-b", "127.0.0.9", "-o", "BindAddress=::1", "h"]).unwrap();
        assert_eq!(inv.bind_address, Some("127.0.0.9".parse().unwrap()));
        let inv = p(&["-oBindAddress=::1", "-b10.0.0.5", "h"]).unwrap();
        assert_eq!(inv.bind_address, Some("::1".parse().unwrap()));
        assert_eq!(p(&["h"]).unwrap().bind_address, None);
        let e = p(&["-b", "eth0", "h"]).unwrap_err().to_string();
        assert!(e.contains("-b eth0: \"eth0\" is not an IP address"), "{e}");
    }

    #[test]
    fn rejects_a_host_that_looks_like_an_option() {
        let e = p(&["--", "-oProxyCommand=evil"]).unwrap_err();
        assert!(e.to_string().contains("starts with '-'"), "{e}");
    }

    #[test]
    fn missing_host_and_values_are_clear() {
        assert!(p(&[]).unwrap_err().to_string().contains("no host"));
        assert!(
            p(&["-p"])
                .unwrap_err()
                .to_string()
                .contains("needs a value")
        );
        assert!(
            p(&["-p", "99999", "h"])
                .unwrap_err()
                .to_string()
                .contains("bad port")
        );
        assert!(
            p(&["-Z", "h"])
                .unwrap_err()
                .to_string()
                .contains("unknown option -Z")
        );
    }

    #[test]
    fn words_keep_their_bytes() {
        let inv = p(&["h", "printf", "%s\\n", "a b", "'q'", "$HOME", "é\nx"]).unwrap();
        assert_eq!(inv.command, "printf %s\\n a b 'q' $HOME é\nx".as_bytes());
    }

    #[test]
    fn uri_and_ipv6_destinations() {
        let inv = p(&["ssh://u@h:2022", "true"]).unwrap();
        assert_eq!(
            (inv.user.as_deref(), inv.host.as_str(), inv.port),
            (Some("u"), "h", Some(2022))
        );
        let inv = p(&["[::1]", "true"]).unwrap();
        assert_eq!(inv.host, "::1");
    }
}
