//! How the other nodes of a run are reached, decided once a run from the
//! route ([`Reach::decide`]): an external wrapper, the nodes' agents, or a
//! stock sshd; and what every node task shares ([`RunCtx`]).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::leg_kind::LegKind;
use super::options::RunOptions;
use super::script::Script;
use crate::defaults;
use crate::env::Job;
use crate::env_map::{BadVar, EnvMap};
use crate::error::Error;
use crate::snapshot::survey::{Ask, RunNodes};
use crate::transport::choice::{ClientSpec, Requested, Route, TransportKind};
use crate::transport::client::{Connector, Target};
use crate::transport::mux::MuxClient;
use crate::values;
use crate::vars;

/// How the other nodes are reached, decided once a run.
pub(crate) enum Reach {
    /// `WRAPPER HOST COMMAND`, one process here per node.
    Wrapper(String),
    /// In-process russh sessions to the nodes' agents (the job secret);
    /// inside `multinode agent -- JOB`, on the head agent's connections.
    Agent(Ssh),
    /// In-process russh sessions to a stock sshd (the user's keys).
    Sshd(Ssh),
}

/// The nodes reached over SSH in-process: how to connect, as whom.
pub(crate) struct Ssh {
    pub connector: Connector,
    pub port: u16,
    pub user: String,
    /// The head agent's shared connections (agents, inside `multinode
    /// agent -- JOB`); `None` for a stock sshd.
    pub mux: Option<MuxClient>,
}

impl Ssh {
    /// Where rank `host` is connected to.
    pub fn target(&self, host: &str) -> Target {
        Target {
            host: host.to_string(),
            port: self.port,
            user: self.user.clone(),
        }
    }
}

impl Reach {
    /// exec_all talks SSH itself when the job's wrapper is this program's
    /// own `mn-ssh` or agents are asked for; else it runs the wrapper.
    pub fn decide(job: &Job, env: &EnvMap, connect_timeout: Duration) -> Result<Reach, Error> {
        // An invalid MULTINODE_TRANSPORT only matters when exec_all talks SSH itself.
        let asked_agent = matches!(
            Requested::from_env(env),
            Ok(Requested::Exactly(TransportKind::Agent))
        );
        if !is_own_wrapper(&job.wrapper) && !asked_agent {
            return Ok(Reach::Wrapper(job.wrapper.clone()));
        }
        let spec = ClientSpec {
            connect_timeout: Some(connect_timeout),
            ..ClientSpec::default()
        };
        let route = Route::from_env(&spec, env)?;
        Ok(match route.kind {
            TransportKind::Agent => Reach::Agent(Ssh {
                connector: route.connector,
                port: job.agent_port,
                user: route.user,
                mux: route.mux,
            }),
            TransportKind::OpenSsh => Reach::Sshd(Ssh {
                connector: route.connector,
                port: match env.get(vars::SSH_PORT) {
                    None => route.port,
                    Some(p) => values::port(p).ok_or_else(|| {
                        BadVar::new(vars::SSH_PORT, p, values::PORT).unset_for(22)
                    })?,
                },
                user: route.user,
                mux: None,
            }),
        })
    }

    /// The leg of every node but this one.
    pub fn kind(&self) -> LegKind {
        match self {
            Reach::Wrapper(_) => LegKind::Wrapper,
            Reach::Agent(_) => LegKind::Agent,
            Reach::Sshd(_) => LegKind::Sshd,
        }
    }

    /// The connector to the nodes' agents, when they are reached through them.
    pub fn agent_connector(&self) -> Option<&Connector> {
        match self {
            Reach::Agent(ssh) => Some(&ssh.connector),
            _ => None,
        }
    }

    /// How a snapshot of the run's nodes (`ranks` of `job`) reaches them:
    /// this node from `/proc`, the others through their agents.
    pub fn snapshot_nodes(&self, job: &Job, ranks: &[usize]) -> RunNodes {
        let host = |rank: usize| job.topology.nodes[rank].host.clone();
        RunNodes {
            connector: self.agent_connector().map(|c| {
                c.clone()
                    .with_timeout(defaults::SNAPSHOT_CONNECT_TIMEOUT.duration)
            }),
            remote: ranks
                .iter()
                .filter(|&&r| r != job.rank)
                .map(|&rank| Ask {
                    rank,
                    host: host(rank),
                    port: self.port(),
                })
                .collect(),
            local: ranks
                .contains(&job.rank)
                .then(|| (job.rank, host(job.rank))),
        }
    }

    /// The port a node is reached on (0: through a wrapper).
    pub fn port(&self) -> u16 {
        match self {
            Reach::Wrapper(_) => 0,
            Reach::Agent(ssh) | Reach::Sshd(ssh) => ssh.port,
        }
    }
}

/// Whether `wrapper` is this program's own `mn-ssh` (then exec_all talks
/// SSH in-process instead of running it once per node).
fn is_own_wrapper(wrapper: &str) -> bool {
    let Ok(exe) = std::env::current_exe() else {
        return false;
    };
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).ok();
    let wrapper = canon(std::path::Path::new(wrapper));
    wrapper.is_some()
        && (wrapper == canon(&exe)
            || exe
                .parent()
                .is_some_and(|dir| wrapper == canon(&dir.join("mn-ssh"))))
}

/// What every node task shares.
pub(crate) struct RunCtx {
    pub reach: Reach,
    pub script: Script,
    pub args: Vec<OsString>,
    /// The head's working directory, for every node.
    pub cwd: String,
    pub grace: Duration,
    /// The `multinode` binary, for `multinode supervise`.
    pub bin: PathBuf,
    /// Bounds the connections being set up at once.
    pub connect_slots: Semaphore,
    /// This machine's agent of the job, which the node run here is shown to
    /// (`snapshot::survey::show_in_agent`): only when exec_all reaches
    /// agents itself and no agent runs it already.
    pub local_agent: Option<Target>,
    /// When a node last printed anything or beat its heartbeat (`--hang-timeout`).
    pub progress: std::sync::Arc<super::progress::Progress>,
    /// Where the node run here gets its heartbeat file, when heartbeats are
    /// watched: with `--hang-timeout`, or when this exec_all passes them on
    /// (it runs under a watcher: a relay). Agents are then asked for theirs.
    pub heartbeat_dir: Option<PathBuf>,
}

impl RunCtx {
    /// `runs_here`: this node is one of the run's.
    pub fn new(
        reach: Reach,
        job: &Job,
        options: &RunOptions,
        runs_here: bool,
        env: &EnvMap,
    ) -> Self {
        let pass_up = crate::heartbeat::PassUp::from_env(env);
        let heartbeat_dir = (options.hang_timeout.is_some() || pass_up.is_some())
            .then(|| crate::env::hostlists::runtime_base(env));
        // Inside `multinode agent -- JOB` (the mux), the head's agent runs this
        // exec_all and so shows its node already.
        let local_agent = match &reach {
            Reach::Agent(ssh) if ssh.mux.is_none() && runs_here && options.show_local_to_agent => {
                Some(ssh.target(&job.topology.nodes[job.rank].host))
            }
            _ => None,
        };
        RunCtx {
            reach,
            script: options.script.clone(),
            args: options.args.clone(),
            cwd: std::env::current_dir()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "/".into()),
            grace: options.grace,
            bin: PathBuf::from(&job.bin),
            connect_slots: Semaphore::new(options.max_connecting),
            local_agent,
            progress: std::sync::Arc::new(super::progress::Progress::new(pass_up)),
            heartbeat_dir,
        }
    }
}
