//! Signals by their SSH names (RFC 4254: `TERM`, `KILL`, ... without `SIG`),
//! and a channel's exit message as the [`Outcome`] of the remote command.

use nix::sys::signal::Signal;
use russh::{ChannelMsg, Sig};

use crate::process::{self, Outcome};

/// RFC 4254 names a signal without the `SIG` prefix.
pub fn signal_to_sig(signo: i32) -> Sig {
    match signo {
        libc::SIGABRT => Sig::ABRT,
        libc::SIGALRM => Sig::ALRM,
        libc::SIGFPE => Sig::FPE,
        libc::SIGHUP => Sig::HUP,
        libc::SIGILL => Sig::ILL,
        libc::SIGINT => Sig::INT,
        libc::SIGKILL => Sig::KILL,
        libc::SIGPIPE => Sig::PIPE,
        libc::SIGQUIT => Sig::QUIT,
        libc::SIGSEGV => Sig::SEGV,
        libc::SIGTERM => Sig::TERM,
        libc::SIGUSR1 => Sig::USR1,
        other => {
            let name = process::signal_name(other);
            Sig::Custom(name.trim_start_matches("SIG").to_string())
        }
    }
}

/// The signal a `Sig` names, if this system knows it.
pub fn signal_number(sig: &Sig) -> Option<nix::sys::signal::Signal> {
    let name = match sig {
        Sig::ABRT => "SIGABRT",
        Sig::ALRM => "SIGALRM",
        Sig::FPE => "SIGFPE",
        Sig::HUP => "SIGHUP",
        Sig::ILL => "SIGILL",
        Sig::INT => "SIGINT",
        Sig::KILL => "SIGKILL",
        Sig::PIPE => "SIGPIPE",
        Sig::QUIT => "SIGQUIT",
        Sig::SEGV => "SIGSEGV",
        Sig::TERM => "SIGTERM",
        Sig::USR1 => "SIGUSR1",
        Sig::Custom(name) => return format!("SIG{name}").parse::<Signal>().ok(),
    };
    name.parse::<Signal>().ok()
}

/// A signal's SSH name (`TERM`), as the wire carries it.
pub fn sig_name(sig: &Sig) -> String {
    match sig {
        Sig::Custom(name) => name.clone(),
        known => signal_number(known)
            .map(|s| s.as_str().trim_start_matches("SIG").to_string())
            .unwrap_or_default(),
    }
}

/// The `Sig` an SSH name stands for (a name this system does not know stays
/// a custom one).
pub fn sig_from_name(name: &str) -> Sig {
    match format!("SIG{name}").parse::<Signal>() {
        Ok(signal) => signal_to_sig(signal as i32),
        Err(_) => Sig::Custom(name.to_string()),
    }
}

/// How the remote command ended, if `msg` says so (`exit-status` or
/// `exit-signal`); the one decoder for exec_all and `mn-ssh`. A signal this
/// system does not know is signal 0.
pub fn exit_outcome(msg: &ChannelMsg) -> Option<Outcome> {
    match msg {
        ChannelMsg::ExitStatus { exit_status } => Some(Outcome::Exited(*exit_status as i32)),
        ChannelMsg::ExitSignal {
            signal_name,
            core_dumped,
            ..
        } => Some(Outcome::Signaled {
            signal: signal_number(signal_name).map_or(0, |s| s as i32),
            core_dumped: *core_dumped,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_messages_decode_to_outcomes() {
        assert_eq!(
            exit_outcome(&ChannelMsg::ExitStatus { exit_status: 3 }),
            Some(Outcome::Exited(3))
        );
        let signaled = |name: Sig| ChannelMsg::ExitSignal {
            signal_name: name,
            core_dumped: true,
            error_message: String::new(),
            lang_tag: String::new(),
        };
        assert_eq!(
            exit_outcome(&signaled(Sig::TERM)),
            Some(Outcome::Signaled {
                signal: libc::SIGTERM,
                core_dumped: true
            })
        );
        assert_eq!(
            exit_outcome(&signaled(Sig::Custom("NOPE".into()))),
            Some(Outcome::Signaled {
                signal: 0,
                core_dumped: true
            })
        );
        assert_eq!(exit_outcome(&ChannelMsg::Eof), None);
    }

    #[test]
    fn signal_names_round_trip() {
        for signo in [1, 2, 6, 9, 10, 12, 13, 14, 15, 3, 11, 8, 4] {
            let sig = signal_to_sig(signo);
            assert_eq!(
                signal_number(&sig).map(|s| s as i32),
                Some(signo),
                "{sig:?}"
            );
        }
        assert!(matches!(signal_to_sig(libc::SIGUSR2), Sig::Custom(ref n) if n == "USR2"));
        assert!(signal_number(&Sig::Custom("NOPE".into())).is_none());
    }

    #[test]
    fn ssh_names_round_trip() {
        for sig in [Sig::TERM, Sig::KILL, Sig::USR1, Sig::Custom("USR2".into())] {
            let name = sig_name(&sig);
            assert_eq!(format!("{:?}", sig_from_name(&name)), format!("{sig:?}"));
        }
        assert_eq!(sig_name(&Sig::INT), "INT");
        assert!(matches!(sig_from_name("NOPE"), Sig::Custom(ref n) if n == "NOPE"));
    }
}
