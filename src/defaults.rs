//! Every default of a flag or a variable, written once: clap shows and
//! applies these (`default_value_t = defaults::FANOUT`, `default_value =
//! defaults::GRACE.text`), and the runtime takes the same constants where no
//! command line was parsed (`RunOptions::new`, the transport's connect
//! timeout, the agent's shared connections). The bottom layer: it imports
//! nothing of this crate.

use std::time::Duration;

/// A default number of seconds, both as a flag's text (what `--help` shows
/// and clap parses when the flag is absent) and as the `Duration` it is.
#[derive(Debug, Clone, Copy)]
pub struct Seconds {
    /// The whole seconds, as written on a command line.
    pub text: &'static str,
    /// The same time.
    pub duration: Duration,
}

/// `seconds!(3)`: [`Seconds`] from one literal, so the text and the
/// `Duration` cannot disagree.
macro_rules! seconds {
    ($n:literal) => {
        Seconds {
            text: stringify!($n),
            duration: Duration::from_secs($n),
        }
    };
}

// exec_all.

/// Between SIGTERM and SIGKILL when ending nodes or a command's process
/// group (`--grace` of exec-all, the agent, the supervisor, the group keeper).
pub const GRACE: Seconds = seconds!(3);
/// For a node to connect (exec-all's `--connect-timeout`; any connection
/// the transport makes without one given, the head agent's shared ones).
pub const CONNECT_TIMEOUT: Seconds = seconds!(30);
/// Up to this many other nodes, exec_all talks to every node itself (`--fanout`).
pub const FANOUT: usize = 256;
/// Connections being set up at once (`--max-connecting`).
pub const MAX_CONNECTING: usize = 256;
/// Every variable goes to the other nodes (`--export`).
pub const EXPORT: &str = "ALL";
/// How long a health check may take on a node (`--health-timeout`).
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(60);
/// Rank 0's store on the head (`--master-port`, torchrun's default), and
/// the rendezvous port `check --port` tries.
pub const MASTER_PORT: u16 = 29500;

// The agent.

/// The agents' port (`MULTINODE_AGENT_PORT`, `--listen`).
pub const AGENT_PORT: u16 = 29922;
/// A worker exits after the head has been unreachable this long (`--idle-timeout`).
pub const IDLE_TIMEOUT: Seconds = seconds!(30);
/// The head waits this long for every worker to answer (`--wait-timeout`).
pub const WAIT_TIMEOUT: Seconds = seconds!(120);
/// A connection not logged in this long after it was accepted is closed
/// (`--login-timeout`).
pub const LOGIN_TIMEOUT: Seconds = seconds!(30);
/// How long a silent server may take before the client counts it lost
/// (`MULTINODE_LOST_AFTER`).
pub const LOST_AFTER: Duration = Duration::from_secs(4);

// Commands on the running job.

/// For an agent to answer a snapshot's connection (`ps` and `top`'s
/// `--connect-timeout`, exec_all's snapshots).
pub const SNAPSHOT_CONNECT_TIMEOUT: Seconds = seconds!(5);
/// For a node's agent to answer `multinode shell` (`--connect-timeout`).
pub const SHELL_CONNECT_TIMEOUT: Seconds = seconds!(10);
/// Between two refreshes of `multinode top` (`--interval`).
pub const TOP_INTERVAL: Seconds = seconds!(2);
/// NCCL's RAS service, where NCCL listens unless `NCCL_RAS_ADDR` moves it
/// (NCCL's own default, `NCCL_RAS_CLIENT_PORT`).
pub const NCCL_RAS_ADDR: &str = "localhost:28028";

// `multinode demo` and `install-helper`.

/// The demo's nodes (`--nodes`).
pub const DEMO_NODES: usize = 4;
/// The demo's slots a node (`--slots`).
pub const DEMO_SLOTS: u32 = 1;
/// The demo's agents' port (`--port`), beside a real job's.
pub const DEMO_PORT: u16 = 29923;
/// Where `install-helper` writes the generic-helper.
pub const HELPER_DIR: &str = "/multinode";
