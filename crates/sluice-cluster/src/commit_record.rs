//! The leader's checkpoint protocol: the [`CommitAuthority`] of a cluster
//! leader's checkpoint store, speaking the protocol of
//! [`crate::checkpoint`]. In an active–standby pipeline the leader is the
//! one owner; with [`LeaderCommitRecord::sharing_vnodes`] it shares the
//! vnodes with followers ([`crate::follower_record`]), and a commit waits
//! until the Prepare's deadline for every owner's ack (any nack, or an
//! owner missing at the deadline, aborts it).
//!
//! A leader paused between its last check of the store's lease and its
//! manifest write wakes up and completes that write after a standby took
//! over; the store cannot refuse it, because object stores have no
//! fencing tokens. etcd can: a checkpoint counts only once etcd holds a
//! commit decision for it, written by a transaction that compares the
//! leader's term and the assignment generation the attempt was admitted
//! under. A deposed leader's decision is refused by etcd itself, its
//! pipeline halts, and its sinks commit nothing; the new leader first
//! aborts every attempt left undecided ([`LeaderCommitRecord::take_over`]),
//! and reads only committed checkpoints.
//!
//! ```text
//!  leader (term T)              store                   etcd
//!   admit ─────────────────────────────────────────────► assignment (gen G, every vnode on T's leader)
//!   reserve id ───────────────► checkpoints/ID (marker)
//!   prepare(ID, G) ───────────────────────────[T]──────► attempts/ID, prepare/ID
//!   barriers, capture, blobs, manifest ───────► checkpoints/ID/…
//!   record_commit(ID, G, manifest)
//!     ack (own answer) ───────────────────[prepare, G, lease]──► answers/ID/N
//!     wait for every owner's answer (until the Prepare's deadline)
//!     commit ─────────────────────[T, G, acks, committed]──► decisions/ID, committed=ID
//!       (a nack or a missing owner: abort ──[T]──► decisions/ID)
//!   abandon(ID) before the manifest ──────────[T]──────► decisions/ID (abort)
//!        ├ committed: the checkpoint exists, sinks commit its epochs
//!        └ refused (deposed, G moved, aborted by a new leader): Fenced
//!  any node: committed() = ids with a commit decision
//! ```
//!
//! The ids are the store's: it reserves each one durably and never reuses
//! it, and etcd records the same id (`reserve_given`), so an attempt has
//! one name on both sides. One record exists per node process: the
//! database is built before the node joins (its catalog is sealed from
//! it), so the record learns its term when the node wins an election
//! ([`LeaderCommitRecord::lead`]). Until then, and after
//! [`LeaderCommitRecord::stand_down`], everything is refused. An attempt
//! prepared but never decided by this record (its tail failed before the
//! manifest) is aborted before the next Prepare, so no follower waits on
//! it longer than one checkpoint interval.

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use etcd_client::{Client, DeleteOptions, GetOptions, TxnOp};
use parking_lot::Mutex;
use sluice_storage::{BlobRef, CommitAuthority, StorageError};

use crate::checkpoint::record::{
    decode_kv, Answer, CheckpointPrepare, Decision, DecisionRecord, PartRef, Stored,
};
use crate::checkpoint::txn::instant_of;
use crate::checkpoint::{
    abort_attempt, abort_orphaned_attempts, answer_checkpoint, checkpoint_assignment_for_admission,
    commit_attempt, decide, now_ms, publish_checkpoint_prepare, read_answers, read_attempt_counter,
    require_prepare, reserve_given, wait_for_answers, CheckpointAssignmentFence, Decided,
};
use crate::checkpoint_requests::RequestWatch;
use crate::error::ClusterError;
use crate::keys::ClusterKeys;
use crate::leader::{Election, Guarded};

/// The leader's checkpoint record for one node process; see the module docs.
pub struct LeaderCommitRecord {
    client: Client,
    keys: ClusterKeys,
    node: String,
    /// The election and the term this node leads at, while it leads.
    leading: Mutex<Option<(Arc<Election>, u64)>>,
    /// The assignment the last attempt was admitted under.
    admitted: Mutex<Option<CheckpointAssignmentFence>>,
    /// Active–standby (every vnode must be this leader's), or vnodes
    /// shared with followers ([`Self::sharing_vnodes`]).
    whole: bool,
    /// The prepared attempt not yet decided by this record: aborted before
    /// the next Prepare if its tail never reached `record_commit` (a
    /// failed manifest write), so no follower waits on it past then.
    open: Mutex<Option<(u64, u64)>>,
    /// The followers' requests for checkpoints, watched while it leads.
    requests: Mutex<Option<RequestWatch>>,
}

impl std::fmt::Debug for LeaderCommitRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderCommitRecord")
            .field("cluster", &self.keys.cluster())
            .field("node", &self.node)
            .field("term", &self.leading.lock().as_ref().map(|(_, t)| *t))
            .finish()
    }
}

impl LeaderCommitRecord {
    /// The record of cluster `keys`, read through `client`, written as
    /// node `node` once it leads.
    pub fn new(client: Client, keys: ClusterKeys, node: &str) -> Self {
        Self {
            client,
            keys,
            node: node.to_string(),
            leading: Mutex::new(None),
            admitted: Mutex::new(None),
            whole: true,
            open: Mutex::new(None),
            requests: Mutex::new(None),
        }
    }

    /// This record, for a leader that shares vnodes with followers: an
    /// attempt is admitted under any table of the leader's own term, and a
    /// commit waits (until the Prepare's deadline) for the ack of every
    /// node that owns a vnode in it.
    #[must_use]
    pub fn sharing_vnodes(mut self) -> Self {
        self.whole = false;
        self
    }

    /// This node leads at `term` through `election`: its writes are
    /// fenced by that term from now on. Call inside a tokio runtime:
    /// sharing vnodes, the record watches the followers' requests for
    /// checkpoints from now on.
    pub fn lead(&self, election: Arc<Election>, term: u64) {
        *self.admitted.lock() = None;
        // Only followers that share the vnodes hold input for its commits.
        *self.requests.lock() = (!self.whole).then(|| RequestWatch::start(election.session()));
        *self.leading.lock() = Some((election, term));
    }

    /// Abort every attempt an earlier leader left undecided (returned, by
    /// id): a manifest it wrote but never committed then never counts, even
    /// if it wakes up and tries. Call after [`Self::lead`], before the
    /// pipeline starts.
    pub async fn take_over(&self) -> Result<Vec<u64>, ClusterError> {
        let (election, term) = self
            .leading
            .lock()
            .clone()
            .ok_or_else(|| self.not_leader(0))?;
        abort_orphaned_attempts(&election, term).await
    }

    /// This node no longer leads: everything is refused.
    pub fn stand_down(&self) {
        *self.leading.lock() = None;
        *self.requests.lock() = None;
    }

    /// Decide an attempt whose vnodes are shared with followers, once
    /// every owner answered or the Prepare's deadline passed. The wait
    /// ends early when the table moves (an owner left, or one joined):
    /// the attempt can no longer commit, and waiting for an owner that is
    /// gone would hold the checkpoint to its deadline. `None`: the answers
    /// could not be judged.
    async fn decide_shared(
        election: &Election,
        term: u64,
        prepare: &Stored<CheckpointPrepare>,
    ) -> Result<Option<Decided>, StorageError> {
        let session = election.session();
        let (id, generation) = (prepare.value.id, prepare.value.generation);
        let what = || format!("committing checkpoint {id}");
        let answered = wait_for_answers(
            session,
            &prepare.value,
            instant_of(prepare.value.deadline_ms),
        );
        let owners = prepare.value.owning_nodes();
        let moved = tokio::select! {
            answers = answered => {
                answers.map_err(|e| Self::authority(what(), e))?;
                None
            }
            current = table_moved(session, generation) => Some(Err(current)),
            gone = owner_gone(session, id, owners) => Some(Ok(gone)),
        };
        let abort = |reason: String| async move {
            abort_attempt(election, term, id, generation, &reason)
                .await
                .map(Some)
                .map_err(|e| Self::refusal(id, what(), e))
        };
        match moved {
            Some(Err(current)) => {
                return abort(format!(
                    "the assignment moved from generation {generation} to {current} \
                     before every owner answered"
                ))
                .await;
            }
            Some(Ok(gone)) => {
                return abort(format!(
                    "node '{gone}' left the cluster (its lease lapsed) before it answered"
                ))
                .await;
            }
            None => {}
        }
        // Past the wait, an owner still missing is as good as late.
        let now = now_ms().max(prepare.value.deadline_ms);
        match decide(election, term, id, now).await {
            Ok(decided) => Ok(decided),
            // The table moved, or an ack was withdrawn (its owner's lease
            // lapsed), between the answers and the commit: while this node
            // still leads, that is an abort, not a fence.
            Err(
                e @ (ClusterError::AssignmentFenceMoved { .. }
                | ClusterError::CheckpointRefused { .. }),
            ) if election.term() == Some(term) => abort(e.to_string()).await,
            Err(e) => Err(Self::refusal(id, what(), e)),
        }
    }

    /// Attempt `id` is decided: it no longer needs aborting.
    fn close(&self, id: u64) {
        let mut open = self.open.lock();
        if open.is_some_and(|(o, _)| o == id) {
            *open = None;
        }
    }

    fn not_leader(&self, term: u64) -> ClusterError {
        ClusterError::NotLeader {
            node: self.node.clone(),
            term,
        }
    }

    fn leader(&self, id: u64) -> Result<(Arc<Election>, u64), StorageError> {
        self.leading
            .lock()
            .clone()
            .ok_or_else(|| StorageError::Fenced {
                id,
                source: Box::new(self.not_leader(0)),
            })
    }

    fn authority(what: String, e: ClusterError) -> StorageError {
        authority_error(what, e)
    }

    /// A refusal that proves this writer may not commit `id` is `Fenced`;
    /// anything else leaves the outcome unknown.
    fn refusal(id: u64, what: String, e: ClusterError) -> StorageError {
        match e {
            ClusterError::NotLeader { .. }
            | ClusterError::AssignmentFenceMoved { .. }
            | ClusterError::CheckpointRefused { .. }
            | ClusterError::AnswerRefused { .. } => StorageError::Fenced {
                id,
                source: Box::new(e),
            },
            e => Self::authority(what, e),
        }
    }
}

#[async_trait]
impl CommitAuthority for LeaderCommitRecord {
    /// Shared vnodes: every owner acks each checkpoint, one decision.
    fn one_cut_across_nodes(&self) -> bool {
        !self.whole
    }

    fn may_originate(&self) -> bool {
        let leading = self.leading.lock().clone();
        leading.is_some_and(|(election, term)| election.term() == Some(term))
    }

    fn checkpoints_requested(&self) -> bool {
        self.requests.lock().as_ref().is_some_and(RequestWatch::any)
    }

    async fn admit(&self) -> Result<Option<u64>, StorageError> {
        let (election, term) = self.leader(0)?;
        let fence = checkpoint_assignment_for_admission(election.session())
            .await
            .map_err(|e| Self::authority("admitting a checkpoint".into(), e))?;
        let generation = fence.generation();
        let table = fence.assignment();
        let refused = if self.whole {
            table.not_whole_for(&self.node, term)
        } else {
            (table.term() != term).then(|| {
                format!(
                    "the table was placed in term {}, not this leader's term {term}",
                    table.term()
                )
            })
        };
        if let Some(reason) = refused {
            return Err(Self::authority(
                "admitting a checkpoint".into(),
                ClusterError::AdmissionRefused {
                    node: self.node.clone(),
                    generation,
                    reason,
                },
            ));
        }
        *self.admitted.lock() = Some(fence);
        Ok(Some(generation))
    }

    async fn prepare(
        &self,
        id: u64,
        generation: Option<u64>,
        deadline_ms: u64,
    ) -> Result<(), StorageError> {
        let (election, term) = self.leader(id)?;
        let admitted = self.admitted.lock().clone();
        let Some(fence) = admitted.filter(|f| Some(f.generation()) == generation) else {
            let e = ClusterError::CheckpointRefused {
                action: "prepare",
                id,
                node: self.node.clone(),
                reason: format!("it was not admitted at generation {generation:?}"),
            };
            return Err(StorageError::Fenced {
                id,
                source: Box::new(e),
            });
        };
        let what = || format!("publishing the Prepare of checkpoint {id}");
        let open = *self.open.lock();
        if let Some((earlier, earlier_generation)) = open {
            // Cleared only once aborted: a failed abort is tried again at
            // the next Prepare.
            let reason = "its leader moved on to a later attempt before it committed";
            abort_attempt(&election, term, earlier, earlier_generation, reason)
                .await
                .map_err(|e| Self::refusal(id, what(), e))?;
            self.close(earlier);
        }
        let attempt = reserve_given(&election, term, id)
            .await
            .map_err(|e| Self::refusal(id, what(), e))?;
        *self.open.lock() = Some((id, fence.generation()));
        publish_checkpoint_prepare(&election, attempt, &fence, deadline_ms)
            .await
            .map_err(|e| Self::refusal(id, what(), e))?;
        Ok(())
    }

    async fn abandon(&self, id: u64, reason: &str) -> Result<(), StorageError> {
        let (election, term) = self.leader(id)?;
        let generation = self.admitted.lock().as_ref().map_or(0, |f| f.generation());
        let decided = abort_attempt(&election, term, id, generation, reason)
            .await
            .map_err(|e| Self::refusal(id, format!("aborting checkpoint {id}"), e))?;
        self.close(id);
        tracing::debug!(node = %self.node, id, first = decided.first, "abandoned checkpoint aborted");
        Ok(())
    }

    async fn record_commit(
        &self,
        id: u64,
        generation: Option<u64>,
        manifest: &BlobRef,
    ) -> Result<(), StorageError> {
        let (election, term) = self.leader(id)?;
        let session = election.session();
        let what = || format!("committing checkpoint {id}");
        let prepare = require_prepare(session, id)
            .await
            .map_err(|e| Self::refusal(id, what(), e))?;
        if Some(prepare.value.generation) != generation {
            let e = ClusterError::AssignmentFenceMoved {
                action: "commit record",
                id,
                node: self.node.clone(),
                expected: generation.unwrap_or(0),
                current: prepare.value.generation,
            };
            return Err(Self::refusal(id, what(), e));
        }
        // The leader answers its own Prepare, then waits for every other
        // owner's answer (none, active–standby) until the deadline.
        answer_checkpoint(
            session,
            &prepare,
            Answer::Ack {
                part: part_of(manifest),
            },
        )
        .await
        .map_err(|e| Self::refusal(id, what(), e))?;
        let alone = prepare
            .value
            .owning_nodes()
            .into_iter()
            .eq([self.node.clone()]);
        let decided = if alone {
            // Its own ack is the only one (active–standby): nothing to
            // wait for or watch; commit on the answers as they are.
            let answers = read_answers(session, id)
                .await
                .map_err(|e| Self::authority(what(), e))?;
            Some(
                commit_attempt(&election, term, &prepare, &answers)
                    .await
                    .map_err(|e| Self::refusal(id, what(), e))?,
            )
        } else {
            Self::decide_shared(&election, term, &prepare).await?
        };
        let decided = decided.ok_or_else(|| {
            Self::authority(
                what(),
                ClusterError::CheckpointRefused {
                    action: "commit",
                    id,
                    node: self.node.clone(),
                    reason: "the answers could not be judged after the wait".into(),
                },
            )
        })?;
        self.close(id);
        match decided.record.decision {
            Decision::Commit { .. } => Ok(()),
            // This leader aborted it (an owner nacked or missed the
            // deadline): the checkpoint does not exist, and nothing fenced
            // this leader.
            Decision::Abort { reason } if decided.first => {
                Err(StorageError::Aborted { id, reason })
            }
            // A new leader aborted it first.
            Decision::Abort { reason } => Err(Self::refusal(
                id,
                what(),
                ClusterError::CheckpointRefused {
                    action: "commit",
                    id,
                    node: self.node.clone(),
                    reason: format!("it was aborted: {reason}"),
                },
            )),
        }
    }

    async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
        committed_ids(&self.client, &self.keys).await
    }

    /// The cluster's attempt counter, while this record leads.
    async fn largest_reserved(&self) -> Result<Option<u64>, StorageError> {
        let leading = self.leading.lock().clone();
        let Some((election, _)) = leading else {
            return Ok(None);
        };
        let counter = read_attempt_counter(election.session())
            .await
            .map_err(|e| Self::authority("reading the checkpoint attempt counter".into(), e))?;
        Ok(Some(counter.last))
    }

    async fn forget_below(&self, id: u64) -> Result<(), StorageError> {
        let (election, term) = self.leader(id)?;
        let deletes = ["attempts", "prepare", "answers", "decisions"]
            .into_iter()
            .map(|kind| {
                let from = self.keys.checkpoint_dir(kind);
                let to = self.keys.checkpoint_record(kind, id);
                TxnOp::delete(from, Some(DeleteOptions::new().with_range(to)))
            })
            .collect();
        match election.guarded_txn(term, vec![], deletes, vec![]).await {
            Ok(Guarded::Committed { .. }) => Ok(()),
            Ok(Guarded::CompareFailed { .. }) => Err(Self::authority(
                format!("forgetting checkpoints below {id}"),
                self.not_leader(term),
            )),
            Err(e) => Err(Self::authority(
                format!("forgetting checkpoints below {id}"),
                e,
            )),
        }
    }
}

/// The checkpoints a cluster's leader committed, read by someone who
/// records none: which manifests of a node's store count after the node
/// stopped (a shuffled split whose member list changes reads every old
/// member's last cut with it). Recording a commit through it is refused.
#[derive(Clone)]
pub struct CommittedCuts {
    client: Client,
    keys: ClusterKeys,
    /// A cut that counts as committed whatever etcd holds now (see
    /// [`CommittedCuts::with_recorded_cut`]).
    recorded: Option<u64>,
}

impl std::fmt::Debug for CommittedCuts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommittedCuts")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl CommittedCuts {
    /// The commit decisions of the cluster of `keys`.
    pub fn new(client: Client, keys: ClusterKeys) -> Self {
        Self {
            client,
            keys,
            recorded: None,
        }
    }

    /// Count `cut` as committed too: the last cut of a generation, which
    /// the split's record holds since the list changed
    /// (`split_record::PreviousSplit::cut`). The leader forgets the
    /// decisions of older checkpoints as it commits newer ones, so a
    /// member dropped by the change, started again once the others ran
    /// on, would otherwise find its last checkpoint uncommitted and never
    /// publish the output a kill left staged.
    pub fn with_recorded_cut(mut self, cut: Option<u64>) -> Self {
        self.recorded = cut;
        self
    }
}

#[async_trait]
impl CommitAuthority for CommittedCuts {
    async fn record_commit(
        &self,
        id: u64,
        _generation: Option<u64>,
        _manifest: &BlobRef,
    ) -> Result<(), StorageError> {
        Err(StorageError::Fenced {
            id,
            source: "a reader of the cluster's commit decisions records none".into(),
        })
    }

    async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
        let mut ids = committed_ids(&self.client, &self.keys).await?;
        if let Some(cut) = self.recorded {
            ids.get_or_insert_with(BTreeSet::new).insert(cut);
        }
        Ok(ids)
    }

    async fn forget_below(&self, _id: u64) -> Result<(), StorageError> {
        Ok(())
    }
}

/// The manifest reference a node acks with.
pub(crate) fn part_of(manifest: &BlobRef) -> PartRef {
    PartRef {
        object_key: manifest.key.clone(),
        size: manifest.len.to_string(),
        crc: format!("{:08x}", manifest.crc32),
    }
}

/// The ids with a commit decision: the committed checkpoints of every
/// node's store (`None` before the first).
pub(crate) async fn committed_ids(
    client: &Client,
    keys: &ClusterKeys,
) -> Result<Option<BTreeSet<u64>>, StorageError> {
    let what = || "reading the committed checkpoints".to_string();
    let dir = keys.checkpoint_dir("decisions");
    let mut client = client.clone();
    let got = client
        .get(dir.clone(), Some(GetOptions::new().with_prefix()))
        .await
        .map_err(|e| StorageError::Authority {
            what: what(),
            source: Box::new(ClusterError::etcd(format!("reading {dir}"), e)),
        })?;
    let mut ids = BTreeSet::new();
    for kv in got.kvs() {
        let decision: Stored<DecisionRecord> =
            decode_kv(kv).map_err(|e| StorageError::Authority {
                what: what(),
                source: Box::new(e),
            })?;
        if matches!(decision.value.decision, Decision::Commit { .. }) {
            ids.insert(decision.value.id);
        }
    }
    Ok((!ids.is_empty()).then_some(ids))
}

/// The commit record could not answer `what`: the outcome is unknown.
pub(crate) fn authority_error(what: String, e: ClusterError) -> StorageError {
    StorageError::Authority {
        what,
        source: Box::new(e),
    }
}

/// Resolves with the current generation (0: no table) once the assignment
/// is no longer at `generation`; pending while it is.
/// Resolves with the first owner of attempt `id` that is no longer a live
/// member and has not answered: a killed node's lease lapses, and its
/// answer will never come, so the leader aborts at once instead of at the
/// Prepare's deadline (which is as long as the checkpoint timeout).
async fn owner_gone(
    session: &crate::session::Session,
    id: u64,
    owners: BTreeSet<String>,
) -> String {
    let members_key = session.keys().nodes_prefix();
    let answers_key = session.keys().checkpoint_answers(id);
    let mut members = crate::watch::spawn(session.client(), members_key.clone(), true);
    let mut answers = crate::watch::spawn(session.client(), answers_key.clone(), true);
    loop {
        {
            let live = members.borrow_and_update();
            let answered = answers.borrow_and_update();
            if live.revision > 0 && answered.revision > 0 {
                let gone = owners.iter().find(|o| {
                    !live.entries.contains_key(&format!("{members_key}{o}"))
                        && !answered.entries.contains_key(&format!("{answers_key}{o}"))
                });
                if let Some(gone) = gone {
                    return gone.clone();
                }
            }
        }
        tokio::select! {
            changed = members.changed() => if changed.is_err() { break },
            changed = answers.changed() => if changed.is_err() { break },
        }
    }
    // A mirror ended (it does not while its receiver lives): never
    // resolve, the answers' deadline ends the wait.
    std::future::pending().await
}

async fn table_moved(session: &crate::session::Session, generation: u64) -> u64 {
    let key = session.keys().assignment();
    let mut table = crate::watch::spawn(session.client(), key.clone(), false);
    loop {
        {
            let snapshot = table.borrow_and_update();
            if snapshot.revision > 0 {
                let current = snapshot
                    .entries
                    .get(&key)
                    .map_or(0, |e| u64::try_from(e.mod_revision).unwrap_or(0));
                if current != generation {
                    return current;
                }
            }
        }
        if table.changed().await.is_err() {
            // The mirror ended (it does not while this receiver lives):
            // never resolve, the answers' deadline ends the wait.
            return std::future::pending().await;
        }
    }
}
