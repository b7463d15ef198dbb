//! The fabric: whether NCCL will find InfiniBand/RoCE or fall back to
//! sockets ("NET/IB : No device found"), and whether `NCCL_IB_HCA`,
//! `NCCL_SOCKET_IFNAME` and `GLOO_SOCKET_IFNAME` name what exists on every
//! node.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally, list_or_none};
use crate::check::facts::{NetInterface, NodeFacts};
use crate::topology::nccl::{NcclList, parse_gloo, sockets_forced};

fn env<'a>(f: &'a NodeFacts, name: &str) -> Option<&'a str> {
    f.fabric
        .env
        .get(name)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}

fn forced(f: &NodeFacts) -> Option<String> {
    sockets_forced(|k| env(f, k).map(String::from))
}

/// `infiniband`: an active InfiniBand/RoCE port that the job can open, on
/// every node of a multi-machine GPU job; else NCCL uses TCP sockets.
pub(crate) fn infiniband(inputs: &CheckInputs) -> CheckResult {
    let needs_fabric = !inputs.one_machine() && inputs.any_gpu();
    let mut t = Tally::new(inputs, "infiniband");
    let mut devices: BTreeSet<String> = BTreeSet::new();
    let mut forced_by: BTreeSet<String> = BTreeSet::new();
    for (n, f) in inputs.answered() {
        let active: Vec<&str> = f
            .fabric
            .ib_devices
            .iter()
            .filter(|d| d.ports.iter().any(|p| p.active()))
            .map(|d| d.name.as_str())
            .collect();
        let all: Vec<&str> = f
            .fabric
            .ib_devices
            .iter()
            .map(|d| d.name.as_str())
            .collect();
        let uverbs = f
            .fabric
            .dev_infiniband
            .as_ref()
            .is_some_and(|e| e.iter().any(|name| name.starts_with("uverbs")));
        if let Some(how) = forced(f) {
            forced_by.insert(how.clone());
            if active.is_empty() {
                t.ok(n.rank);
            } else {
                t.warn(
                    n.rank,
                    format!(
                        "{how}: NCCL uses TCP although the node has active RDMA devices ({})",
                        active.join(", ")
                    ),
                    "unset NCCL_IB_DISABLE / NCCL_NET to use the fabric",
                );
            }
        } else if !active.is_empty() {
            if uverbs {
                devices.extend(active.iter().map(|d| d.to_string()));
                t.ok(n.rank);
            } else {
                t.warn(
                    n.rank,
                    format!(
                        "{} active, but the job has no /dev/infiniband/uverbs*: NCCL cannot open it and uses sockets",
                        active.join(", ")
                    ),
                    "give the job the device files (`docker run --device=/dev/infiniband`, or the platform's fabric option)",
                );
            }
        } else if !needs_fabric {
            t.ok(n.rank);
        } else if !all.is_empty() {
            t.warn(
                n.rank,
                format!("no ACTIVE port on {}: NCCL prints \"NET/IB : No device found\" and uses sockets", all.join(", ")),
                "check the ports with `ibstat` (cable, subnet manager, link layer)",
            );
        } else {
            t.warn(
                n.rank,
                "no InfiniBand/RoCE device: NCCL prints \"NET/IB : No device found\" and uses sockets (TCP) between nodes",
                "provision the fabric and give the job /dev/infiniband (with libibverbs in the image), or set NCCL_IB_DISABLE=1 to choose sockets knowingly",
            );
        }
    }
    let ok = if !devices.is_empty() {
        format!(
            "NCCL can use {} (InfiniBand/RoCE)",
            devices.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else if !forced_by.is_empty() {
        format!(
            "sockets chosen ({})",
            forced_by.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else if inputs.one_machine() {
        "one machine: NCCL needs no network between nodes".to_string()
    } else {
        "no GPU: NCCL does not run".to_string()
    };
    t.finish(ok)
}

/// `nccl-ib-hca`: `NCCL_IB_HCA` selects at least one active device port on
/// every node, and every item of an inclusive list names something.
pub(crate) fn nccl_ib_hca(inputs: &CheckInputs) -> CheckResult {
    const FIX: &str = "name devices that exist on every node (`ls /sys/class/infiniband`): `mlx5` (a prefix), `=mlx5_0:1,mlx5_1:1` (exact, with ports), `^mlx5_2` (all but)";
    let mut t = Tally::new(inputs, "nccl-ib-hca");
    let mut selected_anywhere: BTreeSet<String> = BTreeSet::new();
    let mut set_anywhere = false;
    for (n, f) in inputs.answered() {
        let Some(spec) = env(f, "NCCL_IB_HCA") else {
            t.ok(n.rank);
            continue;
        };
        set_anywhere = true;
        let list = match NcclList::parse(spec) {
            Ok(list) => list,
            Err(e) => {
                t.fail(n.rank, format!("NCCL_IB_HCA='{spec}': {e}"), FIX);
                continue;
            }
        };
        let ports: Vec<(&str, u32, bool)> = f
            .fabric
            .ib_devices
            .iter()
            .flat_map(|d| {
                d.ports
                    .iter()
                    .map(move |p| (d.name.as_str(), p.port, p.active()))
            })
            .collect();
        let have: Vec<String> = ports
            .iter()
            .map(|(d, p, active)| format!("{d}:{p}{}", if *active { "" } else { " (down)" }))
            .collect();
        if ports.is_empty() {
            t.fail(
                n.rank,
                format!("NCCL_IB_HCA='{spec}' but the node has no InfiniBand/RoCE device"),
                "provision the fabric on that node, or unset NCCL_IB_HCA",
            );
            continue;
        }
        let selected: Vec<&(&str, u32, bool)> = ports
            .iter()
            .filter(|(d, p, _)| list.selects(d, Some(*p)))
            .collect();
        if selected.is_empty() {
            let what = if list.exclude {
                "excludes every"
            } else {
                "matches no"
            };
            t.fail(
                n.rank,
                format!(
                    "NCCL_IB_HCA='{spec}' {what} device port (the node has {})",
                    list_or_none(&have)
                ),
                FIX,
            );
            continue;
        }
        if !selected.iter().any(|(_, _, active)| *active) {
            t.fail(
                n.rank,
                format!(
                    "NCCL_IB_HCA='{spec}' selects no ACTIVE port (the node has {})",
                    list_or_none(&have)
                ),
                "select active ports (`ibstat` shows their state), or bring the ports up",
            );
            continue;
        }
        let unmatched: Vec<String> = if list.exclude {
            Vec::new()
        } else {
            list.items
                .iter()
                .filter(|item| {
                    !ports
                        .iter()
                        .any(|(d, p, _)| list.item_matches(item, d, Some(*p)))
                })
                .map(|item| match item.port {
                    Some(p) => format!("'{}:{p}'", item.name),
                    None => format!("'{}'", item.name),
                })
                .collect()
        };
        if !unmatched.is_empty() {
            t.warn(
                n.rank,
                format!(
                    "{} of NCCL_IB_HCA='{spec}' match nothing (the node has {})",
                    unmatched.join(", "),
                    list_or_none(&have)
                ),
                FIX,
            );
            continue;
        }
        selected_anywhere.extend(
            selected
                .iter()
                .filter(|(_, _, active)| *active)
                .map(|(d, p, _)| format!("{d}:{p}")),
        );
        t.ok(n.rank);
    }
    t.finish(if set_anywhere {
        format!(
            "selects {}",
            selected_anywhere.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else {
        "not set: NCCL uses every active device".to_string()
    })
}

/// An address NCCL can bind: IPv4, or IPv6 other than loopback.
fn bindable(addr: &IpAddr) -> bool {
    match addr {
        IpAddr::V4(_) => true,
        IpAddr::V6(a) => !a.is_loopback(),
    }
}

fn with_address(ifaces: &[NetInterface]) -> Vec<&str> {
    let mut names: Vec<&str> = ifaces
        .iter()
        .filter(|i| i.addrs.iter().any(bindable))
        .map(|i| i.name.as_str())
        .collect();
    names.dedup();
    names
}

/// `nccl-socket-ifname`: `NCCL_SOCKET_IFNAME` matches an interface with an
/// address on every node (NCCL aborts with "no socket interface found"
/// otherwise), and not only loopback when other machines must connect.
pub(crate) fn nccl_socket_ifname(inputs: &CheckInputs) -> CheckResult {
    const FIX: &str = "name interfaces that exist on every node (`ip -br addr`); a prefix such as `eth` or an exclusion such as `^docker,lo` adapts to each node";
    let one_machine = inputs.one_machine();
    let mut t = Tally::new(inputs, "nccl-socket-ifname");
    let mut matched_anywhere: BTreeSet<String> = BTreeSet::new();
    let mut set_anywhere = false;
    for (n, f) in inputs.answered() {
        let Some(spec) = env(f, "NCCL_SOCKET_IFNAME") else {
            t.ok(n.rank);
            continue;
        };
        set_anywhere = true;
        let list = match NcclList::parse(spec) {
            Ok(list) => list,
            Err(e) => {
                t.fail(n.rank, format!("NCCL_SOCKET_IFNAME='{spec}': {e}"), FIX);
                continue;
            }
        };
        let have = with_address(&f.fabric.interfaces);
        let matching: Vec<&NetInterface> = f
            .fabric
            .interfaces
            .iter()
            .filter(|i| list.selects(&i.name, None) && i.addrs.iter().any(bindable))
            .collect();
        if matching.is_empty() {
            t.fail(
                n.rank,
                format!(
                    "NCCL_SOCKET_IFNAME='{spec}' matches no interface with an address (the node has {})",
                    list_or_none(&have)
                ),
                FIX,
            );
            continue;
        }
        let only_loopback = matching.iter().all(|i| {
            i.addrs
                .iter()
                .filter(|a| bindable(a))
                .all(IpAddr::is_loopback)
        });
        if only_loopback && !one_machine {
            t.fail(
                n.rank,
                format!("NCCL_SOCKET_IFNAME='{spec}' selects only loopback: the other nodes cannot connect"),
                FIX,
            );
            continue;
        }
        matched_anywhere.extend(matching.iter().map(|i| i.name.clone()));
        t.ok(n.rank);
    }
    t.finish(if set_anywhere {
        format!(
            "matches {}",
            matched_anywhere.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else {
        "not set: NCCL picks ib* first, then any interface but docker* and lo".to_string()
    })
}

/// `gloo-socket-ifname`: every interface of `GLOO_SOCKET_IFNAME` exists with
/// an address on every node (Gloo fails with "Unable to find address for").
pub(crate) fn gloo_socket_ifname(inputs: &CheckInputs) -> CheckResult {
    const FIX: &str = "list exact interface names that exist on every node (`ip -br addr`), or unset GLOO_SOCKET_IFNAME";
    let mut t = Tally::new(inputs, "gloo-socket-ifname");
    let mut set_anywhere = false;
    let mut names_anywhere: BTreeSet<String> = BTreeSet::new();
    for (n, f) in inputs.answered() {
        let Some(spec) = env(f, "GLOO_SOCKET_IFNAME") else {
            t.ok(n.rank);
            continue;
        };
        set_anywhere = true;
        let names = match parse_gloo(spec) {
            Ok(names) => names,
            Err(e) => {
                t.fail(n.rank, format!("GLOO_SOCKET_IFNAME='{spec}': {e}"), FIX);
                continue;
            }
        };
        let have = with_address(&f.fabric.interfaces);
        let missing: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|name| !have.contains(name))
            .collect();
        if missing.is_empty() {
            names_anywhere.extend(names);
            t.ok(n.rank);
        } else {
            t.fail(
                n.rank,
                format!(
                    "GLOO_SOCKET_IFNAME='{spec}': no interface {} with an address (the node has {})",
                    missing.join(", "),
                    list_or_none(&have)
                ),
                FIX,
            );
        }
    }
    t.finish(if set_anywhere {
        format!(
            "{} on every node",
            names_anywhere.into_iter().collect::<Vec<_>>().join(", ")
        )
    } else {
        "not set: Gloo uses the address of the host name".to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::super::CheckInputs;
    use super::super::Status;
    use super::super::fixtures::*;

    fn set_env(inputs: &mut CheckInputs, rank: usize, name: &str, value: &str) {
        facts(inputs, rank)
            .fabric
            .env
            .insert(name.into(), value.into());
    }

    fn set_env_all(inputs: &mut CheckInputs, name: &str, value: &str) {
        for rank in 0..inputs.nodes.len() {
            set_env(inputs, rank, name, value);
        }
    }

    #[test]
    fn a_node_without_the_fabric_falls_back_to_sockets() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 2).fabric.ib_devices.clear();
        facts(&mut inputs, 2).fabric.dev_infiniband = None;
        let r = row(&inputs, "infiniband");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu03"]);
        assert!(
            r.detail.contains("NET/IB : No device found"),
            "{}",
            r.detail
        );
        assert!(r.fix.expect("fix").contains("NCCL_IB_DISABLE=1"));
        assert_eq!(
            row(&cluster(2), "infiniband").detail,
            "NCCL can use mlx5_0, mlx5_1 (InfiniBand/RoCE)"
        );
    }

    #[test]
    fn devices_the_container_cannot_open_or_that_are_down() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 1).fabric.dev_infiniband = Some(vec!["rdma_cm".into()]);
        for d in &mut facts(&mut inputs, 2).fabric.ib_devices {
            d.ports[0].state = "DOWN".into();
        }
        let r = row(&inputs, "infiniband");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        assert!(
            r.detail
                .contains("no /dev/infiniband/uverbs*: NCCL cannot open it"),
            "{}",
            r.detail
        );
        assert!(
            r.detail.contains("no ACTIVE port on mlx5_0, mlx5_1"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn sockets_by_choice_and_jobs_that_need_no_fabric() {
        let mut inputs = cluster(2);
        set_env_all(&mut inputs, "NCCL_IB_DISABLE", "1");
        let r = row(&inputs, "infiniband");
        assert_eq!(r.status, Status::Warn, "IB disabled although active");
        assert!(r.detail.starts_with("NCCL_IB_DISABLE=1: NCCL uses TCP although the node has active RDMA devices (mlx5_0, mlx5_1)"), "{}", r.detail);
        for rank in 0..2 {
            facts(&mut inputs, rank).fabric.ib_devices.clear();
        }
        let r = row(&inputs, "infiniband");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "sockets chosen (NCCL_IB_DISABLE=1)")
        );

        // CPU job across machines: no NCCL, no warning.
        let mut cpu = cluster(2);
        for rank in 0..2 {
            let f = facts(&mut cpu, rank);
            f.fabric.ib_devices.clear();
            f.gpus.devices.clear();
        }
        let r = row(&cpu, "infiniband");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "no GPU: NCCL does not run")
        );

        // One node: NVLink/PCIe within the node, no network.
        let mut one = cluster(1);
        facts(&mut one, 0).fabric.ib_devices.clear();
        let r = row(&one, "infiniband");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (
                Status::Ok,
                "one machine: NCCL needs no network between nodes"
            )
        );
    }

    #[test]
    fn ib_hca_that_names_nothing_fails() {
        let mut inputs = cluster(3);
        set_env_all(&mut inputs, "NCCL_IB_HCA", "=mlx5_4");
        let r = row(&inputs, "nccl-ib-hca");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu01", "gpu02", "gpu03"]);
        assert_eq!(
            r.detail,
            "NCCL_IB_HCA='=mlx5_4' matches no device port (the node has mlx5_0:1, mlx5_1:1) on gpu[01-03]"
        );
    }

    #[test]
    fn ib_hca_partly_wrong_ports_excludes_and_syntax() {
        let mut inputs = cluster(4);
        set_env(&mut inputs, 0, "NCCL_IB_HCA", "mlx5_0:1,mlx5_9");
        set_env(&mut inputs, 1, "NCCL_IB_HCA", "=mlx5_0:2");
        set_env(&mut inputs, 2, "NCCL_IB_HCA", "^mlx5");
        set_env(&mut inputs, 3, "NCCL_IB_HCA", "mlx5_0:x");
        let r = row(&inputs, "nccl-ib-hca");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03", "gpu04"]);
        assert_eq!(
            r.detail,
            "NCCL_IB_HCA='=mlx5_0:2' matches no device port (the node has mlx5_0:1, mlx5_1:1) on gpu02; \
             NCCL_IB_HCA='^mlx5' excludes every device port (the node has mlx5_0:1, mlx5_1:1) on gpu03; \
             NCCL_IB_HCA='mlx5_0:x': port 'x' of 'mlx5_0:x' is not a number on gpu04; \
             also warn: 'mlx5_9' of NCCL_IB_HCA='mlx5_0:1,mlx5_9' match nothing (the node has mlx5_0:1, mlx5_1:1) on gpu01"
        );
    }

    #[test]
    fn ib_hca_on_down_ports_or_without_devices() {
        let mut inputs = cluster(2);
        set_env_all(&mut inputs, "NCCL_IB_HCA", "mlx5_1");
        facts(&mut inputs, 0).fabric.ib_devices[1].ports[0].state = "DOWN".into();
        facts(&mut inputs, 1).fabric.ib_devices.clear();
        let r = row(&inputs, "nccl-ib-hca");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(
            r.detail,
            "NCCL_IB_HCA='mlx5_1' selects no ACTIVE port (the node has mlx5_0:1, mlx5_1:1 (down)) on gpu01; \
             NCCL_IB_HCA='mlx5_1' but the node has no InfiniBand/RoCE device on gpu02"
        );
    }

    #[test]
    fn ib_hca_ok() {
        let mut inputs = cluster(2);
        set_env_all(&mut inputs, "NCCL_IB_HCA", "=mlx5_0:1,mlx5_1:1");
        let r = row(&inputs, "nccl-ib-hca");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "selects mlx5_0:1, mlx5_1:1")
        );
        set_env_all(&mut inputs, "NCCL_IB_HCA", "^=mlx5_1");
        assert_eq!(row(&inputs, "nccl-ib-hca").detail, "selects mlx5_0:1");
        assert_eq!(
            row(&cluster(1), "nccl-ib-hca").detail,
            "not set: NCCL uses every active device"
        );
    }

    #[test]
    fn socket_ifname_missing_on_one_node() {
        let mut inputs = cluster(3);
        set_env_all(&mut inputs, "NCCL_SOCKET_IFNAME", "=eth0");
        facts(&mut inputs, 1).fabric.interfaces[1].name = "ens5".into();
        let r = row(&inputs, "nccl-socket-ifname");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02"]);
        assert_eq!(
            r.detail,
            "NCCL_SOCKET_IFNAME='=eth0' matches no interface with an address (the node has lo, ens5, ib0, docker0) on gpu02"
        );
        set_env_all(&mut inputs, "NCCL_SOCKET_IFNAME", "^docker,lo");
        let r = row(&inputs, "nccl-socket-ifname");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "matches ens5, eth0, ib0")
        );
    }

    #[test]
    fn socket_ifname_loopback_only_across_machines() {
        let mut inputs = cluster(2);
        set_env_all(&mut inputs, "NCCL_SOCKET_IFNAME", "lo");
        let r = row(&inputs, "nccl-socket-ifname");
        assert_eq!(r.status, Status::Fail);
        assert!(r.detail.contains("selects only loopback"), "{}", r.detail);
        let mut one = cluster(1);
        set_env_all(&mut one, "NCCL_SOCKET_IFNAME", "lo");
        assert_eq!(row(&one, "nccl-socket-ifname").status, Status::Ok);
        set_env_all(&mut one, "NCCL_SOCKET_IFNAME", "^");
        let r = row(&one, "nccl-socket-ifname");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(
            r.detail,
            "NCCL_SOCKET_IFNAME='^': it names nothing on gpu01"
        );
    }

    #[test]
    fn gloo_needs_every_named_interface() {
        let mut inputs = cluster(2);
        set_env_all(&mut inputs, "GLOO_SOCKET_IFNAME", "eth0,ib0");
        assert_eq!(
            row(&inputs, "gloo-socket-ifname").detail,
            "eth0, ib0 on every node"
        );
        // A prefix is not enough for Gloo.
        set_env(&mut inputs, 1, "GLOO_SOCKET_IFNAME", "eth");
        let r = row(&inputs, "gloo-socket-ifname");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02"]);
        assert_eq!(
            r.detail,
            "GLOO_SOCKET_IFNAME='eth': no interface eth with an address (the node has lo, eth0, ib0, docker0) on gpu02"
        );
    }
}
