//! The interfaces of the default routes, from the text of `/proc/net/route`
//! and `/proc/net/ipv6_route`.

const RTF_UP: u32 = 0x0001;
const RTF_REJECT: u32 = 0x0200;

/// Interfaces with an IPv4 default route (`0.0.0.0/0`, up), lowest metric first.
pub(crate) fn default_ifaces_v4(table: &str) -> Vec<String> {
    let routes = table.lines().filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 8 || f[0] == "Iface" {
            return None;
        }
        let flags = u32::from_str_radix(f[3], 16).ok()?;
        let default = f[1] == "00000000" && f[7] == "00000000";
        let metric: u64 = f[6].parse().ok()?;
        (default && flags & RTF_UP != 0).then(|| (metric, f[0].to_string()))
    });
    by_metric(routes)
}

/// Interfaces with an IPv6 default route (`::/0`, up, not a reject route, not
/// `lo`), lowest metric first.
pub(crate) fn default_ifaces_v6(table: &str) -> Vec<String> {
    let routes = table.lines().filter_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 10 {
            return None;
        }
        let default = f[0].bytes().all(|b| b == b'0') && f[0].len() == 32 && f[1] == "00";
        let metric = u64::from_str_radix(f[5], 16).ok()?;
        let flags = u32::from_str_radix(f[8], 16).ok()?;
        let usable = flags & RTF_UP != 0 && flags & RTF_REJECT == 0 && f[9] != "lo";
        (default && usable).then(|| (metric, f[9].to_string()))
    });
    by_metric(routes)
}

fn by_metric(routes: impl Iterator<Item = (u64, String)>) -> Vec<String> {
    let mut routes: Vec<(u64, String)> = routes.collect();
    routes.sort_by_key(|(metric, _)| *metric);
    let mut ifaces: Vec<String> = Vec::new();
    for (_, iface) in routes {
        if !ifaces.contains(&iface) {
            ifaces.push(iface);
        }
    }
    ifaces
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from a container: eth0 is the default route, docker0 is not.
    const ROUTE: &str = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
";

    const ROUTE6: &str = "\
fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000002 00000000 80200001       lo
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
";

    #[test]
    fn ipv4_default_route() {
        assert_eq!(default_ifaces_v4(ROUTE), ["eth0"]);
        assert!(default_ifaces_v4("").is_empty());
        assert!(default_ifaces_v4("garbage\nmore garbage here x y z w v").is_empty());
    }

    #[test]
    fn ipv4_lowest_metric_first_and_down_routes_skipped() {
        let table = "\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask
wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000
eth1\t00000000\t0101A8C0\t0002\t0\t0\t10\t00000000
eth0\t00000000\t0100000A\t0003\t0\t0\t100\t00000000
";
        assert_eq!(default_ifaces_v4(table), ["eth0", "wlan0"]);
    }

    #[test]
    fn ipv6_default_route_skips_lo_reject_routes() {
        assert_eq!(default_ifaces_v6(ROUTE6), ["eth0"]);
        assert!(default_ifaces_v6("").is_empty());
    }
}
