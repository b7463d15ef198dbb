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
}

/// Variables given as UTF-8 pairs (tests, and callers that build an environment).
impl FromIterator<(String, String)> for EnvMap {
    fn from_iter<I: IntoIterator<Item = (String, String)>>(vars: I) -> Self {
        EnvMap(vars.into_iter().collect(), NotUtf8::default())
    }
}
