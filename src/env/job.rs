//! This node's job, resolved once from the flags and the environment
//! (docs/environment.md): the topology, which node this is, the addresses,
//! the agents' port, the programs.

use std::borrow::Cow;
use std::net::IpAddr;

use super::programs;
use crate::defaults;
use crate::env_map::{BadVar, EnvMap};
use crate::error::Error;
use crate::topology::machine::System;
use crate::topology::{Inputs, Placement, Topology, resolve_placement};
use crate::vars;

/// This node's job: the topology, which node this is, the addresses, the
/// agents' port and the programs, resolved once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    /// The nodes; node 0 is the head. The last [`Job::spares`] of them are
    /// spares: the contract's lists leave them out (`MULTINODE_SPARE_HOSTLIST`).
    pub topology: Topology,
    /// How many of the last nodes are spares (docs/restarts.md).
    pub spares: usize,
    /// This node's rank (`RANK`, `MULTINODE_NODE_RANK`).
    pub rank: usize,
    /// The head's address (`MULTINODE_NODE_IP`): never loopback unless the
    /// hostlist wrote a loopback literal, or the job has one node.
    pub head_ip: IpAddr,
    /// This node's own address (`MULTINODE_LOCAL_IP`).
    pub local_ip: IpAddr,
    /// The agents' port (`MULTINODE_AGENT_PORT`, default [`crate::defaults::AGENT_PORT`]).
    pub agent_port: u16,
    /// The remote-exec wrapper (`MULTINODE_SSH_WRAPPER`): the platform's, or
    /// the absolute path of `mn-ssh`.
    pub wrapper: String,
    /// `MULTINODE_RSH_WRAPPER`: the platform's, else [`Job::wrapper`].
    pub rsh_wrapper: String,
    /// The absolute path of the `multinode` binary (`MULTINODE_BIN`).
    pub bin: String,
}

/// Resolves this node's job from the command-line flags and the environment
/// (see docs/environment.md for the order of sources and the rules).
///
/// Errors are [`Error::Usage`]: one line naming the bad input and what to do.
pub fn resolve_job(args: &Inputs, env: &EnvMap) -> Result<Job, Error> {
    let placement = resolve_placement(args, env, &System)?;
    let invocation = programs::ThisBinary::current();
    job_from(placement, env, &invocation)
}

/// [`resolve_job`] for an agent that starts with its job: while the head's
/// host name does not resolve yet (its container may not exist yet, so the
/// cluster's DNS does not know it), retry for up to `wait`. Every other error
/// is returned at once.
pub fn resolve_job_waiting(
    args: &Inputs,
    env: &EnvMap,
    wait: std::time::Duration,
) -> Result<Job, Error> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match resolve_placement(args, env, &System) {
            Err(crate::topology::TopologyError::Unresolvable { host, reason })
                if std::time::Instant::now() < deadline =>
            {
                tracing::debug!(%host, %reason, "the head's name does not resolve yet; retrying");
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
            result => return job_from(result?, env, &programs::ThisBinary::current()),
        }
    }
}

pub(super) fn job_from(
    placement: Placement,
    env: &EnvMap,
    invocation: &programs::ThisBinary,
) -> Result<Job, Error> {
    let agent_port = agent_port(env)?;
    let wrapper = match env.get(vars::SSH_WRAPPER) {
        Some(w) => w.to_string(),
        None => invocation.mn_ssh()?,
    };
    let rsh_wrapper = env
        .get(vars::RSH_WRAPPER)
        .map_or_else(|| wrapper.clone(), String::from);
    let bin = invocation.multinode_bin()?;
    Ok(Job {
        topology: placement.topology,
        spares: placement.spares,
        rank: placement.rank,
        head_ip: placement.head_ip,
        local_ip: placement.local_ip,
        agent_port,
        wrapper,
        rsh_wrapper,
        bin,
    })
}

impl Job {
    /// The nodes the job runs on: the topology less its spares.
    pub fn active(&self) -> Cow<'_, Topology> {
        if self.spares == 0 {
            return Cow::Borrowed(&self.topology);
        }
        let mut topo = self.topology.clone();
        topo.nodes.truncate(topo.nodes.len() - self.spares);
        Cow::Owned(topo)
    }

    /// The job of one attempt (docs/restarts.md): `nodes`, by their place
    /// in [`Job::topology`], ranked 0.. in that order, no spares. This
    /// node keeps its place: it must be among them.
    pub fn attempt(&self, nodes: &[usize]) -> Job {
        let rank = nodes
            .iter()
            .position(|&i| i == self.rank)
            .expect("an attempt runs on this node");
        Job {
            topology: Topology {
                nodes: nodes
                    .iter()
                    .map(|&i| self.topology.nodes[i].clone())
                    .collect(),
                source: self.topology.source.clone(),
            },
            spares: 0,
            rank,
            ..self.clone()
        }
    }
}

/// The agents' port: `MULTINODE_AGENT_PORT`, else [`crate::defaults::AGENT_PORT`].
pub fn agent_port(env: &EnvMap) -> Result<u16, Error> {
    let Some(value) = env.get(vars::AGENT_PORT) else {
        return Ok(defaults::AGENT_PORT);
    };
    crate::values::port(value).ok_or_else(|| {
        BadVar::new(vars::AGENT_PORT, value, crate::values::PORT)
            .unset_for(defaults::AGENT_PORT)
            .into()
    })
}
