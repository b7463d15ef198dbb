//! Sets of CPUs and NUMA nodes in the kernel's list format (`0-23,48-71`),
//! as sysfs, `/proc/PID/status` and `taskset -c` write them. Pure.

use std::collections::BTreeSet;
use std::fmt;

/// A set of CPU (or NUMA node) numbers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    /// `0-23,48-71`, `5`, or empty (a NUMA node without CPUs writes an empty
    /// line). The kernel writes no stride (`0-7:2`), so none is read.
    pub(crate) fn parse(text: &str) -> Result<CpuSet, String> {
        let mut set = BTreeSet::new();
        let text = text.trim();
        if text.is_empty() {
            return Ok(CpuSet(set));
        }
        for part in text.split(',') {
            let part = part.trim();
            let number = |s: &str| {
                s.parse::<u32>()
                    .map_err(|_| format!("'{text}' is not a CPU list like 0-23,48-71"))
            };
            match part.split_once('-') {
                Some((a, b)) => {
                    let (a, b) = (number(a)?, number(b)?);
                    if a > b {
                        return Err(format!("'{text}' is not a CPU list like 0-23,48-71"));
                    }
                    set.extend(a..=b);
                }
                None => {
                    set.insert(number(part)?);
                }
            }
        }
        Ok(CpuSet(set))
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub(crate) fn first(&self) -> Option<u32> {
        self.0.first().copied()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub(crate) fn intersection(&self, other: &CpuSet) -> CpuSet {
        CpuSet(self.0.intersection(&other.0).copied().collect())
    }

    /// The set as a mask of `c_ulong` words, bit N for CPU N, as
    /// `sched_setaffinity(2)` and `set_mempolicy(2)` take it.
    pub(crate) fn to_mask(&self) -> Vec<libc::c_ulong> {
        let bits = libc::c_ulong::BITS;
        let words = self.0.last().map_or(1, |&max| (max / bits + 1) as usize);
        let mut mask = vec![0 as libc::c_ulong; words];
        for &n in &self.0 {
            mask[(n / bits) as usize] |= 1 << (n % bits);
        }
        mask
    }

    /// The set a mask of `c_ulong` words holds (`sched_getaffinity(2)`'s answer).
    pub(crate) fn from_mask(mask: &[libc::c_ulong]) -> CpuSet {
        let bits = libc::c_ulong::BITS;
        let mut set = BTreeSet::new();
        for (w, word) in mask.iter().enumerate() {
            for b in 0..bits {
                if word & (1 << b) != 0 {
                    set.insert(w as u32 * bits + b);
                }
            }
        }
        CpuSet(set)
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

/// The kernel's list format: runs folded (`0-23,48-71`); `none` when empty.
impl fmt::Display for CpuSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        let mut runs: Vec<(u32, u32)> = Vec::new();
        for &n in &self.0 {
            match runs.last_mut() {
                Some((_, end)) if *end + 1 == n => *end = n,
                _ => runs.push((n, n)),
            }
        }
        let text: Vec<String> = runs
            .iter()
            .map(|&(a, b)| {
                if a == b {
                    a.to_string()
                } else {
                    format!("{a}-{b}")
                }
            })
            .collect();
        f.write_str(&text.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_read_and_write_back_folded() {
        for text in ["0-23,48-71", "5", "0,2,4-6", "48-63,176-191"] {
            assert_eq!(CpuSet::parse(text).expect(text).to_string(), text);
        }
        assert_eq!(CpuSet::parse("3,1,2\n").expect("list").to_string(), "1-3");
        assert_eq!(CpuSet::parse("\n").expect("empty").len(), 0);
        assert_eq!(CpuSet::parse("").expect("empty").to_string(), "none");
    }

    #[test]
    fn garbage_is_an_error() {
        for bad in ["a", "3-1", "1,,2", "0-7:2", "-1"] {
            assert!(CpuSet::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn masks_hold_every_cpu_and_only_those() {
        let set = CpuSet::parse("0,63-65,255").expect("list");
        let mask = set.to_mask();
        assert_eq!(mask.len() as u32 * libc::c_ulong::BITS, 256);
        assert_eq!(CpuSet::from_mask(&mask), set);
        assert_eq!(CpuSet::default().to_mask(), vec![0]);
    }

    #[test]
    fn intersections() {
        let node = CpuSet::parse("48-63,176-191").expect("list");
        let allowed = CpuSet::parse("0-1,60-200").expect("list");
        assert_eq!(node.intersection(&allowed).to_string(), "60-63,176-191");
    }
}
