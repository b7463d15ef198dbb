//! How long a silent server may take before the client counts it lost:
//! the default, and `MULTINODE_LOST_AFTER` read from the environment.

use crate::defaults;
use crate::vars;
use std::time::Duration;

/// How long a silent server may take: `MULTINODE_LOST_AFTER` (seconds, 0 for
/// never), else [`crate::defaults::LOST_AFTER`]. `None` is never.
pub fn lost_after(env: &crate::env_map::EnvMap) -> Result<Option<Duration>, crate::error::Error> {
    let Some(text) = env.get(vars::LOST_AFTER) else {
        return Ok(Some(defaults::LOST_AFTER));
    };
    match crate::values::seconds(text) {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) if d >= Duration::from_millis(400) => Ok(Some(d)),
        _ => Err(crate::env_map::BadVar::new(
            vars::LOST_AFTER,
            text,
            "a number of seconds of at least 0.4 (or 0 for never)",
        )
        .unset_for(defaults::LOST_AFTER.as_secs())
        .into()),
    }
}
