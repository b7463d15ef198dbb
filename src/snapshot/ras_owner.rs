//! Whom `top` may ask for NCCL's RAS status: a listener of this node's
//! loopback (the rule of `agent/forward.rs`: `127.0.0.0/8`, `::1`,
//! `localhost`) whose socket the job's user owns. Another user of the node
//! can listen on `localhost:28028` before NCCL does, or on the one of
//! `127.0.0.1` and `::1` that NCCL left free: what it would answer is not
//! the job's status, and it could hold every ask to its limit. The owner of
//! a listening socket is the `uid` column of `/proc/net/tcp` and
//! `/proc/net/tcp6` (of this network namespace, where the connection goes).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// TCP's `LISTEN` in `/proc/net/tcp`'s `st` column (include/net/tcp_states.h).
const LISTEN: &str = "0A";

/// Where `addr` (`host:port`, `[v6]:port`) may be asked: `localhost` is
/// both loopbacks (never a name lookup: `/etc/hosts` could send it
/// elsewhere); an address must be a loopback one. Anything else is the
/// one line why not.
pub(crate) fn destinations(addr: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(one) = addr.parse::<SocketAddr>() {
        return if one.ip().to_canonical().is_loopback() {
            Ok(vec![one])
        } else {
            Err(format!("{addr} is not this node's loopback"))
        };
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| format!("{addr:?} is not HOST:PORT"))?;
    let port: u16 = port
        .parse()
        .map_err(|_| format!("{addr:?} has no TCP port"))?;
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(vec![
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            SocketAddr::from((Ipv6Addr::LOCALHOST, port)),
        ]);
    }
    Err(format!(
        "{addr} is not this node's loopback (127.0.0.0/8, ::1, localhost)"
    ))
}

/// The listening sockets of this network namespace: where each listens and
/// its owner's uid.
pub(crate) fn listeners() -> Vec<(SocketAddr, u32)> {
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| parse(&text))
        .collect()
}

/// `/proc/net/tcp`'s (or `tcp6`'s) listening sockets. Pure.
pub(crate) fn parse(text: &str) -> Vec<(SocketAddr, u32)> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.get(3) != Some(&LISTEN) {
                return None;
            }
            let (ip, port) = f.get(1)?.split_once(':')?;
            let port = u16::from_str_radix(port, 16).ok()?;
            let uid = f.get(7)?.parse().ok()?;
            Some((SocketAddr::new(kernel_ip(ip)?, port), uid))
        })
        .collect()
}

/// An address as the kernel prints it: each 32-bit word in hex, as it lies
/// in memory read as a number of this machine.
fn kernel_ip(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| {
        let w = hex.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(w, 16).ok()?.to_ne_bytes())
    };
    match hex.len() {
        8 => Some(IpAddr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            Some(IpAddr::from(bytes))
        }
        _ => None,
    }
}

/// Whether a connection to `dest` reaches only sockets of `uid`: some
/// socket listens where it goes (its address, or a wildcard one of its
/// family, or `::` for both), and every such socket is `uid`'s.
pub(crate) fn held_by(dest: SocketAddr, listening: &[(SocketAddr, u32)], uid: u32) -> bool {
    let ip = dest.ip().to_canonical();
    let mut takers = listening.iter().filter(|(at, _)| {
        at.port() == dest.port() && {
            let at = at.ip().to_canonical();
            at == ip || at.is_unspecified() && (at.is_ipv4() == ip.is_ipv4() || at.is_ipv6())
        }
    });
    let mut any = false;
    let all = takers.all(|(_, owner)| {
        any = true;
        *owner == uid
    });
    any && all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As Linux prints them on a little- or big-endian machine.
    fn table(rows: &[(&str, &str, u32)]) -> String {
        let mut text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n".to_string();
        for (i, (local, st, uid)) in rows.iter().enumerate() {
            text.push_str(&format!(
                "   {i}: {local} 00000000:0000 {st} 00000000:00000000 00:00000000 00000000 {uid:>5}        0 1353 1 0000 100 0 0 10 0\n"
            ));
        }
        text
    }

    fn v4(ip: [u8; 4]) -> String {
        format!("{:08X}", u32::from_ne_bytes(ip))
    }

    fn v6(ip: Ipv6Addr) -> String {
        ip.octets()
            .chunks(4)
            .map(|w| format!("{:08X}", u32::from_ne_bytes([w[0], w[1], w[2], w[3]])))
            .collect()
    }

    #[test]
    fn listeners_and_their_owners_are_read_from_proc_net_tcp() {
        let port = "6D7C"; // 28028
        let text = table(&[
            (&format!("{}:{port}", v4([127, 0, 0, 1])), "0A", 0),
            (&format!("{}:{port}", v4([127, 0, 0, 1])), "01", 1000),
            (&format!("{}:0016", v4([0, 0, 0, 0])), "0A", 0),
        ]);
        assert_eq!(
            parse(&text),
            [
                ("127.0.0.1:28028".parse().unwrap(), 0),
                ("0.0.0.0:22".parse().unwrap(), 0)
            ]
        );
        let text6 = table(&[(&format!("{}:{port}", v6(Ipv6Addr::LOCALHOST)), "0A", 65534)]);
        assert_eq!(parse(&text6), [("[::1]:28028".parse().unwrap(), 65534)]);
        // The real tables parse (this machine listens somewhere, or not).
        let _ = listeners();
    }

    #[test]
    fn only_a_loopback_held_by_the_user_alone_is_asked() {
        let at = |s: &str| s.parse::<SocketAddr>().unwrap();
        let (me, other) = (1000, 65534);
        // Ours on 127.0.0.1, another user's on ::1: only 127.0.0.1.
        let both = [(at("127.0.0.1:28028"), me), (at("[::1]:28028"), other)];
        assert!(held_by(at("127.0.0.1:28028"), &both, me));
        assert!(!held_by(at("[::1]:28028"), &both, me));
        // Nobody listens: nothing to ask.
        assert!(!held_by(at("127.0.0.1:28029"), &both, me));
        // A wildcard listener takes the loopback's connections too.
        let wild = [(at("[::]:28028"), other)];
        assert!(!held_by(at("127.0.0.1:28028"), &wild, me));
        assert!(!held_by(at("[::1]:28028"), &wild, me));
        let wild4 = [(at("0.0.0.0:28028"), me)];
        assert!(held_by(at("127.0.0.1:28028"), &wild4, me));
        assert!(!held_by(at("[::1]:28028"), &wild4, me));
        // Ours and another user's where one connection could go: not asked.
        let shared = [(at("127.0.0.1:28028"), me), (at("0.0.0.0:28028"), other)];
        assert!(!held_by(at("127.0.0.1:28028"), &shared, me));
    }

    #[test]
    fn only_loopback_destinations() {
        assert_eq!(
            destinations("localhost:28028").unwrap(),
            [at("127.0.0.1:28028"), at("[::1]:28028")]
        );
        assert_eq!(destinations("127.0.0.5:99").unwrap(), [at("127.0.0.5:99")]);
        assert_eq!(destinations("[::1]:99").unwrap(), [at("[::1]:99")]);
        for bad in [
            "169.254.169.254:28028",
            "10.0.0.1:28028",
            "[::ffff:169.254.169.254]:28028",
            "metadata.google.internal:80",
            "localhost",
            "localhost:http",
        ] {
            assert!(destinations(bad).is_err(), "{bad}");
        }
    }

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }
}
