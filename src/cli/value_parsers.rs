//! The parsers of flag values (seconds, counts, a binding mode): clap calls
//! them, with one message each for a value they refuse.

use crate::values;
use std::time::Duration;

/// `--bind`'s mode.
pub(super) fn bind_mode(text: &str) -> Result<crate::binding::Mode, String> {
    text.parse()
}

/// A number of seconds above 0 (`--interval`, `--hang-timeout`).
pub(super) fn positive_seconds(value: &str) -> Result<Duration, String> {
    values::positive_seconds(value)
        .ok_or_else(|| format!("{value:?} is not {}", values::POSITIVE_SECONDS))
}

/// A number of seconds (`2`, `0.5`), for the flags that take one.
pub(super) fn seconds(value: &str) -> Result<Duration, String> {
    values::seconds(value).ok_or_else(|| format!("{value:?} is not {}", values::SECONDS))
}

/// A port (`--master-port`).
pub(super) fn port(value: &str) -> Result<u16, String> {
    values::port(value).ok_or_else(|| format!("{value:?} is not {}", values::PORT))
}

/// A count of 1 or more (0 would be a silent guess of what was meant).
pub(super) fn at_least_one() -> fn(&str) -> Result<usize, String> {
    |text| match text.parse::<usize>() {
        Ok(0) => Err("give 1 or more".to_string()),
        Ok(n) => Ok(n),
        Err(_) => Err("give a whole number, 1 or more".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::defaults;

    #[test]
    fn each_default_in_seconds_parses_to_its_duration() {
        for d in [
            defaults::GRACE,
            defaults::CONNECT_TIMEOUT,
            defaults::IDLE_TIMEOUT,
            defaults::WAIT_TIMEOUT,
            defaults::LOGIN_TIMEOUT,
            defaults::SNAPSHOT_CONNECT_TIMEOUT,
            defaults::SHELL_CONNECT_TIMEOUT,
            defaults::TOP_INTERVAL,
        ] {
            assert_eq!(seconds(d.text), Ok(d.duration), "{d:?}");
        }
        assert_eq!(
            positive_seconds(defaults::TOP_INTERVAL.text),
            Ok(defaults::TOP_INTERVAL.duration)
        );
    }
}
