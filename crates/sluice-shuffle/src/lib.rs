//! The data shuffle between hosts: rows of a keyed operator travel to the
//! node that owns their vnode, as Arrow IPC frames over gRPC, bounded by
//! credit, with checkpoint barriers and watermarks in band.
//!
//! # Architecture
//!
//! ```text
//!  node A                                               node B
//!  ┌──────────────────────────────┐                     ┌──────────────────────────────────┐
//!  │ ShuffleSender (edge e)       │  Exchange (gRPC)    │ ShuffleServer                    │
//!  │  route: vnode column ──take──┼─ Frame ───────────▶ │  channel task: handshake, fence, │
//!  │   │ local rows ─▶ caller     │  Handshake, Data    │  credit check, IPC decode        │
//!  │   │ remote rows ─▶ channel ──┤  (FlightData IPC),  │        │ push                    │
//!  │  CreditWindow ◀──────────────┼─ Barrier, Watermark,│        ▼                         │
//!  │   (frames + bytes)           │  EndOfStream        │  EdgeInbox: Aligner over N       │
//!  │                              │ ◀─ Accepted/Credit/ │   channel queues ── pop ──▶      │
//!  └──────────────────────────────┘    Refused ──────── │  ShuffleReceiver (consumer)      │
//!                                                       │   shuffle_work_wake: Notify      │
//!                                                       └──────────────────────────────────┘
//! ```
//!
//! * [`proto`] (`proto/shuffle.proto`): one bidirectional stream per
//!   sender → receiver channel of an edge. Frames go one way, credit the
//!   other. A channel opens with a [`proto::Handshake`] naming pipeline,
//!   sender node, edge and assignment generation; a receiver refuses a
//!   generation other than its current one (`SLC-SHF-002`) and cuts open
//!   channels when its generation moves.
//! * [`route`]: a batch is split per owner by its `UInt32` vnode column with
//!   the `take` kernel; the local share goes back to the caller.
//! * [`ipc`]: batches as Arrow IPC messages in Arrow Flight `FlightData`,
//!   schema once per channel, dictionaries as needed.
//! * [`config`]: the credit budget (frames AND bytes) and the owner table.
//! * [`sender`]: [`ShuffleSender`] per edge, a [`sender::ChannelSender`] per
//!   remote node, each with a [`sender::CreditWindow`]. A frame is produced
//!   only with credit, so nothing queues unboundedly; the only slack is one
//!   frame in the request channel and gRPC's own window.
//! * [`receiver`]: [`ShuffleServer`] per node, [`ShuffleReceiver`] per
//!   edge. Each channel's queue holds at most its budget (the task refuses
//!   a frame beyond the credit it granted); consuming a frame grants its
//!   credit back, so a consumer that stops draining stops every sender.
//! * [`align`]: the pure merge of N channels: barrier alignment exactly as
//!   for local inputs, minimum watermark, end of stream when all ended.
//! * [`error`]: [`ShuffleError`], codes `SLC-SHF-001`..`012`.
//!
//! Flow control: a frame costs one frame of credit and its encoded size in
//! bytes (capped at the byte budget, so a frame larger than the budget
//! passes alone and the channel never deadlocks). A blocked channel (it
//! delivered a barrier the others have not) is not drained, so its sender
//! runs out of credit: alignment backpressures exactly the early channel.

pub mod align;
pub mod config;
pub mod error;
pub mod ipc;
pub mod receiver;
pub mod route;
pub mod sender;

/// The generated protocol types and gRPC stubs.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("sluice.shuffle.v1");
}

pub use align::{Aligner, BarrierId, ChannelItem, ShuffleEvent};
pub use config::{CreditBudget, OwnerTable, MAX_FRAME_BYTES};
pub use error::{Result, ShuffleError, Violation};
pub use receiver::{ShuffleReceiver, ShuffleServer};
pub use sender::{ChannelIdentity, SendPressure, ShuffleSender};
