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
    // A second init (tests calling run_from_args twice) is harmless: ignore it.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(true)
        .try_init();
}
