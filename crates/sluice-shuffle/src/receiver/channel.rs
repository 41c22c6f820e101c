//! The receiving task of one channel: checks the handshake, enforces the
//! credit the receiver granted, decodes frames into the edge's inbox, and
//! streams credit back as the consumer drains.
//!
//! Any failure cuts the channel: the sender gets a `Refused` with the
//! error's code, the consumer gets the error itself.

use std::sync::Arc;

use prost::Message;
use tokio::sync::{mpsc, watch, Notify};
use tonic::{Status, Streaming};
use tracing::debug;

use crate::align::{BarrierId, ChannelItem};
use crate::error::{ShuffleError, Violation, CODE_PEER_GONE};
use crate::ipc::IpcDecoder;
use crate::proto::{
    frame, receiver_message, Accepted, Credit, Frame, Handshake, ReceiverMessage, Refused,
};

use super::edge::EdgeInbox;
use super::registry::Registry;

type Out = mpsc::Sender<Result<ReceiverMessage, Status>>;

async fn send(out: &Out, kind: receiver_message::Kind) -> bool {
    out.send(Ok(ReceiverMessage { kind: Some(kind) }))
        .await
        .is_ok()
}

async fn refuse(out: &Out, error: &ShuffleError, current_generation: u64) {
    debug!(code = error.code(), %error, "shuffle channel refused");
    let refused = Refused {
        code: error.code().to_string(),
        message: error.to_string(),
        current_generation,
    };
    send(out, receiver_message::Kind::Refused(refused)).await;
}

/// Serve one inbound channel until it ends, fails or is cut.
pub(crate) async fn run_channel(
    registry: Arc<Registry>,
    mut inbound: Streaming<Frame>,
    out: Out,
    mut shutdown: watch::Receiver<bool>,
) {
    let handshake = match inbound.message().await {
        Ok(Some(Frame {
            kind: Some(frame::Kind::Handshake(handshake)),
        })) => handshake,
        Ok(Some(_)) => {
            let error = ShuffleError::Protocol {
                edge: String::new(),
                sender: String::new(),
                violation: Violation::FrameBeforeHandshake,
            };
            refuse(&out, &error, registry.generation()).await;
            return;
        }
        // The sender left before saying who it is: nothing to report to.
        Ok(None) | Err(_) => return,
    };
    let (inbox, index, control) = match registry.admit(&handshake) {
        Ok(admitted) => admitted,
        Err(error) => {
            refuse(&out, &error, registry.generation()).await;
            return;
        }
    };
    let accepted = Accepted {
        frames: inbox.budget.frames,
        bytes: inbox.budget.bytes,
    };
    if !send(&out, receiver_message::Kind::Accepted(accepted)).await {
        return;
    }
    let mut task = ChannelTask {
        registry,
        decoder: IpcDecoder::new(
            &inbox.edge,
            &handshake.sender_node,
            Arc::clone(&inbox.schema),
        ),
        frames: inbox.budget.frames,
        bytes: inbox.budget.bytes,
        inbox,
        index,
        handshake,
        ended: false,
    };
    if let Err(error) = task
        .serve(&mut inbound, &out, &control, &mut shutdown)
        .await
    {
        refuse(&out, &error, task.registry.generation()).await;
        task.inbox.fail(task.index, error);
    }
}

struct ChannelTask {
    registry: Arc<Registry>,
    inbox: Arc<EdgeInbox>,
    index: usize,
    handshake: Handshake,
    decoder: IpcDecoder,
    /// Credit the sender still holds.
    frames: u64,
    bytes: u64,
    ended: bool,
}

/// How a channel stopped without an error of its own.
enum Stop {
    /// Cut by the receiver (consumer gone, shutdown, a pop-time violation):
    /// the refusal is already decided.
    Cut(Refused),
    /// The sender ended and closed its stream.
    Done,
}

impl ChannelTask {
    fn edge(&self) -> &str {
        &self.inbox.edge
    }

    fn sender(&self) -> &str {
        &self.handshake.sender_node
    }

    fn violation(&self, violation: Violation) -> ShuffleError {
        ShuffleError::Protocol {
            edge: self.edge().to_string(),
            sender: self.sender().to_string(),
            violation,
        }
    }

    fn check_generation(&self) -> Result<(), ShuffleError> {
        let current = self.registry.generation();
        if current != self.handshake.generation {
            return Err(ShuffleError::StaleGeneration {
                edge: self.edge().to_string(),
                sender: self.sender().to_string(),
                sent: self.handshake.generation,
                current,
            });
        }
        Ok(())
    }

    async fn serve(
        &mut self,
        inbound: &mut Streaming<Frame>,
        out: &Out,
        control: &Notify,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Result<(), ShuffleError> {
        let stop = loop {
            tokio::select! {
                biased;
                changed = shutdown.changed() => {
                    if changed.is_err() || *shutdown.borrow() {
                        break Stop::Cut(Refused {
                            code: CODE_PEER_GONE.to_string(),
                            message: "the receiving node shut down".to_string(),
                            current_generation: self.registry.generation(),
                        });
                    }
                }
                () = control.notified() => {
                    self.check_generation()?;
                    let update = self.inbox.control(self.index);
                    if let Some(refused) = update.cut {
                        break Stop::Cut(refused);
                    }
                    if update.frames > 0 || update.bytes > 0 {
                        self.frames += update.frames;
                        self.bytes += update.bytes;
                        let credit = Credit { frames: update.frames, bytes: update.bytes };
                        if !send(out, receiver_message::Kind::Credit(credit)).await {
                            break Stop::Done;
                        }
                    }
                }
                message = inbound.message() => match message {
                    Ok(Some(frame)) => self.on_frame(frame)?,
                    Ok(None) if self.ended => break Stop::Done,
                    Ok(None) => {
                        return Err(ShuffleError::PeerGone {
                            edge: self.edge().to_string(),
                            node: self.sender().to_string(),
                            detail: "the sender closed its stream without end of stream".to_string(),
                            source: None,
                        })
                    }
                    Err(status) => {
                        return Err(ShuffleError::PeerGone {
                            edge: self.edge().to_string(),
                            node: self.sender().to_string(),
                            detail: "the sender's stream failed".to_string(),
                            source: Some(status),
                        })
                    }
                },
            }
        };
        if let Stop::Cut(refused) = stop {
            debug!(edge = %self.edge(), sender = %self.sender(), code = %refused.code, "shuffle channel cut");
            send(out, receiver_message::Kind::Refused(refused)).await;
        }
        Ok(())
    }

    fn on_frame(&mut self, frame: Frame) -> Result<(), ShuffleError> {
        self.check_generation()?;
        if self.ended {
            return Err(self.violation(Violation::FrameAfterEndOfStream));
        }
        let size = frame.encoded_len() as u64;
        let charge = self.inbox.budget.charge(size);
        if self.frames == 0 {
            return Err(self.violation(Violation::CreditExceeded {
                what: "frames",
                needed: 1,
                available: 0,
            }));
        }
        if self.bytes < charge {
            return Err(self.violation(Violation::CreditExceeded {
                what: "bytes",
                needed: charge,
                available: self.bytes,
            }));
        }
        self.frames -= 1;
        self.bytes -= charge;
        let item = match frame.kind {
            None => return Err(self.violation(Violation::EmptyFrame)),
            Some(frame::Kind::Handshake(_)) => {
                return Err(self.violation(Violation::DuplicateHandshake))
            }
            Some(frame::Kind::Data(ipc)) => match self.decoder.decode(ipc)? {
                Some(batch) => ChannelItem::Data(batch),
                None => {
                    self.inbox.release_now(self.index, 1, charge);
                    return Ok(());
                }
            },
            Some(frame::Kind::Barrier(b)) => ChannelItem::Barrier(BarrierId {
                checkpoint_id: b.checkpoint_id,
                attempt: b.attempt,
            }),
            Some(frame::Kind::Watermark(w)) => ChannelItem::Watermark(w.ms),
            Some(frame::Kind::EndOfStream(_)) => {
                self.ended = true;
                ChannelItem::EndOfStream
            }
        };
        self.inbox
            .push(self.index, item, charge)
            .map_err(|violation| self.violation(violation))
    }
}
