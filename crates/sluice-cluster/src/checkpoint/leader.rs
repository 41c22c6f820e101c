//! The leader side of a checkpoint round ([`CheckpointLeader`]): it drives
//! the protocol functions of this module in order, one round per call.
//!
//! ```text
//!  take_over ─► abandon_orphaned_attempts (abort every undecided attempt)
//!  run_round ─► reserve ─► admission ─► Prepare ─► wait (watch, ≤ deadline)
//!               ─► commit | abort ─► prune (after a commit)
//! ```
//!
//! Each step is one fenced etcd transaction (see the module docs), so a
//! leader deposed mid-round cannot write anything that counts; this driver
//! only makes it *stop* early and say so ([`ClusterError::CheckpointDeposed`])
//! instead of waiting for a deadline. An attempt it leaves undecided is
//! aborted by the next leader's [`CheckpointLeader::take_over`] — the
//! authoritative abort that releases followers waiting on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp, TxnOpResponse};
use tokio::time::Instant;

use super::decide::{abort_attempt, commit_attempt, verdict, Decided, Verdict};
use super::prepare::{
    checkpoint_assignment_for_admission, publish_checkpoint_prepare, read_prepare,
};
use super::prune::prune_checkpoints;
use super::record::{Decision, PartRef};
use super::reserve::reserve_checkpoint_attempt;
use super::txn::now_ms;
use super::wait::{wait_for_answers, FINAL_READ};
use crate::error::{ClusterError, Result};
use crate::leader::Election;

/// How the round ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RoundOutcome {
    /// Every owning node acked and the commit was written.
    Committed {
        /// The attempt id.
        id: u64,
        /// Each owning node's part.
        parts: BTreeMap<String, PartRef>,
    },
    /// The attempt was aborted (its id stays burned).
    Aborted {
        /// The attempt id.
        id: u64,
        /// Why.
        reason: String,
    },
}

impl RoundOutcome {
    /// The attempt id.
    pub fn id(&self) -> u64 {
        match self {
            Self::Committed { id, .. } | Self::Aborted { id, .. } => *id,
        }
    }

    fn of(decided: Decided) -> Self {
        let id = decided.record.id;
        match decided.record.decision {
            Decision::Commit { parts } => Self::Committed { id, parts },
            Decision::Abort { reason } => Self::Aborted { id, reason },
        }
    }
}

/// The checkpoint leader of one term.
#[derive(Debug)]
pub struct CheckpointLeader {
    election: Arc<Election>,
    term: u64,
    keep: u64,
    /// An earlier round of this term stopped before deciding; its attempt
    /// is aborted before the next one is reserved.
    unresolved: bool,
}

impl CheckpointLeader {
    /// Become checkpoint leader for the term `election` currently holds,
    /// first aborting every attempt a previous leader left undecided
    /// (returned, by id). `keep` is how many ids below the newest commit
    /// survive pruning. [`ClusterError::NotLeader`] if it does not lead.
    pub async fn take_over(election: Arc<Election>, keep: u64) -> Result<(Self, Vec<u64>)> {
        let term = election.term().ok_or_else(|| ClusterError::NotLeader {
            node: election.session().node().to_string(),
            term: 0,
        })?;
        let mut leader = Self {
            election,
            term,
            keep,
            unresolved: true,
        };
        let orphans = leader.abandon_orphaned_attempts().await?;
        Ok((leader, orphans))
    }

    /// The term this leader drives rounds under.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// Abort every reserved attempt without a decision (Prepared or not),
    /// so followers waiting on one are released at once. Returns their
    /// ids. Safe at any time: an abort never makes anything durable, and a
    /// decision is written at most once.
    pub async fn abandon_orphaned_attempts(&mut self) -> Result<Vec<u64>> {
        let result = abort_orphaned_attempts(&self.election, self.term).await;
        self.unresolved = result.is_err();
        result.map_err(|e| self.deposed(e))
    }

    /// Run one round, with answers due at `deadline`: reserve, admit,
    /// publish the Prepare, wait for the answers, decide, and prune after a
    /// commit. Ends by `deadline` plus the time etcd takes to write the
    /// decision (at most [`FINAL_READ`] more, else
    /// [`ClusterError::Timeout`]). [`ClusterError::CheckpointDeposed`] as
    /// soon as the term is lost; the attempt is then the next leader's to
    /// abort.
    pub async fn run_round(&mut self, deadline: Instant) -> Result<RoundOutcome> {
        if self.unresolved {
            self.abandon_orphaned_attempts().await?;
        }
        self.unresolved = true;
        let bound = deadline + FINAL_READ;
        let outcome = tokio::select! {
            bounded = tokio::time::timeout_at(bound, self.round(deadline)) => match bounded {
                Ok(outcome) => outcome,
                Err(_) => Err(ClusterError::Timeout {
                    what: "checkpoint round".to_string(),
                    after_ms: millis(bound.saturating_duration_since(Instant::now())),
                }),
            },
            () = lost_term(&self.election, self.term) => Err(ClusterError::NotLeader {
                node: self.election.session().node().to_string(),
                term: self.term,
            }),
        };
        let outcome = outcome.map_err(|e| self.deposed(e))?;
        self.unresolved = false;
        if matches!(outcome, RoundOutcome::Committed { .. }) {
            // The commit is durable whatever pruning does; a failed prune
            // is retried after the next commit.
            if let Err(e) = prune_checkpoints(&self.election, self.term, self.keep).await {
                tracing::warn!(term = self.term, error = %e, "pruning checkpoint records failed");
            }
        }
        Ok(outcome)
    }

    async fn round(&self, deadline: Instant) -> Result<RoundOutcome> {
        let election = &self.election;
        let session = election.session();
        let attempt = reserve_checkpoint_attempt(election, self.term).await?;
        let fence = checkpoint_assignment_for_admission(session).await?;
        let left = deadline.saturating_duration_since(Instant::now());
        let deadline_ms = now_ms().saturating_add(millis(left));
        let prepare = match publish_checkpoint_prepare(election, attempt, &fence, deadline_ms).await
        {
            Ok(prepare) => prepare,
            // The table changed between admission and Prepare: abandon the
            // attempt (nobody waits on it) and let the next round admit anew.
            Err(e @ ClusterError::AssignmentFenceMoved { .. }) => {
                let decided =
                    abort_attempt(election, self.term, attempt.id, 0, &e.to_string()).await?;
                return Ok(RoundOutcome::of(decided));
            }
            Err(e) => return Err(e),
        };
        let answers = wait_for_answers(session, &prepare.value, deadline).await?;
        // The wait is over: whoever has not acked by now missed the deadline.
        let reason = match verdict(&prepare.value, &answers, u64::MAX) {
            Verdict::Commit => {
                match commit_attempt(election, self.term, &prepare, &answers).await {
                    Ok(decided) => return Ok(RoundOutcome::of(decided)),
                    Err(
                        e @ (ClusterError::AssignmentFenceMoved { .. }
                        | ClusterError::CheckpointRefused { .. }),
                    ) => e.to_string(),
                    Err(e) => return Err(e),
                }
            }
            Verdict::Abort(reason) => reason,
            Verdict::Pending { missing } => format!("no ack from {}", missing.join(", ")),
        };
        let decided = abort_attempt(
            election,
            self.term,
            attempt.id,
            prepare.value.generation,
            &reason,
        )
        .await?;
        Ok(RoundOutcome::of(decided))
    }

    /// `NotLeader` for this term becomes `CheckpointDeposed`.
    fn deposed(&self, error: ClusterError) -> ClusterError {
        match error {
            ClusterError::NotLeader { node, term } if term == self.term => {
                ClusterError::CheckpointDeposed { node, term }
            }
            other => other,
        }
    }
}

/// Abort, as the leader of `term`, every reserved attempt without a
/// decision (Prepared or not), so followers waiting on one are released at
/// once; returns the ids this call decided. Safe at any time: an abort
/// never makes anything durable, and a decision is written at most once.
/// A leader that runs no rounds of its own (`LeaderCommitRecord`) calls
/// this directly; [`CheckpointLeader`] calls it on taking over.
pub async fn abort_orphaned_attempts(election: &Election, term: u64) -> Result<Vec<u64>> {
    let session = election.session();
    let keys = session.keys();
    let attempts_dir = keys.checkpoint_dir("attempts");
    let decisions_dir = keys.checkpoint_dir("decisions");
    let keys_only = || Some(GetOptions::new().with_prefix().with_keys_only());
    // One read, so the two listings are of the same revision. A read whose
    // answer was lost (a call timeout, say after this process was paused)
    // is asked again while this node still leads in `term`: the read
    // changes nothing, and failing here would end a leader that is fine.
    let response = loop {
        let txn = Txn::new().and_then([
            TxnOp::get(attempts_dir.clone(), keys_only()),
            TxnOp::get(decisions_dir.clone(), keys_only()),
        ]);
        match session.client().txn(txn).await {
            Ok(response) => break response,
            Err(e) if election.term() == Some(term) => {
                tracing::warn!(node = %session.node(), error = %e, "listing undecided checkpoint attempts again");
                tokio::time::sleep(crate::session::ASK_AGAIN).await;
            }
            Err(e) => {
                return Err(ClusterError::etcd(
                    "listing of undecided checkpoint attempts",
                    e,
                ))
            }
        }
    };
    let mut listings = Vec::new();
    for (op, dir) in response
        .op_responses()
        .into_iter()
        .zip([&attempts_dir, &decisions_dir])
    {
        let mut ids = BTreeSet::new();
        if let TxnOpResponse::Get(get) = op {
            for kv in get.kvs() {
                ids.insert(id_in(dir, kv.key())?);
            }
        }
        listings.push(ids);
    }
    let (attempts, decided) = match listings.as_slice() {
        [a, d] => (a.clone(), d.clone()),
        _ => (BTreeSet::new(), BTreeSet::new()),
    };
    let mut orphans = Vec::new();
    for id in attempts.difference(&decided).copied() {
        let generation = read_prepare(session, id)
            .await?
            .map_or(0, |p| p.value.generation);
        let reason =
            format!("left undecided by an earlier leader; aborted by the leader of term {term}");
        let decided = abort_attempt(election, term, id, generation, &reason).await?;
        if decided.first {
            tracing::info!(node = %session.node(), id, term, "aborted orphaned checkpoint attempt");
            orphans.push(id);
        }
    }
    Ok(orphans)
}

/// Resolves once `election` no longer holds `term` (its key was seen gone
/// or replaced, or its lease was lost); pending while it does.
async fn lost_term(election: &Election, term: u64) {
    let mut state = election.state();
    let mut lost = election.session().lost();
    loop {
        let held = {
            let s = state.borrow_and_update();
            s.is_self && s.term == term
        };
        if !held || *lost.borrow_and_update() {
            return;
        }
        tokio::select! {
            changed = state.changed() => if changed.is_err() { return },
            changed = lost.changed() => if changed.is_err() { return },
        }
    }
}

/// The attempt id of a key under `dir`.
fn id_in(dir: &str, key: &[u8]) -> Result<u64> {
    let key = String::from_utf8_lossy(key);
    key.strip_prefix(dir)
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| ClusterError::Corrupt {
            key: key.to_string(),
            reason: "not an attempt id key".to_string(),
        })
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
