//! The checkpoint side of `ConnectorPipelineCallback`: barriers, capture,
//! the durable manifest, two-phase sink commit, and recovery.
//!
//! Capture runs on the compute thread and only takes a consistent snapshot
//! (operator state as shared Arrow batches, source positions) and queues
//! each sink's seal on its writer. Encoding, the blob writes, awaiting the
//! seals, the manifest, the sinks' epoch commits and pruning run as a
//! tracked tail on the checkpoint worker (see [`super::tails`]); once the
//! tail reports, [`CheckpointLifecycle::complete_checkpoint_tail`] records
//! the outcome (a sink that could not commit after the manifest became
//! durable faults the pipeline).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sluice_storage::{LoadedCheckpoint, Manifest, SourceCheckpoint};

use super::callback::{
    BarrierOutcome, CheckpointAssignmentFence, CheckpointAttempt, CheckpointLifecycle,
    CheckpointReport, CycleError,
};
use super::connector::ConnectorPipelineCallback;
use super::tails::{TailError, TailJob, TailResult};
use super::{FLAG_MANUAL, FLAG_SHUTDOWN};
use crate::error::{EngineError, Result};
use crate::options::Delivery;
use crate::output::sink::{SealedEpoch, SinkCommitter};
use crate::split::handover::SourceProgress;
use crate::state::StatePart;

/// What a capture hands the tail.
struct Captured {
    /// The manifest without its blobs and sinks (the tail fills them in).
    manifest: Manifest,
    parts: Vec<(String, StatePart)>,
    seals: Vec<SealedEpoch>,
    committers: Vec<SinkCommitter>,
}

/// Who asked for a checkpoint, from its flags (for logs).
fn checkpoint_kind(flags: u64) -> &'static str {
    if flags & FLAG_SHUTDOWN != 0 {
        "shutdown"
    } else if flags & FLAG_MANUAL != 0 {
        "manual"
    } else {
        "periodic"
    }
}

fn view_blob(name: &str) -> String {
    format!("view/{name}")
}

pub(super) fn stream_blob(name: &str, i: usize) -> String {
    format!("stream/{name}/{i}")
}

impl ConnectorPipelineCallback {
    /// Restore operators, views, sources and sinks from a checkpoint.
    pub(super) fn recover(&mut self, cp: &LoadedCheckpoint) -> Result<()> {
        let m = &cp.manifest;
        for s in self.streams.iter_mut() {
            let mut parts: VecDeque<Bytes> = VecDeque::new();
            let mut i = 0;
            while let Some(b) = cp.blobs.get(&stream_blob(&s.name, i)) {
                parts.push_back(b.clone());
                i += 1;
            }
            s.restore(&mut parts)?;
            if !parts.is_empty() {
                return Err(EngineError::Internal(format!(
                    "checkpoint holds more state for stream '{}' than its plan",
                    s.name
                )));
            }
            if let Some(view) = &s.view {
                if let Some(b) = cp.blobs.get(&view_blob(&s.name)) {
                    view.restore_bytes(b)?;
                }
            }
        }
        for (name, state) in self.sources.iter_mut() {
            let Some(sc) = m.sources.get(name.as_ref()) else {
                return Err(EngineError::Catalog(format!(
                    "checkpoint {} has no progress for source '{name}'",
                    m.id
                )));
            };
            state.final_offset = sc.offset.clone();
            // A split node whose vnodes moved starts its file sources from
            // the handover, which its own progress is one part of; a source
            // it had finished may have files to read now.
            let own = SourceProgress {
                offset: sc.offset.clone(),
                finished: sc.finished,
            };
            if let Some((reader, resumed)) = state.def.handed_over_reader(Some(&own))? {
                // After a handover the source reads other files than those
                // its watermark came from, and they may hold older rows:
                // lateness is judged again from the rows it reads. So is a
                // finished source's (its watermark is the end of time).
                let watermark = if resumed && !sc.finished {
                    sc.watermark
                } else {
                    i64::MIN
                };
                state.watermark.restore(watermark, false);
                state.pending_reader = Some(reader);
                continue;
            }
            state.watermark.restore(sc.watermark, sc.finished);
            state.pending_reader = if sc.finished {
                state.def.check_finished_offset(sc.offset.as_deref())?;
                None
            } else {
                state.def.open_reader(sc.offset.as_deref())?
            };
        }
        let mode = self.sink_mode;
        for sink in self.sinks.iter_mut() {
            sink.begin(mode, m.sinks.get(sink.name()))?;
        }
        for (name, bytes) in &cp.blobs {
            if let Some(topic) = name.strip_prefix("subscription/") {
                self.shared.subscriptions.restore_history(topic, bytes)?;
            }
        }
        self.watermark = m.watermark;
        self.local_watermark = m.watermark;
        self.shared.metrics.set_watermark(self.watermark);
        tracing::info!(checkpoint = m.id, "recovered");
        Ok(())
    }

    /// The consistent snapshot, on the compute thread: nothing is encoded
    /// or written here, and no sink is waited for.
    fn capture(
        &mut self,
        attempt: CheckpointAttempt,
        mut offsets: FxHashMap<String, SourceCheckpoint>,
    ) -> Result<Captured> {
        let mut blobs = Vec::new();
        for s in self.streams.iter_mut() {
            s.seal(attempt.id);
            let mut parts = Vec::new();
            s.snapshot(&mut parts)?;
            for (i, p) in parts.into_iter().enumerate() {
                blobs.push((stream_blob(&s.name, i), p));
            }
            if let Some(view) = &s.view {
                blobs.push((view_blob(&s.name), view.snapshot_part()?));
            }
        }
        let mut sources = BTreeMap::new();
        for (name, state) in &self.sources {
            let mut sc = offsets.remove(name.as_ref()).unwrap_or_default();
            if state.watermark.is_finished() {
                sc.offset = state.final_offset.clone();
            }
            sc.watermark = state.watermark.watermark();
            sc.finished = state.watermark.is_finished();
            sources.insert(name.to_string(), sc);
        }
        for (name, bytes) in self.shared.subscriptions.snapshot_history(attempt.id)? {
            blobs.push((format!("subscription/{name}"), bytes));
        }
        let mut seals = Vec::new();
        for sink in self.sinks.iter_mut() {
            seals.extend(sink.seal()?);
        }
        let committers = self.sinks.iter().filter_map(|s| s.committer()).collect();
        let fingerprint = self
            .checkpoints
            .as_ref()
            .map(|c| c.fingerprint.clone())
            .unwrap_or_default();
        let manifest = Manifest {
            id: attempt.id,
            created_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as i64)
                .unwrap_or(0),
            pipeline: fingerprint,
            watermark: self.watermark,
            sources,
            sinks: BTreeMap::new(),
            blobs: Vec::new(),
            assignment_generation: None,
        };
        Ok(Captured {
            manifest,
            parts: blobs,
            seals,
            committers,
        })
    }
}

impl ConnectorPipelineCallback {
    /// The store's commit authority: a cluster's, when there is one.
    pub(super) fn authority(&self) -> Option<&Arc<dyn sluice_storage::CommitAuthority>> {
        self.checkpoints.as_ref().and_then(|c| c.store.authority())
    }

    /// A fence comes only from a commit authority's admission: refused by
    /// name on a pipeline without one.
    pub(super) fn accept_fence(&self, fence: Option<CheckpointAssignmentFence>) -> Result<()> {
        match fence {
            Some(f) if self.authority().is_none() => Err(EngineError::Checkpoint(format!(
                "assignment fence {} given, but this pipeline is not clustered",
                f.generation
            ))),
            _ => Ok(()),
        }
    }
}

impl CheckpointLifecycle for ConnectorPipelineCallback {
    fn checkpoint_interval(&self) -> Option<std::time::Duration> {
        self.checkpoints.as_ref().and_then(|c| c.interval)
    }

    fn checkpoint_delivery(&self) -> Option<Delivery> {
        self.checkpoints.as_ref().map(|c| c.delivery)
    }

    fn settles_on_shutdown(&self) -> bool {
        self.checkpoints.is_some()
    }

    fn alignment_timeout(&self) -> std::time::Duration {
        self.checkpoints
            .as_ref()
            .map_or(std::time::Duration::from_secs(10), |c| c.alignment_timeout)
    }

    fn checkpoint_timeout(&self) -> std::time::Duration {
        self.checkpoints
            .as_ref()
            .map_or(std::time::Duration::from_secs(600), |c| c.timeout)
    }

    async fn reserve_checkpoint_attempt(&mut self, deadline: Instant) -> Result<CheckpointAttempt> {
        let Some(c) = &self.checkpoints else {
            return Err(EngineError::Checkpoint("checkpointing is off (open the database on a state directory and set checkpoint_interval or delivery)".into()));
        };
        let id = c.store.reserve_by(deadline).await?;
        Ok(CheckpointAttempt { id })
    }

    fn inject_source_barriers(&mut self, attempt: CheckpointAttempt) -> Vec<Arc<str>> {
        let mut waiting = Vec::new();
        for (name, state) in &self.sources {
            if state.reading && !state.watermark.is_finished() {
                state.control.inject(attempt.id);
                waiting.push(Arc::clone(name));
            }
        }
        waiting
    }

    fn forward_exchange_barriers(&mut self, attempt: CheckpointAttempt) {
        self.forward_barriers(attempt.id);
    }

    fn release_exchange_barrier(&mut self, attempt: CheckpointAttempt) {
        self.release_exchange_barriers(attempt.id);
    }

    fn exchanges_awaiting_barrier(
        &self,
        attempt: CheckpointAttempt,
    ) -> std::result::Result<Vec<String>, EngineError> {
        self.barriers_awaited(attempt.id)
    }

    async fn checkpoint_with_barrier(
        &mut self,
        source_checkpoints: FxHashMap<String, SourceCheckpoint>,
        attempt: CheckpointAttempt,
        attempt_started: Instant,
        deadline: Instant,
        flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> BarrierOutcome {
        // Whatever follows, the other nodes' rows after this attempt's
        // barriers belong to the next one (drained after this returns).
        self.release_exchange_barriers(attempt.id);
        if let Err(e) = self.accept_fence(assignment_fence) {
            return BarrierOutcome::Aborted(Arc::new(e));
        }
        // A followed attempt the leader aborted while this node aligned:
        // nothing is captured (the coordinator resolves local state).
        let (following, authority) = (self.following, self.authority().cloned());
        if let Some(reason) =
            super::cluster::followed_attempt_aborted(following, authority, attempt).await
        {
            return BarrierOutcome::Aborted(Arc::new(EngineError::Checkpoint(format!(
                "the leader aborted checkpoint {} before this node captured it: {reason}",
                attempt.id
            ))));
        }
        for s in self.sources.values() {
            s.control.withdraw();
        }
        // Offsets of sources that were aligned without a barrier event.
        let mut offsets = source_checkpoints;
        for (name, state) in self.sources.iter() {
            if !offsets.contains_key(name.as_ref()) {
                if let Some(r) = &state.pending_reader {
                    offsets.insert(
                        name.to_string(),
                        SourceCheckpoint {
                            offset: r.offset(),
                            ..Default::default()
                        },
                    );
                }
            }
        }
        let mut captured = match self.capture(attempt, offsets) {
            Ok(c) => c,
            Err(e) => return BarrierOutcome::Failed(Arc::new(e.context("capturing state"))),
        };
        // The commit counts only while the admitted generation holds.
        captured.manifest.assignment_generation = assignment_fence.map(|f| f.generation);
        let Some(c) = &self.checkpoints else {
            let off = EngineError::Checkpoint("checkpointing is off".into());
            return BarrierOutcome::Failed(Arc::new(off));
        };
        if Instant::now() >= deadline {
            let late = TailError::TimedOut {
                limit: deadline.saturating_duration_since(attempt_started),
            };
            return BarrierOutcome::Failed(Arc::new(late.into_error()));
        }
        // Nobody runs cycles after a shutdown checkpoint: its tail never
        // rests (a busy pipeline's share does not apply).
        let share = if flags & FLAG_SHUTDOWN != 0 {
            100
        } else {
            c.tail_share
        };
        tracing::debug!(
            checkpoint = attempt.id,
            kind = checkpoint_kind(flags),
            "checkpoint captured"
        );
        let job = TailJob {
            id: attempt.id,
            started: attempt_started,
            deadline,
            store: c.store.clone(),
            manifest: captured.manifest,
            parts: captured.parts,
            seals: captured.seals,
            committers: captured.committers,
            retain: c.retain,
            followed: self.following == Some(attempt.id),
            pacer: crate::state::pace::Pacer::new(
                share,
                Arc::clone(&self.shared.metrics) as Arc<dyn crate::state::pace::PaceHost>,
            ),
        };
        match self.tails.spawn(job) {
            Ok(()) => {
                // A followed attempt is answered by its manifest commit.
                if self.following == Some(attempt.id) {
                    self.following = None;
                }
                BarrierOutcome::Tailing(attempt)
            }
            Err(e) => BarrierOutcome::Failed(Arc::new(e.into_error())),
        }
    }

    fn checkpoint_tails_in_flight(&mut self) -> usize {
        self.tails.in_flight()
    }

    fn max_checkpoint_tails(&self) -> usize {
        super::tails::MAX_IN_FLIGHT
    }

    async fn next_checkpoint_tail(&mut self) -> Option<CheckpointAttempt> {
        self.tails
            .next_durable()
            .await
            .map(|id| CheckpointAttempt { id })
    }

    fn complete_checkpoint_tail(&mut self, attempt: CheckpointAttempt) -> BarrierOutcome {
        let Some(done) = self.tails.take(attempt.id) else {
            return BarrierOutcome::Failed(Arc::new(EngineError::Internal(format!(
                "checkpoint {} has no finished tail to complete",
                attempt.id
            ))));
        };
        let (state_bytes, created_ms, sink_commit_failed) = match done.result {
            TailResult::Failed(e) => {
                let e = e.into_error();
                tracing::warn!(checkpoint = attempt.id, code = e.code(), error = %e, "checkpoint tail failed");
                return BarrierOutcome::Failed(Arc::new(e));
            }
            TailResult::Cancelled => {
                return BarrierOutcome::Aborted(Arc::new(EngineError::Checkpoint(format!(
                    "checkpoint {} was cancelled before its manifest: recovery took over",
                    attempt.id
                ))))
            }
            // Durable although cancelled (the fence only stops a tail
            // before its manifest, so this is a defence): recovery takes
            // over from the manifest.
            TailResult::Durable { .. } if done.cancelled => {
                return BarrierOutcome::Aborted(Arc::new(EngineError::Checkpoint(format!(
                    "checkpoint {} became durable after recovery took over; recovery takes over from it",
                    attempt.id
                ))))
            }
            TailResult::Durable {
                state_bytes,
                created_ms,
                sink_commit_failed,
            } => (state_bytes, created_ms, sink_commit_failed),
        };
        // Durable: a sink that could not commit its sealed epochs is a
        // continuation fault; the checkpoint itself stays committed and
        // recovery re-commits them.
        if let Some(e) = sink_commit_failed {
            self.record_checkpoint_continuation_fault(attempt, e);
        }
        let report = CheckpointReport {
            id: attempt.id,
            duration: done.started.elapsed(),
            state_bytes,
            created_ms,
        };
        self.shared.metrics.record_checkpoint(&report);
        tracing::debug!(
            id = report.id,
            bytes = report.state_bytes,
            duration_ms = report.duration.as_millis(),
            "checkpoint committed"
        );
        BarrierOutcome::Committed(report)
    }

    async fn wait_checkpoint_tails_idle(&mut self) {
        self.tails.idle().await;
    }

    fn cancel_checkpoint_tails_for_recovery(&mut self) -> bool {
        let stopped = self.tails.cancel();
        if stopped {
            // That checkpoint never becomes durable: the epochs it sealed
            // are referred to by no checkpoint, so nothing would ever
            // remove their staged files.
            for sink in self.sinks.iter_mut() {
                if let Err(e) = sink.discard_sealed() {
                    tracing::warn!(sink = sink.name(), error = %e, "discarding sealed epochs failed");
                }
            }
        }
        stopped
    }

    async fn settle_checkpoint_tail_tasks(&mut self) -> Result<()> {
        if self.tails.next_durable().await.is_some() {
            // The coordinator completes every tail before settling; one
            // left here is reported, not silently committed.
            return Err(EngineError::Internal(
                "a checkpoint tail finished but was never completed".into(),
            ));
        }
        self.tails.idle().await;
        Ok(())
    }

    fn record_checkpoint_pause(&self, pause_ns: u64) {
        self.shared.metrics.record_checkpoint_pause(pause_ns);
    }

    fn note_checkpoint_skipped(&self) {
        self.shared.metrics.note_checkpoint_skipped();
    }

    async fn abandon_checkpoint_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &EngineError,
        flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> Result<()> {
        // Abandoned before capture: no sink sealed an epoch for it, so
        // there is nothing to roll back; only the barriers are withdrawn.
        for s in self.sources.values() {
            s.control.withdraw();
        }
        tracing::warn!(
            checkpoint = attempt.id,
            kind = checkpoint_kind(flags),
            %reason,
            "checkpoint attempt abandoned"
        );
        self.shared.metrics.note_checkpoint_abandoned();
        self.accept_fence(assignment_fence)?;
        // Followers waiting on a prepared attempt are released at once.
        if let Some(authority) = self.authority().cloned() {
            if let Err(e) = authority.abandon(attempt.id, &reason.to_string()).await {
                tracing::warn!(checkpoint = attempt.id, error = %e, "recording the abandoned attempt failed");
            }
        }
        Ok(())
    }

    async fn cancel_source_barrier_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &EngineError,
    ) -> Result<()> {
        for s in self.sources.values() {
            s.control.withdraw();
        }
        self.release_exchange_barriers(attempt.id);
        tracing::debug!(checkpoint = attempt.id, %reason, "source barriers withdrawn");
        // A followed attempt given up before capture: the leader hears why.
        if self.following == Some(attempt.id) {
            self.following = None;
            if let Some(authority) = self.authority().cloned() {
                authority.decline(attempt.id, &reason.to_string()).await?;
            }
        }
        Ok(())
    }

    async fn settle_sink_epoch_for_shutdown(&mut self) -> Result<()> {
        let open: Vec<&str> = self
            .sinks
            .iter()
            .filter(|s| s.has_unsettled_epochs())
            .map(|s| s.name())
            .collect();
        if open.is_empty() {
            Ok(())
        } else {
            Err(EngineError::Checkpoint(format!(
                "sinks with unsettled epochs: {}",
                open.join(", ")
            )))
        }
    }

    fn record_checkpoint_failure(&mut self, checkpoint_id: u64, reason: &EngineError) {
        self.shared.metrics.note_checkpoint_failed();
        tracing::warn!(
            checkpoint = checkpoint_id,
            %reason,
            code = reason.code(),
            "checkpoint failed"
        );
    }

    fn record_checkpoint_continuation_fault(
        &mut self,
        attempt: CheckpointAttempt,
        reason: EngineError,
    ) {
        let e = reason.context(format!("after checkpoint {} became durable", attempt.id));
        self.failures.push(CycleError::AfterDurable(e));
    }

    fn record_checkpoint_admission_failure(&mut self, reason: &EngineError) {
        self.shared.metrics.note_checkpoint_failed();
        tracing::warn!(%reason, "could not reserve a checkpoint attempt");
    }
}
