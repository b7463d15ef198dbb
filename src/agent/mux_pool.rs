//! The head's logged-in connections to the nodes, by target: kept from
//! the pings, else made on first use (at most [`MAX_CONNECTING`] at once),
//! forgotten when one breaks, closed when the job ends.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::defaults;
use crate::keys::JobKeys;
use crate::protocol::mux as wire;
use crate::transport::client::{Auth, ConnectError, Connection, Connector, Target};

/// Connections being set up at once by the pool (as exec_all's default).
const MAX_CONNECTING: usize = 256;

/// One slot a target: the connection, once made.
type Slot = Arc<tokio::sync::Mutex<Option<Arc<Connection>>>>;

/// Logged-in connections to the nodes, by target; made on first use.
pub(crate) struct ConnectionPool {
    connector: Connector,
    pub(super) job: String,
    /// What a client's challenge is signed with ([`wire::prove`]).
    pub(super) host_key: russh::keys::PrivateKey,
    slots: std::sync::Mutex<HashMap<String, Slot>>,
    connecting: Semaphore,
}

impl ConnectionPool {
    /// `lost_after`: as exec_all's (`MULTINODE_LOST_AFTER`, `None`: never).
    pub(crate) fn new(keys: &JobKeys, lost_after: Option<std::time::Duration>) -> ConnectionPool {
        let connector = Connector::new(
            Auth::Agent(Arc::new(keys.clone())),
            defaults::CONNECT_TIMEOUT.duration,
        )
        .with_lost_after(lost_after);
        ConnectionPool {
            connector,
            job: wire::job_id(keys.client_public()),
            host_key: keys.host.clone(),
            slots: std::sync::Mutex::new(HashMap::new()),
            connecting: Semaphore::new(MAX_CONNECTING),
        }
    }

    fn slot(&self, target: &Target) -> Slot {
        self.slots
            .lock()
            .expect("not poisoned: no panics while held")
            .entry(target.to_string())
            .or_default()
            .clone()
    }

    /// Keeps `conn` (made elsewhere, by the head's ping) for later use.
    pub(crate) async fn keep(&self, target: &Target, conn: Connection) {
        *self.slot(target).lock().await = Some(Arc::new(conn));
    }

    /// The connection to `target`: the kept one while it lives, else a new
    /// one (a first use, or the last one was lost). One handshake at a time
    /// a target.
    pub(super) async fn get(&self, target: &Target) -> Result<Arc<Connection>, ConnectError> {
        let slot = self.slot(target);
        let mut slot = slot.lock().await;
        if let Some(conn) = slot.as_ref().filter(|c| !c.is_closed()) {
            return Ok(conn.clone());
        }
        let _permit = self
            .connecting
            .acquire()
            .await
            .expect("the semaphore is never closed");
        let conn = Arc::new(self.connector.connect(target).await?);
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets `conn` if it is still the one kept for `target`.
    pub(super) async fn forget(&self, target: &Target, conn: &Arc<Connection>) {
        let slot = self.slot(target);
        let mut slot = slot.lock().await;
        if slot.as_ref().is_some_and(|c| Arc::ptr_eq(c, conn)) {
            *slot = None;
        }
    }

    /// Closes every kept connection.
    pub(crate) async fn close(&self) {
        let slots: Vec<Slot> = self
            .slots
            .lock()
            .expect("not poisoned: no panics while held")
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            if let Some(conn) = slot.lock().await.take()
                && let Ok(conn) = Arc::try_unwrap(conn)
            {
                conn.close().await;
            }
        }
    }
}
