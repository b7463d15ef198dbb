//! A node's variables in one `env` request: an SSH message a variable costs
//! both ends a packet, a wake-up and a few microseconds, and a node's
//! environment is often a hundred variables or more. Our clients send agents
//! of their job one request named [`NAME`] whose value is every `NAME=VALUE`
//! pair, each ended by a NUL (which no variable can hold). An agent that does
//! not know it drops it (a value with a NUL is no variable).

/// The name of the packed request.
pub const NAME: &str = "MULTINODE_ENV_PACK";

/// The pairs as one value.
pub fn pack(env: &[(String, String)]) -> String {
    let mut out = String::with_capacity(env.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (name, value) in env {
        out.push_str(name);
        out.push('=');
        out.push_str(value);
        out.push('\0');
    }
    out
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
        let back: Vec<(String, String)> = unpack(&packed)
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!(back, env);
        assert_eq!(unpack("junk\0B=1\0").collect::<Vec<_>>(), vec![("B", "1")]);
    }
}
