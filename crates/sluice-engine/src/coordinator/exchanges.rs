//! The pipeline callback's side of the exchanges between the nodes of a
//! split (see [`crate::exchange`]): the inbound rows and watermarks taken
//! in between cycles, the outbox handed on after each cycle, the pipeline
//! watermark held by the other nodes, and output pressure from an outbound
//! queue that is full.

use std::sync::Arc;

use super::callback::CycleError;
use super::connector::ConnectorPipelineCallback;
use crate::error::EngineError;
use crate::exchange::{ExchangeEdge, ShuffleSetup};

impl ConnectorPipelineCallback {
    /// Route keyed operators' rows between the nodes of a split with
    /// `setup` (`None`: this node runs everything it reads itself).
    pub fn with_exchanges(mut self, setup: Option<Arc<ShuffleSetup>>) -> Self {
        self.exchanges = setup;
        self
    }

    fn edges(&self) -> Vec<Arc<ExchangeEdge>> {
        self.exchanges
            .as_ref()
            .map(|s| s.edges())
            .unwrap_or_default()
    }

    /// The pipeline watermark from this node's source watermark `local`:
    /// no later than any edge's inbound watermark (the other nodes' rows
    /// on it are complete only that far).
    pub(super) fn held_by_edges(&self, local: i64) -> i64 {
        self.edges()
            .iter()
            .filter_map(|e| e.inbound_watermark())
            .fold(local, i64::min)
    }

    /// Every source of this node is done (its rows were all taken in).
    fn local_sources_finished(&self) -> bool {
        !self.sources.is_empty() && self.sources.values().all(|s| s.watermark.is_finished())
    }

    /// Every edge's other nodes ended and their rows were folded.
    pub(super) fn exchanges_finished(&self) -> bool {
        self.edges().iter().all(|e| e.inbound_finished())
    }

    /// Whether an edge's outbound queue is full: source intake pauses.
    pub(super) fn exchanges_full(&self) -> bool {
        self.edges().iter().any(|e| e.is_full())
    }

    /// Bytes routed to other nodes and not yet sent.
    pub(super) fn exchange_queued_bytes(&self) -> u64 {
        self.edges().iter().map(|e| e.queued_bytes()).sum()
    }

    /// After a cycle or an idle tick: hand every edge's outbox to its
    /// outbound task, with this node's source watermark and, once every
    /// source is done, the end.
    pub(super) fn flush_exchanges(&self) {
        let Some(setup) = &self.exchanges else { return };
        if !self.started {
            return;
        }
        let finished = self.local_sources_finished();
        for edge in setup.edges() {
            self.shared.metrics.set_exchange(edge.id(), edge.counters());
            edge.flush(
                || setup.channels(),
                self.shared.subscriptions.relief(),
                self.local_watermark,
                finished,
            );
        }
    }

    /// On an idle tick: a node that never opened its channel to an edge
    /// within the patience halts this one (see
    /// [`ExchangeEdge::check_attached`]).
    pub(super) fn check_exchanges_attached(&mut self) {
        let Some(setup) = &self.exchanges else { return };
        let patience = setup.patience();
        for edge in setup.edges() {
            if let Err(e) = edge.check_attached(patience) {
                // Once: the check runs again before the halt is taken.
                if !self
                    .failures
                    .iter()
                    .any(|f| matches!(f, CycleError::Source(_)))
                {
                    self.failures.push(CycleError::Source(e));
                }
                return;
            }
        }
    }

    /// Take in what the other nodes sent; `true` when anything arrived
    /// (a cycle should fold it). A failed channel halts the pipeline, with
    /// checkpoints too: a node must never recover alone (it would resume
    /// from a checkpoint the others have moved past, or wait for nodes that
    /// finished); every node is started again and resumes from the last
    /// checkpoint committed for all of them.
    pub(super) fn drain_exchanges(&mut self) -> Result<bool, CycleError> {
        // Before `Start` the rows wait in their channels: folded now, a
        // recovered checkpoint would replace the state that holds them.
        if !self.started {
            return Ok(false);
        }
        let mut arrived = false;
        for edge in self.edges() {
            arrived |= edge.drain().map_err(CycleError::Source)?;
        }
        if arrived {
            self.recompute_watermark();
        }
        Ok(arrived)
    }

    /// At a clean shutdown: wait until the other nodes took every row of
    /// the edges that ended. Owns what it waits on, so the callback is not
    /// borrowed across the wait.
    pub(super) fn settle_exchanges(
        &self,
    ) -> impl std::future::Future<Output = Result<(), EngineError>> + Send + 'static {
        let edges = self.edges();
        let patience = self
            .exchanges
            .as_ref()
            .map_or(crate::exchange::CONNECT_PATIENCE, |s| s.patience());
        async move {
            for edge in edges {
                edge.settle(patience).await?;
            }
            Ok(())
        }
    }

    /// Every exchange's counts into the metrics (after each cycle, and
    /// once more when the last frames went out).
    pub(super) fn publish_exchange_counters(&self) {
        for edge in self.edges() {
            self.shared.metrics.set_exchange(edge.id(), edge.counters());
        }
    }

    /// The pipeline stopped: cut every exchange's channels (after a clean
    /// shutdown settled them, nothing is lost by it).
    pub(super) fn close_exchanges(&self) {
        for edge in self.edges() {
            edge.close();
        }
        // Out of the cut: whatever this node still holds, no checkpoint
        // of the leader's releases it now, so it asks for none.
        if let Some(authority) = self.authority() {
            authority.request_checkpoints(false);
        }
    }

    /// Checkpoint `id`'s local sources are aligned: every edge sends its
    /// barrier behind the rows routed so far.
    pub(super) fn forward_barriers(&mut self, id: u64) {
        self.flush_exchanges();
        for edge in self.edges() {
            edge.start_barrier(id);
        }
    }

    /// The edges still waiting for the other nodes' barrier of checkpoint
    /// `id` (none: aligned). An `Err`: the other nodes are on a newer one.
    pub(super) fn barriers_awaited(&self, id: u64) -> Result<Vec<String>, EngineError> {
        let mut waiting = Vec::new();
        for edge in self.edges() {
            if !edge.barrier_aligned(id)? {
                waiting.push(edge.id().to_string());
            }
        }
        Ok(waiting)
    }

    /// Checkpoint `id` is over on this node (captured or given up): the
    /// rows that followed its barriers are drained again.
    pub(super) fn release_exchange_barriers(&self, id: u64) {
        let Some(setup) = &self.exchanges else { return };
        for edge in setup.edges() {
            edge.release_barrier(id);
        }
        setup.wake().notify_one();
    }
}
