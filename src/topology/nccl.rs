//! The device and interface lists of NCCL and Gloo, parsed and matched as
//! they do it. Pure. The one parser of these lists: the launcher's choice of
//! this machine's address (`address.rs`: `--iface`, `MULTINODE_IFNAME`,
//! `NCCL_SOCKET_IFNAME`) and `multinode check` read a list the same way.
//!
//! NCCL (`NCCL_IB_HCA`, `NCCL_SOCKET_IFNAME`): a comma list of prefixes;
//! a leading `^` excludes what the list matches, then a leading `=` makes
//! the names exact; an item may end in `:PORT` (a device port, for
//! `NCCL_IB_HCA`). `mlx5_1` matches `mlx5_1` and `mlx5_10`; `=mlx5_1` only
//! the first. NCCL does not trim spaces, nor does this.
//!
//! Gloo (`GLOO_SOCKET_IFNAME`): a comma list of exact interface names, every
//! one of which must exist.

/// One item of an NCCL list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub name: String,
    /// `:PORT`; `None` matches every port.
    pub port: Option<u32>,
}

/// An NCCL device or interface list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NcclList {
    pub exclude: bool,
    pub exact: bool,
    pub items: Vec<Item>,
}

impl NcclList {
    /// Parses `spec`; an error is one lowercase fragment for a message.
    pub(crate) fn parse(spec: &str) -> Result<Self, String> {
        Self::parse_listing(spec, "nothing")
    }

    /// [`NcclList::parse`] for an interface list: an empty one "names no interface".
    pub(crate) fn parse_interfaces(spec: &str) -> Result<Self, String> {
        Self::parse_listing(spec, "no interface")
    }

    fn parse_listing(spec: &str, nothing: &str) -> Result<Self, String> {
        let (exclude, rest) = match spec.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, spec),
        };
        let (exact, rest) = match rest.strip_prefix('=') {
            Some(rest) => (true, rest),
            None => (false, rest),
        };
        let mut items = Vec::new();
        for raw in rest.split(',').filter(|s| !s.is_empty()) {
            let item = match raw.split_once(':') {
                Some((name, port)) => Item {
                    name: name.to_string(),
                    port: Some(
                        port.parse::<u32>()
                            .map_err(|_| format!("port '{port}' of '{raw}' is not a number"))?,
                    ),
                },
                None => Item {
                    name: raw.to_string(),
                    port: None,
                },
            };
            if item.name.is_empty() {
                return Err(format!("'{raw}' has a port but no name"));
            }
            items.push(item);
        }
        if items.is_empty() {
            return Err(format!("it names {nothing}"));
        }
        Ok(NcclList {
            exclude,
            exact,
            items,
        })
    }

    /// Whether `item` names device or interface `name` (and `port`, when
    /// both give one), ignoring `^`.
    pub(crate) fn item_matches(&self, item: &Item, name: &str, port: Option<u32>) -> bool {
        let named = if self.exact {
            name == item.name
        } else {
            name.starts_with(item.name.as_str())
        };
        let port_ok = match (item.port, port) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        named && port_ok
    }

    /// Whether NCCL uses `name` (port `port`) under this list.
    pub(crate) fn selects(&self, name: &str, port: Option<u32>) -> bool {
        let listed = self
            .items
            .iter()
            .any(|item| self.item_matches(item, name, port));
        listed != self.exclude
    }
}

/// `GLOO_SOCKET_IFNAME`: the interface names, every one required.
pub(crate) fn parse_gloo(spec: &str) -> Result<Vec<String>, String> {
    let names: Vec<String> = spec
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if names.is_empty() {
        return Err("it names no interface".to_string());
    }
    Ok(names)
}

/// How NCCL is told to use sockets instead of InfiniBand/RoCE, if it is:
/// `NCCL_IB_DISABLE=1` or `NCCL_NET=Socket`.
pub(crate) fn sockets_forced(get: impl Fn(&str) -> Option<String>) -> Option<String> {
    if let Some(v) = get("NCCL_IB_DISABLE")
        && v.trim().parse::<i64>().is_ok_and(|n| n != 0)
    {
        return Some(format!("NCCL_IB_DISABLE={v}"));
    }
    if let Some(v) = get("NCCL_NET")
        && v.trim().eq_ignore_ascii_case("socket")
    {
        return Some(format!("NCCL_NET={v}"));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(spec: &str) -> NcclList {
        NcclList::parse(spec).expect("valid list")
    }

    #[test]
    fn prefixes_match_more_than_the_name() {
        let l = list("mlx5_1");
        assert!(l.selects("mlx5_1", Some(1)));
        assert!(l.selects("mlx5_10", Some(1)));
        assert!(!l.selects("mlx5_0", Some(1)));
        let l = list("mlx5");
        assert!(l.selects("mlx5_0", None) && l.selects("mlx5_7", Some(2)));
        assert!(!l.selects("bnxt_re0", Some(1)));
    }

    #[test]
    fn exact_names() {
        let l = list("=mlx5_1,mlx5_3");
        assert!(l.exact && !l.exclude);
        assert!(l.selects("mlx5_1", Some(1)) && l.selects("mlx5_3", Some(1)));
        assert!(!l.selects("mlx5_10", Some(1)));
    }

    #[test]
    fn exclusions() {
        let l = list("^mlx5_1");
        assert!(!l.selects("mlx5_1", Some(1)) && !l.selects("mlx5_12", Some(1)));
        assert!(l.selects("mlx5_0", Some(1)));
        let l = list("^=mlx5_1,mlx5_4");
        assert!(l.exclude && l.exact);
        assert!(!l.selects("mlx5_1", Some(1)) && !l.selects("mlx5_4", Some(1)));
        assert!(l.selects("mlx5_10", Some(1)));
    }

    #[test]
    fn ports() {
        let l = list("=mlx5_0:1,mlx5_1:2");
        assert_eq!(
            l.items,
            vec![
                Item {
                    name: "mlx5_0".into(),
                    port: Some(1)
                },
                Item {
                    name: "mlx5_1".into(),
                    port: Some(2)
                },
            ]
        );
        assert!(l.selects("mlx5_0", Some(1)));
        assert!(!l.selects("mlx5_0", Some(2)));
        assert!(l.selects("mlx5_1", Some(2)));
        // An interface has no port: the item's port does not restrict it.
        assert!(l.selects("mlx5_0", None));
    }

    #[test]
    fn interface_lists() {
        let l = list("eth,ib");
        assert!(l.selects("eth0", None) && l.selects("ib1", None) && !l.selects("lo", None));
        let l = list("^docker,lo");
        assert!(l.selects("eth0", None) && !l.selects("docker0", None) && !l.selects("lo", None));
        let l = list("=eth0");
        assert!(l.selects("eth0", None) && !l.selects("eth0.100", None));
        let l = list("^=eth0");
        assert!(!l.selects("eth0", None) && l.selects("eth0.100", None));
    }

    #[test]
    fn spaces_are_kept_as_nccl_keeps_them() {
        let l = list("mlx5_0, mlx5_1");
        assert!(l.selects("mlx5_0", Some(1)));
        assert!(!l.selects("mlx5_1", Some(1)), "' mlx5_1' is not 'mlx5_1'");
        assert_eq!(l.items[1].name, " mlx5_1");
    }

    #[test]
    fn bad_lists() {
        assert_eq!(NcclList::parse("").unwrap_err(), "it names nothing");
        assert_eq!(NcclList::parse("^").unwrap_err(), "it names nothing");
        assert_eq!(NcclList::parse("^=,,").unwrap_err(), "it names nothing");
        assert_eq!(
            NcclList::parse("mlx5_0:x").unwrap_err(),
            "port 'x' of 'mlx5_0:x' is not a number"
        );
        assert_eq!(
            NcclList::parse(":1").unwrap_err(),
            "':1' has a port but no name"
        );
    }

    #[test]
    fn gloo_lists() {
        assert_eq!(
            parse_gloo("eth0, eth1").expect("valid"),
            vec!["eth0".to_string(), "eth1".to_string()]
        );
        assert!(parse_gloo(" , ").is_err());
    }

    #[test]
    fn sockets_chosen_by_the_user() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            sockets_forced(env(&[("NCCL_IB_DISABLE", "1")])).as_deref(),
            Some("NCCL_IB_DISABLE=1")
        );
        assert_eq!(sockets_forced(env(&[("NCCL_IB_DISABLE", "0")])), None);
        assert_eq!(
            sockets_forced(env(&[("NCCL_NET", "Socket")])).as_deref(),
            Some("NCCL_NET=Socket")
        );
        assert_eq!(sockets_forced(env(&[("NCCL_NET", "IB")])), None);
        assert_eq!(sockets_forced(env(&[])), None);
    }
}
