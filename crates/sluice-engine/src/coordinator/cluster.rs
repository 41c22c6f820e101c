//! The cluster side of `ConnectorPipelineCallback`: a cluster speaks
//! through the store's commit authority. On the leader it says whether
//! this node leads, under which assignment generation an attempt
//! captures, and publishes the attempt's Prepare. On a follower it wakes
//! the coordinator for the leader's announcements and turns each into a
//! [`CheckpointControlOutcome`]: a Prepare this node owns part of is
//! captured under the leader's id (its manifest commit is the ack, see
//! [`sluice_storage::CommitAuthority::record_commit`]); one given up
//! before capture is declined (`cancel_source_barrier_attempt`).

use std::sync::Arc;
use std::time::Instant;

use sluice_storage::Announcement;

use super::callback::{
    CheckpointAssignmentAdmission, CheckpointAssignmentFence, CheckpointAttempt,
    CheckpointControlOutcome, CheckpointControlWake, CheckpointLifecycle, ClusterCoordination,
};
use super::connector::ConnectorPipelineCallback;
use crate::error::{EngineError, Result};

/// The leader's reason, if it already aborted `attempt`, which this
/// follower aligned for (`following`). Unknown (the record could not be
/// read) counts as not aborted: the acknowledgement learns the decision.
/// Takes its inputs by value so the future stays `Send`.
pub(super) async fn followed_attempt_aborted(
    following: Option<u64>,
    authority: Option<Arc<dyn sluice_storage::CommitAuthority>>,
    attempt: CheckpointAttempt,
) -> Option<String> {
    if following != Some(attempt.id) {
        return None;
    }
    match authority?.attempt_aborted(attempt.id).await {
        Ok(reason) => reason,
        Err(e) => {
            tracing::debug!(checkpoint = attempt.id, error = %e, "could not read whether the leader aborted the checkpoint");
            None
        }
    }
}

impl ClusterCoordination for ConnectorPipelineCallback {
    fn is_leader(&self) -> bool {
        self.authority().is_none_or(|a| a.may_originate())
    }

    async fn checkpoint_assignment_for_admission(
        &mut self,
        deadline: Instant,
    ) -> CheckpointAssignmentAdmission {
        let Some(authority) = self.authority().cloned() else {
            return CheckpointAssignmentAdmission::Unfenced;
        };
        let admitted = tokio::time::timeout_at(deadline.into(), authority.admit()).await;
        match admitted {
            Ok(Ok(None)) => CheckpointAssignmentAdmission::Unfenced,
            Ok(Ok(Some(generation))) => {
                CheckpointAssignmentAdmission::Fenced(CheckpointAssignmentFence { generation })
            }
            Ok(Err(e)) => CheckpointAssignmentAdmission::Refused(Arc::new(e.into())),
            Err(_) => CheckpointAssignmentAdmission::Refused(Arc::new(EngineError::Checkpoint(
                "the commit authority did not admit the attempt by its alignment deadline".into(),
            ))),
        }
    }

    async fn publish_checkpoint_prepare(
        &mut self,
        attempt: CheckpointAttempt,
        attempt_started: Instant,
        deadline: Instant,
        _flags: u64,
        assignment_fence: Option<CheckpointAssignmentFence>,
    ) -> Result<()> {
        let Some(authority) = self.authority().cloned() else {
            return self.accept_fence(assignment_fence);
        };
        // Answers are due by the attempt's deadline, in wall-clock time;
        // publishing it takes no longer than the alignment timeout.
        let left = deadline.saturating_duration_since(Instant::now());
        let deadline_ms = std::time::SystemTime::now()
            .checked_add(left)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let generation = assignment_fence.map(|f| f.generation);
        let prepared = authority.prepare(attempt.id, generation, deadline_ms);
        let by = deadline.min(attempt_started + self.alignment_timeout());
        match tokio::time::timeout_at(by.into(), prepared).await {
            Ok(r) => r.map_err(EngineError::from),
            Err(_) => Err(EngineError::Checkpoint(
                "the commit authority did not publish the Prepare by the alignment deadline".into(),
            )),
        }
    }

    fn checkpoint_control_wake(&self) -> Option<CheckpointControlWake> {
        let notify = self.authority()?.announcements()?;
        Some(CheckpointControlWake::new(notify, CONTROL_FALLBACK))
    }

    async fn service_checkpoint_control(&mut self) -> CheckpointControlOutcome {
        let Some(authority) = self.authority().cloned() else {
            return CheckpointControlOutcome::Idle;
        };
        let announced = match authority.next_announcement().await {
            Ok(Some(a)) => a,
            Ok(None) => return CheckpointControlOutcome::Idle,
            Err(e) => return CheckpointControlOutcome::AdmissionFailed(Arc::new(e.into())),
        };
        match announced {
            Announcement::Prepared {
                id,
                generation,
                deadline_ms,
            } => {
                self.following = Some(id);
                CheckpointControlOutcome::Started {
                    attempt: CheckpointAttempt { id },
                    fence: Some(CheckpointAssignmentFence { generation }),
                    deadline: instant_of(deadline_ms),
                    // The Prepare does not say who asked the leader: a
                    // follower's part is taken as a periodic one.
                    flags: 0,
                }
            }
            Announcement::Aborted { id, reason } => {
                tracing::debug!(checkpoint = id, %reason, "the leader aborted a checkpoint before this node answered");
                CheckpointControlOutcome::Aborted {
                    attempt: CheckpointAttempt { id },
                }
            }
        }
    }

    fn resolve_authoritative_follower_abort(&mut self, attempt: CheckpointAttempt) -> Result<()> {
        // Nothing was captured: only the barrier requests are withdrawn.
        for s in self.sources.values() {
            s.control.withdraw();
        }
        if self.following == Some(attempt.id) {
            self.following = None;
        }
        Ok(())
    }
}

/// How often a follower asks for the leader's announcements when it was
/// not woken (a notification that came while it was busy is kept only
/// once): the longest a Prepare waits on a follower that missed its wake.
const CONTROL_FALLBACK: std::time::Duration = std::time::Duration::from_millis(250);

/// The `Instant` of a wall-clock deadline in Unix milliseconds (now, if
/// it has passed).
fn instant_of(deadline_ms: u64) -> Instant {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    Instant::now() + std::time::Duration::from_millis(deadline_ms.saturating_sub(now_ms))
}
