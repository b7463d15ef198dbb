//! A node's variables in one `env` request: an SSH message a variable costs
//! both ends a packet, a wake-up and a few microseconds, and a node's
//! environment is often a hundred variables or more. Our clients send agents
//! of their job one request named [`crate::vars::ENV_PACK`] whose value is every `NAME=VALUE`
//! pair, each ended by a NUL (which no variable can hold); an environment
//! over [`MAX_PACK`] goes in several, as an SSH packet is bounded. An agent
//! that does not know it drops it (a value with a NUL is no variable).

/// The most bytes one packed value holds (a larger variable goes alone): an
/// SSH packet holds at most 256 KiB (russh drops the connection past it).
pub const MAX_PACK: usize = 128 * 1024;

/// The pairs as values of at most [`MAX_PACK`] bytes each (one for a
/// node's usual environment), in order.
pub fn pack(env: &[(String, String)]) -> Vec<String> {
    let mut packs = Vec::new();
    let mut out = String::new();
    for (name, value) in env {
        let len = name.len() + value.len() + 2;
        if !out.is_empty() && out.len() + len > MAX_PACK {
            packs.push(std::mem::take(&mut out));
        }
        out.push_str(name);
        out.push('=');
        out.push_str(value);
        out.push('\0');
    }
    if !out.is_empty() {
        packs.push(out);
    }
    packs
}

/// The pairs of a packed value, in order; a piece without `=` is skipped.
pub fn unpack(packed: &str) -> impl Iterator<Item = (&str, &str)> {
    packed.split('\0').filter_map(|pair| pair.split_once('='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_round_trip_with_any_value_but_a_nul() {
        let env = vec![
            ("A".to_string(), "x=y, \"q\" 'r' $HOME\nline".to_string()),
            ("EMPTY".to_string(), String::new()),
            ("UTF8".to_string(), "gpu-é".to_string()),
        ];
        let packed = pack(&env);
        assert_eq!(packed.len(), 1);
        let back: Vec<(String, String)> = unpack(&packed[0])
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(back, env);
        assert_eq!(unpack("junk\0B=1\0").collect::<Vec<_>>(), vec![("B", "1")]);
    }

    #[test]
    fn a_large_environment_is_split_into_packets_that_fit() {
        let env: Vec<(String, String)> = (0..20)
            .map(|i| {
                (
                    format!("V{i}"),
                    "x".repeat(if i == 7 { 200_000 } else { 60_000 }),
                )
            })
            .collect();
        let packed = pack(&env);
        assert!(packed.len() > 1);
        for p in &packed {
            assert!(p.len() <= MAX_PACK || unpack(p).count() == 1, "{}", p.len());
        }
        let back: Vec<(String, String)> = packed
            .iter()
            .flat_map(|p| unpack(p))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(back, env);
    }
}
