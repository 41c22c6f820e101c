//! A node's etcd session: one client and one lease kept alive by a task.
//!
//! Everything a node owns in etcd (its membership key, the leadership key
//! while it leads) is attached to this lease, so a node that dies or pauses
//! past the TTL loses all of it at once and atomically.
//!
//! The session also keeps a *local* lease deadline: the time the last
//! successful keep-alive was sent plus the TTL etcd granted. The lease cannot
//! have outlived that instant on the server's clock (etcd extends from when it
//! receives the request, which is later), so a node whose deadline has passed
//! knows it may have lost everything without asking etcd — that is what
//! makes `is_leader()` turn false in a process resumed after a long pause,
//! before any watch event arrives.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::{ClusterError, Result};
use crate::keys::{ClusterKeys, NodeId};

/// How long a node waits before asking etcd again after a call that got
/// no answer (a call timeout, say after the process was paused).
pub(crate) const ASK_AGAIN: Duration = Duration::from_millis(200);

/// Default lease TTL: a node that stops renewing is gone after 5 s.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(5);

/// How soon the keep-alive task renews again after a renewal failed.
const RENEW_RETRY: Duration = Duration::from_millis(100);

/// State shared between the session and its keep-alive task.
#[derive(Debug)]
struct LeaseClock {
    /// The lease cannot be alive past this instant unless renewed.
    expires_at: Mutex<Instant>,
    /// Flips to `true` once the lease is known lost; never back.
    lost: watch::Sender<bool>,
}

impl LeaseClock {
    fn mark_lost(&self) {
        self.lost.send_replace(true);
    }
}

/// One node's connection to the cluster: etcd client, ids and a live lease.
pub struct Session {
    client: Client,
    keys: ClusterKeys,
    node: NodeId,
    lease_id: i64,
    ttl: Duration,
    clock: Arc<LeaseClock>,
    keep_alive: Mutex<Option<JoinHandle<()>>>,
}

impl Session {
    /// Connect to etcd at `endpoints`, grant a lease of `ttl` and start
    /// keeping it alive. etcd leases have whole-second TTLs, so `ttl` is
    /// rounded up (at least 1 s), and etcd may raise it to its minimum;
    /// [`Session::ttl`] says what was granted.
    pub async fn connect(
        endpoints: &[String],
        cluster: &str,
        node: &str,
        ttl: Duration,
    ) -> Result<Self> {
        let keys = ClusterKeys::new(cluster)?;
        let node = NodeId::new(node)?;
        let mut client = crate::client::connect(endpoints).await?;
        let whole = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let ttl_secs = i64::try_from(whole.max(1)).unwrap_or(i64::MAX);
        let sent = Instant::now();
        let grant = client
            .lease_grant(ttl_secs, None)
            .await
            .map_err(|e| ClusterError::etcd(format!("lease grant for node '{node}'"), e))?;
        // etcd may raise a TTL below its minimum; trust what it granted.
        let granted = Duration::from_secs(u64::try_from(grant.ttl()).unwrap_or(1).max(1));
        let (lost, _) = watch::channel(false);
        let clock = Arc::new(LeaseClock {
            expires_at: Mutex::new(sent + granted),
            lost,
        });
        let (keeper, stream) = client
            .lease_keep_alive(grant.id())
            .await
            .map_err(|e| ClusterError::etcd(format!("lease keep-alive for node '{node}'"), e))?;
        let task = tokio::spawn(keep_alive_loop(
            client.clone(),
            keeper,
            stream,
            granted,
            Arc::clone(&clock),
            node.clone(),
        ));
        tracing::debug!(node = %node, lease = grant.id(), ttl = ?granted, "etcd session started");
        Ok(Self {
            client,
            keys,
            node,
            lease_id: grant.id(),
            ttl: granted,
            clock,
            keep_alive: Mutex::new(Some(task)),
        })
    }

    /// A clone of the etcd client (clones share one connection).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The cluster's keys.
    pub fn keys(&self) -> &ClusterKeys {
        &self.keys
    }

    /// This node's id.
    pub fn node(&self) -> &NodeId {
        &self.node
    }

    /// The lease everything this node owns is attached to.
    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the lease may still be alive: not known lost, and renewed
    /// within the TTL (by the local clock; see the module docs).
    pub fn lease_valid(&self) -> bool {
        !*self.clock.lost.borrow() && Instant::now() < *self.clock.expires_at.lock()
    }

    /// A receiver that turns `true` once the lease is known lost.
    pub fn lost(&self) -> watch::Receiver<bool> {
        self.clock.lost.subscribe()
    }

    /// Stop renewing the lease without revoking it, as a process paused past
    /// its TTL would: etcd expires the lease (and every key on it) one TTL
    /// later. Tests use this to simulate a partitioned or stopped node.
    #[cfg(feature = "testing")]
    pub fn stop_keep_alive(&self) {
        if let Some(task) = self.keep_alive.lock().take() {
            task.abort();
        }
    }

    /// Revoke the lease: every key attached to it is deleted now, so the
    /// rest of the cluster sees this node leave at once rather than one TTL
    /// later.
    pub async fn close(&self) -> Result<()> {
        if let Some(task) = self.keep_alive.lock().take() {
            task.abort();
        }
        self.clock.mark_lost();
        self.client
            .clone()
            .lease_revoke(self.lease_id)
            .await
            .map_err(|e| ClusterError::etcd(format!("lease revoke for node '{}'", self.node), e))?;
        Ok(())
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("cluster", &self.keys.cluster())
            .field("node", &self.node)
            .field("lease_id", &self.lease_id)
            .field("ttl", &self.ttl)
            .field("lease_valid", &self.lease_valid())
            .finish()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(task) = self.keep_alive.lock().take() {
            task.abort();
        }
    }
}

/// Renew every third of the TTL. A renewal that fails is retried on a new
/// stream until the local deadline passes; then the lease is lost for good
/// (etcd may already have deleted our keys) and the task ends.
async fn keep_alive_loop(
    mut client: Client,
    mut keeper: LeaseKeeper,
    mut stream: LeaseKeepAliveStream,
    ttl: Duration,
    clock: Arc<LeaseClock>,
    node: NodeId,
) {
    let period = ttl / 3;
    let mut wait = period;
    loop {
        tokio::time::sleep(wait).await;
        wait = period;
        let deadline = *clock.expires_at.lock();
        let sent = Instant::now();
        let renewed = tokio::time::timeout_at(deadline, async {
            keeper.keep_alive().await?;
            stream.message().await
        })
        .await;
        match renewed {
            Ok(Ok(Some(resp))) if resp.ttl() > 0 => {
                let granted = Duration::from_secs(u64::try_from(resp.ttl()).unwrap_or(1));
                *clock.expires_at.lock() = sent + granted;
            }
            Ok(Ok(Some(_))) => {
                tracing::warn!(node = %node, "etcd lease expired");
                clock.mark_lost();
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) if Instant::now() < deadline => {
                // The stream broke (etcd restarted, connection reset): open
                // a new one and try again before the deadline.
                tracing::debug!(node = %node, "lease keep-alive stream broke; reopening");
                let reopened =
                    tokio::time::timeout_at(deadline, client.lease_keep_alive(keeper.id())).await;
                if let Ok(Ok((k, s))) = reopened {
                    keeper = k;
                    stream = s;
                }
                // Renew again soon, not a whole period later: the failed
                // renewal already used part of the lease, and a connection
                // that breaks every period would let it lapse.
                wait = RENEW_RETRY;
            }
            _ => {
                tracing::warn!(node = %node, "etcd lease not renewed within its TTL");
                clock.mark_lost();
                return;
            }
        }
    }
}
