//! The parsers of flag values (seconds, counts, a binding mode): clap calls
//! them, with one message each for a value they refuse.

use std::time::Duration;

/// `--bind`'s mode.
pub(super) fn bind_mode(text: &str) -> Result<crate::binding::Mode, String> {
    text.parse()
}

/// A number of seconds above 0 (`--interval`).
pub(super) fn positive_seconds(value: &str) -> Result<Duration, String> {
    seconds(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{value:?} is not a number of seconds > 0"))
}

/// A number of seconds (`2`, `0.5`), for the flags that take one.
pub(super) fn seconds(value: &str) -> Result<Duration, String> {
    value
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .ok_or_else(|| format!("{value:?} is not a number of seconds >= 0"))
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
