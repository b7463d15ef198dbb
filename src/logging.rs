//! Logs go to stderr through `tracing`; `-v` raises the level, `RUST_LOG` overrides.
//! russh logs through `log`, bridged by tracing-subscriber's `tracing-log` feature.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

pub(crate) fn init(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "multinode=info,warn",
        2 => "multinode=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    // A second init (tests calling run_from_args twice) is harmless: ignore it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_target(true)
        .try_init();
}

/// Colours only for a person: a container's log, a file or a CI log gets
/// plain text, and so does anyone who sets `NO_COLOR` (https://no-color.org).
fn colour(stderr_is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    stderr_is_terminal && no_color.is_none_or(|v| v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_color_turns_colours_off_even_on_a_terminal() {
        assert!(colour(true, None));
        assert!(
            colour(true, Some("".as_ref())),
            "an empty NO_COLOR is unset"
        );
        assert!(!colour(true, Some("1".as_ref())));
        assert!(!colour(false, None));
    }
}
