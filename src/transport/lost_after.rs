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
    match text
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
    {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) if d >= Duration::from_millis(400) => Ok(Some(d)),
        _ => Err(crate::error::Error::usage(format!(
            "{}='{}' is not a number of seconds of at least 0.4 (or 0 for never); fix it, or unset it for the default {}",
            vars::LOST_AFTER,
            crate::topology::shorten(text),
            defaults::LOST_AFTER.as_secs()
        ))),
    }
}
