//! Host names folded into Slurm's bracket syntax for the table:
//! `node01,node02,node03,node07` → `node[01-03,07]`; and the rank-list
//! format (`0-3,5`: a relay's `--nodes`), written and read here alone. Pure.
//!
//! The last run of digits of each name is its number; names that differ only
//! there fold together, zero padding kept (`gpu01`..`gpu10` fold with width
//! 2; `n1` and `n01` do not fold). IPv6 literals stay as they are.

use std::collections::BTreeSet;

/// A name split around its last run of digits: `rack1-node` `07` `-ib`.
pub(crate) struct Split<'a> {
    pub(crate) prefix: &'a str,
    pub(crate) digits: &'a str,
    pub(crate) suffix: &'a str,
}

/// `host` cut around its last run of digits; `None` for a name without
/// digits, an IPv6 literal, or a number too long for `u64` (at most 18
/// digits are read): those stay literal, in a fold and in the parser.
pub(crate) fn split(host: &str) -> Option<Split<'_>> {
    if host.contains(':') {
        return None;
    }
    let end = host.rfind(|c: char| c.is_ascii_digit())? + 1;
    let start = host[..end]
        .rfind(|c: char| !c.is_ascii_digit())
        .map_or(0, |i| i + 1);
    let digits = &host[start..end];
    // Numbers too long for u64 stay unfolded.
    if digits.len() > 18 {
        return None;
    }
    Some(Split {
        prefix: &host[..start],
        digits,
        suffix: &host[end..],
    })
}

/// The zero-padded width of `digits`, or 0 when it is not padded.
fn pad_width(digits: &str) -> usize {
    if digits.len() > 1 && digits.starts_with('0') {
        digits.len()
    } else {
        0
    }
}

/// One foldable family: a prefix, a suffix, a padding, and its numbers.
struct Family<'a> {
    prefix: &'a str,
    suffix: &'a str,
    width: usize,
    numbers: BTreeSet<u64>,
}

enum Entry<'a> {
    Family(Family<'a>),
    Plain(&'a str),
}

/// Folds `hosts` (in the order given; duplicates dropped) into one string.
pub(crate) fn fold<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut entries: Vec<Entry<'_>> = Vec::new();
    let mut seen_plain: BTreeSet<&str> = BTreeSet::new();
    for host in hosts {
        let host = host.as_ref();
        let Some(s) = split(host) else {
            if seen_plain.insert(host) {
                entries.push(Entry::Plain(host));
            }
            continue;
        };
        let Ok(number) = s.digits.parse::<u64>() else {
            entries.push(Entry::Plain(host));
            continue;
        };
        let padded = pad_width(s.digits);
        // An unpadded number as long as a padded family's width belongs to it
        // (gpu10 with gpu01..gpu09); a padded one only to its own width.
        let family = entries.iter_mut().find_map(|e| match e {
            Entry::Family(f)
                if f.prefix == s.prefix
                    && f.suffix == s.suffix
                    && (f.width == padded
                        || (padded == 0 && f.width == s.digits.len())
                        || (f.width == 0
                            && padded == s.digits.len()
                            && f.numbers.iter().all(|n| n.to_string().len() == padded))) =>
            {
                Some(f)
            }
            _ => None,
        });
        match family {
            Some(f) => {
                f.width = f.width.max(padded);
                f.numbers.insert(number);
            }
            None => entries.push(Entry::Family(Family {
                prefix: s.prefix,
                suffix: s.suffix,
                width: padded,
                numbers: BTreeSet::from([number]),
            })),
        }
    }
    entries
        .iter()
        .map(|e| match e {
            Entry::Plain(h) => h.to_string(),
            Entry::Family(f) => render(f),
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn render(f: &Family<'_>) -> String {
    let w = f.width;
    let num = |n: u64| format!("{n:0w$}");
    if let (1, Some(n)) = (f.numbers.len(), f.numbers.first()) {
        return format!("{}{}{}", f.prefix, num(*n), f.suffix);
    }
    let mut ranges: Vec<String> = Vec::new();
    let mut iter = f.numbers.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        ranges.push(if start == end {
            num(start)
        } else {
            format!("{}-{}", num(start), num(end))
        });
    }
    format!("{}[{}]{}", f.prefix, ranges.join(","), f.suffix)
}

/// Ranks in the order given, consecutive ones as ranges: `[0,1,2,3,5,7,8]`
/// as `0-3,5,7-8` (a relay's `--nodes`, the ranks of a snapshot's or
/// `--group`'s entry).
pub(crate) fn fold_ranks(ranks: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            ranks[i].to_string()
        } else {
            format!("{}-{}", ranks[i], ranks[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// What is wrong with a rank list given to [`parse_ranks`]: the reason
/// alone, for the caller to put after the flag and the text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum RankListError {
    #[error("{0:?} is not a rank")]
    NotARank(String),
    #[error("reversed range {0:?}")]
    Reversed(String),
    #[error("rank {rank} is past the last node ({last})", last = .nodes.saturating_sub(1))]
    PastTheEnd { rank: usize, nodes: usize },
}

/// A rank list as [`fold_ranks`] writes it (`0,2-5`), read back as the set
/// of ranks it names, each below `nodes`.
pub(crate) fn parse_ranks(spec: &str, nodes: usize) -> Result<BTreeSet<usize>, RankListError> {
    let mut ranks = BTreeSet::new();
    for part in spec.split(',') {
        let part = part.trim();
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let number = |s: &str| {
            s.parse::<usize>()
                .map_err(|_| RankListError::NotARank(part.to_string()))
        };
        let (lo, hi) = (number(lo)?, number(hi)?);
        if lo > hi {
            return Err(RankListError::Reversed(part.to_string()));
        }
        if hi >= nodes {
            return Err(RankListError::PastTheEnd { rank: hi, nodes });
        }
        ranks.extend(lo..=hi);
    }
    Ok(ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_lists_read_back_what_fold_ranks_wrote() {
        for ranks in [
            vec![0],
            vec![0, 1, 2, 3, 5, 7, 8],
            vec![2, 4, 6],
            (0..300).collect(),
            (10..20).chain(25..26).chain(40..300).collect::<Vec<_>>(),
        ] {
            let text = fold_ranks(&ranks);
            let back: Vec<usize> = parse_ranks(&text, 300).unwrap().into_iter().collect();
            assert_eq!(back, ranks, "{text}");
        }
        assert_eq!(
            parse_ranks(" 0, 2-4", 5).unwrap(),
            BTreeSet::from([0, 2, 3, 4])
        );
    }

    #[test]
    fn bad_rank_lists_say_what_is_wrong() {
        let err = |spec: &str, nodes| parse_ranks(spec, nodes).unwrap_err().to_string();
        assert_eq!(err("5", 5), "rank 5 is past the last node (4)");
        assert_eq!(err("0-9", 3), "rank 9 is past the last node (2)");
        assert_eq!(err("3-1", 5), "reversed range \"3-1\"");
        assert_eq!(err("a", 5), "\"a\" is not a rank");
        assert_eq!(err("1,,2", 5), "\"\" is not a rank");
        assert_eq!(err("1-", 5), "\"1-\" is not a rank");
        assert_eq!(err("-1", 5), "\"-1\" is not a rank");
        assert_eq!(err("0-1-2", 5), "\"0-1-2\" is not a rank");
        assert_eq!(err("0", 0), "rank 0 is past the last node (0)");
    }

    #[test]
    fn rank_ranges() {
        assert_eq!(fold_ranks(&[0, 1, 2, 3, 5, 7, 8]), "0-3,5,7-8");
        assert_eq!(fold_ranks(&[4]), "4");
        assert_eq!(fold_ranks(&[]), "");
    }

    #[test]
    fn ranges_and_singles() {
        assert_eq!(
            fold(&["node01", "node02", "node03", "node04"]),
            "node[01-04]"
        );
        assert_eq!(
            fold(&["node01", "node02", "node03", "node07"]),
            "node[01-03,07]"
        );
        assert_eq!(fold(&["gpu07"]), "gpu07");
        assert_eq!(fold::<&str>(&[]), "");
    }

    #[test]
    fn padding_is_kept() {
        assert_eq!(fold(&["gpu08", "gpu09", "gpu10", "gpu11"]), "gpu[08-11]");
        assert_eq!(fold(&["n1", "n2", "n10"]), "n[1-2,10]");
        assert_eq!(fold(&["n1", "n01"]), "n1,n01");
        assert_eq!(fold(&["n001", "n002", "n100"]), "n[001-002,100]");
    }

    #[test]
    fn prefixes_suffixes_and_plain_names() {
        assert_eq!(
            fold(&["a1-ib", "a2-ib", "b1", "head", "a3-ib"]),
            "a[1-3]-ib,b1,head"
        );
        assert_eq!(fold(&["rack1-n01", "rack1-n02"]), "rack1-n[01-02]");
        assert_eq!(
            fold(&["10.0.0.1", "10.0.0.2", "10.0.0.9"]),
            "10.0.0.[1-2,9]"
        );
        assert_eq!(fold(&["fd00::1", "fd00::2"]), "fd00::1,fd00::2");
        assert_eq!(fold(&["x", "x"]), "x");
        assert_eq!(fold(&["n1", "n1"]), "n1");
    }

    #[test]
    fn order_of_first_appearance() {
        assert_eq!(fold(&["b2", "a1", "b1"]), "b[1-2],a1");
    }

    #[test]
    fn many_nodes_fold_to_one_range() {
        let hosts: Vec<String> = (1..=256).map(|i| format!("node{i:03}")).collect();
        assert_eq!(fold(&hosts), "node[001-256]");
    }

    #[test]
    fn huge_numbers_do_not_overflow() {
        let big = "n99999999999999999999999";
        assert_eq!(fold(&[big, "n1"]), format!("{big},n1"));
    }
}
