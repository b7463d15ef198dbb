//! Hostfiles, one host a line, in the forms schedulers and MPIs write them:
//!
//! - Open MPI: `host slots=N [max_slots=M]`;
//! - MPICH: `host:N`;
//! - plain: `host`, repeated once per slot, consecutively or not (this is
//!   `PBS_NODEFILE` and LSF's `LSB_DJOB_HOSTFILE`): slots are the occurrences,
//!   nodes come in the order of their first appearance.
//!
//! `#` starts a comment; blank lines are skipped; forms may be mixed line by
//! line. A host with an explicit count (`:N` or `slots=N`) that appears again
//! is a duplicate, an error. IPv6 literals may be bare (`fd00::2 slots=2`) or
//! in brackets (`[fd00::2]:2`, required with `:N`).
//!
//! Also LSF's `LSB_MCPU_HOSTS`, `host1 4 host2 4`.

use std::collections::HashMap;
use std::net::Ipv6Addr;

use super::host_slots::Node;
use super::host_slots::{HostPart, split_slots};
use super::hostlist::{MAX_HOSTS, find_duplicate, validate_host};
use super::slots::parse_slots;
use super::topology_error::{ParseError, shorten};

/// A hostfile's text → nodes.
pub(crate) fn parse_hostfile(text: &str) -> Result<Vec<Node>, ParseError> {
    struct Seen {
        index: usize,
        line: usize,
        explicit: bool,
    }
    let mut nodes: Vec<Node> = Vec::new();
    let mut seen: HashMap<String, Seen> = HashMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let at_line = |error| ParseError::Line {
            line,
            error: Box::new(error),
        };
        let content = raw.split('#').next().unwrap_or_default().trim();
        if content.is_empty() {
            continue;
        }
        let (host, slots) = parse_line(content).map_err(at_line)?;
        match seen.get(&host.to_ascii_lowercase()) {
            Some(first) if first.explicit || slots.is_some() => {
                return Err(ParseError::DuplicateLine {
                    host,
                    first: first.line,
                    second: line,
                });
            }
            Some(first) => {
                let node = &mut nodes[first.index];
                node.slots = node.slots.checked_add(1).ok_or_else(|| {
                    at_line(ParseError::SlotsTooLarge {
                        value: "4294967296".to_string(),
                        host: host.clone(),
                    })
                })?;
            }
            None => {
                if nodes.len() == MAX_HOSTS {
                    return Err(at_line(ParseError::TooManyHosts {
                        expr: "the hostfile".to_string(),
                        limit: MAX_HOSTS,
                    }));
                }
                seen.insert(
                    host.to_ascii_lowercase(),
                    Seen {
                        index: nodes.len(),
                        line,
                        explicit: slots.is_some(),
                    },
                );
                nodes.push(Node {
                    host,
                    slots: slots.unwrap_or(1),
                });
            }
        }
    }
    if nodes.is_empty() {
        return Err(ParseError::NoHosts);
    }
    Ok(nodes)
}

/// One line without its comment: the host, and its slot count if written.
fn parse_line(content: &str) -> Result<(String, Option<u32>), ParseError> {
    let mut words = content.split_whitespace();
    let first = words.next().unwrap_or_default();
    let (host, mut slots) = parse_host_word(first)?;
    let mut max_slots = None;
    for word in words {
        let (target, value) = match word.split_once('=') {
            Some(("slots", value)) => (&mut slots, value),
            Some(("max_slots" | "max-slots", value)) => (&mut max_slots, value),
            _ => {
                return Err(ParseError::UnknownOption {
                    option: shorten(word),
                    host,
                });
            }
        };
        if target.is_some() {
            return Err(ParseError::TwoSlotCounts { host });
        }
        *target = Some(parse_slots(value, &host)?);
    }
    if let (Some(slots), Some(max)) = (slots, max_slots)
        && max < slots
    {
        return Err(ParseError::MaxBelowSlots { host, slots, max });
    }
    Ok((host, slots))
}

/// `host`, `host:N`, `fd00::2`, `[fd00::2]`, `[fd00::2]:N`.
fn parse_host_word(word: &str) -> Result<(String, Option<u32>), ParseError> {
    if let Ok(ip) = word.parse::<Ipv6Addr>() {
        return Ok((ip.to_string(), None));
    }
    let (host, slots) = match split_slots(word)? {
        (HostPart::Ipv6(ip), slots) => (ip.to_string(), slots),
        (HostPart::Expr(host), slots) => {
            validate_host(host)?;
            (host.to_string(), slots)
        }
    };
    let slots = slots.map(|s| parse_slots(s, &host)).transpose()?;
    Ok((host, slots))
}

/// LSF's `LSB_MCPU_HOSTS`: `host1 4 host2 4`.
pub(crate) fn parse_lsb_mcpu_hosts(value: &str) -> Result<Vec<Node>, ParseError> {
    let words: Vec<&str> = value.split_whitespace().collect();
    if words.is_empty() {
        return Err(ParseError::EmptyList);
    }
    let mut nodes = Vec::with_capacity(words.len() / 2);
    for pair in words.chunks(2) {
        let host = match pair[0].parse::<Ipv6Addr>() {
            Ok(ip) => ip.to_string(),
            Err(_) => {
                validate_host(pair[0])?;
                pair[0].to_string()
            }
        };
        let Some(slots) = pair.get(1) else {
            return Err(ParseError::MissingSlots { host });
        };
        let slots = parse_slots(slots, &host)?;
        nodes.push(Node { host, slots });
    }
    if let Some((host, first, second)) = find_duplicate(nodes.iter().map(|n| n.host.as_str())) {
        return Err(ParseError::Duplicate {
            host,
            first,
            second,
            expr: shorten(value),
        });
    }
    Ok(nodes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(text: &str) -> Vec<(String, u32)> {
        parse_hostfile(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e}"))
            .into_iter()
            .map(|n| (n.host, n.slots))
            .collect()
    }

    fn pairs(p: &[(&str, u32)]) -> Vec<(String, u32)> {
        p.iter().map(|(h, s)| (h.to_string(), *s)).collect()
    }

    fn err(text: &str) -> String {
        match parse_hostfile(text) {
            Ok(n) => panic!("{text:?} parsed as {n:?}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn open_mpi_form() {
        let text = "# the cluster\n\ngpu01 slots=4 max_slots=8\ngpu02 slots=2   # half\n  gpu03\n";
        assert_eq!(
            nodes(text),
            pairs(&[("gpu01", 4), ("gpu02", 2), ("gpu03", 1)])
        );
        assert_eq!(nodes("a max-slots=4"), pairs(&[("a", 1)]));
    }

    #[test]
    fn mpich_form() {
        assert_eq!(
            nodes("a:2\nb:3\r\nc\n"),
            pairs(&[("a", 2), ("b", 3), ("c", 1)])
        );
        assert_eq!(
            nodes("[fd00::2]:2\nfd00::3\nfd00::4 slots=3"),
            pairs(&[("fd00::2", 2), ("fd00::3", 1), ("fd00::4", 3)])
        );
    }

    #[test]
    fn plain_form_counts_occurrences_in_first_appearance_order() {
        // PBS_NODEFILE: consecutive.
        assert_eq!(nodes("n1\nn1\nn2\nn2\n"), pairs(&[("n1", 2), ("n2", 2)]));
        // Round-robin: not consecutive.
        assert_eq!(nodes("n2\nn1\nn2\nn1\nn2"), pairs(&[("n2", 3), ("n1", 2)]));
        assert_eq!(nodes("N1\nn1"), pairs(&[("N1", 2)]));
    }

    #[test]
    fn errors_name_the_line() {
        assert_eq!(
            err("a slots=2\nb slots=0\n"),
            "line 2: slot count '0' for 'b' is not a positive integer"
        );
        assert_eq!(
            err("a slots=2\nb\na slots=1"),
            "duplicate host 'a' on lines 1 and 3"
        );
        assert_eq!(err("a\nb\na:2"), "duplicate host 'a' on lines 1 and 3");
        assert_eq!(err("a:2\na"), "duplicate host 'a' on lines 1 and 2");
        assert_eq!(
            err("a cpus=2"),
            "line 1: unknown option 'cpus=2' for 'a'; a hostfile line is 'host', 'host:N' or 'host slots=N [max_slots=M]'"
        );
        assert_eq!(
            err("a slots=4 max_slots=2"),
            "line 1: max_slots=2 is less than slots=4 for 'a'"
        );
        assert!(err("a:2 slots=2").contains("has a slot count twice"));
        assert!(err("a slots=2 slots=3").contains("has a slot count twice"));
        assert!(err("a slots=-1").contains("slot count '-1' for 'a'"));
        assert!(err("a slots=x").contains("slot count 'x' for 'a'"));
        assert!(err("a slots=99999999999").contains("too large"));
        assert!(err("a;b").contains("contains ';'"));
        assert!(err("gpu[1-2]").contains("contains '['"));
        assert!(err("-x").contains("starts with '-'"));
        assert_eq!(err(""), "no hosts in it");
        assert_eq!(err("# only a comment\n\n"), "no hosts in it");
    }

    #[test]
    fn lsb_mcpu_hosts() {
        let parsed = parse_lsb_mcpu_hosts("host1 4 host2 2")
            .map(|n| n.into_iter().map(|n| (n.host, n.slots)).collect::<Vec<_>>());
        assert_eq!(parsed, Ok(pairs(&[("host1", 4), ("host2", 2)])));
        let e = |v: &str| parse_lsb_mcpu_hosts(v).map_err(|e| e.to_string()).err();
        assert_eq!(
            e("host1 4 host2"),
            Some("host 'host2' has no slot count; the form is 'host1 4 host2 4'".to_string())
        );
        assert!(e("host1 0").is_some_and(|m| m.contains("slot count '0'")));
        assert!(e("a 1 a 2").is_some_and(|m| m.starts_with("duplicate host 'a'")));
        assert!(e("").is_some());
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,60}") {
            let _ = parse_hostfile(&text);
            let _ = parse_lsb_mcpu_hosts(&text);
        }

        #[test]
        fn never_panics_on_hostfile_like_input(text in "([ab1-3:=# \n\\[\\]]|slots=|max_slots=|[0-9]{1,12}){0,20}") {
            let _ = parse_hostfile(&text);
        }
    }
}
