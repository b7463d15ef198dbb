//! The job's nodes, in node-rank order, and where they came from
//! ([`Topology`]); its hostlists written out in full or folded, and read
//! back.

use super::host_slots::{self, Node};
use super::hostlist_fold;
use super::topology_error::ParseError;

/// The nodes of the job and where they came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Node 0 is the head. Never empty; no host appears twice.
    pub nodes: Vec<Node>,
    /// Where the hostlist came from, for messages: `--hosts`, `SLURM_JOB_NODELIST`, ...
    pub source: String,
}

impl Topology {
    pub fn total_slots(&self) -> u64 {
        self.nodes.iter().map(|n| u64::from(n.slots)).sum()
    }

    /// `host1:2,host2:2,[fd00::2]:2`
    pub fn hostlist(&self) -> String {
        self.render(true)
    }

    /// `host1,host2,[fd00::2]`
    pub fn hostlist_noslots(&self) -> String {
        self.render(false)
    }

    /// Both lists above, written into one buffer (a relay renders them for
    /// thousands of nodes: no string a node).
    fn render(&self, slots: bool) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(self.nodes.len() * 16);
        for (i, n) in self.nodes.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&n.written());
            if slots {
                let _ = write!(out, ":{}", n.slots);
            }
        }
        out
    }

    /// [`Topology::hostlist`] folded as `nodeset -f` folds: `gpu[01-64]:8`.
    /// It parses back to the same nodes, in the same order.
    pub fn hostlist_folded(&self) -> String {
        hostlist_fold::fold(&self.nodes, true)
    }

    /// [`Topology::hostlist_noslots`] folded: `gpu[01-64]`.
    pub fn hostlist_noslots_folded(&self) -> String {
        hostlist_fold::fold(&self.nodes, false)
    }

    /// Parses a `MULTINODE_HOSTLIST` (full or folded) into a topology whose
    /// source is `source`.
    pub fn from_hostlist(list: &str, source: &str) -> Result<Self, ParseError> {
        Ok(Topology {
            nodes: host_slots::parse_host_slots(list)?,
            source: source.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostlists_bracket_ipv6_literals_so_they_parse_back() {
        let topo = Topology {
            nodes: vec![
                Node {
                    host: "gpu01".into(),
                    slots: 2,
                },
                Node {
                    host: "fd00::2".into(),
                    slots: 3,
                },
            ],
            source: "test".into(),
        };
        assert_eq!(topo.hostlist(), "gpu01:2,[fd00::2]:3");
        assert_eq!(topo.hostlist_noslots(), "gpu01,[fd00::2]");
        assert_eq!(topo.total_slots(), 5);
        assert_eq!(
            host_slots::parse_host_slots(&topo.hostlist()).ok(),
            Some(topo.nodes.clone())
        );
    }
}
