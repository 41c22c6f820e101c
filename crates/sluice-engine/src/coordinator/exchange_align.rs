//! Barrier alignment across the exchanges of a split: the second half of
//! a checkpoint's alignment on a node whose keyed operators take rows
//! from other nodes.
//!
//! ```text
//!  local sources ── barrier ──► (rows before it ran)      other nodes
//!        │                                                     │
//!        └─► forward_exchange_barriers: each edge sends        │
//!            [rows routed so far] [barrier] to every node ─────┼──►
//!                                                              │
//!  drain inbound rows (cycles run on them) ◄── rows ◄──────────┤
//!  until every edge delivered the barrier  ◄── barrier ◄───────┘
//!  (an edge stops draining at it: what follows is the next
//!   checkpoint's, taken in once this node captured)
//!        │
//!        ▼
//!  capture: local positions + state holding every node's rows before
//!  the barrier, nothing after it
//! ```
//!
//! A node forwards its barrier before it waits for the others', so no two
//! nodes wait on each other; its own sources stay held meanwhile (their
//! input after the barrier waits in the source channel).

use std::time::Instant;

use super::{BatchMap, CheckpointAttempt, PipelineCallback, StreamingCoordinator};
use crate::error::EngineError;

impl<C: PipelineCallback> StreamingCoordinator<C> {
    /// Forward `attempt`'s barrier on every exchange and take in the other
    /// nodes' rows up to theirs, by `deadline`. `Err`: why the attempt
    /// cannot align (the caller gives it up).
    pub(super) async fn align_exchanges(
        &mut self,
        attempt: CheckpointAttempt,
        deadline: Instant,
    ) -> Result<(), EngineError> {
        let Some(wake) = self.callback.shuffle_work_wake() else {
            return Ok(());
        };
        self.callback.forward_exchange_barriers(attempt);
        loop {
            match self.callback.take_shuffle_input() {
                Ok(true) => {
                    self.run_cycle(BatchMap::default(), 0, 0).await;
                    if self.stopped_intake {
                        return Err(EngineError::Checkpoint(
                            "the pipeline stopped during alignment".into(),
                        ));
                    }
                }
                Ok(false) => {}
                Err(e) => return Err(self.settle(e)),
            }
            let waiting = self.callback.exchanges_awaiting_barrier(attempt)?;
            if waiting.is_empty() {
                return Ok(());
            }
            if self.abort.is_raised() {
                return Err(EngineError::Checkpoint(format!(
                    "the pipeline is aborted (its output discarded) while waiting for the other \
                     nodes' barrier on exchange {}",
                    waiting.join(", ")
                )));
            }
            if Instant::now() >= deadline {
                return Err(EngineError::Checkpoint(format!(
                    "alignment timed out waiting for the other nodes' barrier on exchange {}",
                    waiting.join(", ")
                )));
            }
            // A wake that came while draining is kept (`notify_one`).
            let abort = self.abort.clone();
            tokio::select! {
                _ = tokio::time::timeout_at(deadline.into(), wake.notified()) => {}
                () = abort.raised() => {}
            }
        }
    }
}
