//! Spawning commands as process-group leaders and ending their whole group.
