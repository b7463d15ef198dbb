//! Slot counts: positive integers that fit in a `u32`.

use super::topology_error::{ParseError, shorten};

/// Why a count is not a positive integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CountError {
    /// Empty, zero, negative, or not made of digits.
    NotPositive,
    /// More than `u32::MAX`.
    TooLarge,
}

/// A positive decimal integer: `4`, `04`; not `0`, `-1`, `+2`, ` 2`, `2.0`.
pub(crate) fn parse_count(text: &str) -> Result<u32, CountError> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CountError::NotPositive);
    }
    let digits = text.trim_start_matches('0');
    if digits.is_empty() {
        return Err(CountError::NotPositive);
    }
    digits.parse().map_err(|_| CountError::TooLarge)
}

/// The slot count `value` written for `host`.
pub(crate) fn parse_slots(value: &str, host: &str) -> Result<u32, ParseError> {
    parse_count(value).map_err(|e| {
        let (value, host) = (shorten(value), shorten(host));
        match e {
            CountError::NotPositive => ParseError::BadSlots { value, host },
            CountError::TooLarge => ParseError::SlotsTooLarge { value, host },
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positive_integers_only() {
        assert_eq!(parse_count("4"), Ok(4));
        assert_eq!(parse_count("04"), Ok(4));
        assert_eq!(parse_count("4294967295"), Ok(u32::MAX));
        assert_eq!(parse_count("4294967296"), Err(CountError::TooLarge));
        assert_eq!(
            parse_count("99999999999999999999999"),
            Err(CountError::TooLarge)
        );
        for bad in ["", "0", "000", "-1", "+2", " 2", "2 ", "2.0", "two", "0x10"] {
            assert_eq!(parse_count(bad), Err(CountError::NotPositive), "{bad:?}");
        }
    }

    #[test]
    fn errors_name_the_value_and_the_host() {
        assert_eq!(
            parse_slots("0", "gpu01").map_err(|e| e.to_string()),
            Err("slot count '0' for 'gpu01' is not a positive integer".to_string())
        );
        assert_eq!(
            parse_slots("5000000000", "gpu01").map_err(|e| e.to_string()),
            Err(
                "slot count '5000000000' for 'gpu01' is too large (at most 4294967295)".to_string()
            )
        );
    }
}
