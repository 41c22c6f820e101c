//! Waiting for answers or a decision, on etcd watches (no polling), and
//! always bounded: every wait ends at the earlier of the caller's instant
//! and the Prepare's deadline, then returns what a direct read finds —
//! itself bounded by [`FINAL_READ`], since an unreachable etcd can leave a
//! request unanswered.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::read::{read_answers, read_decision, Answers};
use super::record::{decode, Answer, AnswerRecord, CheckpointPrepare, DecisionRecord, Stored};
use super::txn::instant_of;
use crate::error::{ClusterError, Result};
use crate::session::Session;
use crate::watch as key_watch;

/// Wait until every owning node of `prepare` answered or one nacked, or
/// until `until` or the Prepare's deadline, whichever comes first; then
/// return the answers as read from etcd.
pub async fn wait_for_answers(
    session: &Session,
    prepare: &CheckpointPrepare,
    until: Instant,
) -> Result<Answers> {
    let end = until.min(instant_of(prepare.deadline_ms));
    let owners = prepare.owning_nodes();
    let mut snapshots = key_watch::spawn(
        session.client(),
        session.keys().checkpoint_answers(prepare.id),
        true,
    );
    loop {
        let settled = {
            let snapshot = snapshots.borrow_and_update();
            let mut answered = 0;
            let mut nacked = false;
            for (key, entry) in &snapshot.entries {
                // An unreadable answer is reported by the final read.
                if let Ok(record) = decode::<AnswerRecord>(key, &entry.value) {
                    nacked |= matches!(record.answer, Answer::Nack { .. });
                    answered += usize::from(owners.contains(&record.node));
                }
            }
            snapshot.revision > 0 && (nacked || answered == owners.len())
        };
        if settled {
            break;
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            () = tokio::time::sleep_until(end) => break,
        }
    }
    bounded("answers to the attempt", read_answers(session, prepare.id)).await
}

/// Wait until attempt `id` is decided or `until` passes; then return the
/// decision as read from etcd (`None`: still undecided).
pub async fn wait_for_decision(
    session: &Session,
    id: u64,
    until: Instant,
) -> Result<Option<Stored<DecisionRecord>>> {
    let key = session.keys().checkpoint_record("decisions", id);
    let mut snapshots = key_watch::spawn(session.client(), key, false);
    loop {
        {
            let snapshot = snapshots.borrow_and_update();
            if !snapshot.entries.is_empty() {
                break;
            }
        }
        tokio::select! {
            changed = snapshots.changed() => if changed.is_err() { break },
            () = tokio::time::sleep_until(until) => break,
        }
    }
    bounded("decision on the attempt", read_decision(session, id)).await
}

/// Resolves once the leader of `term` no longer holds its key (it
/// resigned, or its lease lapsed: a killed leader), so a follower stops
/// waiting for a decision that leader will never write.
pub async fn term_ended(session: &Session, term: u64) {
    let key = session.keys().leader();
    let mut leader = key_watch::spawn(session.client(), key.clone(), false);
    loop {
        {
            let snapshot = leader.borrow_and_update();
            let holds = snapshot
                .entries
                .get(&key)
                .is_some_and(|e| u64::try_from(e.create_revision).ok() == Some(term));
            if snapshot.revision > 0 && !holds {
                return;
            }
        }
        if leader.changed().await.is_err() {
            // The mirror ended (it does not while this receiver lives):
            // the caller's own bound ends the wait.
            return std::future::pending().await;
        }
    }
}

/// How long the read that ends a wait may take.
pub const FINAL_READ: Duration = Duration::from_secs(5);

/// Run `read`, giving up with [`ClusterError::Timeout`] after [`FINAL_READ`].
async fn bounded<T>(what: &str, read: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(FINAL_READ, read)
        .await
        .map_err(|_| ClusterError::Timeout {
            what: what.to_string(),
            after_ms: u64::try_from(FINAL_READ.as_millis()).unwrap_or(u64::MAX),
        })?
}
