//! `multinode top`: every rank of the running job, refreshed: its state,
//! CPU and memory, its GPUs, the age of its last output line and of its
//! heartbeat, its step and step rate (`--progress`), where its time goes
//! (waiting against computing), NCCL's RAS view where there is one, and a
//! line naming the straggler. Every node's agent is asked at once, as for
//! `multinode ps` (`snapshot::survey`), with `#multinode:top`.
//!
//! - `rows`: the snapshots as one row a rank (pure).
//! - `history`: what is kept between refreshes: steps for the rate, samples
//!   for the wait share; `--progress`'s pattern (pure).
//! - `straggler`: the rule that names the straggler (pure).
//! - `start_line`: the line on the ranks' start, while they start (pure).
//! - `ras_status`: NCCL's RAS status text, read (pure).
//! - `refresh_render`: the table and the JSON (pure).
//! - `session`: the refreshes: asked, judged, printed; `--once`, a pipe, a terminal.
//! - `screen`: the terminal, full screen: raw mode, keys, restored on every exit.

mod history;
mod ras_status;
mod refresh_render;
mod rows;
mod screen;
mod session;
mod start_line;
mod straggler;

pub(crate) use session::main;
