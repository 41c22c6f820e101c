//! Active–standby execution: the leader runs the whole pipeline, every
//! other node waits to take over.
//!
//! This is the first way a pipeline runs "as one" on several hosts: no
//! node is special for longer than its lease. Every node has sealed the
//! same catalog and joined; the leader runs the pipeline with its
//! checkpoints on shared object storage; when it dies or is partitioned
//! past its lease, etcd deletes its leader key, a standby wins the
//! election and resumes from the last committed checkpoint on the shared
//! store. A bounded run (file sources) that reaches its end is recorded
//! once, fenced by the finishing leader's term, and the standbys stop.
//!
//! ```text
//!   node ──seal+join──► wait_for_turn ──(wins election)──► Turn::Lead{term}
//!                            │                               run pipeline
//!                            │                               record_finished (txn: term)
//!                            └──(finished key appears)──► Turn::Finished
//! ```
//!
//! Fencing against a deposed leader that still runs (paused, then resumed)
//! rests on three guards: its leader key is gone, so [`record_finished`]
//! fails in etcd; the shared checkpoint store's lease (in `sluice-storage`)
//! is taken over by the new leader, so the old one's next checkpoint
//! fails; and a write already past the lease check (the manifest of a
//! leader paused just before it) counts only once the leader records it in
//! etcd under its term ([`LeaderCommitRecord`]), which etcd refuses. The
//! runner watches [`lost_leadership`] and stops without publishing as soon
//! as it sees the loss.
//!
//! [`LeaderCommitRecord`]: crate::commit_record::LeaderCommitRecord

use etcd_client::{Compare, CompareOp, PutOptions, TxnOp, TxnOpResponse};

use crate::assignment::Assignment;
use crate::error::{ClusterError, Result};
use crate::leader::{Election, Guarded, LeaderState};
use crate::node::ClusterNode;
use crate::status::{self, Finished};
use crate::watch as key_watch;

/// What a waiting node is to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Turn {
    /// This node leads at `term`: run the pipeline.
    Lead {
        /// The leader term (the fencing token of its writes).
        term: u64,
    },
    /// The run was finished by another node: nothing is left to do.
    Finished(Finished),
}

/// Wait until the assignment table is this leader's own: written in
/// `term`, with every vnode on this node ([`Placement::Leader`]). Its
/// checkpoints are admitted under that table's generation, so the pipeline
/// starts only once it exists. Ends with an error if the table is
/// unreadable or its watch ended; the caller stops it when leadership is
/// lost meanwhile.
///
/// [`Placement::Leader`]: crate::assignment::Placement::Leader
pub async fn wait_for_own_assignment(node: &ClusterNode, term: u64) -> Result<Assignment> {
    let mut view = node.assignment_view();
    loop {
        if let Some(a) = view.current()? {
            if a.not_whole_for(node.node_id(), term).is_none() {
                return Ok(a);
            }
        }
        if !view.changed().await {
            return Err(ClusterError::NotLeader {
                node: node.node_id().to_string(),
                term,
            });
        }
    }
}

/// Wait until this node leads or the run has been finished. Ends with
/// [`ClusterError::LeaseLost`] if the node's session lease is lost while it
/// waits (it must rejoin).
pub async fn wait_for_turn(node: &ClusterNode) -> Result<Turn> {
    let session = node.session();
    let key = session.keys().finished();
    let mut finished = key_watch::spawn(session.client(), key.clone(), false);
    let mut leader = node.leader();
    let mut lost = session.lost();
    loop {
        let done = finished
            .borrow_and_update()
            .entries
            .get(&key)
            .map(|e| e.value.clone());
        if let Some(value) = done {
            return Ok(Turn::Finished(status::decode(&key, &value)?));
        }
        if let Some(term) = node.term() {
            // The watch may not have delivered a finish recorded just
            // before the old leader resigned: ask etcd itself before
            // running anything.
            match status::read_finished(&session.client(), session.keys()).await {
                Ok(Some(finished)) => return Ok(Turn::Finished(finished)),
                Ok(None) => return Ok(Turn::Lead { term }),
                Err(e @ ClusterError::Etcd { .. }) => {
                    // No answer (a call timeout, a reset connection, this
                    // process paused mid-call) says nothing about the run:
                    // ask again while this node still leads. Failing here
                    // would hand a healthy cluster's run to a standby for
                    // one slow call; the lease bounds the retries.
                    tracing::warn!(node = node.node_id(), error = %e, "asking etcd again whether the run finished");
                    tokio::time::sleep(crate::session::ASK_AGAIN).await;
                    continue;
                }
                Err(e) => return Err(e),
            }
        }
        if *lost.borrow_and_update() {
            return Err(ClusterError::LeaseLost {
                node: node.node_id().to_string(),
            });
        }
        tokio::select! {
            r = finished.changed() => if r.is_err() { return Err(watch_ended(node)) },
            r = leader.changed() => if r.is_err() { return Err(watch_ended(node)) },
            r = lost.changed() => if r.is_err() { return Err(watch_ended(node)) },
        }
    }
}

/// Resolves once this node no longer leads at `term` (its key was deleted
/// or replaced, or its lease lapsed).
pub async fn lost_leadership(node: &ClusterNode, term: u64) {
    let mut leader = node.leader();
    let mut lost = node.session().lost();
    loop {
        let still = {
            let state: LeaderState = leader.borrow_and_update().clone();
            state.is_self && state.term == term && !*lost.borrow_and_update()
        };
        if !still || node.term() != Some(term) {
            return;
        }
        // The local lease deadline can pass without any event (a paused
        // process wakes up past it): look again at least once a second.
        tokio::select! {
            r = leader.changed() => if r.is_err() { return },
            r = lost.changed() => if r.is_err() { return },
            () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
        }
    }
}

/// Record that the run finished, only while this node still leads at
/// `term` and no one recorded it before. Refused with
/// [`ClusterError::NotLeader`] for a deposed leader.
///
/// A call that got no answer is asked again while the node leads at that
/// term: the record may have been written, so finding this very record
/// already there is success.
pub async fn record_finished(election: &Election, finished: &Finished) -> Result<()> {
    let session = election.session();
    let key = session.keys().finished();
    let value = status::encode(&key, finished)?;
    let outcome = loop {
        let attempt = election
            .guarded_txn(
                finished.term,
                vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)],
                vec![TxnOp::put(key.clone(), value.clone(), None::<PutOptions>)],
                vec![TxnOp::get(key.clone(), None)],
            )
            .await;
        match attempt {
            Err(e @ ClusterError::Etcd { .. }) if election.term() == Some(finished.term) => {
                tracing::warn!(node = %session.node(), error = %e, "recording the finished run again");
                tokio::time::sleep(crate::session::ASK_AGAIN).await;
            }
            other => break other?,
        }
    };
    match outcome {
        Guarded::Committed { .. } => Ok(()),
        Guarded::CompareFailed { response } => {
            // op 0 reads the leader key, op 1 the finished record.
            let ours = match response.op_responses().get(1) {
                Some(TxnOpResponse::Get(get)) => get.kvs().first().is_some_and(|kv| {
                    status::decode::<Finished>(&key, kv.value()).ok().as_ref() == Some(finished)
                }),
                _ => false,
            };
            if ours {
                return Ok(());
            }
            Err(ClusterError::AlreadyFinished {
                cluster: session.keys().cluster().to_string(),
                node: session.node().to_string(),
            })
        }
    }
}

fn watch_ended(node: &ClusterNode) -> ClusterError {
    ClusterError::LeaseLost {
        node: node.node_id().to_string(),
    }
}
