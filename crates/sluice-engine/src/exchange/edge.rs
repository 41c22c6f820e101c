//! One exchange edge on one node: the rows it received and has not yet
//! folded, the rows it routed to other nodes and has not yet handed to its
//! outbound task, and its inbound watermark.
//!
//! The exchange operator (`operators/exchange.rs`, on the coordinator
//! thread during a cycle) and the pipeline callback (between cycles) share it; its
//! outbound task owns the channels.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use sluice_shuffle::{BarrierId, OwnerTable, ShuffleEvent, ShuffleReceiver};

use super::outbound::{Channels, Outbound, Outgoing};
use super::ExchangeCounters;
use crate::budget::Relief;

/// The edge's running counts (see [`ExchangeCounters`]).
#[derive(Debug, Default)]
struct Counters {
    rows_kept: AtomicU64,
    rows_sent: AtomicU64,
    rows_received: AtomicU64,
    /// Shared with the outbound task, which sends the bytes.
    bytes_sent: Arc<AtomicU64>,
}
use crate::error::{EngineError, Result};

/// One exchange edge of this node.
#[derive(Debug)]
pub struct ExchangeEdge {
    /// What it carried (rows kept, sent, received; bytes sent).
    counters: Counters,
    id: String,
    local: usize,
    table: OwnerTable,
    wire: SchemaRef,
    state: Mutex<EdgeState>,
}

#[derive(Debug)]
struct EdgeState {
    /// `None` when this node is the only one (nothing is ever received),
    /// and once the edge is closed.
    receiver: Option<ShuffleReceiver>,
    /// Received batches (wire schema) not yet folded by the operator.
    inbound: Vec<RecordBatch>,
    /// The minimum watermark over the nodes sending to this edge.
    inbound_watermark: i64,
    /// Every other node ended its channel.
    inbound_finished: bool,
    /// Routed rows for other nodes (wire schema), until the cycle ends.
    outbox: Vec<RecordBatch>,
    outbound: Option<Outbound>,
    /// When the outbound task started (this node's first cycle).
    started: Option<std::time::Instant>,
    /// The inbound barrier held back until this node captured its
    /// checkpoint (nothing after it is drained meanwhile).
    barrier: Option<BarrierId>,
    /// The newest checkpoint this node is done with: barriers up to it
    /// are stale.
    resolved: u64,
    /// The last watermark queued for the other nodes.
    sent_watermark: i64,
    ended: bool,
}

impl ExchangeEdge {
    pub(super) fn new(
        id: &str,
        local: usize,
        table: OwnerTable,
        wire: SchemaRef,
        receiver: Option<ShuffleReceiver>,
    ) -> Self {
        let alone = receiver.is_none();
        Self {
            counters: Counters::default(),
            id: id.to_string(),
            local,
            table,
            wire,
            state: Mutex::new(EdgeState {
                receiver,
                inbound: Vec::new(),
                inbound_watermark: if alone { i64::MAX } else { i64::MIN },
                inbound_finished: alone,
                outbox: Vec::new(),
                outbound: None,
                started: None,
                barrier: None,
                resolved: 0,
                sent_watermark: i64::MIN,
                ended: alone,
            }),
        }
    }

    /// The edge's name, alike on every node.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// This node's index in the owner table.
    pub(crate) fn local(&self) -> usize {
        self.local
    }

    /// Who owns each vnode.
    pub(crate) fn table(&self) -> &OwnerTable {
        &self.table
    }

    /// The batches this edge carries: the exchange's input columns, then
    /// the `UInt32` vnode column.
    pub(crate) fn wire(&self) -> &SchemaRef {
        &self.wire
    }

    /// Take in everything the other nodes sent that is ready, in order:
    /// rows wait for the next cycle, watermarks and ends apply at once.
    /// `true` when anything arrived. A failed channel or outbound task
    /// fails the edge.
    pub(crate) fn drain(&self) -> Result<bool> {
        let mut state = self.state.lock();
        if let Some(out) = &state.outbound {
            if let Some(e) = out.failure() {
                return Err(EngineError::Shared(e).context(format!(
                    "sending rows of exchange '{}' to the other nodes",
                    self.id
                )));
            }
        }
        let receiving = |e| {
            EngineError::from(e).context(format!(
                "receiving rows of exchange '{}' from the other nodes",
                self.id
            ))
        };
        if state.barrier.is_some() {
            // Nothing after the barrier is taken, but a node gone is.
            if let Some(e) = state
                .receiver
                .as_ref()
                .and_then(ShuffleReceiver::take_failure)
            {
                return Err(receiving(e));
            }
        }
        let mut arrived = false;
        // A barrier held back stops the edge: what follows it belongs to
        // the next checkpoint, folded only after this node captured.
        while state.barrier.is_none() {
            let Some(event) = state.receiver.as_ref().and_then(ShuffleReceiver::try_next) else {
                break;
            };
            arrived = true;
            let event = event.map_err(receiving)?;
            match event {
                ShuffleEvent::Data(b) => {
                    self.counters
                        .rows_received
                        .fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                    state.inbound.push(b);
                }
                ShuffleEvent::Watermark(w) => {
                    state.inbound_watermark = state.inbound_watermark.max(w);
                }
                ShuffleEvent::EndOfStream => {
                    state.inbound_finished = true;
                    state.inbound_watermark = i64::MAX;
                }
                // A barrier of an attempt this node is past (it captured,
                // gave up or never took part in it) is stale.
                ShuffleEvent::Barrier(b) if b.checkpoint_id <= state.resolved => {
                    tracing::debug!(edge = %self.id, barrier = %b, "stale barrier passed over");
                }
                ShuffleEvent::Barrier(b) => state.barrier = Some(b),
            }
        }
        Ok(arrived)
    }

    /// Checkpoint `id` starts aligning here: send its barrier to the
    /// other nodes behind every row routed so far (unless this node's end
    /// went out already: an ended channel holds no barrier back), and pass
    /// over barriers of older attempts.
    pub(crate) fn start_barrier(&self, id: u64) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        state.resolved = state.resolved.max(id.saturating_sub(1));
        if state
            .barrier
            .is_some_and(|b| b.checkpoint_id <= state.resolved)
        {
            state.barrier = None;
        }
        if state.ended {
            return;
        }
        if let Some(out) = state.outbound.as_ref() {
            for b in std::mem::take(&mut state.outbox) {
                out.queue(Outgoing::Rows(b));
            }
            out.queue(Outgoing::Barrier(BarrierId {
                checkpoint_id: id,
                attempt: 0,
            }));
        }
    }

    /// Where this edge stands for checkpoint `id`: `Ok(true)` once every
    /// other node's rows before its barrier arrived (or every other node
    /// ended); an `Err` names a newer attempt the other nodes are on (this
    /// one can never align).
    pub(crate) fn barrier_aligned(&self, id: u64) -> Result<bool> {
        let state = self.state.lock();
        if state.receiver.is_none() || state.inbound_finished {
            return Ok(true);
        }
        match state.barrier {
            Some(b) if b.checkpoint_id == id => Ok(true),
            Some(b) => Err(EngineError::Checkpoint(format!(
                "exchange '{}': the other nodes sent the barrier of checkpoint {} while this \
                 node aligns checkpoint {id}",
                self.id, b.checkpoint_id
            ))),
            None => Ok(false),
        }
    }

    /// Checkpoint `id` is over here (captured or given up): its barrier
    /// is let go, and what followed it is drained from now on.
    pub(crate) fn release_barrier(&self, id: u64) {
        let mut state = self.state.lock();
        state.resolved = state.resolved.max(id);
        if state.barrier.is_some_and(|b| b.checkpoint_id <= id) {
            state.barrier = None;
        }
    }

    /// The received rows not yet folded, taken.
    pub(crate) fn take_inbound(&self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.state.lock().inbound)
    }

    /// Rows of this cycle that stay on this node.
    pub(crate) fn count_kept(&self, rows: usize) {
        self.counters
            .rows_kept
            .fetch_add(rows as u64, Ordering::Relaxed);
    }

    /// What the edge carried so far.
    pub(crate) fn counters(&self) -> ExchangeCounters {
        ExchangeCounters {
            rows_kept: self.counters.rows_kept.load(Ordering::Relaxed),
            rows_sent: self.counters.rows_sent.load(Ordering::Relaxed),
            rows_received: self.counters.rows_received.load(Ordering::Relaxed),
            bytes_sent: self.counters.bytes_sent.load(Ordering::Relaxed),
        }
    }

    /// Rows routed to other nodes this cycle.
    pub(crate) fn push_outbox(&self, batch: RecordBatch) {
        self.counters
            .rows_sent
            .fetch_add(batch.num_rows() as u64, Ordering::Relaxed);
        self.state.lock().outbox.push(batch);
    }

    /// How far the other nodes' rows on this edge are complete: `None` once
    /// all of them ended (the edge holds nothing back).
    pub(crate) fn inbound_watermark(&self) -> Option<i64> {
        let state = self.state.lock();
        (!state.inbound_finished).then_some(state.inbound_watermark)
    }

    /// Every other node ended its channel and every row was folded.
    pub(crate) fn inbound_finished(&self) -> bool {
        let state = self.state.lock();
        state.inbound_finished && state.inbound.is_empty()
    }

    /// After a cycle (or an idle tick): hand the outbox to the outbound
    /// task (started on first use), then this node's source watermark
    /// `local` if it moved, then the end once `finished` (every source of
    /// this node is done and its rows were routed).
    pub(crate) fn flush(
        &self,
        channels: impl FnOnce() -> Channels,
        relief: Arc<Relief>,
        local: i64,
        finished: bool,
    ) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        if state.ended {
            return;
        }
        state.started.get_or_insert_with(std::time::Instant::now);
        let outbound = state.outbound.get_or_insert_with(|| {
            Outbound::spawn(
                &self.id,
                Arc::clone(&self.wire),
                channels(),
                relief,
                Arc::clone(&self.counters.bytes_sent),
            )
        });
        for b in std::mem::take(&mut state.outbox) {
            outbound.queue(Outgoing::Rows(b));
        }
        if local > state.sent_watermark {
            outbound.queue(Outgoing::Watermark(local));
            state.sent_watermark = local;
        }
        if finished {
            outbound.queue(Outgoing::End);
            state.ended = true;
        }
    }

    /// This node's pipeline stopped (shut down, aborted or halted): cut
    /// every channel of the edge both ways, so the other nodes learn it
    /// is gone instead of waiting for its rows. An edge that ended and was
    /// settled lost nothing by it.
    pub(crate) fn close(&self) {
        let mut state = self.state.lock();
        state.receiver = None;
        if let Some(out) = state.outbound.as_mut() {
            out.abort();
        }
        state.ended = true;
    }

    /// Fail when a node has not opened its channel to this edge within
    /// `patience` of this node's start: it died before it started, and no
    /// channel of it can fail to say so.
    pub(crate) fn check_attached(&self, patience: std::time::Duration) -> Result<()> {
        let state = self.state.lock();
        let (Some(started), Some(receiver)) = (state.started, &state.receiver) else {
            return Ok(());
        };
        if state.inbound_finished || started.elapsed() < patience {
            return Ok(());
        }
        match receiver.unattached_senders().first() {
            Some(node) => Err(EngineError::from(sluice_shuffle::ShuffleError::PeerGone {
                edge: self.id.clone(),
                node: node.clone(),
                detail: format!(
                    "it did not open its channel within {} of this node's start",
                    humantime::format_duration(patience)
                ),
                source: None,
            })
            .context(format!("exchange '{}'", self.id))),
            None => Ok(()),
        }
    }

    /// Bytes routed to other nodes and not yet sent.
    pub(crate) fn queued_bytes(&self) -> u64 {
        let state = self.state.lock();
        let outbox: u64 = state
            .outbox
            .iter()
            .map(|b| b.get_array_memory_size() as u64)
            .sum();
        outbox + state.outbound.as_ref().map_or(0, Outbound::queued_bytes)
    }

    /// Whether the outbound queue passed the channel budget (source intake
    /// pauses until it drains).
    pub(crate) fn is_full(&self) -> bool {
        let state = self.state.lock();
        state.outbound.as_ref().is_some_and(Outbound::is_full)
    }

    /// Wait (up to `patience`) until the outbound task sent everything
    /// queued and, once the edge ended, every other node's channel received
    /// it all (queued there; not necessarily processed yet).
    pub(crate) async fn settle(&self, patience: std::time::Duration) -> Result<()> {
        let task = {
            let mut state = self.state.lock();
            if !state.ended {
                // Stopped before its sources were done: nothing to finish.
                return Ok(());
            }
            state.outbound.as_mut().and_then(Outbound::take_task)
        };
        let Some(mut task) = task else { return Ok(()) };
        match tokio::time::timeout(patience, &mut task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                return Err(EngineError::Internal(format!(
                    "the outbound task of exchange '{}' failed: {e}",
                    self.id
                )))
            }
            Err(_) => {
                // Stopped now: its channels close, and the other nodes see
                // this node gone instead of waiting on it.
                task.abort();
                return Err(EngineError::from(sluice_shuffle::ShuffleError::PeerGone {
                    edge: self.id.clone(),
                    node: self.table.nodes().join(", "),
                    detail: format!(
                        "the other nodes did not take this node's last rows within {}",
                        humantime::format_duration(patience)
                    ),
                    source: None,
                }));
            }
        }
        match self
            .state
            .lock()
            .outbound
            .as_ref()
            .and_then(Outbound::failure)
        {
            Some(e) => Err(EngineError::Shared(e)
                .context(format!("sending the last rows of exchange '{}'", self.id))),
            None => Ok(()),
        }
    }
}
