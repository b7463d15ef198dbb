//! The head's address (`MULTINODE_NODE_IP`) and this node's own
//! (`MULTINODE_LOCAL_IP`).
//!
//! - A value already in the environment is honoured (it must be an IP address).
//! - A hostlist entry that is an IP literal is its own address, loopback
//!   included: the user chose it (the one-machine demo runs on 127.0.0.x).
//! - This machine's address is that of the interface chosen by `--iface`, else
//!   `MULTINODE_IFNAME`, else `NCCL_SOCKET_IFNAME` (all three in NCCL's syntax),
//!   else of the default route's interface; IPv4 preferred, never loopback or
//!   IPv6 link-local. A one-node job with no such address uses 127.0.0.1, as
//!   no other node has to reach it.
//! - Another machine's address comes from DNS, loopback results skipped
//!   (Debian's `/etc/hosts` maps the host name to 127.0.1.1).

use std::net::{IpAddr, Ipv4Addr};

use tracing::debug;

use super::job_nodes::Topology;
use super::kernel_routes::{default_ifaces_v4, default_ifaces_v6};
use super::machine::{Interface, Machine};
use super::nccl::NcclList;
use super::topology_error::{TopologyError, shorten};
use crate::env_map::{BadVar, EnvMap};
use crate::vars;

/// How this machine's own address is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IfaceChoice {
    /// `--iface`, `MULTINODE_IFNAME` or `NCCL_SOCKET_IFNAME`.
    Named {
        origin: &'static str,
        spec: String,
        /// In NCCL's syntax, parsed by NCCL's rules (`nccl`): the launcher
        /// and the preflight read the same list the same way.
        filter: NcclList,
    },
    /// The default route's interface.
    DefaultRoute,
}

impl IfaceChoice {
    /// `--iface`, else `MULTINODE_IFNAME`, else `NCCL_SOCKET_IFNAME`, else the default route.
    pub(crate) fn from_inputs(iface: Option<&str>, env: &EnvMap) -> Result<Self, TopologyError> {
        let named = iface
            .filter(|s| !s.is_empty())
            .map(|s| ("--iface", s))
            .or_else(|| env.get(vars::IFNAME).map(|s| (vars::IFNAME, s)))
            .or_else(|| {
                env.get("NCCL_SOCKET_IFNAME")
                    .map(|s| ("NCCL_SOCKET_IFNAME", s))
            });
        let Some((origin, spec)) = named else {
            return Ok(IfaceChoice::DefaultRoute);
        };
        let filter =
            NcclList::parse_interfaces(spec).map_err(|reason| TopologyError::BadIfaceSpec {
                origin,
                spec: shorten(spec),
                reason,
            })?;
        Ok(IfaceChoice::Named {
            origin,
            spec: spec.to_string(),
            filter,
        })
    }
}

/// An address other nodes can use: not loopback, not IPv6 link-local (which
/// needs a zone id), not unspecified.
fn usable(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V4(a) => !a.is_loopback() && !a.is_unspecified(),
        IpAddr::V6(a) => {
            !a.is_loopback() && !a.is_unspecified() && (a.segments()[0] & 0xffc0) != 0xfe80
        }
    }
}

/// The first usable IPv4 address of `candidates` (interfaces in order), else
/// the first usable IPv6 one.
fn prefer_v4<'a>(candidates: impl Iterator<Item = &'a Interface> + Clone) -> Option<&'a Interface> {
    let mut usable = candidates.filter(|i| i.up && usable(&i.addr));
    usable
        .clone()
        .find(|i| i.addr.is_ipv4())
        .or_else(|| usable.next())
}

/// The address of the chosen interface. Pure: interfaces and route tables are given.
///
/// `var` names the variable to set instead, for the message.
pub(crate) fn pick_interface_address(
    interfaces: &[Interface],
    choice: &IfaceChoice,
    route: &str,
    route6: &str,
    var: &'static str,
) -> Result<Interface, TopologyError> {
    match choice {
        IfaceChoice::Named {
            origin,
            spec,
            filter,
        } => {
            let matching = interfaces.iter().filter(|i| filter.selects(&i.name, None));
            if matching.clone().next().is_none() {
                let mut have: Vec<&str> = interfaces.iter().map(|i| i.name.as_str()).collect();
                have.dedup();
                return Err(TopologyError::NoSuchIface {
                    origin,
                    spec: shorten(spec),
                    have: have.join(", "),
                });
            }
            prefer_v4(matching)
                .cloned()
                .ok_or_else(|| TopologyError::NoUsableAddress {
                    origin,
                    spec: shorten(spec),
                })
        }
        IfaceChoice::DefaultRoute => {
            let mut route_ifaces = default_ifaces_v4(route);
            for iface in default_ifaces_v6(route6) {
                if !route_ifaces.contains(&iface) {
                    route_ifaces.push(iface);
                }
            }
            let ordered: Vec<&Interface> = route_ifaces
                .iter()
                .flat_map(|name| interfaces.iter().filter(move |i| &i.name == name))
                .collect();
            prefer_v4(ordered.iter().copied())
                .cloned()
                .ok_or(TopologyError::NoDefaultRoute { var })
        }
    }
}

/// This machine's address by the interface rules, with the one-node fallback
/// to 127.0.0.1 (an interface named explicitly that does not exist stays an error).
pub(crate) fn interface_address(
    topology: &Topology,
    choice: &IfaceChoice,
    machine: &dyn Machine,
    var: &'static str,
) -> Result<IpAddr, TopologyError> {
    let interfaces = machine.interfaces();
    let route = machine.route_table().unwrap_or_default();
    let route6 = machine.route6_table().unwrap_or_default();
    match pick_interface_address(&interfaces, choice, &route, &route6, var) {
        Ok(iface) => {
            debug!(iface = %iface.name, addr = %iface.addr, ?choice, "address of this machine");
            Ok(iface.addr)
        }
        Err(e @ (TopologyError::NoDefaultRoute { .. } | TopologyError::NoUsableAddress { .. }))
            if topology.nodes.len() == 1 =>
        {
            debug!(reason = %e, "one-node job: using 127.0.0.1");
            Ok(IpAddr::V4(Ipv4Addr::LOCALHOST))
        }
        Err(e) => Err(e),
    }
}

/// A variable holding an address, honoured when set.
fn ip_var(env: &EnvMap, name: &str) -> Result<Option<IpAddr>, TopologyError> {
    let Some(value) = env.get(name) else {
        return Ok(None);
    };
    match value.parse::<IpAddr>() {
        Ok(ip) if !ip.is_unspecified() => {
            debug!(%ip, var = name, "address from the environment");
            Ok(Some(ip))
        }
        _ => Err(TopologyError::from(BadVar::new(
            name,
            value,
            "an IP address",
        ))),
    }
}

/// `MULTINODE_LOCAL_IP`: this node's own address.
///
/// `env` holds the variables describing the topology's job (empty when the
/// topology came from command-line flags, which override them).
pub(crate) fn local_address(
    topology: &Topology,
    rank: usize,
    env: &EnvMap,
    choice: &IfaceChoice,
    machine: &dyn Machine,
) -> Result<IpAddr, TopologyError> {
    if let Some(ip) = ip_var(env, vars::LOCAL_IP)? {
        return Ok(ip);
    }
    if let Some(ip) = topology.nodes.get(rank).and_then(|n| n.host.parse().ok()) {
        return Ok(ip);
    }
    interface_address(topology, choice, machine, vars::LOCAL_IP)
}

/// `MULTINODE_NODE_IP`: the head's address. `rank` is this node's, if known;
/// `local_ip` its address when it is the head.
pub(crate) fn head_address(
    topology: &Topology,
    rank: Option<usize>,
    local_ip: Option<IpAddr>,
    env: &EnvMap,
    machine: &dyn Machine,
) -> Result<IpAddr, TopologyError> {
    if let Some(ip) = ip_var(env, vars::NODE_IP)? {
        return Ok(ip);
    }
    let head = topology
        .nodes
        .first()
        .map(|n| n.host.as_str())
        .unwrap_or_default();
    if let Ok(ip) = head.parse::<IpAddr>() {
        return Ok(ip);
    }
    if let (Some(0), Some(ip)) = (rank, local_ip) {
        return Ok(ip);
    }
    let addrs = machine
        .lookup(head)
        .map_err(|reason| TopologyError::Unresolvable {
            host: head.to_string(),
            reason,
        })?;
    pick_remote(head, &addrs)
}

/// Another machine's address among the ones DNS gave: loopback skipped, IPv4 first.
pub(crate) fn first_reachable(addrs: &[IpAddr]) -> Option<IpAddr> {
    let reachable = addrs
        .iter()
        .filter(|a| !a.is_loopback() && !a.is_unspecified());
    reachable
        .clone()
        .find(|a| a.is_ipv4())
        .or(reachable.clone().next())
        .copied()
}

/// The head's address among the ones DNS gave, or why there is none.
fn pick_remote(host: &str, addrs: &[IpAddr]) -> Result<IpAddr, TopologyError> {
    if let Some(ip) = first_reachable(addrs) {
        debug!(host, %ip, "head address from DNS");
        return Ok(ip);
    }
    if addrs.is_empty() {
        return Err(TopologyError::Unresolvable {
            host: host.to_string(),
            reason: "no addresses".to_string(),
        });
    }
    Err(TopologyError::LoopbackOnly {
        host: host.to_string(),
        addrs: addrs
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", "),
    })
}

#[cfg(test)]
mod tests {
    use super::super::machine::fake::{FakeMachine, env, iface, ip, topology};
    use super::*;

    fn named(spec: &str) -> IfaceChoice {
        IfaceChoice::from_inputs(Some(spec), &EnvMap::default()).expect("valid spec")
    }

    #[test]
    fn nccl_interface_syntax() {
        let f = |spec: &str| NcclList::parse(spec).expect("valid");
        let matches = |l: &NcclList, name: &str| l.selects(name, None);
        let l = f("eth,ib");
        assert!(matches(&l, "eth0") && matches(&l, "ib1") && !matches(&l, "lo"));
        let l = f("^docker,lo");
        assert!(matches(&l, "eth0") && !matches(&l, "docker0") && !matches(&l, "lo"));
        let l = f("=eth0");
        assert!(matches(&l, "eth0") && !matches(&l, "eth0.100"));
        let l = f("^=eth0");
        assert!(!matches(&l, "eth0") && matches(&l, "eth0.100"));
        assert!(NcclList::parse("^").is_err());
        assert!(NcclList::parse(",").is_err());
        // As NCCL reads it: no spaces trimmed, so the launcher and
        // `multinode check` agree on which interfaces a list names.
        let l = f("eth0, ib0");
        assert!(matches(&l, "eth0") && !matches(&l, "ib0"));
    }

    #[test]
    fn interface_choice_order() {
        let e = env(&[("MULTINODE_IFNAME", "ib"), ("NCCL_SOCKET_IFNAME", "eth")]);
        let origin = |c: IfaceChoice| match c {
            IfaceChoice::Named { origin, .. } => origin,
            IfaceChoice::DefaultRoute => "default route",
        };
        assert_eq!(
            origin(IfaceChoice::from_inputs(Some("eth0"), &e).unwrap()),
            "--iface"
        );
        assert_eq!(
            origin(IfaceChoice::from_inputs(None, &e).unwrap()),
            "MULTINODE_IFNAME"
        );
        let e = env(&[("NCCL_SOCKET_IFNAME", "eth")]);
        assert_eq!(
            origin(IfaceChoice::from_inputs(None, &e).unwrap()),
            "NCCL_SOCKET_IFNAME"
        );
        assert_eq!(
            origin(IfaceChoice::from_inputs(None, &EnvMap::default()).unwrap()),
            "default route"
        );
        let e = env(&[("NCCL_SOCKET_IFNAME", "^")]);
        assert_eq!(
            IfaceChoice::from_inputs(None, &e).unwrap_err().to_string(),
            "bad interface list NCCL_SOCKET_IFNAME='^': it names no interface"
        );
    }

    #[test]
    fn default_route_interface_ipv4_preferred() {
        let m = FakeMachine::gpu01();
        let pick = |c: &IfaceChoice| {
            pick_interface_address(
                &m.interfaces,
                c,
                m.route.as_deref().unwrap_or_default(),
                "",
                "MULTINODE_NODE_IP",
            )
            .map(|i| i.addr)
        };
        assert_eq!(pick(&IfaceChoice::DefaultRoute).ok(), Some(ip("10.0.0.1")));
        assert_eq!(pick(&named("ib")).ok(), Some(ip("192.168.0.1")));
        assert_eq!(pick(&named("^eth,lo")).ok(), Some(ip("192.168.0.1")));
        assert_eq!(
            pick(&named("lo")).unwrap_err().to_string(),
            "interfaces matching --iface='lo' have no usable address (only loopback or link-local); other nodes cannot reach it: choose another interface"
        );
        assert_eq!(
            pick(&named("wlan")).unwrap_err().to_string(),
            "no interface matches --iface='wlan' (this machine has: lo, eth0, ib0); name an interface that exists"
        );
    }

    #[test]
    fn ipv6_only_interface_and_ipv6_default_route() {
        let interfaces = vec![
            iface("lo", "127.0.0.1"),
            iface("eth0", "fe80::1"),
            iface("eth0", "2001:db8::5"),
        ];
        let route6 = "00000000000000000000000000000000 00 00000000000000000000000000000000 00 fe800000000000000000000000000001 00000400 00000002 00000000 00000003     eth0\n";
        let got = pick_interface_address(&interfaces, &IfaceChoice::DefaultRoute, "", route6, "X");
        assert_eq!(got.map(|i| i.addr).ok(), Some(ip("2001:db8::5")));
    }

    #[test]
    fn down_interfaces_are_skipped() {
        let mut eth0 = iface("eth0", "10.0.0.1");
        eth0.up = false;
        let interfaces = vec![eth0, iface("eth1", "10.0.1.1")];
        let got = pick_interface_address(&interfaces, &named("eth"), "", "", "X");
        assert_eq!(got.map(|i| i.addr).ok(), Some(ip("10.0.1.1")));
    }

    #[test]
    fn no_default_route() {
        let mut m = FakeMachine::gpu01();
        m.route = None;
        let two = topology("--hosts", &["gpu01", "gpu02"]);
        assert_eq!(
            interface_address(&two, &IfaceChoice::DefaultRoute, &m, "MULTINODE_NODE_IP")
                .unwrap_err()
                .to_string(),
            "this machine has no default route with a usable address, so its address is unknown; choose an interface with --iface or MULTINODE_IFNAME, or set MULTINODE_NODE_IP"
        );
        // One node: nothing else needs to reach it.
        let one = topology("--hosts", &["gpu01"]);
        assert_eq!(
            interface_address(&one, &IfaceChoice::DefaultRoute, &m, "X").ok(),
            Some(ip("127.0.0.1"))
        );
        // ... but an interface named explicitly that does not exist is still an error.
        assert!(interface_address(&one, &named("wlan"), &m, "X").is_err());
    }

    #[test]
    fn head_address_rules() {
        let m = FakeMachine {
            dns: [
                ("gpu02".to_string(), vec![ip("127.0.1.1"), ip("10.0.0.2")]),
                ("trap".to_string(), vec![ip("127.0.1.1"), ip("::1")]),
                ("v6".to_string(), vec![ip("::1"), ip("fd00::9")]),
            ]
            .into(),
            ..FakeMachine::gpu01()
        };
        let none = EnvMap::default();
        let head = |hosts: &[&str], rank: Option<usize>, env: &EnvMap| {
            head_address(
                &topology("--hosts", hosts),
                rank,
                Some(ip("10.0.0.1")),
                env,
                &m,
            )
            .map_err(|e| e.to_string())
        };
        // Honoured from the environment, validated.
        let set = env(&[("MULTINODE_NODE_IP", "10.9.9.9")]);
        assert_eq!(head(&["gpu02", "gpu01"], Some(1), &set), Ok(ip("10.9.9.9")));
        let bad = env(&[("MULTINODE_NODE_IP", "gpu02")]);
        assert_eq!(
            head(&["gpu02"], Some(0), &bad),
            Err("MULTINODE_NODE_IP='gpu02' is not an IP address; fix it or unset it".into())
        );
        assert!(
            head(
                &["gpu02"],
                Some(0),
                &env(&[("MULTINODE_NODE_IP", "0.0.0.0")])
            )
            .is_err()
        );
        // An IP literal is taken as written, even loopback.
        assert_eq!(
            head(&["127.0.0.2", "127.0.0.3"], Some(1), &none),
            Ok(ip("127.0.0.2"))
        );
        // This node is the head: its own address.
        assert_eq!(
            head(&["gpu01", "gpu02"], Some(0), &none),
            Ok(ip("10.0.0.1"))
        );
        // Another machine: DNS, loopback skipped.
        assert_eq!(
            head(&["gpu02", "gpu01"], Some(1), &none),
            Ok(ip("10.0.0.2"))
        );
        assert_eq!(head(&["gpu02", "gpu01"], None, &none), Ok(ip("10.0.0.2")));
        assert_eq!(head(&["v6", "gpu01"], Some(1), &none), Ok(ip("fd00::9")));
        let trap = head(&["trap", "gpu01"], Some(1), &none).unwrap_err();
        assert!(
            trap.starts_with("head host 'trap' resolves only to loopback (127.0.1.1, ::1)"),
            "{trap}"
        );
        assert!(trap.contains("/etc/hosts"), "{trap}");
        assert_eq!(
            head(&["nowhere", "gpu01"], Some(1), &none),
            Err("cannot resolve head host 'nowhere': Name or service not known; set MULTINODE_NODE_IP to the head's address".into())
        );
    }

    #[test]
    fn local_address_rules() {
        let m = FakeMachine::gpu01();
        let none = EnvMap::default();
        let local = |hosts: &[&str], rank: usize, env: &EnvMap| {
            local_address(
                &topology("--hosts", hosts),
                rank,
                env,
                &IfaceChoice::DefaultRoute,
                &m,
            )
            .ok()
        };
        assert_eq!(local(&["gpu00", "gpu01"], 1, &none), Some(ip("10.0.0.1")));
        assert_eq!(
            local(&["127.0.0.2", "127.0.0.3"], 1, &none),
            Some(ip("127.0.0.3"))
        );
        let set = env(&[("MULTINODE_LOCAL_IP", "10.1.1.1")]);
        assert_eq!(local(&["gpu00", "gpu01"], 1, &set), Some(ip("10.1.1.1")));
    }
}
