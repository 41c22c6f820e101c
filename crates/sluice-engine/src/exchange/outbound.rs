//! The outbound task of one edge: it opens a channel to every other node
//! (retrying while they start), then sends what the coordinator queued, in
//! order: rows, this node's watermark, the end.
//!
//! The coordinator never waits for it. Its queue is unbounded, but the
//! coordinator takes no source input while the queue holds more than one
//! channel budget of bytes ([`Outbound::is_full`]), so the queue grows at
//! most by what one cycle routes; rows other nodes send are still taken
//! meanwhile, which is what lets two nodes that send to each other both
//! drain.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use sluice_shuffle::{ChannelIdentity, OwnerTable, ShuffleError, ShuffleSender};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::budget::Relief;
use crate::error::EngineError;

/// Who this node is to the other nodes, and where they listen.
#[derive(Debug, Clone)]
pub(crate) struct Channels {
    pub pipeline: String,
    pub node: String,
    pub generation: u64,
    pub table: OwnerTable,
    pub endpoints: HashMap<String, String>,
    /// Queued bytes past which source intake pauses.
    pub budget_bytes: u64,
    /// The coordinator's shuffle wake: a failure must be seen even by an
    /// idle coordinator.
    pub wake: Arc<Notify>,
    /// How long the channels may take to open.
    pub patience: std::time::Duration,
}

/// What the coordinator queues for the other nodes.
#[derive(Debug)]
pub(super) enum Outgoing {
    /// Rows (wire schema), each to its vnode's owner.
    Rows(RecordBatch),
    /// This node's source watermark.
    Watermark(i64),
    /// A checkpoint's barrier, behind every row routed before it.
    Barrier(sluice_shuffle::BarrierId),
    /// This node's sources are done and every row was routed.
    End,
}

/// The handle of one edge's outbound task.
#[derive(Debug)]
pub(super) struct Outbound {
    tx: mpsc::UnboundedSender<(Outgoing, u64)>,
    queued: Arc<AtomicU64>,
    limit: u64,
    failure: Arc<Mutex<Option<Arc<EngineError>>>>,
    task: Option<JoinHandle<()>>,
}

impl Outbound {
    /// Start the task of edge `edge` on the current runtime.
    pub(super) fn spawn(
        edge: &str,
        wire: SchemaRef,
        channels: Channels,
        relief: Arc<Relief>,
        bytes_sent: Arc<AtomicU64>,
    ) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicU64::new(0));
        let failure = Arc::new(Mutex::new(None));
        let limit = channels.budget_bytes;
        let task = Task {
            edge: edge.to_string(),
            wire,
            channels,
            queued: Arc::clone(&queued),
            failure: Arc::clone(&failure),
            relief,
            bytes_sent,
        };
        Self {
            tx,
            queued,
            limit,
            failure,
            task: Some(tokio::spawn(task.run(rx))),
        }
    }

    /// Queue `item` behind everything queued before it.
    pub(super) fn queue(&self, item: Outgoing) {
        let bytes = match &item {
            Outgoing::Rows(b) => b.get_array_memory_size() as u64,
            _ => 0,
        };
        self.queued.fetch_add(bytes, Ordering::AcqRel);
        if self.tx.send((item, bytes)).is_err() {
            // The task ended on a failure, which the edge reports.
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// Bytes queued and not yet sent.
    pub(super) fn queued_bytes(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Whether the queue holds more than one channel budget.
    pub(super) fn is_full(&self) -> bool {
        self.queued_bytes() > self.limit
    }

    /// The failure that stopped the task, if any.
    pub(super) fn failure(&self) -> Option<Arc<EngineError>> {
        self.failure.lock().clone()
    }

    /// Stop the task now (its channels drop, and their receivers see the
    /// node gone).
    pub(super) fn abort(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }

    /// The task, to wait for its end (once).
    pub(super) fn take_task(&mut self) -> Option<JoinHandle<()>> {
        self.task.take()
    }
}

struct Task {
    edge: String,
    wire: SchemaRef,
    channels: Channels,
    queued: Arc<AtomicU64>,
    failure: Arc<Mutex<Option<Arc<EngineError>>>>,
    relief: Arc<Relief>,
    bytes_sent: Arc<AtomicU64>,
}

impl Task {
    async fn run(self, mut rx: mpsc::UnboundedReceiver<(Outgoing, u64)>) {
        let mut sender = match self.connect().await {
            Ok(s) => s,
            Err(e) => return self.fail(e),
        };
        while let Some((item, bytes)) = rx.recv().await {
            let end = matches!(item, Outgoing::End);
            let sent = match item {
                Outgoing::Rows(b) => sender.send(&b).await.map(|_| ()),
                Outgoing::Watermark(w) => sender.send_watermark(w).await,
                Outgoing::Barrier(b) => sender.send_barrier(b).await,
                Outgoing::End => sender.finish().await,
            };
            self.queued.fetch_sub(bytes, Ordering::AcqRel);
            self.bytes_sent
                .store(sender.sent_bytes(), Ordering::Relaxed);
            self.relief.notify();
            if let Err(e) = sent {
                return self.fail(e);
            }
            if end {
                return;
            }
        }
    }

    fn fail(&self, error: ShuffleError) {
        tracing::warn!(edge = %self.edge, code = error.code(), %error, "exchange channel failed");
        *self.failure.lock() = Some(Arc::new(EngineError::from(error)));
        self.channels.wake.notify_one();
        self.relief.notify();
    }

    /// Open a channel to every other node, each retried while its node
    /// is not listening yet or has not made this edge yet, up to
    /// the setup's patience.
    async fn connect(&self) -> Result<ShuffleSender, ShuffleError> {
        let c = &self.channels;
        let identity = ChannelIdentity {
            pipeline_id: c.pipeline.clone(),
            sender_node: c.node.clone(),
            edge_id: self.edge.clone(),
            generation: c.generation,
        };
        ShuffleSender::connect_patiently(
            identity,
            Arc::clone(&self.wire),
            self.wire.fields().len().saturating_sub(1),
            c.table.clone(),
            &c.endpoints,
            c.patience,
        )
        .await
    }
}
