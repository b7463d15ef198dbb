//! The environment contract: resolving it for this node and rendering it.
//! (Placeholder until the topology work lands.)

use crate::cli::{EnvArgs, TopologyArgs};
use crate::error::Error;
use crate::topology::{EnvMap, Topology};

/// The job as this node sees it.
#[derive(Debug, Clone)]
pub struct Job {
    pub topology: Topology,
    pub rank: usize,
    pub head_ip: String,
    pub local_ip: String,
    pub agent_port: u16,
    pub wrapper: String,
    pub bin: String,
}

pub fn resolve_job(_args: &TopologyArgs, _env: &EnvMap) -> Result<Job, Error> {
    Err(Error::usage("topology resolution is not built yet"))
}

pub fn contract(_job: &Job) -> Vec<(String, String)> {
    Vec::new()
}

pub fn contract_for_rank(_job: &Job, _rank: usize) -> Vec<(String, String)> {
    Vec::new()
}

pub fn cmd_env(_args: &EnvArgs) -> Result<i32, Error> {
    Err(Error::usage("`multinode env` is not built yet"))
}
