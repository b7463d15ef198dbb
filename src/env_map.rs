//! The process environment as a map ([`EnvMap`]), read once and passed in,
//! so everything that reads variables (topology, the contract, keys, the
//! transport choice) is testable. The bottom layer: it imports nothing of
//! this crate.

use std::collections::BTreeMap;

/// A snapshot of the process environment, so resolution is testable.
///
/// Values that are not UTF-8 are kept apart: [`EnvMap::get`] does not see
/// them (a host list or a port must be text), [`EnvMap::get_bytes`] does
/// (the job secret may be any bytes).
#[derive(Debug, Clone, Default)]
pub struct EnvMap(pub BTreeMap<String, String>, NotUtf8);

/// The variables whose value is not UTF-8; their values never show in `Debug`.
#[derive(Clone, Default)]
struct NotUtf8(BTreeMap<String, Vec<u8>>);

impl std::fmt::Debug for NotUtf8 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

impl EnvMap {
    pub fn from_process() -> Self {
        use std::os::unix::ffi::OsStringExt;
        let mut env = EnvMap::default();
        for (name, value) in std::env::vars_os() {
            let Ok(name) = name.into_string() else {
                continue;
            };
            match value.into_string() {
                Ok(value) => {
                    env.0.insert(name, value);
                }
                Err(value) => {
                    env.1.0.insert(name, value.into_vec());
                }
            }
        }
        env
    }

    /// A variable's bytes, UTF-8 or not; set-but-empty counts as unset.
    pub fn get_bytes(&self, name: &str) -> Option<&[u8]> {
        match self.0.get(name) {
            Some(value) => Some(value.as_bytes()),
            None => self.1.0.get(name).map(Vec::as_slice),
        }
        .filter(|v| !v.is_empty())
    }

    /// A variable's value; set-but-empty counts as unset.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// A flag's value when given, else variable `name`'s read by `parse`;
    /// `None` when neither is set. The one reading of a flag that a variable
    /// may give instead: a value `parse` does not take is a [`BadVar`],
    /// which says what it should be (`what`).
    pub fn flag_or_var<T>(
        &self,
        flag: Option<T>,
        name: &str,
        what: &str,
        parse: impl FnOnce(&str) -> Option<T>,
    ) -> Result<Option<T>, BadVar> {
        if flag.is_some() {
            return Ok(flag);
        }
        self.get(name)
            .map(|value| parse(value).ok_or_else(|| BadVar::new(name, value, what)))
            .transpose()
    }
}

/// Inputs quoted in messages are cut to this many characters.
const QUOTE_MAX: usize = 120;

/// `s`, cut to [`QUOTE_MAX`] characters with `...` when longer, so that one
/// bad million-host expression does not make a million-character message.
pub fn shorten(s: &str) -> String {
    match s.char_indices().nth(QUOTE_MAX) {
        Some((cut, _)) => format!("{}...", &s[..cut]),
        None => s.to_string(),
    }
}

/// A variable set to what it cannot be, as one line: "NAME='value' is not
/// WHAT; fix it or unset it", or "...; fix it, or unset it for the default
/// D" where unsetting it gives a default worth naming (a usage error). The
/// one wording of that advice: every reading of a variable says it so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadVar {
    pub name: String,
    /// The value as set, cut to [`QUOTE_MAX`] characters.
    pub value: String,
    pub what: String,
    /// What unsetting it gives, when that is worth naming.
    pub default: Option<String>,
}

impl BadVar {
    pub fn new(name: impl Into<String>, value: &str, what: impl Into<String>) -> Self {
        BadVar {
            name: name.into(),
            value: shorten(value),
            what: what.into(),
            default: None,
        }
    }

    /// The same, naming the default that unsetting the variable gives.
    pub fn unset_for(mut self, default: impl std::fmt::Display) -> Self {
        self.default = Some(default.to_string());
        self
    }
}

impl std::fmt::Display for BadVar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let BadVar {
            name, value, what, ..
        } = self;
        write!(f, "{name}='{value}' is not {what}; ")?;
        match &self.default {
            None => write!(f, "fix it or unset it"),
            Some(d) => write!(f, "fix it, or unset it for the default {d}"),
        }
    }
}

impl std::error::Error for BadVar {}

/// Variables given as UTF-8 pairs (tests, and callers that build an environment).
impl FromIterator<(String, String)> for EnvMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(vars: I) -> Self {
        EnvMap(vars.into_iter().collect(), NotUtf8::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flag_wins_over_its_variable_and_a_bad_variable_is_one_line() {
        let env = EnvMap::from_iter([("MULTINODE_X".to_string(), "ten".to_string())]);
        let parse = |v: &str| v.parse::<u32>().ok();
        assert_eq!(
            env.flag_or_var(Some(3), "MULTINODE_X", "a number", parse)
                .unwrap(),
            Some(3)
        );
        assert_eq!(
            env.flag_or_var(None, "MULTINODE_X", "a number", parse)
                .unwrap_err()
                .to_string(),
            "MULTINODE_X='ten' is not a number; fix it or unset it"
        );
        assert_eq!(
            env.flag_or_var(None, "MULTINODE_Y", "a number", parse)
                .unwrap(),
            None
        );
    }

    #[test]
    fn shorten_cuts_long_inputs_on_a_char_boundary() {
        assert_eq!(shorten("gpu[1-2]"), "gpu[1-2]");
        let long = "é".repeat(200);
        let cut = shorten(&long);
        assert_eq!(cut, format!("{}...", "é".repeat(QUOTE_MAX)));
    }

    #[test]
    fn a_bad_variable_names_its_default_and_is_cut_when_long() {
        let bad =
            BadVar::new("MULTINODE_AGENT_PORT", "0", "a port number (1-65535)").unset_for(29922);
        assert_eq!(
            bad.to_string(),
            "MULTINODE_AGENT_PORT='0' is not a port number (1-65535); fix it, or unset it for the default 29922"
        );
        let long = "x".repeat(1000);
        let msg = BadVar::new("V", &long, "a number").to_string();
        assert!(msg.len() < 200, "{msg}");
        assert!(msg.contains("..."), "{msg}");
    }
}
