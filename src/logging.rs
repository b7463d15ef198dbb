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
    // Colours only for a person: a container's log, a file or a CI log gets
    // plain text (https://no-color.org is honoured too).
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    // A second init (tests calling run_from_args twice) is harmless: ignore it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(true)
        .try_init();
}
