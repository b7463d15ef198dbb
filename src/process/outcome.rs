//! How a process ended, kept whole (the signal is never folded into a code),
//! and signals by name.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use nix::sys::signal::Signal;

/// How a process ended, kept whole: the signal is never folded into a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    Exited(i32),
    Signaled { signal: i32, core_dumped: bool },
}

impl Outcome {
    pub fn from_status(status: ExitStatus) -> Self {
        match (status.code(), status.signal()) {
            (Some(code), _) => Outcome::Exited(code),
            (None, Some(signal)) => Outcome::Signaled {
                signal,
                core_dumped: status.core_dumped(),
            },
            // Neither code nor signal: stopped/continued never reach here from wait().
            (None, None) => Outcome::Exited(1),
        }
    }

    /// The code a shell reports: the exit code, or 128 + the signal.
    pub fn shell_code(self) -> i32 {
        match self {
            Outcome::Exited(code) => code,
            Outcome::Signaled { signal, .. } => crate::exit_code::from_signal(signal),
        }
    }

    pub fn success(self) -> bool {
        self == Outcome::Exited(0)
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Exited(code) => write!(f, "exit {code}"),
            Outcome::Signaled {
                signal,
                core_dumped,
            } => {
                write!(f, "killed by {}", signal_name(*signal))?;
                if *core_dumped {
                    write!(f, " (core dumped)")?;
                }
                Ok(())
            }
        }
    }
}

/// `SIGKILL`, `SIGTERM`, ... or `signal 42`.
pub fn signal_name(signo: i32) -> String {
    Signal::try_from(signo)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signo}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_codes_follow_the_shell() {
        assert_eq!(Outcome::Exited(3).shell_code(), 3);
        let killed = Outcome::Signaled {
            signal: 9,
            core_dumped: false,
        };
        assert_eq!(killed.shell_code(), 137);
        assert_eq!(killed.to_string(), "killed by SIGKILL");
        assert_eq!(signal_name(200), "signal 200");
    }
}
