//! The receiving side: a node's [`ShuffleServer`] admits channels; each
//! edge's [`ShuffleReceiver`] hands its consumer one aligned stream.

mod channel;
mod edge;
mod registry;
mod server;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::align::ShuffleEvent;
use crate::error::Result;

use edge::EdgeInbox;
use registry::Registry;

pub use server::ShuffleServer;

/// The consumer's end of one edge: the merge of its channels, aligned on
/// barriers, with the minimum watermark.
///
/// A channel failure (protocol violation, stale generation, a sender gone)
/// is returned once, ahead of any event; the failed channel never ends, so
/// the edge does not reach end of stream (the pipeline must recover).
/// Dropping the receiver cuts every channel; their senders see
/// `SLC-SHF-005`.
#[derive(Debug)]
pub struct ShuffleReceiver {
    inbox: Arc<EdgeInbox>,
    registry: Arc<Registry>,
}

impl ShuffleReceiver {
    fn new(inbox: Arc<EdgeInbox>, registry: Arc<Registry>) -> Self {
        Self { inbox, registry }
    }

    /// The edge.
    pub fn edge(&self) -> &str {
        &self.inbox.edge
    }

    /// The next event or failure if one is ready now, without waiting.
    /// Popping returns the frame's credit to its sender.
    pub fn try_next(&self) -> Option<Result<ShuffleEvent>> {
        self.inbox.try_next()
    }

    /// A channel failure, if one is waiting, without taking any event: a
    /// consumer that holds back what follows a barrier still learns that a
    /// sender is gone.
    pub fn take_failure(&self) -> Option<crate::error::ShuffleError> {
        self.inbox.take_failure()
    }

    /// The next event or failure; `None` after end of stream.
    pub async fn next(&self) -> Option<Result<ShuffleEvent>> {
        let wake = self.inbox.wake();
        loop {
            if let Some(next) = self.inbox.try_next() {
                return Some(next);
            }
            if self.inbox.finished() {
                return None;
            }
            wake.notified().await;
        }
    }

    /// Notified whenever a frame or failure arrives for this edge: the
    /// coordinator's `shuffle_work_wake`. A notification that finds no
    /// waiter is kept, so a wake between polls is never lost.
    pub fn shuffle_work_wake(&self) -> Arc<Notify> {
        self.inbox.wake()
    }

    /// The sending nodes that have not opened their channel yet: a node
    /// that never does (it died before it started) is only noticed by
    /// the consumer's own patience, since no channel of it can fail.
    pub fn unattached_senders(&self) -> Vec<String> {
        self.inbox.unattached()
    }

    /// Frames and charged bytes queued (received, not yet consumed) over
    /// all channels. Bounded by the channel count times the budget.
    pub fn buffered(&self) -> (u64, u64) {
        self.inbox.buffered()
    }
}

impl Drop for ShuffleReceiver {
    fn drop(&mut self) {
        self.inbox.close();
        self.registry.remove(&self.inbox);
    }
}
