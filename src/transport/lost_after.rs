//! How long a silent server may take before the client counts it lost:
//! the default, and `MULTINODE_LOST_AFTER` read from the environment.

use std::time::Duration;

/// A server that sends nothing for this long is lost (a frozen node: its
/// kernel still acknowledges, nothing answers; or a node gone: nothing
/// acknowledges), unless one side waits on the other: its kernel says it has
/// no room for our bytes (a zero window whose probes it answers: it is not
/// reading what we send, as an agent whose command leaves its stdin unread),
/// or bytes from it wait to be read here (our output is slow). Silent servers are probed
/// every quarter of it (an SSH keepalive, which a live server answers at
/// once, however busy its CPUs). `MULTINODE_LOST_AFTER` (seconds; 0 = never)
/// changes it.
pub const DEFAULT_LOST_AFTER: Duration = Duration::from_secs(4);
/// The variable that sets how long a silent server may take.
pub const LOST_AFTER_VAR: &str = "MULTINODE_LOST_AFTER";

/// How long a silent server may take: `MULTINODE_LOST_AFTER` (seconds, 0 for
/// never), else [`DEFAULT_LOST_AFTER`]. `None` is never.
pub fn lost_after(env: &crate::env_map::EnvMap) -> Result<Option<Duration>, crate::error::Error> {
    let Some(text) = env.get(LOST_AFTER_VAR) else {
        return Ok(Some(DEFAULT_LOST_AFTER));
    };
    match text
        .parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
    {
        Some(d) if d.is_zero() => Ok(None),
        Some(d) if d >= Duration::from_millis(400) => Ok(Some(d)),
        _ => Err(crate::error::Error::usage(format!(
            "{LOST_AFTER_VAR}='{}' is not a number of seconds of at least 0.4 (or 0 for never); fix it, or unset it for the default {}",
            crate::topology::shorten(text),
            DEFAULT_LOST_AFTER.as_secs()
        ))),
    }
}
