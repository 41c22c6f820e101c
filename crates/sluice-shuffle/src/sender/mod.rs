//! The sending side of one edge: route each batch by vnode owner, keep the
//! local share, and send the rest over one channel per remote node.
//!
//! [`ShuffleSender::send`] returns the rows this node owns instead of
//! sending them to itself: the caller feeds them to its local operator
//! directly. Barriers, watermarks and end of stream go to every remote
//! channel (the caller injects the local copy itself), in band, after every
//! frame sent before them.

mod channel;
mod credit;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use futures::future::try_join_all;

use crate::align::BarrierId;
use crate::config::OwnerTable;
use crate::error::{Result, ShuffleError};
use crate::ipc::IpcEncoder;
use crate::proto::{frame, Barrier, EndOfStream, Watermark};
use crate::route::{split_by_vnode, vnode_column};

pub use channel::{ChannelIdentity, ChannelSender};
pub use credit::CreditWindow;

/// The backpressure state of one sender's channels, shareable.
#[derive(Debug, Clone)]
pub struct SendPressure {
    windows: Vec<Arc<CreditWindow>>,
}

impl SendPressure {
    /// True when any channel is out of credit or a send waits for it.
    pub fn is_backpressured(&self) -> bool {
        self.windows.iter().any(|w| w.is_backpressured())
    }
}

/// A remote destination: its channel and its encoder.
#[derive(Debug)]
struct Remote {
    channel: ChannelSender,
    encoder: IpcEncoder,
}

impl Remote {
    async fn send_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        for ipc in self.encoder.encode(batch)? {
            self.channel.send(frame::Kind::Data(ipc)).await?;
        }
        Ok(())
    }
}

/// Open the channel to `node`, again while it is not listening or has not
/// made the edge, until `deadline`.
async fn open_patiently(
    identity: ChannelIdentity,
    node: &str,
    endpoint: &str,
    deadline: Instant,
) -> Result<ChannelSender> {
    let mut wait = Duration::from_millis(20);
    loop {
        match ChannelSender::open(identity.clone(), node, endpoint).await {
            Err(e) if not_there_yet(&e) && Instant::now() + wait < deadline => {
                tracing::debug!(edge = %identity.edge_id, node, error = %e, "shuffle channel not open yet; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(1));
            }
            opened => return opened,
        }
    }
}

/// A node that is not listening yet, or has not made the edge yet.
fn not_there_yet(e: &ShuffleError) -> bool {
    match e {
        ShuffleError::Connect { .. } | ShuffleError::UnknownChannel { .. } => true,
        ShuffleError::Refused { code, .. } => code == crate::error::CODE_UNKNOWN_CHANNEL,
        _ => false,
    }
}

/// The sending side of one edge on one node.
#[derive(Debug)]
pub struct ShuffleSender {
    edge: String,
    schema: SchemaRef,
    vnode_column: usize,
    table: OwnerTable,
    local: usize,
    /// Indexed like `table.nodes()`; `None` for this node.
    remotes: Vec<Option<Remote>>,
}

impl ShuffleSender {
    /// Open a channel to every other node of `table`. `endpoints` maps node
    /// ids to `http://host:port`; `vnode_column` is the `UInt32` column of
    /// each batch that holds the row's vnode.
    pub async fn connect(
        identity: ChannelIdentity,
        schema: SchemaRef,
        vnode_column: usize,
        table: OwnerTable,
        endpoints: &HashMap<String, String>,
    ) -> Result<Self> {
        Self::connect_patiently(
            identity,
            schema,
            vnode_column,
            table,
            endpoints,
            Duration::ZERO,
        )
        .await
    }

    /// [`Self::connect`], where each channel is opened again (with a
    /// backoff up to 1 s) for up to `patience` while its node is not
    /// listening yet or has not made the edge yet: nodes of one pipeline
    /// start in any order. A channel that opened is kept while the others
    /// retry, so no receiver sees a channel come and go.
    pub async fn connect_patiently(
        identity: ChannelIdentity,
        schema: SchemaRef,
        vnode_column: usize,
        table: OwnerTable,
        endpoints: &HashMap<String, String>,
        patience: Duration,
    ) -> Result<Self> {
        let deadline = Instant::now() + patience;
        let local = table
            .nodes()
            .iter()
            .position(|n| *n == identity.sender_node)
            .ok_or_else(|| ShuffleError::InvalidConfig {
                detail: format!(
                    "the sending node '{}' is not in the owner table",
                    identity.sender_node
                ),
            })?;
        let mut opens = Vec::new();
        for (i, node) in table.nodes().iter().enumerate() {
            if i == local {
                continue;
            }
            let endpoint = endpoints
                .get(node)
                .ok_or_else(|| ShuffleError::InvalidConfig {
                    detail: format!("no shuffle endpoint for node '{node}'"),
                })?;
            let identity = identity.clone();
            opens.push(async move {
                open_patiently(identity, node, endpoint, deadline)
                    .await
                    .map(|c| (i, c))
            });
        }
        let opened = try_join_all(opens).await?;
        let mut remotes: Vec<Option<Remote>> = (0..table.nodes().len()).map(|_| None).collect();
        for (i, channel) in opened {
            remotes[i] = Some(Remote {
                channel,
                encoder: IpcEncoder::new(&identity.edge_id, schema.clone()),
            });
        }
        Ok(Self {
            edge: identity.edge_id,
            schema,
            vnode_column,
            table,
            local,
            remotes,
        })
    }

    /// Route `batch`: send every remote node its rows (waiting for credit)
    /// and return this node's rows, if any.
    pub async fn send(&mut self, batch: &RecordBatch) -> Result<Option<RecordBatch>> {
        if batch.schema().fields() != self.schema.fields() {
            return Err(ShuffleError::SchemaMismatch {
                edge: self.edge.clone(),
                expected: self.schema.to_string(),
                got: batch.schema().to_string(),
            });
        }
        let vnodes = vnode_column(&self.edge, batch, self.vnode_column)?;
        let mut parts = split_by_vnode(&self.edge, batch, vnodes, &self.table)?;
        let local = parts.get_mut(self.local).and_then(Option::take);
        let sends = self
            .remotes
            .iter_mut()
            .zip(parts)
            .filter_map(|(remote, part)| Some((remote.as_mut()?, part?)))
            .map(|(remote, part)| async move { remote.send_batch(&part).await });
        try_join_all(sends).await?;
        Ok(local)
    }

    async fn broadcast(&mut self, kind: frame::Kind) -> Result<()> {
        let sends = self
            .remotes
            .iter_mut()
            .flatten()
            .map(|remote| remote.channel.send(kind.clone()));
        try_join_all(sends).await?;
        Ok(())
    }

    /// Send barrier `barrier` on every remote channel, after everything sent
    /// before it.
    pub async fn send_barrier(&mut self, barrier: BarrierId) -> Result<()> {
        self.broadcast(frame::Kind::Barrier(Barrier {
            checkpoint_id: barrier.checkpoint_id,
            attempt: barrier.attempt,
        }))
        .await
    }

    /// Send this node's watermark on every remote channel.
    pub async fn send_watermark(&mut self, ms: i64) -> Result<()> {
        self.broadcast(frame::Kind::Watermark(Watermark { ms }))
            .await
    }

    /// End every remote channel and wait until each receiver has taken all
    /// of its frames.
    pub async fn finish(&mut self) -> Result<()> {
        self.broadcast(frame::Kind::EndOfStream(EndOfStream {}))
            .await?;
        let closes = self
            .remotes
            .iter_mut()
            .flatten()
            .map(|remote| remote.channel.closed());
        try_join_all(closes).await?;
        Ok(())
    }

    /// True when any remote channel is out of credit (or a send waits for
    /// it): the caller should stop producing input for this edge.
    pub fn is_backpressured(&self) -> bool {
        self.remotes
            .iter()
            .flatten()
            .any(|r| r.channel.credit().is_backpressured())
    }

    /// A handle that answers [`SendPressure::is_backpressured`] while a send
    /// is in progress elsewhere (the coordinator polls it between cycles).
    pub fn pressure(&self) -> SendPressure {
        SendPressure {
            windows: self
                .remotes
                .iter()
                .flatten()
                .map(|r| r.channel.credit_window())
                .collect(),
        }
    }

    /// Encoded bytes sent so far over every channel of this edge.
    pub fn sent_bytes(&self) -> u64 {
        self.remotes
            .iter()
            .flatten()
            .map(|r| r.channel.sent_bytes())
            .sum()
    }

    /// The credit window of the channel to `node`, if it is remote.
    pub fn credit(&self, node: &str) -> Option<&CreditWindow> {
        let i = self.table.nodes().iter().position(|n| n == node)?;
        self.remotes.get(i)?.as_ref().map(|r| r.channel.credit())
    }
}
