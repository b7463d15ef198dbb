//! Slurm's hostlist syntax, expanded as `scontrol show hostnames` does it.
//!
//! - `a,b,c`: a comma list;
//! - `gpu[01-04,07]`: a bracket group of numbers and ranges;
//! - `rack[1-2]-node[01-02]`: several groups, a cartesian product in which the
//!   leftmost group varies slowest (`rack1-node01 rack1-node02 rack2-node01 ...`);
//! - zero padding as Slurm does it: every number of a range is printed with the
//!   width of the range's start, so `[08-11]` is `08 09 10 11` and `[8-11]` is
//!   `8 9 10 11`;
//! - `node[1-2]-ib`: text after a group.
//!
//! Host names hold only letters, digits, `.`, `-` and `_` (so IPv4 literals are
//! fine); anything a shell would read (`;`, `$`, quotes, whitespace) is an error,
//! as is a name starting with `-`, which ssh would read as an option.
//! Duplicates are errors, never silently merged.

use std::borrow::Cow;
use std::collections::HashMap;

use super::topology_error::{ParseError, shorten};

/// The most hosts one hostlist may expand to.
pub(crate) const MAX_HOSTS: usize = 1_000_000;
/// The longest host name accepted (a DNS name has at most 253 characters).
pub(crate) const MAX_HOST_LEN: usize = 255;
/// Numbers in ranges have at most this many digits, so they fit in a u64.
const MAX_DIGITS: usize = 18;

/// Expands a hostlist expression into host names, in `scontrol show hostnames` order.
pub(crate) fn expand(expr: &str) -> Result<Vec<String>, ParseError> {
    expand_with_limit(expr, MAX_HOSTS)
}

/// [`expand`], refusing to produce more than `limit` hosts.
pub(crate) fn expand_with_limit(expr: &str, limit: usize) -> Result<Vec<String>, ParseError> {
    if expr.is_empty() {
        return Err(ParseError::EmptyList);
    }
    let mut hosts = Vec::new();
    for (offset, element) in split_top_level(expr)? {
        if element.is_empty() {
            return Err(empty_element(expr, offset));
        }
        expand_element(element, expr, limit, &mut hosts)?;
    }
    check_unique(&hosts, expr)?;
    Ok(hosts)
}

/// Splits `list` at the commas outside brackets, into (byte offset, element).
///
/// Checks that brackets balance and do not nest.
pub(crate) fn split_top_level(list: &str) -> Result<Vec<(usize, &str)>, ParseError> {
    let mut elements = Vec::new();
    let mut open: Option<usize> = None;
    let mut start = 0;
    for (i, c) in list.char_indices() {
        match c {
            '[' if open.is_some() => {
                return Err(ParseError::Nested {
                    expr: shorten(list),
                    pos: char_pos(list, i),
                });
            }
            '[' => open = Some(i),
            ']' if open.is_none() => return Err(unbalanced(list, ']', i)),
            ']' => open = None,
            ',' if open.is_none() => {
                elements.push((start, &list[start..i]));
                start = i + 1;
            }
            _ => {}
        }
    }
    if let Some(i) = open {
        return Err(unbalanced(list, '[', i));
    }
    elements.push((start, &list[start..]));
    Ok(elements)
}

/// The error for an empty element starting at byte `offset` of `list`.
pub(crate) fn empty_element(list: &str, offset: usize) -> ParseError {
    ParseError::EmptyElement {
        expr: shorten(list),
        pos: char_pos(list, offset),
    }
}

/// Checks one host name written out in full (a hostfile line, this machine's name).
pub(crate) fn validate_host(host: &str) -> Result<(), ParseError> {
    if host.is_empty() {
        return Err(ParseError::EmptyElement {
            expr: String::new(),
            pos: 1,
        });
    }
    check_literal(host, host)?;
    check_host(host)
}

/// The first host that appears twice (ignoring ASCII case, as DNS does), with
/// both 1-based positions.
pub(crate) fn find_duplicate<'a>(
    hosts: impl IntoIterator<Item = &'a str>,
) -> Option<(String, usize, usize)> {
    let hosts = hosts.into_iter();
    let mut seen: HashMap<Cow<'a, str>, usize> = HashMap::with_capacity(hosts.size_hint().0);
    for (i, host) in hosts.enumerate() {
        let key = if host.bytes().any(|b| b.is_ascii_uppercase()) {
            Cow::Owned(host.to_ascii_lowercase())
        } else {
            Cow::Borrowed(host)
        };
        if let Some(first) = seen.insert(key, i + 1) {
            return Some((host.to_string(), first, i + 1));
        }
    }
    None
}

fn check_unique(hosts: &[String], expr: &str) -> Result<(), ParseError> {
    if hosts.len() < 2 {
        return Ok(());
    }
    match find_duplicate(hosts.iter().map(String::as_str)) {
        Some((host, first, second)) => Err(ParseError::Duplicate {
            host,
            first,
            second,
            expr: shorten(expr),
        }),
        None => Ok(()),
    }
}

/// 1-based character position of byte offset `i`, for messages.
fn char_pos(s: &str, i: usize) -> usize {
    s[..i].chars().count() + 1
}

fn unbalanced(list: &str, bracket: char, i: usize) -> ParseError {
    ParseError::Unbalanced {
        expr: shorten(list),
        bracket,
        pos: char_pos(list, i),
    }
}

/// A piece of one element: literal text, or a bracket group.
enum Part<'a> {
    Literal(&'a str),
    Group(Vec<String>),
}

/// Expands one element (no top-level commas, brackets balanced) onto `out`.
fn expand_element(
    element: &str,
    list: &str,
    limit: usize,
    out: &mut Vec<String>,
) -> Result<(), ParseError> {
    let budget = limit.saturating_sub(out.len());
    let too_many = || ParseError::TooManyHosts {
        expr: shorten(list),
        limit,
    };
    if !element.contains('[') {
        // A name written out (`gpu01`, `10.0.0.1`): the same checks, in the
        // same order, as the general case below, without its parts.
        check_literal(element, element)?;
        if budget == 0 {
            return Err(too_many());
        }
        check_host(element)?;
        out.push(element.to_string());
        return Ok(());
    }
    let parts = parse_element(element, budget, &too_many)?;
    let mut count: usize = 1;
    for part in &parts {
        if let Part::Group(values) = part {
            count = count
                .checked_mul(values.len())
                .filter(|n| *n <= budget)
                .ok_or_else(too_many)?;
        }
    }
    if count > budget {
        return Err(too_many());
    }
    let groups: Vec<&[String]> = parts
        .iter()
        .filter_map(|p| match p {
            Part::Group(values) => Some(values.as_slice()),
            Part::Literal(_) => None,
        })
        .collect();
    // An odometer over the groups: the rightmost turns fastest.
    let mut index = vec![0usize; groups.len()];
    for _ in 0..count {
        let mut host = String::new();
        let mut g = 0;
        for part in &parts {
            match part {
                Part::Literal(text) => host.push_str(text),
                Part::Group(_) => {
                    host.push_str(&groups[g][index[g]]);
                    g += 1;
                }
            }
        }
        check_host(&host)?;
        out.push(host);
        for k in (0..groups.len()).rev() {
            index[k] += 1;
            if index[k] < groups[k].len() {
                break;
            }
            index[k] = 0;
        }
    }
    Ok(())
}

fn parse_element<'a>(
    element: &'a str,
    budget: usize,
    too_many: &dyn Fn() -> ParseError,
) -> Result<Vec<Part<'a>>, ParseError> {
    let mut parts = Vec::new();
    let mut rest = element;
    loop {
        let Some(open) = rest.find('[') else {
            if !rest.is_empty() {
                check_literal(rest, element)?;
                parts.push(Part::Literal(rest));
            }
            return Ok(parts);
        };
        let literal = &rest[..open];
        if !literal.is_empty() {
            check_literal(literal, element)?;
            parts.push(Part::Literal(literal));
        }
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            return Err(unbalanced(element, '[', element.len() - rest.len() + open));
        };
        let group = &rest[open + 1..close];
        parts.push(Part::Group(parse_group(group, element, budget, too_many)?));
        rest = &rest[close + 1..];
    }
}

/// `01-04,07` → `["01", "02", "03", "04", "07"]`.
fn parse_group(
    group: &str,
    element: &str,
    budget: usize,
    too_many: &dyn Fn() -> ParseError,
) -> Result<Vec<String>, ParseError> {
    let mut values = Vec::new();
    for item in group.split(',') {
        if item.is_empty() {
            return Err(ParseError::EmptyRangeItem {
                group: shorten(group),
                expr: shorten(element),
            });
        }
        let (lo_text, hi_text) = item.split_once('-').unwrap_or((item, item));
        let is_number = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !is_number(lo_text) || !is_number(hi_text) {
            return Err(ParseError::NotNumeric {
                item: shorten(item),
                expr: shorten(element),
            });
        }
        let too_large = || ParseError::NumberTooLarge {
            item: shorten(item),
            expr: shorten(element),
        };
        if lo_text.len() > MAX_DIGITS || hi_text.len() > MAX_DIGITS {
            return Err(too_large());
        }
        let lo: u64 = lo_text.parse().map_err(|_| too_large())?;
        let hi: u64 = hi_text.parse().map_err(|_| too_large())?;
        if lo > hi {
            return Err(ParseError::Reversed {
                item: shorten(item),
                expr: shorten(element),
            });
        }
        let size = usize::try_from(hi - lo)
            .ok()
            .and_then(|n| n.checked_add(1))
            .ok_or_else(too_many)?;
        if values.len().saturating_add(size) > budget {
            return Err(too_many());
        }
        // Slurm prints every number with the width of the range's start.
        let width = lo_text.len();
        values.extend((lo..=hi).map(|n| format!("{n:0width$}")));
    }
    Ok(values)
}

/// Literal text of a host name: letters, digits, `.`, `-`, `_`.
fn check_literal(text: &str, host: &str) -> Result<(), ParseError> {
    match text
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
    {
        None => Ok(()),
        Some(c) => Err(ParseError::BadChar {
            host: shorten(host),
            what: if c.is_whitespace() {
                "whitespace".to_string()
            } else {
                format!("'{}'", c.escape_debug())
            },
        }),
    }
}

/// Checks a complete host name whose characters are already known to be good.
fn check_host(host: &str) -> Result<(), ParseError> {
    if host.starts_with('-') {
        return Err(ParseError::LeadingDash {
            host: shorten(host),
        });
    }
    if host.len() > MAX_HOST_LEN {
        return Err(ParseError::TooLong {
            host: shorten(host),
            limit: MAX_HOST_LEN,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(expr: &str) -> Vec<String> {
        expand(expr).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    fn err(expr: &str) -> String {
        match expand(expr) {
            Ok(hosts) => panic!("{expr} expanded to {hosts:?}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn plain_lists() {
        assert_eq!(ok("a"), ["a"]);
        assert_eq!(ok("a,b,c"), ["a", "b", "c"]);
        assert_eq!(ok("10.0.0.1,10.0.0.2"), ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(ok("n_1.example.org"), ["n_1.example.org"]);
    }

    #[test]
    fn ranges_lists_and_padding() {
        assert_eq!(
            ok("gpu[01-04,07]"),
            ["gpu01", "gpu02", "gpu03", "gpu04", "gpu07"]
        );
        assert_eq!(ok("a[08-11]"), ["a08", "a09", "a10", "a11"]);
        assert_eq!(ok("a[8-11]"), ["a8", "a9", "a10", "a11"]);
        // Slurm's rule: the width of the range's start.
        assert_eq!(ok("a[008-11]"), ["a008", "a009", "a010", "a011"]);
        assert_eq!(ok("a[1-010]").len(), 10);
        assert_eq!(ok("a[007]"), ["a007"]);
        assert_eq!(ok("[1-2]"), ["1", "2"]);
        assert_eq!(ok("10.0.0.[1-3]"), ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
    }

    #[test]
    fn suffixes_and_several_groups() {
        assert_eq!(ok("node[1-2]-ib"), ["node1-ib", "node2-ib"]);
        assert_eq!(
            ok("rack[1-2]-node[01-02]"),
            [
                "rack1-node01",
                "rack1-node02",
                "rack2-node01",
                "rack2-node02"
            ]
        );
        assert_eq!(
            ok("a[1-2]b[3,5]c[7]"),
            ["a1b3c7", "a1b5c7", "a2b3c7", "a2b5c7"]
        );
        assert_eq!(ok("x[1-2],y,z[9-10]"), ["x1", "x2", "y", "z9", "z10"]);
    }

    #[test]
    fn syntax_errors_name_the_input() {
        assert_eq!(err("gpu[9-3]"), "reversed range '9-3' in 'gpu[9-3]'");
        assert_eq!(err("a,gpu[9-3]"), "reversed range '9-3' in 'gpu[9-3]'");
        assert_eq!(err("gpu[1-2"), "unmatched '[' at character 4 of 'gpu[1-2'");
        assert_eq!(err("gpu1-2]"), "unmatched ']' at character 7 of 'gpu1-2]'");
        assert_eq!(err("gpu[[1]]"), "nested '[' at character 5 of 'gpu[[1]]'");
        assert_eq!(err("a,,b"), "empty host name at character 3 of 'a,,b'");
        assert_eq!(err(",a"), "empty host name at character 1 of ',a'");
        assert_eq!(err("a,"), "empty host name at character 3 of 'a,'");
        assert_eq!(err(""), "empty hostlist");
        assert_eq!(err("gpu[]"), "empty item in range '[]' of 'gpu[]'");
        assert_eq!(err("gpu[1,]"), "empty item in range '[1,]' of 'gpu[1,]'");
        assert_eq!(
            err("gpu[a-b]"),
            "'a-b' in 'gpu[a-b]' is not a number or a range such as 1-4"
        );
        for bad in ["gpu[1-x]", "gpu[-3]", "gpu[1-2-3]", "gpu[1- 2]", "gpu[+1]"] {
            assert!(err(bad).contains("is not a number"), "{bad}");
        }
        assert_eq!(
            err("gpu[1-99999999999999999999]"),
            "number '1-99999999999999999999' in 'gpu[1-99999999999999999999]' is too large"
        );
    }

    #[test]
    fn absurd_sizes_are_refused_before_expanding() {
        assert_eq!(
            err("a[1-1000001]"),
            "'a[1-1000001]' expands to more than 1000000 hosts"
        );
        assert!(err("a[1-1000]b[1-1000]c[1-2]").contains("more than 1000000 hosts"));
        assert!(err("a[0-999999999999999999]").contains("more than 1000000 hosts"));
        assert!(err("a[1-600000],b[1-600000]").contains("more than 1000000 hosts"));
        assert_eq!(ok("a[1-1000]b[1-1000]").len(), 1_000_000);
    }

    #[test]
    fn duplicates_name_the_host_and_both_positions() {
        assert_eq!(
            err("gpu[01-03],gpu02"),
            "duplicate host 'gpu02' at positions 2 and 4 in 'gpu[01-03],gpu02'"
        );
        assert!(err("a[1-3,2]").starts_with("duplicate host 'a2' at positions 2 and 4"));
        assert!(err("A,a").starts_with("duplicate host 'a' at positions 1 and 2"));
    }

    #[test]
    fn shell_metacharacters_and_whitespace_are_refused() {
        assert_eq!(
            err("a;rm"),
            "host name 'a;rm' contains ';'; host names hold only letters, digits, '.', '-' and '_'"
        );
        assert!(err("a b").contains("contains whitespace"));
        assert!(err("a\nb").contains("contains whitespace"));
        for bad in [
            "$(x)", "a`b`", "a'b", "a\"b", "a|b", "a&b", "a*", "a:2", "a\\b", "é",
        ] {
            assert!(err(bad).contains("host names hold only"), "{bad}");
        }
        assert!(err("a\u{1}").contains(r"'\u{1}'"));
        assert_eq!(
            err("-oProxyCommand"),
            "host name '-oProxyCommand' starts with '-'; host names start with a letter or a digit"
        );
        assert!(err(&"a".repeat(256)).contains("longer than 255 characters"));
        assert_eq!(ok(&"a".repeat(255)).len(), 1);
    }

    #[test]
    fn validate_host_checks_single_names() {
        assert!(validate_host("gpu01.example.org").is_ok());
        assert!(validate_host("gpu[01]").is_err());
        assert!(validate_host("").is_err());
        assert!(validate_host("-x").is_err());
    }

    #[test]
    fn limit_is_shared_by_all_elements() {
        assert!(expand_with_limit("a[1-3],b[1-3]", 5).is_err());
        assert_eq!(
            expand_with_limit("a[1-3],b[1-2]", 5).map(|h| h.len()),
            Ok(5)
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(expr in "\\PC{0,40}") {
            let _ = expand(&expr);
        }

        #[test]
        fn never_panics_on_hostlist_like_input(expr in "[a-c0-9\\[\\],\\-:.]{0,40}") {
            if let Ok(hosts) = expand_with_limit(&expr, 10_000) {
                proptest::prop_assert!(!hosts.is_empty());
                for h in &hosts {
                    proptest::prop_assert!(validate_host(h).is_ok(), "{}", h);
                }
            }
        }
    }
}
