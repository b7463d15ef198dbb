//! Legs: how a node's command is started and how its messages (stdout,
//! stderr, exit info, exit) come back. How the other nodes are reached is
//! decided once a run from the route ([`Reach::decide`]); a node's leg is
//! then one of four ([`LegKind`]): this node (a process here), an external
//! wrapper (`WRAPPER HOST COMMAND`, a process here), an agent or a stock
//! sshd (a russh channel in-process, on a connection of our own or on the
//! head agent's shared one). A started leg is a channel
//! (`channel_leg.rs`) or a process (`process_leg.rs`); `node` runs one loop
//! over either. A relay's leg takes the relay's record out of its stderr.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::mpsc;

use super::channel_leg::ChannelLeg;
use super::event::{Closed, Connected, LegMsg, Order};
use super::leg_kind::LegKind;
use super::node_conn::NodeConn;
use super::plan::NodeSpec;
use super::process_leg::ProcessLeg;
use super::reach::{Reach, RunCtx};
use super::record::NodeOutcome;
use super::relay_record::RecordTap;
use crate::protocol::signals::signal_to_sig;

/// A started leg.
pub struct Leg {
    started: StartedLeg,
    /// A relay's: its record is taken out of its stderr.
    tap: Option<RecordTap>,
    /// A message that came with the one just yielded.
    queued: Option<LegMsg>,
    done: bool,
}

enum StartedLeg {
    Channel(ChannelLeg),
    Process(ProcessLeg),
}

impl Leg {
    /// Starts `spec`'s command, on `conn` when it shares its node's
    /// connection with the node's other processes. `orders` stop it before
    /// it started (the run is ending); then the node did not start.
    pub async fn start(
        ctx: &RunCtx,
        spec: &mut NodeSpec,
        orders: &mut mpsc::UnboundedReceiver<Order>,
        stdin: Option<mpsc::Receiver<Bytes>>,
        conn: Option<Arc<NodeConn>>,
    ) -> Result<Leg, NodeOutcome> {
        let started = match (spec.leg, &ctx.reach) {
            (LegKind::Local, _) => StartedLeg::Process(ProcessLeg::start(ctx, spec, None, stdin)?),
            (_, Reach::Wrapper(wrapper)) => {
                StartedLeg::Process(ProcessLeg::start(ctx, spec, Some(wrapper), stdin)?)
            }
            (_, Reach::Agent(ssh) | Reach::Sshd(ssh)) => {
                StartedLeg::Channel(ChannelLeg::start(ctx, ssh, spec, orders, stdin, conn).await?)
            }
        };
        Ok(Leg {
            started,
            tap: spec.relay.is_some().then(RecordTap::default),
            queued: None,
            done: false,
        })
    }

    /// The node's address as it was reached (`None`: a process here).
    pub fn address(&self) -> Option<String> {
        match &self.started {
            StartedLeg::Channel(leg) => Some(leg.peer.to_string()),
            StartedLeg::Process(_) => None,
        }
    }

    /// When its connection was up and logged in (a channel on a
    /// connection made for it or for its node's processes).
    pub fn connect_times(&self) -> Option<Connected> {
        match &self.started {
            StartedLeg::Channel(leg) => leg.times.map(|times| Connected {
                times,
                shared_by: leg.shared_by,
            }),
            StartedLeg::Process(_) => None,
        }
    }

    /// The next message; `None` once the command is over.
    pub async fn next(&mut self) -> Option<LegMsg> {
        if let Some(msg) = self.queued.take() {
            return Some(msg);
        }
        while !self.done {
            let msg = match &mut self.started {
                StartedLeg::Channel(leg) => leg.next().await,
                StartedLeg::Process(leg) => leg.next().await,
            };
            let Some(tap) = &mut self.tap else {
                self.done = msg.is_none();
                return msg;
            };
            let pass = match msg {
                Some(LegMsg::Err(data)) => tap.feed(&data),
                None => {
                    self.done = true;
                    tap.finish()
                }
                other => return other,
            };
            self.queued = tap.take().map(LegMsg::RelayRecord);
            if !pass.is_empty() {
                return Some(LegMsg::Err(Bytes::from(pass)));
            }
            if let Some(msg) = self.queued.take() {
                return Some(msg);
            }
        }
        None
    }

    /// Passes `signo` on to the command's group.
    pub async fn signal(&self, signo: i32) {
        match &self.started {
            // Boxed: a seldom awaited future, not part of the state the
            // task holds for the run.
            StartedLeg::Channel(leg) => {
                let _ = Box::pin(leg.tx.signal(signal_to_sig(signo))).await;
            }
            StartedLeg::Process(leg) => leg.signal(signo),
        }
    }

    /// Ends the leg: closing a connection (or a shared one's channel) makes
    /// the agent end whatever is left of the group; a process here is
    /// killed when `abandoned`, and its group ended.
    pub async fn close(self, abandoned: bool) -> Closed {
        match self.started {
            StartedLeg::Channel(leg) => Box::pin(leg.close(abandoned)).await,
            StartedLeg::Process(leg) => Box::pin(leg.close(abandoned)).await,
        }
    }
}
