//! Leader election on a lease-guarded key, with the leader's term as a
//! fencing token.
//!
//! # Architecture
//!
//! Every node runs one campaign task. The leadership key
//! `/sluice/C/leader` holds the leader's node id and is attached to its
//! session lease. A node becomes leader by creating the key in a
//! transaction that requires it to be absent (`create_revision == 0`); the
//! etcd revision of that transaction — the key's create revision — is the
//! leader's **term**. Terms only grow, and no two leaders ever share one.
//! A campaign whose answer is lost (a call timeout, a reset connection, a
//! pause) learns the outcome from the watched key: a leader key on the
//! node's own lease is its own, at that key's create revision.
//!
//! ```text
//!   follower ──(leader key deleted: resign / lease expired)──► campaign
//!      ▲                                                          │
//!      │ key exists, someone else's                   txn created │ term = revision
//!      └──────────────────────────────────────────────────────────┤
//!                                                               leader
//!   leader ──(own key deleted or replaced, or own lease lost)──► follower
//! ```
//!
//! Followers wait on a watch of the key (no polling), so a new leader is
//! elected about one lease period after the old one stops renewing: etcd
//! deletes the key when the lease expires and every waiting node races to
//! create it.
//!
//! A paused leader cannot know it lost leadership while it is paused. Two
//! things protect the cluster: `is_leader()` is false once the session's
//! local lease deadline has passed (see `session.rs`), and every
//! leader-only write goes through [`Election::guarded_txn`], which adds
//! `create_revision(leader key) == term` to the transaction — so a write
//! from an old term fails in etcd itself, whatever the old leader believes.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::{ClusterError, Result};
use crate::session::Session;
use crate::watch as key_watch;

/// What a node knows about leadership.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderState {
    /// The current leader's node id, if any is known.
    pub leader: Option<String>,
    /// The current leader's term (0 if none).
    pub term: u64,
    /// Whether that leader is this node.
    pub is_self: bool,
}

/// One node's campaign for leadership.
#[derive(Debug)]
pub struct Election {
    session: Arc<Session>,
    state: watch::Receiver<LeaderState>,
    task: JoinHandle<()>,
}

/// The outcome of a term-guarded transaction.
#[derive(Debug)]
pub enum Guarded {
    /// Every compare held; the operations ran at this etcd revision.
    Committed {
        /// The transaction's revision.
        revision: u64,
    },
    /// The leader guard held but a caller compare failed; the caller's
    /// `else` reads are in `response` (after the leader key read).
    CompareFailed {
        /// The transaction response; op 0 is the leader key's read.
        response: TxnResponse,
    },
}

impl Election {
    /// Start campaigning. The node leads once it wins; it never campaigns
    /// again after its session lease is lost (it must rejoin).
    pub fn start(session: Arc<Session>) -> Self {
        Self::spawn(session, true)
    }

    /// Follow leadership without ever campaigning: the node learns who
    /// leads (and when nobody does) but never leads itself. A shuffled
    /// split lets one designated member lead, so a member that runs as a
    /// follower cannot become the leader halfway through.
    pub fn observe(session: Arc<Session>) -> Self {
        Self::spawn(session, false)
    }

    fn spawn(session: Arc<Session>, may_lead: bool) -> Self {
        let (tx, state) = watch::channel(LeaderState::default());
        let task = tokio::spawn(campaign(Arc::clone(&session), tx, may_lead));
        Self {
            session,
            state,
            task,
        }
    }

    /// Whether this node leads now: the campaign won, the key has not been
    /// seen deleted, and the session lease is still within its TTL.
    pub fn is_leader(&self) -> bool {
        self.state.borrow().is_self && self.session.lease_valid()
    }

    /// This node's term while it leads.
    pub fn term(&self) -> Option<u64> {
        let state = self.state.borrow();
        (state.is_self && self.session.lease_valid()).then_some(state.term)
    }

    /// A receiver of leadership changes.
    pub fn state(&self) -> watch::Receiver<LeaderState> {
        self.state.clone()
    }

    /// The session this election runs on.
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Run `compares` / `ops` only if this node still holds leadership
    /// `term` in etcd. `else_reads` are run when a compare fails, after a
    /// read of the leader key, so the caller can say which compare failed.
    pub async fn guarded_txn(
        &self,
        term: u64,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
        else_reads: Vec<TxnOp>,
    ) -> Result<Guarded> {
        let node = self.session.node().to_string();
        let key = self.session.keys().leader();
        let fence = i64::try_from(term).map_err(|_| ClusterError::NotLeader {
            node: node.clone(),
            term,
        })?;
        let mut all = vec![
            Compare::create_revision(key.clone(), CompareOp::Equal, fence),
            Compare::value(key.clone(), CompareOp::Equal, node.as_str()),
        ];
        all.extend(compares);
        let mut otherwise = vec![TxnOp::get(key, None)];
        otherwise.extend(else_reads);
        let txn = Txn::new().when(all).and_then(ops).or_else(otherwise);
        let response = self
            .session
            .client()
            .txn(txn)
            .await
            .map_err(|e| ClusterError::etcd(format!("leader write by node '{node}'"), e))?;
        if response.succeeded() {
            let revision = response.header().map_or(0, |h| h.revision());
            return Ok(Guarded::Committed {
                revision: u64::try_from(revision).unwrap_or(0),
            });
        }
        let still_leader = match response.op_responses().first() {
            Some(TxnOpResponse::Get(get)) => get
                .kvs()
                .first()
                .is_some_and(|kv| kv.create_revision() == fence && kv.value() == node.as_bytes()),
            _ => false,
        };
        if still_leader {
            Ok(Guarded::CompareFailed { response })
        } else {
            Err(ClusterError::NotLeader { node, term })
        }
    }

    /// Give up leadership now (delete the key if it is still this term's),
    /// so another node is elected without waiting for the lease.
    pub async fn resign(&self) -> Result<()> {
        let Some(term) = self.term() else {
            return Ok(());
        };
        let key = self.session.keys().leader();
        let fence = i64::try_from(term).unwrap_or(i64::MAX);
        let txn = Txn::new()
            .when([Compare::create_revision(
                key.clone(),
                CompareOp::Equal,
                fence,
            )])
            .and_then([TxnOp::delete(key, None)]);
        self.session.client().txn(txn).await.map_err(|e| {
            ClusterError::etcd(format!("resign by node '{}'", self.session.node()), e)
        })?;
        Ok(())
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The campaign loop: see the module docs. A node that may not lead only
/// reports who does.
async fn campaign(session: Arc<Session>, tx: watch::Sender<LeaderState>, may_lead: bool) {
    let key = session.keys().leader();
    let node = session.node().to_string();
    let mut lost = session.lost();
    let mut leader_key = key_watch::spawn(session.client(), key.clone(), false);
    loop {
        if *lost.borrow() {
            tx.send_replace(LeaderState::default());
            return;
        }
        // Wait for a listing that shows no leader, then race for the key.
        let current = leader_key.borrow_and_update().clone();
        let won = if current.revision > 0 && current.entries.is_empty() && !may_lead {
            tx.send_if_modified(|s| {
                let changed = *s != LeaderState::default();
                *s = LeaderState::default();
                changed
            });
            None
        } else if current.revision > 0 && current.entries.is_empty() {
            match try_acquire(&session, &key, &node).await {
                Ok(won) => won,
                Err(e) => {
                    // etcd unreachable, or the answer lost (a timeout, a
                    // reset connection, a pause): the key may be ours
                    // anyway, which the next listing shows. Try again
                    // shortly (the watch may see nothing change while etcd
                    // is down).
                    tracing::debug!(node = %node, error = %e, "leader campaign request failed");
                    tokio::time::sleep(CAMPAIGN_RETRY).await;
                    continue;
                }
            }
        } else if let Some(entry) = current.entries.get(&key) {
            let term = u64::try_from(entry.create_revision).unwrap_or(0);
            if entry.lease == session.lease_id() {
                // Created on our own lease by a campaign whose answer never
                // arrived: we lead. Waiting as a follower would leave the
                // cluster without a running leader until our lease lapsed.
                Some(term)
            } else {
                let leader = String::from_utf8_lossy(&entry.value).into_owned();
                tx.send_if_modified(|s| {
                    let next = LeaderState {
                        is_self: false,
                        leader: Some(leader),
                        term,
                    };
                    let changed = *s != next;
                    *s = next;
                    changed
                });
                None
            }
        } else {
            None
        };
        if let Some(term) = won {
            tracing::info!(node = %node, term, "became leader");
            tx.send_replace(LeaderState {
                leader: Some(node.clone()),
                term,
                is_self: true,
            });
            hold(&mut leader_key, &mut lost, term).await;
            tracing::info!(node = %node, term, "no longer leader");
            tx.send_replace(LeaderState::default());
            continue;
        }
        tokio::select! {
            changed = leader_key.changed() => if changed.is_err() { return },
            changed = lost.changed() => if changed.is_err() { return },
        }
    }
}

/// How long a campaign waits after etcd refused to answer.
const CAMPAIGN_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Try to create the leader key on our lease; the term on success, `None`
/// if another node holds it.
async fn try_acquire(
    session: &Session,
    key: &str,
    node: &str,
) -> std::result::Result<Option<u64>, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            node,
            Some(PutOptions::new().with_lease(session.lease_id())),
        )]);
    let response = session.client().txn(txn).await?;
    Ok(if response.succeeded() {
        response
            .header()
            .and_then(|h| u64::try_from(h.revision()).ok())
    } else {
        None
    })
}

/// Hold leadership until our key (created at `term`) is gone or replaced,
/// or our lease is lost.
async fn hold(
    leader_key: &mut watch::Receiver<key_watch::Snapshot>,
    lost: &mut watch::Receiver<bool>,
    term: u64,
) {
    loop {
        {
            let snapshot = leader_key.borrow_and_update();
            let ours = snapshot
                .entries
                .values()
                .next()
                .is_some_and(|e| u64::try_from(e.create_revision).ok() == Some(term));
            // A listing older than our term has not seen our key yet.
            if !ours && snapshot.revision >= i64::try_from(term).unwrap_or(i64::MAX) {
                return;
            }
        }
        if *lost.borrow() {
            return;
        }
        tokio::select! {
            changed = leader_key.changed() => if changed.is_err() { return },
            changed = lost.changed() => if changed.is_err() { return },
        }
    }
}
