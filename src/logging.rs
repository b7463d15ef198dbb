//! Logs go to stderr through `tracing`; `-v` raises the level, `RUST_LOG` overrides.
//! russh logs through `log`, bridged by tracing-subscriber's `tracing-log` feature.
//!
//! Without `-v` or `RUST_LOG` only warnings and errors are shown, and a
//! command run by a person writes them like its other messages:
//! `multinode: warning: MESSAGE (field=value)`, with no timestamp or module
//! path. With `-v` or `RUST_LOG`, and always for the agent (a service, whose
//! log wants the time), every line is a full log line.

use std::fmt;
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The name this process's messages begin with (`multinode`, `mn-exec-all`,
/// `mn-ssh`), as `run.rs` chose it from `argv[0]`: the one source of it.
static PROGRAM: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// The name messages begin with: the one [`init`] was given, else `multinode`.
pub(crate) fn program() -> &'static str {
    PROGRAM.get().copied().unwrap_or("multinode")
}

/// `program` names the messages (and is [`program`] from now on);
/// `service` keeps full log lines (the agent).
pub(crate) fn init(program: &'static str, verbose: u8, service: bool) {
    let _ = PROGRAM.set(program);
    let from_env = EnvFilter::try_from_default_env().ok();
    let plain = verbose == 0 && from_env.is_none() && !service;
    let default = match verbose {
        0 => "warn",
        1 => "multinode=info,warn",
        2 => "multinode=debug,info",
        _ => "trace",
    };
    let filter = from_env.unwrap_or_else(|| EnvFilter::new(default));
    let ansi = colour(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").as_deref(),
    );
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(true);
    // A second init (tests calling run_from_args twice) is harmless: ignore it.
    let _ = if plain {
        builder.event_format(Plain { program }).try_init()
    } else {
        builder.try_init()
    };
}

/// `PROGRAM: warning: MESSAGE (field=value, ...)`: a warning as a person reads it.
struct Plain {
    program: &'static str,
}

impl<S, N> FormatEvent<S, N> for Plain
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let level = match *event.metadata().level() {
            Level::ERROR => "error",
            Level::WARN => "warning",
            Level::INFO => "info",
            _ => "debug",
        };
        let mut fields = Fields::default();
        event.record(&mut fields);
        write!(writer, "{}: {level}: {}", self.program, fields.message)?;
        if !fields.rest.is_empty() {
            write!(writer, " ({})", fields.rest.join(", "))?;
        }
        writeln!(writer)
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    rest: Vec<String>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_string();
        } else {
            self.rest.push(format!("{}={value}", field.name()));
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.rest.push(format!("{}={value:?}", field.name()));
        }
    }
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
