//! Signals by their SSH names (RFC 4254: `TERM`, `KILL`, ... without `SIG`).

use nix::sys::signal::Signal;
use russh::Sig;

use crate::process;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
