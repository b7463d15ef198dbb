//! The `MULTINODE_HOSTLIST` form, `host:slots,host:slots`, and
//! `MULTINODE_HOSTLIST_NOSLOTS`, `host,host` (also the syntax of `--hosts`).
//!
//! Each element is a hostlist expression (`gpu[01-04]:2`); its `:N` applies to
//! every host it expands to, and a missing `:N` means one slot. IPv6 literals
//! are written in brackets, `[fe80::1]:2` or `[fd00::2]`, in both lists: a
//! bare `fd00::2:2` is ambiguous, so it is an error. A bracket group holding a
//! `:` is an IPv6 literal; any other is a hostlist range.

use std::borrow::Cow;
use std::net::Ipv6Addr;

use super::hostlist::{self, MAX_HOSTS, empty_element, find_duplicate, split_top_level};
use super::slots::parse_slots;
use super::topology_error::{ParseError, shorten};

/// One node of the job, in node-rank order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Node {
    /// A host name, or an IP literal (IPv6 without brackets).
    pub host: String,
    pub slots: u32,
}

impl Node {
    /// The host as the hostlists write it: IPv6 literals in brackets.
    pub(super) fn written(&self) -> Cow<'_, str> {
        if self.host.contains(':') {
            Cow::Owned(format!("[{}]", self.host))
        } else {
            Cow::Borrowed(&self.host)
        }
    }
}

/// The host part of one element of the list.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HostPart<'a> {
    /// `[fe80::1]`
    Ipv6(Ipv6Addr),
    /// `gpu[01-04]`, `host`, `10.0.0.1`
    Expr(&'a str),
}

/// Splits `gpu[01-02]:4` into its host part and its slot count text, if any.
///
/// Checks IPv6 literals; does not expand the hostlist expression.
pub(crate) fn split_slots(element: &str) -> Result<(HostPart<'_>, Option<&str>), ParseError> {
    if let Some(inner) = element.strip_prefix('[')
        && let Some((addr, rest)) = inner.split_once(']')
        && addr.contains(':')
    {
        let ip = addr.parse::<Ipv6Addr>().map_err(|_| ParseError::BadIpv6 {
            text: shorten(addr),
        })?;
        return match rest.strip_prefix(':') {
            Some(slots) => Ok((HostPart::Ipv6(ip), Some(slots))),
            None if rest.is_empty() => Ok((HostPart::Ipv6(ip), None)),
            None => Err(ParseError::BadChar {
                host: shorten(element),
                what: format!("'{}' after the IPv6 address", shorten(rest)),
            }),
        };
    }
    let Some((host, slots)) = element.rsplit_once(':') else {
        return Ok((HostPart::Expr(element), None));
    };
    if !host.contains(':') {
        // One ':' in all: neither the element nor the host is an IPv6
        // address (those have two at least), and the host has no ':' left.
        return Ok((HostPart::Expr(host), Some(slots)));
    }
    if element.parse::<Ipv6Addr>().is_ok() {
        return Err(ParseError::UnbracketedIpv6 {
            text: shorten(element),
        });
    }
    if host.parse::<Ipv6Addr>().is_ok() {
        return Err(ParseError::UnbracketedIpv6 {
            text: shorten(host),
        });
    }
    // `gpu01:2;gpu02:2`, `gpu01:2 gpu02:2`: two entries, wrongly separated.
    if let Some(sep) = host.chars().find(|c| *c == ';' || c.is_whitespace()) {
        return Err(ParseError::BadSeparator {
            list: shorten(element),
            sep: if sep == ';' {
                "';'".into()
            } else {
                "whitespace".into()
            },
        });
    }
    Err(ParseError::BadChar {
        host: shorten(host),
        what: "':'".to_string(),
    })
}

/// `host:slots,gpu[01-02]:4,[fe80::1]:2,other` → nodes (`other` gets 1 slot).
pub(crate) fn parse_host_slots(list: &str) -> Result<Vec<Node>, ParseError> {
    parse_entries(list, true)
}

/// `host,gpu[01-02],[fe80::1]` → host names; a `:N` is an error.
pub(crate) fn parse_noslots(list: &str) -> Result<Vec<String>, ParseError> {
    Ok(parse_entries(list, false)?
        .into_iter()
        .map(|n| n.host)
        .collect())
}

fn parse_entries(list: &str, allow_slots: bool) -> Result<Vec<Node>, ParseError> {
    if list.is_empty() {
        return Err(ParseError::EmptyList);
    }
    let mut nodes = Vec::new();
    for (offset, element) in split_top_level(list)? {
        if element.is_empty() {
            return Err(empty_element(list, offset));
        }
        let (host_part, slots_text) = split_slots(element)?;
        if slots_text.is_some() && !allow_slots {
            return Err(ParseError::SlotsNotAllowed {
                entry: shorten(element),
            });
        }
        let hosts = match host_part {
            HostPart::Ipv6(ip) => vec![ip.to_string()],
            HostPart::Expr(expr) => hostlist::expand_with_limit(expr, MAX_HOSTS - nodes.len())
                .map_err(|e| match e {
                    ParseError::TooManyHosts { .. } => ParseError::TooManyHosts {
                        expr: shorten(list),
                        limit: MAX_HOSTS,
                    },
                    e => e,
                })?,
        };
        if nodes.len() + hosts.len() > MAX_HOSTS {
            return Err(ParseError::TooManyHosts {
                expr: shorten(list),
                limit: MAX_HOSTS,
            });
        }
        let slots = match slots_text {
            Some(text) => parse_slots(text, &element[..element.len() - text.len() - 1])?,
            None => 1,
        };
        nodes.extend(hosts.into_iter().map(|host| Node { host, slots }));
    }
    if let Some((host, first, second)) = find_duplicate(nodes.iter().map(|n| n.host.as_str())) {
        return Err(ParseError::Duplicate {
            host,
            first,
            second,
            expr: shorten(list),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(list: &str) -> Vec<(String, u32)> {
        parse_host_slots(list)
            .unwrap_or_else(|e| panic!("{list}: {e}"))
            .into_iter()
            .map(|n| (n.host, n.slots))
            .collect()
    }

    fn pairs(p: &[(&str, u32)]) -> Vec<(String, u32)> {
        p.iter().map(|(h, s)| (h.to_string(), *s)).collect()
    }

    fn err(list: &str) -> String {
        match parse_host_slots(list) {
            Ok(n) => panic!("{list} parsed as {n:?}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn host_slots_with_expressions() {
        assert_eq!(nodes("a:2,b:2"), pairs(&[("a", 2), ("b", 2)]));
        assert_eq!(nodes("a,b:3"), pairs(&[("a", 1), ("b", 3)]));
        assert_eq!(
            nodes("gpu[01-02]:4,cpu1"),
            pairs(&[("gpu01", 4), ("gpu02", 4), ("cpu1", 1)])
        );
        assert_eq!(
            nodes("10.0.0.[1-2]:8"),
            pairs(&[("10.0.0.1", 8), ("10.0.0.2", 8)])
        );
    }

    #[test]
    fn ipv6_literals_in_brackets() {
        assert_eq!(
            nodes("[fe80::1]:2,[FD00::0002],[::1]:1"),
            pairs(&[("fe80::1", 2), ("fd00::2", 1), ("::1", 1)])
        );
        assert_eq!(
            err("fd00::2:2"),
            "IPv6 address 'fd00::2:2' must be written in brackets: '[fd00::2:2]', or '[fd00::2:2]:SLOTS' with a slot count"
        );
        assert!(err("fd00::2").contains("must be written in brackets"));
        assert!(err("[fe80::zz]:2").contains("'[fe80::zz]' is not an IPv6 address"));
        assert!(err("[fe80::1%eth0]").contains("is not an IPv6 address"));
        assert!(err("[fe80::1]x").contains("after the IPv6 address"));
        assert!(err("[fe80::1]:2,[fe80:0::1]").starts_with("duplicate host 'fe80::1'"));
    }

    #[test]
    fn bad_slot_counts_are_named() {
        assert_eq!(
            err("a:0"),
            "slot count '0' for 'a' is not a positive integer"
        );
        assert_eq!(
            err("a:-1"),
            "slot count '-1' for 'a' is not a positive integer"
        );
        assert_eq!(err("a:"), "slot count '' for 'a' is not a positive integer");
        assert_eq!(
            err("gpu[1-2]:x"),
            "slot count 'x' for 'gpu[1-2]' is not a positive integer"
        );
        assert!(err("a:99999999999").contains("too large"));
        assert!(err("a:b:c").contains("contains ':'"));
    }

    #[test]
    fn list_errors() {
        assert_eq!(err(""), "empty hostlist");
        assert_eq!(err("a:1,,b"), "empty host name at character 5 of 'a:1,,b'");
        assert_eq!(
            err("a:1,b,a:2"),
            "duplicate host 'a' at positions 1 and 3 in 'a:1,b,a:2'"
        );
        assert!(err("a[1-600000]:1,b[1-600000]").contains("more than 1000000 hosts"));
        assert!(err("a;b:1").contains("contains ';'"));
        assert_eq!(
            err("gpu01:2;gpu02:2"),
            "'gpu01:2;gpu02:2' separates its hosts with ';'; separate them with ',': host1:2,host2:2"
        );
        assert_eq!(
            err("gpu01:2 gpu02:2"),
            "'gpu01:2 gpu02:2' separates its hosts with whitespace; separate them with ',': host1:2,host2:2"
        );
    }

    #[test]
    fn noslots_refuses_slot_counts() {
        assert_eq!(
            parse_noslots("a,gpu[1-2],[fd00::2]"),
            Ok(vec![
                "a".to_string(),
                "gpu1".to_string(),
                "gpu2".to_string(),
                "fd00::2".to_string()
            ])
        );
        assert_eq!(
            parse_noslots("a,b:2").map_err(|e| e.to_string()),
            Err("'b:2' has a slot count, but this list holds host names only".to_string())
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(list in "\\PC{0,40}") {
            let _ = parse_host_slots(&list);
            let _ = parse_noslots(&list);
        }

        #[test]
        fn never_panics_on_list_like_input(list in "[ab0-9\\[\\],:f\\-]{0,30}") {
            let _ = parse_host_slots(&list);
        }
    }
}
