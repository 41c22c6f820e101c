//! One sender → receiver channel: a bidirectional gRPC stream whose
//! request half carries frames and whose response half carries credit.
//!
//! The request half is fed through a one-slot channel, so at most one frame
//! waits outside the credit window (inside gRPC's own bounded buffers). A
//! reader task turns the response half into [`CreditWindow`] updates.

use std::sync::Arc;

use prost::Message;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;
use tracing::debug;

use crate::config::{CreditBudget, MAX_FRAME_BYTES};
use crate::error::{Result, ShuffleError};
use crate::proto::{
    frame, receiver_message, shuffle_client::ShuffleClient, Frame, Handshake, ReceiverMessage,
};

use super::credit::CreditWindow;

/// The names a channel opens with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelIdentity {
    /// The cluster pipeline.
    pub pipeline_id: String,
    /// This (sending) node.
    pub sender_node: String,
    /// The edge.
    pub edge_id: String,
    /// The assignment generation the sender routes by.
    pub generation: u64,
}

/// The sending end of one channel.
#[derive(Debug)]
pub struct ChannelSender {
    identity: ChannelIdentity,
    node: String,
    frames: Option<mpsc::Sender<Frame>>,
    credit: Arc<CreditWindow>,
    reader: JoinHandle<()>,
    ended: bool,
    /// Encoded bytes of the frames sent so far.
    sent_bytes: u64,
}

impl ChannelSender {
    /// Open the channel to `node` at `endpoint` (an `http://host:port` URI)
    /// and wait for the receiver to accept it.
    pub async fn open(identity: ChannelIdentity, node: &str, endpoint: &str) -> Result<Self> {
        let connect_error =
            |source: Box<dyn std::error::Error + Send + Sync>| ShuffleError::Connect {
                node: node.to_string(),
                endpoint: endpoint.to_string(),
                source,
            };
        let mut client = ShuffleClient::connect(endpoint.to_string())
            .await
            .map_err(|e| connect_error(Box::new(e)))?
            // Frames are bounded by the frame limit and the credit budget,
            // not by gRPC's default 4 MiB message limit.
            .max_encoding_message_size(MAX_FRAME_BYTES);
        let (tx, rx) = mpsc::channel(1);
        let handshake = Frame {
            kind: Some(frame::Kind::Handshake(Handshake {
                pipeline_id: identity.pipeline_id.clone(),
                sender_node: identity.sender_node.clone(),
                edge_id: identity.edge_id.clone(),
                generation: identity.generation,
            })),
        };
        tx.send(handshake)
            .await
            .map_err(|_| ShuffleError::PeerGone {
                edge: identity.edge_id.clone(),
                node: node.to_string(),
                detail: "the request stream closed before the handshake".to_string(),
                source: None,
            })?;
        let mut responses = client
            .exchange(ReceiverStream::new(rx))
            .await
            .map_err(|status| connect_error(Box::new(status)))?
            .into_inner();
        let gone = |detail: &str, source: Option<tonic::Status>| ShuffleError::PeerGone {
            edge: identity.edge_id.clone(),
            node: node.to_string(),
            detail: detail.to_string(),
            source,
        };
        let budget = match responses.message().await {
            Ok(Some(ReceiverMessage {
                kind: Some(receiver_message::Kind::Accepted(accepted)),
            })) => CreditBudget::new(accepted.frames, accepted.bytes)?,
            Ok(Some(ReceiverMessage {
                kind: Some(receiver_message::Kind::Refused(refused)),
            })) => {
                return Err(ShuffleError::from_refusal(
                    node,
                    &identity.edge_id,
                    &identity.sender_node,
                    identity.generation,
                    &refused,
                ))
            }
            Ok(Some(_)) => {
                return Err(gone(
                    "the receiver answered the handshake with credit",
                    None,
                ))
            }
            Ok(None) => {
                return Err(gone(
                    "the receiver closed the channel at the handshake",
                    None,
                ))
            }
            Err(status) => return Err(gone("the handshake failed", Some(status))),
        };
        let credit = Arc::new(CreditWindow::new(&identity.edge_id, node, budget));
        let reader = tokio::spawn(read_credit(
            responses,
            Arc::clone(&credit),
            identity.clone(),
            node.to_string(),
        ));
        Ok(Self {
            identity,
            node: node.to_string(),
            frames: Some(tx),
            credit,
            reader,
            ended: false,
            sent_bytes: 0,
        })
    }

    /// Encoded bytes of the frames sent so far (what crossed the network,
    /// less gRPC's own framing).
    pub fn sent_bytes(&self) -> u64 {
        self.sent_bytes
    }

    /// The destination node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The channel's credit window.
    pub fn credit(&self) -> &CreditWindow {
        &self.credit
    }

    /// A shared handle on the channel's credit window.
    pub fn credit_window(&self) -> Arc<CreditWindow> {
        Arc::clone(&self.credit)
    }

    /// Send one frame once credit allows.
    pub async fn send(&mut self, kind: frame::Kind) -> Result<()> {
        let gone = |detail: &str| ShuffleError::PeerGone {
            edge: self.identity.edge_id.clone(),
            node: self.node.clone(),
            detail: detail.to_string(),
            source: None,
        };
        if self.ended {
            return Err(ShuffleError::Protocol {
                edge: self.identity.edge_id.clone(),
                sender: self.identity.sender_node.clone(),
                violation: crate::error::Violation::FrameAfterEndOfStream,
            });
        }
        let is_end = matches!(kind, frame::Kind::EndOfStream(_));
        let frame = Frame { kind: Some(kind) };
        let size = frame.encoded_len();
        if size > MAX_FRAME_BYTES {
            return Err(ShuffleError::FrameTooLarge {
                edge: self.identity.edge_id.clone(),
                node: self.node.clone(),
                size,
                limit: MAX_FRAME_BYTES,
            });
        }
        self.credit.acquire(size as u64).await?;
        let Some(frames) = &self.frames else {
            return Err(gone("the channel is closed"));
        };
        if frames.send(frame).await.is_err() {
            return Err(self
                .credit
                .take_failure()
                .unwrap_or_else(|| gone("the request stream closed")));
        }
        self.sent_bytes += size as u64;
        if is_end {
            self.ended = true;
            // Closing the request half tells the receiver nothing follows.
            self.frames = None;
        }
        Ok(())
    }

    /// After end of stream: wait until the receiver has taken every frame
    /// and closed the channel.
    pub async fn closed(&mut self) -> Result<()> {
        self.credit.wait_done().await;
        match self.credit.take_failure() {
            Some(failure) => Err(failure),
            None => Ok(()),
        }
    }
}

impl Drop for ChannelSender {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Turn the response stream into credit, failure or close.
async fn read_credit(
    mut responses: Streaming<ReceiverMessage>,
    credit: Arc<CreditWindow>,
    identity: ChannelIdentity,
    node: String,
) {
    let gone = |detail: &str, source: Option<tonic::Status>| ShuffleError::PeerGone {
        edge: identity.edge_id.clone(),
        node: node.clone(),
        detail: detail.to_string(),
        source,
    };
    loop {
        match responses.message().await {
            Ok(Some(ReceiverMessage {
                kind: Some(receiver_message::Kind::Credit(grant)),
            })) => credit.grant(grant.frames, grant.bytes),
            Ok(Some(ReceiverMessage {
                kind: Some(receiver_message::Kind::Refused(refused)),
            })) => {
                debug!(edge = %identity.edge_id, %node, code = %refused.code, "shuffle channel cut by the receiver");
                credit.fail(ShuffleError::from_refusal(
                    &node,
                    &identity.edge_id,
                    &identity.sender_node,
                    identity.generation,
                    &refused,
                ));
                return;
            }
            Ok(Some(_)) => {
                credit.fail(gone("the receiver sent a second acceptance", None));
                return;
            }
            Ok(None) => {
                credit.close();
                return;
            }
            Err(status) => {
                credit.fail(gone("the response stream failed", Some(status)));
                return;
            }
        }
    }
}
