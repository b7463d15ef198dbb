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
            .map(|value| {
                parse(value).ok_or_else(|| BadVar {
                    name: name.to_string(),
                    value: value.to_string(),
                    what: what.to_string(),
                })
            })
            .transpose()
    }
}

/// A variable set to what it cannot be, as one line: "NAME='value' is not
/// WHAT; fix it or unset it" (a usage error).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name}='{value}' is not {what}; fix it or unset it")]
pub struct BadVar {
    pub name: String,
    pub value: String,
    pub what: String,
}

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
}
