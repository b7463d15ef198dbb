//! The one parser of each kind of value a flag or a variable gives: seconds,
//! seconds above 0, a port. clap's value parsers (`cli/value_parsers.rs`)
//! and the readings of variables (`EnvMap::flag_or_var`, the agents' port,
//! `MULTINODE_SSH_PORT`, `mn-ssh`'s `-p` and `-L`) call these, so a value a
//! flag refuses is refused as a variable too. Pure; the bottom layer.

use std::time::Duration;

/// What [`seconds`] takes, as a message says it.
pub const SECONDS: &str = "a number of seconds >= 0";
/// What [`positive_seconds`] takes.
pub const POSITIVE_SECONDS: &str = "a number of seconds > 0";
/// What [`port`] takes.
pub const PORT: &str = "a port number (1-65535)";

/// A number of seconds, `2` or `0.5`, 0 included.
pub fn seconds(text: &str) -> Option<Duration> {
    text.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
}

/// A number of seconds above 0 (a time limit of 0 would end everything at once).
pub fn positive_seconds(text: &str) -> Option<Duration> {
    seconds(text).filter(|d| !d.is_zero())
}

/// A TCP port to connect to or to name: 1 to 65535.
pub fn port(text: &str) -> Option<u16> {
    text.parse::<u16>().ok().filter(|p| *p != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_take_fractions_and_zero_and_refuse_the_rest() {
        assert_eq!(seconds("2"), Some(Duration::from_secs(2)));
        assert_eq!(seconds("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(seconds("0"), Some(Duration::ZERO));
        for bad in ["", "-1", "ten", "inf", "NaN", "1e30", " 1"] {
            assert_eq!(seconds(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn positive_seconds_refuse_zero() {
        assert_eq!(positive_seconds("0"), None);
        assert_eq!(positive_seconds("0.0"), None);
        assert_eq!(positive_seconds("0.001"), Some(Duration::from_millis(1)));
    }

    #[test]
    fn ports_are_1_to_65535() {
        assert_eq!(port("1"), Some(1));
        assert_eq!(port("65535"), Some(65535));
        for bad in ["0", "65536", "-1", "http", "22 ", ""] {
            assert_eq!(port(bad), None, "{bad:?}");
        }
    }
}
