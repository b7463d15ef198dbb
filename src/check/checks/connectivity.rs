//! Can the nodes find and reach each other: they answer, run the same
//! `multinode`, resolve the contract; the head's address is not loopback,
//! its rendezvous port is free and reachable from every node; host names
//! resolve alike everywhere (the `127.0.1.1` trap); clocks agree.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

use super::check_inputs::CheckInputs;
use super::tally::{CheckResult, Tally, list_or_none};
use crate::check::facts::Resolution;
use crate::vars;

/// Clock difference to the head above which `clock` warns (ms): logs stop
/// lining up, and timeouts computed from timestamps misfire.
pub(crate) const CLOCK_WARN_MS: u64 = 1_000;
/// ... and fails (ms): TLS certificates and Kerberos tickets start failing,
/// and a rendezvous keyed on time (torch elastic's) can expire at once.
pub(crate) const CLOCK_FAIL_MS: u64 = 30_000;

const FIX_ANSWER: &str = "run `multinode exec-all -c true` to see why; every node needs `multinode` at the head's path ($MULTINODE_BIN)";

/// `nodes`: every node ran `multinode check --local` and sent a report.
pub(crate) fn nodes(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "nodes");
    for n in &inputs.nodes {
        match &n.facts {
            Ok(_) => t.ok(n.rank),
            Err(reason) => t.fail(n.rank, format!("no report: {reason}"), FIX_ANSWER),
        }
    }
    let count = inputs.nodes.len();
    t.finish(format!("{count} of {count} nodes answered"))
}

/// `version`: the same `multinode` on every node.
pub(crate) fn version(inputs: &CheckInputs) -> CheckResult {
    let head = &inputs.head.version;
    let mut t = Tally::new(inputs, "version");
    for (n, f) in inputs.answered() {
        if &f.version == head {
            t.ok(n.rank);
        } else {
            let theirs = if f.version.is_empty() {
                "unknown"
            } else {
                &f.version
            };
            t.fail(
                n.rank,
                format!("multinode {theirs}, the head runs {head}"),
                format!("install multinode {head} on every node (the same image everywhere)"),
            );
        }
    }
    t.finish(format!("multinode {head} on every node"))
}

/// `environment`: the contract resolves on every node to the head's address.
pub(crate) fn environment(inputs: &CheckInputs) -> CheckResult {
    let head_ip = inputs.head.head_ip;
    let mut t = Tally::new(inputs, "environment");
    for (n, f) in inputs.answered() {
        if let Some(error) = &f.job.error {
            t.fail(
                n.rank,
                format!("`multinode env` fails: {error}"),
                "fix what the message names on that node (docs/environment.md)",
            );
        } else if let Some(ip) = f.job.head_ip
            && ip != head_ip
        {
            t.fail(
                n.rank,
                format!("{} is {ip} there, {head_ip} on the head", vars::NODE_IP),
                format!(
                    "set {} to the same value on every node, or unset it",
                    vars::NODE_IP
                ),
            );
        } else {
            t.ok(n.rank);
        }
    }
    t.finish("the environment contract resolves on every node")
}

/// `head-address`: `MULTINODE_NODE_IP` is not loopback, unless every node is
/// this one machine (then a warning: fine for the demo, not for a cluster).
pub(crate) fn head_address(inputs: &CheckInputs) -> CheckResult {
    let ip = inputs.head.head_ip;
    let mut t = Tally::new(inputs, "head-address");
    if !ip.is_loopback() {
        t.ok(0);
        return t.finish(format!("{ip}, not loopback"));
    }
    if inputs.nodes.len() <= 1 {
        t.ok(0);
        return t.finish(format!("{ip}: one node, nothing else connects to it"));
    }
    if inputs.one_machine() {
        t.warn(
            0,
            format!("{ip} is loopback: every node is this machine (a demo), no other machine can join"),
            "on a cluster, choose the nodes' interface (--iface, MULTINODE_IFNAME) or set MULTINODE_NODE_IP",
        );
    } else {
        t.fail(
            0,
            format!("{}={ip} is loopback: the other nodes cannot reach it", vars::NODE_IP),
            "choose the nodes' interface (--iface, MULTINODE_IFNAME) or set MULTINODE_NODE_IP to the head's routable address; remove the head's `127.0.1.1 HOST` line from /etc/hosts",
        );
    }
    t.finish("")
}

/// `rendezvous-port`: the head could listen on the port (nothing else holds it).
pub(crate) fn rendezvous_port(inputs: &CheckInputs) -> CheckResult {
    let port = inputs.head.port;
    let mut t = Tally::new(inputs, "rendezvous-port");
    match &inputs.head.bind_error {
        None => t.ok(0),
        Some(e) => t.fail(
            0,
            format!("cannot listen on port {port} on the head: {e}"),
            format!(
                "stop what holds port {port} on the head (`ss -ltnp 'sport = :{port}'`; a previous job's torchrun?), or use another --master-port and pass it as --port"
            ),
        ),
    }
    t.finish(format!("port {port} is free on the head"))
}

/// `rendezvous-connect`: every node opens a TCP connection to `MULTINODE_NODE_IP:PORT`.
pub(crate) fn rendezvous_connect(inputs: &CheckInputs) -> CheckResult {
    let port = inputs.head.port;
    let addr = SocketAddr::new(inputs.head.head_ip, port);
    let mut t = Tally::new(inputs, "rendezvous-connect");
    let mut slowest = 0;
    for (n, f) in inputs.answered() {
        let Some(r) = &f.rendezvous else {
            t.fail(
                n.rank,
                "did not try: the node knows no MULTINODE_NODE_IP",
                "set MULTINODE_NODE_IP, or fix the environment (see the environment check)",
            );
            continue;
        };
        if r.connected {
            slowest = slowest.max(r.elapsed_ms);
            t.ok(n.rank);
            continue;
        }
        let error = r.error.as_deref().unwrap_or("failed");
        let fix = if error.contains("refused") {
            format!(
                "nothing listens at {addr} as that node sees it: MULTINODE_NODE_IP is not the head's address on this network, or a firewall rejects port {port}"
            )
        } else if error.contains("timed out") {
            format!(
                "a firewall drops port {port}, or {} is not routed from that node: open TCP port {port} on the head, or choose the interface every node shares (--iface, MULTINODE_IFNAME)",
                addr.ip()
            )
        } else {
            format!(
                "check the route from that node to the head (`ip route get {}`)",
                addr.ip()
            )
        };
        t.fail(
            n.rank,
            format!("cannot connect to {}: {error}", r.addr),
            fix,
        );
    }
    let mut ok = format!("every node connects to {addr} (slowest {slowest} ms)");
    if inputs.head.bind_error.is_some() {
        ok.push_str(", but another program holds the port on the head");
    }
    t.finish(ok)
}

/// `host-names`: every host name of the hostlist resolves on every node, to
/// no loopback address (unless every node is this machine), and to an
/// address the head also gets (a stale /etc/hosts gets another).
pub(crate) fn host_names(inputs: &CheckInputs) -> CheckResult {
    let names: Vec<&str> = inputs
        .nodes
        .iter()
        .map(|n| n.host.as_str())
        .filter(|h| h.parse::<IpAddr>().is_err())
        .collect();
    let mut t = Tally::new(inputs, "host-names");
    if names.is_empty() {
        for (n, _) in inputs.answered() {
            t.ok(n.rank);
        }
        return t.finish("the hostlist holds IP addresses only");
    }
    let one_machine = inputs.one_machine();
    for name in &names {
        let reference = reference_addrs(inputs, name);
        for (n, f) in inputs.answered() {
            let Some(res) = f.names.get(*name) else {
                t.warn(
                    n.rank,
                    format!("{name}: not resolved in time"),
                    "make name resolution fast on every node (a DNS server that does not answer?)",
                );
                continue;
            };
            if let Some(error) = &res.error {
                let detail = format!("{name}: {error}");
                let fix = "add every node's name to DNS or to /etc/hosts on every node (mpirun and tools that connect by name need them)";
                if n.rank == 0 {
                    t.fail(n.rank, detail, fix);
                } else {
                    t.warn(n.rank, detail, fix);
                }
                continue;
            }
            let shown = addr_list(&res.addrs);
            if !one_machine && res.addrs.iter().any(IpAddr::is_loopback) {
                t.fail(
                    n.rank,
                    format!("{name} → {shown}"),
                    "remove the loopback line of the node's name from /etc/hosts (Debian writes `127.0.1.1 HOST`) or map the name to the node's real address",
                );
                continue;
            }
            if let Some(reference) = &reference
                && !res.addrs.iter().any(|a| reference.contains(a))
            {
                t.fail(
                    n.rank,
                    format!("{name} → {shown}, the head gets {}", addr_list(reference)),
                    "make DNS and /etc/hosts agree on every node",
                );
                continue;
            }
            t.ok(n.rank);
        }
    }
    let how = if one_machine {
        "every node is this machine"
    } else {
        "none to loopback"
    };
    t.finish(format!(
        "{} host names resolve alike on every node, {how}",
        names.len()
    ))
}

/// The addresses other nodes should get for `name`: the head's answer when
/// it has a usable one, else the most common usable answer.
fn reference_addrs(inputs: &CheckInputs, name: &str) -> Option<Vec<IpAddr>> {
    let usable = |r: &Resolution| {
        r.error.is_none() && !r.addrs.is_empty() && !r.addrs.iter().any(IpAddr::is_loopback)
    };
    if let Some(r) = inputs.head_facts().and_then(|f| f.names.get(name))
        && usable(r)
    {
        return Some(r.addrs.clone());
    }
    let mut counts: BTreeMap<Vec<IpAddr>, usize> = BTreeMap::new();
    for (_, f) in inputs.answered() {
        if let Some(r) = f.names.get(name)
            && usable(r)
        {
            let mut key = r.addrs.clone();
            key.sort();
            *counts.entry(key).or_default() += 1;
        }
    }
    counts
        .into_iter()
        .max_by_key(|(_, count)| *count)
        .map(|(addrs, _)| addrs)
}

fn addr_list(addrs: &[IpAddr]) -> String {
    let shown: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
    list_or_none(&shown)
}

/// `clock`: each node's clock against the head's.
///
/// With the head's listener's answer (a [`crate::check::facts::ClockSample`]),
/// the offset is the head's time minus the midpoint of the node's send and
/// receive times, less half the round trip (what cannot be told apart from
/// latency). Without it, the node's `time_ms` is compared with the window
/// during which the head waited for the reports.
pub(crate) fn clock(inputs: &CheckInputs) -> CheckResult {
    let mut t = Tally::new(inputs, "clock");
    let mut largest = 0u64;
    for (n, f) in inputs.answered() {
        let Some(offset) = offset_ms(inputs, f) else {
            t.ok(n.rank);
            continue;
        };
        let skew = offset.unsigned_abs();
        largest = largest.max(skew);
        let way = if offset > 0 { "ahead of" } else { "behind" };
        let detail = format!("{} {way} the head", seconds(skew));
        let fix = "synchronise the clocks: chrony or ntpd on every node (`chronyc tracking` shows the offset)";
        if skew > CLOCK_FAIL_MS {
            t.fail(n.rank, detail, fix);
        } else if skew > CLOCK_WARN_MS {
            t.warn(n.rank, detail, fix);
        } else {
            t.ok(n.rank);
        }
    }
    t.finish(format!(
        "every clock within {} of the head's (largest difference {largest} ms)",
        seconds(CLOCK_WARN_MS)
    ))
}

/// How far node `f`'s clock is ahead of the head's (negative: behind), less
/// the measurement's uncertainty; `None` when the node sent no time.
pub(crate) fn offset_ms(inputs: &CheckInputs, f: &crate::check::facts::NodeFacts) -> Option<i64> {
    let shrink = |offset: i64, uncertainty: i64| {
        if offset.unsigned_abs() <= uncertainty.unsigned_abs() {
            0
        } else {
            offset - offset.signum() * uncertainty
        }
    };
    if let Some(sample) = f.rendezvous.as_ref().and_then(|r| r.clock)
        && sample.received_ms >= sample.sent_ms
    {
        let mid = (i128::from(sample.sent_ms) + i128::from(sample.received_ms)) / 2;
        let offset = i64::try_from(mid - i128::from(sample.head_ms)).ok()?;
        let uncertainty = i64::try_from((sample.received_ms - sample.sent_ms).div_ceil(2)).ok()?;
        return Some(shrink(offset, uncertainty));
    }
    if f.time_ms == 0 {
        return None;
    }
    let (start, end) = (inputs.head.started_ms, inputs.head.finished_ms);
    let diff = |a: u64, b: u64| i64::try_from(a.abs_diff(b)).unwrap_or(i64::MAX);
    Some(if f.time_ms < start {
        -diff(start, f.time_ms)
    } else if f.time_ms > end {
        diff(f.time_ms, end)
    } else {
        0
    })
}

/// `1.5 s`, `42 s`.
fn seconds(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::*;
    use super::super::{CheckInputs, Status};
    use crate::check::facts::{ClockSample, Resolution};

    #[test]
    fn a_node_without_a_report_fails_by_name() {
        let mut inputs = cluster(4);
        inputs.nodes[2].facts = Err("exit 127: multinode: not found".into());
        let r = row(&inputs, "nodes");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu03"]);
        assert_eq!(
            r.detail,
            "no report: exit 127: multinode: not found on gpu03"
        );
        assert!(r.fix.expect("fix").contains("multinode exec-all -c true"));
        assert_eq!(row(&cluster(4), "nodes").detail, "4 of 4 nodes answered");
    }

    #[test]
    fn another_version_fails() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 1).version = "0.0.9".into();
        facts(&mut inputs, 2).version = String::new();
        let r = row(&inputs, "version");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        let head = env!("CARGO_PKG_VERSION");
        assert_eq!(
            r.detail,
            format!(
                "multinode 0.0.9, the head runs {head} on gpu02; multinode unknown, the head runs {head} on gpu03"
            )
        );
    }

    #[test]
    fn environment_errors_and_disagreements() {
        let mut inputs = cluster(3);
        facts(&mut inputs, 1).job.error =
            Some("no interface matches NCCL_SOCKET_IFNAME='eth9'".into());
        facts(&mut inputs, 2).job.head_ip = Some(ip("10.9.9.9"));
        let r = row(&inputs, "environment");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03"]);
        assert!(
            r.detail.contains(
                "`multinode env` fails: no interface matches NCCL_SOCKET_IFNAME='eth9' on gpu02"
            ),
            "{}",
            r.detail
        );
        assert!(
            r.detail
                .contains("MULTINODE_NODE_IP is 10.9.9.9 there, 10.0.0.1 on the head on gpu03"),
            "{}",
            r.detail
        );
    }

    #[test]
    fn loopback_head_fails_on_a_cluster_and_warns_on_one_machine() {
        let mut inputs = cluster(2);
        inputs.head.head_ip = ip("127.0.1.1");
        let r = row(&inputs, "head-address");
        assert_eq!(
            (r.status, r.nodes.clone()),
            (Status::Fail, vec!["gpu01".to_string()])
        );
        assert!(
            r.detail
                .starts_with("MULTINODE_NODE_IP=127.0.1.1 is loopback"),
            "{}",
            r.detail
        );
        assert!(r.fix.expect("fix").contains("127.0.1.1 HOST"));

        // The loopback demo: every node shares this machine's kernel and network.
        for rank in 0..2 {
            let f = facts(&mut inputs, rank);
            f.machine.boot_id = Some("b".into());
        }
        assert_eq!(row(&inputs, "head-address").status, Status::Warn);
        inputs.nodes[0].host = "127.0.0.2".into();
        inputs.nodes[1].host = "127.0.0.3".into();
        inputs.head.head_ip = ip("127.0.0.2");
        assert_eq!(row(&inputs, "head-address").status, Status::Warn);

        // One node: nothing else connects.
        let mut one = cluster(1);
        one.head.head_ip = ip("127.0.0.1");
        let r = row(&one, "head-address");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(r.detail, "127.0.0.1: one node, nothing else connects to it");
        assert_eq!(
            row(&cluster(2), "head-address").detail,
            "10.0.0.1, not loopback"
        );
    }

    #[test]
    fn rendezvous_port_in_use() {
        let mut inputs = cluster(2);
        inputs.head.bind_error = Some("Address already in use (os error 98)".into());
        let r = row(&inputs, "rendezvous-port");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu01"]);
        assert_eq!(
            r.detail,
            "cannot listen on port 29500 on the head: Address already in use (os error 98) on gpu01"
        );
        assert!(r.fix.expect("fix").contains("ss -ltnp 'sport = :29500'"));
        // The nodes still connected: to whatever holds the port.
        let c = row(&inputs, "rendezvous-connect");
        assert_eq!(c.status, Status::Ok);
        assert!(
            c.detail
                .ends_with("but another program holds the port on the head"),
            "{}",
            c.detail
        );
        assert_eq!(
            row(&cluster(2), "rendezvous-port").detail,
            "port 29500 is free on the head"
        );
    }

    #[test]
    fn rendezvous_connect_failures_say_what_to_do() {
        let mut inputs = cluster(4);
        for (rank, error) in [(1, "connection refused"), (2, "timed out after 3 s")] {
            let r = facts(&mut inputs, rank)
                .rendezvous
                .as_mut()
                .expect("rendezvous");
            r.connected = false;
            r.error = Some(error.into());
            r.clock = None;
        }
        facts(&mut inputs, 3).rendezvous = None;
        let r = row(&inputs, "rendezvous-connect");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu02", "gpu03", "gpu04"]);
        assert!(
            r.detail
                .contains("cannot connect to 10.0.0.1:29500: connection refused on gpu02"),
            "{}",
            r.detail
        );
        assert!(
            r.detail
                .contains("cannot connect to 10.0.0.1:29500: timed out after 3 s on gpu03"),
            "{}",
            r.detail
        );
        assert!(
            r.detail
                .contains("did not try: the node knows no MULTINODE_NODE_IP on gpu04"),
            "{}",
            r.detail
        );
        let fix = r.fix.expect("fix");
        assert!(fix.contains("a firewall rejects port 29500"), "{fix}");
        assert!(fix.contains("open TCP port 29500 on the head"), "{fix}");
        assert_eq!(
            row(&cluster(2), "rendezvous-connect").detail,
            "every node connects to 10.0.0.1:29500 (slowest 1 ms)"
        );
    }

    #[test]
    fn the_127_0_1_1_trap_names_the_node_with_the_bad_hosts_file() {
        let mut inputs = cluster(4);
        // gpu03's /etc/hosts maps its own name to 127.0.1.1 (Debian's default).
        facts(&mut inputs, 2).names.insert(
            "gpu03".into(),
            Resolution {
                addrs: vec![ip("127.0.1.1")],
                error: None,
            },
        );
        let r = row(&inputs, "host-names");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu03"]);
        assert_eq!(r.detail, "gpu03 → 127.0.1.1 on gpu03");
        assert!(r.fix.expect("fix").contains("127.0.1.1 HOST"));
    }

    #[test]
    fn loopback_names_are_fine_on_one_machine() {
        let mut inputs = cluster(2);
        for rank in 0..2 {
            let f = facts(&mut inputs, rank);
            f.machine.boot_id = Some("same".into());
            for name in ["gpu01", "gpu02"] {
                f.names.insert(
                    name.into(),
                    Resolution {
                        addrs: vec![ip("127.0.1.1")],
                        error: None,
                    },
                );
            }
        }
        let r = row(&inputs, "host-names");
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            r.detail,
            "2 host names resolve alike on every node, every node is this machine"
        );
    }

    #[test]
    fn stale_hosts_entries_and_unresolvable_names() {
        let mut inputs = cluster(4);
        facts(&mut inputs, 3).names.insert(
            "gpu02".into(),
            Resolution {
                addrs: vec![ip("10.0.0.99")],
                error: None,
            },
        );
        facts(&mut inputs, 1).names.insert(
            "gpu04".into(),
            Resolution {
                addrs: vec![],
                error: Some("Name or service not known".into()),
            },
        );
        facts(&mut inputs, 2).names.remove("gpu01");
        let r = row(&inputs, "host-names");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu04"]);
        assert_eq!(
            r.detail,
            "gpu02 → 10.0.0.99, the head gets 10.0.0.2 on gpu04; also warn: gpu01: not resolved in time on gpu03; gpu04: Name or service not known on gpu02"
        );
        // Unresolvable on the head itself: the head must reach every node.
        let mut inputs = cluster(2);
        facts(&mut inputs, 0).names.insert(
            "gpu02".into(),
            Resolution {
                addrs: vec![],
                error: Some("Name or service not known".into()),
            },
        );
        let r = row(&inputs, "host-names");
        assert_eq!(
            (r.status, r.nodes),
            (Status::Fail, vec!["gpu01".to_string()])
        );
    }

    #[test]
    fn ip_literal_hostlists_have_no_names_to_check() {
        let mut inputs = cluster(2);
        inputs.nodes[0].host = "10.0.0.1".into();
        inputs.nodes[1].host = "10.0.0.2".into();
        let r = row(&inputs, "host-names");
        assert_eq!(
            (r.status, r.detail.as_str()),
            (Status::Ok, "the hostlist holds IP addresses only")
        );
    }

    #[test]
    fn clock_skew_from_the_rendezvous_exchange() {
        let mut inputs = cluster(4);
        let sample = |offset: i64, rtt: u64| {
            let sent = (T0 as i64 + offset) as u64;
            ClockSample {
                sent_ms: sent,
                head_ms: T0 + rtt / 2,
                received_ms: sent + rtt,
            }
        };
        let set = |inputs: &mut CheckInputs, rank, s| {
            facts(inputs, rank).rendezvous.as_mut().expect("rdzv").clock = Some(s);
        };
        set(&mut inputs, 1, sample(1_500, 10));
        set(&mut inputs, 2, sample(-45_000, 10));
        // 800 ms ahead with a 2 s round trip: cannot be told from latency.
        set(&mut inputs, 3, sample(800, 2_000));
        let r = row(&inputs, "clock");
        assert_eq!(r.status, Status::Fail);
        assert_eq!(r.nodes, ["gpu03"]);
        assert_eq!(
            r.detail,
            "45.0 s behind the head on gpu03; also warn: 1.5 s ahead of the head on gpu02"
        );
        assert!(r.fix.expect("fix").contains("chrony"));
    }

    #[test]
    fn absurd_clock_samples_do_not_panic() {
        let mut inputs = cluster(2);
        for (sent, head, received) in [(u64::MAX, 0, u64::MAX), (0, u64::MAX, 0), (5, 0, 1)] {
            facts(&mut inputs, 1)
                .rendezvous
                .as_mut()
                .expect("rdzv")
                .clock = Some(ClockSample {
                sent_ms: sent,
                head_ms: head,
                received_ms: received,
            });
            let _ = row(&inputs, "clock");
        }
        facts(&mut inputs, 1).rendezvous = None;
        facts(&mut inputs, 1).time_ms = u64::MAX;
        assert_eq!(row(&inputs, "clock").status, Status::Fail);
    }

    #[test]
    fn clock_skew_without_the_exchange_uses_the_head_s_window() {
        let mut inputs = cluster(3);
        for rank in 0..3 {
            facts(&mut inputs, rank)
                .rendezvous
                .as_mut()
                .expect("rdzv")
                .clock = None;
        }
        facts(&mut inputs, 1).time_ms = T0 + 800 + 2_000;
        facts(&mut inputs, 2).time_ms = T0 - 500;
        let r = row(&inputs, "clock");
        assert_eq!(r.status, Status::Warn);
        assert_eq!(r.nodes, ["gpu02"]);
        assert_eq!(r.detail, "2 s ahead of the head on gpu02");
        facts(&mut inputs, 1).time_ms = 0;
        let r = row(&inputs, "clock");
        assert_eq!(r.status, Status::Ok);
        assert_eq!(
            r.detail,
            "every clock within 1 s of the head's (largest difference 500 ms)"
        );
    }
}
