//! Keyed operators across the nodes of a split: every row of a keyed
//! aggregation, join or process function crosses to the node that owns
//! its key's vnode, so each key is handled on exactly one node.
//!
//! # Architecture
//!
//! ```text
//!  node n1 (coordinator thread)                         node n2
//!  ┌───────────────────────────────────────────┐        ┌──────────────────────┐
//!  │ sources (its files) ─► filters/projections│        │                      │
//!  │        │ rows                             │        │                      │
//!  │        ▼                                  │        │                      │
//!  │  Exchange (operators): key ─► vnode ─► own│       │                      │
//!  │        │ own rows            │ n2's rows   │        │                      │
//!  │        │                     ▼ outbox      │        │                      │
//!  │        │      after the cycle: outbound.rs ┼─gRPC──►│ ShuffleServer inbox  │
//!  │        │      (task: rows, then the node's │ Arrow  │  (n2's edge)         │
//!  │        │       source watermark, then end) │  IPC   │                      │
//!  │        ▼                                  │        │                      │
//!  │  aggregation ◄── inbound rows ◄─ drain ◄───┼◄───────┤ n2's outbound        │
//!  │        │         (take_shuffle_input,     │        │                      │
//!  │        ▼          woken by the edge wake) │        │                      │
//!  │  sinks of n1                              │        │                      │
//!  └───────────────────────────────────────────┘        └──────────────────────┘
//! ```
//!
//! * `catalog::split_admission` certifies which queries can run this way
//!   (a windowed or updating `GROUP BY` over append-only, row-by-row
//!   input) and `operators::exchange::distribute` puts an exchange in
//!   front of each such aggregation; an edge is named after its stream, so
//!   every node names it alike.
//! * `operators::exchange` is the exchange operator: it computes each row's vnode from
//!   the canonical key encoding of the `GROUP BY` keys (the encoding process
//!   functions document), keeps the rows this node owns in the cycle and
//!   puts the others in the edge's outbox; it then adds the rows other
//!   nodes sent.
//! * `outbound` is one task per edge that sends the outbox over
//!   `sluice-shuffle` channels. The coordinator never waits on it: when its
//!   queue holds more than the edge's byte budget, the node takes no source
//!   input (output pressure), but it keeps taking rows other nodes send, so
//!   two nodes sending to each other never wait on each other.
//!
//! Time: a node sends the watermark of its own sources, never its
//! pipeline watermark (that includes the other nodes', and two nodes
//! waiting on each other's would never move). An edge's inbound watermark
//! is the minimum over the nodes sending to it; the pipeline watermark is
//! the minimum of the node's sources and its edges, so a window closes
//! only once every node has passed it. Rows drained from an edge are
//! folded in the same cycle as the watermark that followed them, and
//! operators add a cycle's rows before they advance, so no row another
//! node admitted is late here.
//!
//! Checkpoints are one cut through every node and channel: a checkpoint's
//! barrier goes on every edge behind the rows routed before it, an edge
//! holds back what follows the other nodes' barrier until this node has
//! captured (`coordinator/exchange_align.rs`), and only a commit authority
//! that decides every node's checkpoint at once may commit it
//! (`CommitAuthority::one_cut_across_nodes`, checked at start). A node
//! never recovers alone: its channels failing halts it, and a fault is not
//! restarted in its process; every node is started again from the last
//! checkpoint committed for all.

pub mod edge;
mod outbound;

use std::collections::HashMap;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use sluice_shuffle::{CreditBudget, OwnerTable, ShuffleServer};
use tokio::sync::Notify;

use crate::error::{EngineError, Result};
pub use edge::ExchangeEdge;

/// How long a node keeps trying to open its channels to the other nodes
/// (they may start later than it).
pub const CONNECT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);

/// One node's part in the shuffle between the nodes of a split: who it is,
/// who owns each vnode, where the other nodes listen, and its own server.
pub struct ShuffleSetup {
    node: String,
    pipeline: String,
    generation: u64,
    table: OwnerTable,
    endpoints: HashMap<String, String>,
    server: Arc<ShuffleServer>,
    budget: CreditBudget,
    /// How long channels to and from the other nodes may take to open.
    patience: std::time::Duration,
    /// One wake for every edge of this node: the coordinator's
    /// `shuffle_work_wake`.
    wake: Arc<Notify>,
    /// The edges made so far, in the order their streams were installed.
    edges: Mutex<Vec<Arc<ExchangeEdge>>>,
}

impl std::fmt::Debug for ShuffleSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShuffleSetup")
            .field("node", &self.node)
            .field("pipeline", &self.pipeline)
            .field("generation", &self.generation)
            .field("nodes", &self.table.nodes())
            .finish_non_exhaustive()
    }
}

impl ShuffleSetup {
    /// Node `node` of pipeline `pipeline` under assignment `generation`:
    /// `table` owns every vnode, `endpoints` has the `http://host:port` of
    /// every other node of the table, and `server` is this node's own
    /// (bound for the same pipeline, node and generation).
    pub fn new(
        node: &str,
        pipeline: &str,
        generation: u64,
        table: OwnerTable,
        endpoints: HashMap<String, String>,
        server: Arc<ShuffleServer>,
    ) -> Result<Self> {
        let refuse = |why: String| EngineError::Option(format!("shuffle of node '{node}': {why}"));
        if !table.nodes().iter().any(|n| n == node) {
            return Err(refuse(format!(
                "the node is not in the owner table (nodes: {})",
                table.nodes().join(", ")
            )));
        }
        if let Some(missing) = table
            .nodes()
            .iter()
            .find(|n| *n != node && !endpoints.contains_key(*n))
        {
            return Err(refuse(format!("no endpoint for node '{missing}'")));
        }
        if server.generation() != generation {
            return Err(refuse(format!(
                "its server admits generation {}, the setup routes by generation {generation}",
                server.generation()
            )));
        }
        Ok(Self {
            node: node.to_string(),
            pipeline: pipeline.to_string(),
            generation,
            table,
            endpoints,
            server,
            budget: CreditBudget::default(),
            patience: CONNECT_PATIENCE,
            wake: Arc::new(Notify::new()),
            edges: Mutex::new(Vec::new()),
        })
    }

    /// Each channel's credit (frames and bytes in flight; 64 frames and 16
    /// MiB by default); the outbound
    /// queue of an edge pauses source intake past the same byte count.
    pub fn with_budget(mut self, budget: CreditBudget) -> Self {
        self.budget = budget;
        self
    }

    /// How long this node waits for its channels to the other nodes to
    /// open, and for theirs to it ([`CONNECT_PATIENCE`] by default): a
    /// node that never opens its channel (it died before it started) halts
    /// the others after it, naming it.
    pub fn with_patience(mut self, patience: std::time::Duration) -> Self {
        self.patience = patience;
        self
    }

    /// How long channels may take to open.
    pub fn patience(&self) -> std::time::Duration {
        self.patience
    }

    /// This node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Who owns each vnode.
    pub fn table(&self) -> &OwnerTable {
        &self.table
    }

    /// The vnodes this node owns.
    pub fn owned_vnodes(&self) -> Vec<u32> {
        let local = self.local_index();
        (0..self.table.vnode_count())
            .filter(|v| self.table.owner_index(*v) == Some(local as u32))
            .collect()
    }

    fn local_index(&self) -> usize {
        self.table
            .nodes()
            .iter()
            .position(|n| *n == self.node)
            .unwrap_or(0)
    }

    /// The coordinator's wake: notified whenever rows, a watermark, an end
    /// or a failure arrive on any edge of this node.
    pub fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// Make the edge `id` carrying batches of `wire` (the exchange's input
    /// columns and the vnode column), in place of an edge of that id made
    /// before (a restart): its receiver is registered with this node's
    /// server at once, so other nodes can open their channels.
    pub(crate) fn edge(&self, id: &str, wire: SchemaRef) -> Result<Arc<ExchangeEdge>> {
        let mut edges = self.edges.lock();
        // A pipeline restarted in the process (after a fault) makes its
        // edges again: the old one's channels are cut first, so its
        // receiver leaves the server before the new one registers.
        if let Some(at) = edges.iter().position(|e| e.id() == id) {
            edges.remove(at).close();
        }
        let others: Vec<String> = self
            .table
            .nodes()
            .iter()
            .filter(|n| **n != self.node)
            .cloned()
            .collect();
        let receiver = if others.is_empty() {
            None
        } else {
            Some(self.server.receiver_waking(
                id,
                Arc::clone(&wire),
                others,
                self.budget,
                self.wake(),
            )?)
        };
        let edge = Arc::new(ExchangeEdge::new(
            id,
            self.local_index(),
            self.table.clone(),
            wire,
            receiver,
        ));
        edges.push(Arc::clone(&edge));
        Ok(edge)
    }

    /// Close and forget every edge (a pipeline restarting in the process
    /// makes them again): a new coordinator never sees an old channel's
    /// failure, and the old receivers leave the server first.
    pub(crate) fn reset(&self) {
        for edge in std::mem::take(&mut *self.edges.lock()) {
            edge.close();
        }
    }

    /// Close and forget the edges of stream `stream` (it was dropped).
    pub(crate) fn drop_stream(&self, stream: &str) {
        let of_stream =
            |e: &Arc<ExchangeEdge>| e.id().rsplit_once('#').is_some_and(|(s, _)| s == stream);
        let mut edges = self.edges.lock();
        for edge in edges.iter().filter(|e| of_stream(e)) {
            edge.close();
        }
        edges.retain(|e| !of_stream(e));
    }

    /// The input columns each edge made so far carries to the other
    /// nodes, by edge id (an aggregation's edge carries only the columns
    /// it reads; see `operators::exchange`).
    pub fn columns_sent(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        self.edges
            .lock()
            .iter()
            .map(|e| {
                let fields = e.wire().fields();
                let data = &fields[..fields.len().saturating_sub(1)];
                let names = data.iter().map(|f| f.name().clone()).collect();
                (e.id().to_string(), names)
            })
            .collect()
    }

    /// Every edge made so far.
    pub(crate) fn edges(&self) -> Vec<Arc<ExchangeEdge>> {
        self.edges.lock().clone()
    }

    /// What an edge's outbound task needs to open its channels.
    pub(crate) fn channels(&self) -> outbound::Channels {
        outbound::Channels {
            pipeline: self.pipeline.clone(),
            node: self.node.clone(),
            generation: self.generation,
            table: self.table.clone(),
            endpoints: self.endpoints.clone(),
            budget_bytes: self.budget.bytes,
            wake: self.wake(),
            patience: self.patience,
        }
    }
}

/// What one exchange between the nodes of a split carried on this node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExchangeCounters {
    /// Rows whose key's vnode this node owns (they stayed here).
    pub rows_kept: u64,
    /// Rows routed to the other nodes.
    pub rows_sent: u64,
    /// Rows the other nodes routed here.
    pub rows_received: u64,
    /// Encoded bytes of the frames sent to the other nodes (rows as Arrow
    /// IPC, watermarks, barriers, the end).
    pub bytes_sent: u64,
}

/// A [`ShuffleSetup`] as pipeline options hold it: compared by identity.
#[derive(Debug, Clone)]
pub struct ShuffleHandle(pub Arc<ShuffleSetup>);

impl PartialEq for ShuffleHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ShuffleHandle {}
