//! Followers asking the leader for checkpoints.
//!
//! A process function in a checkpointed cluster holds its input until the
//! checkpoint that cut it commits, and only the leader originates
//! checkpoints. A leader whose own sources are idle runs no cycle, so
//! without a word from the follower it would take no checkpoint and the
//! follower's input would wait for ever (or, at its
//! `process_held_input_bytes` budget, stop its sources for ever).
//!
//! So a follower that holds such input says so with a key attached to its
//! lease, and the leader watches the directory:
//!
//! ```text
//!  follower N                              etcd                         leader
//!   request_checkpoints(true) ─put [N's lease]─► checkpoint-requests/N
//!                                                      ───watch──► checkpoints_requested()
//!   request_checkpoints(false) ──delete────────► (gone)                = any key but its own
//!   dies / paused past its lease ──────────────► (gone with the lease)
//! ```
//!
//! The pipeline calls [`CheckpointRequests::set`] with its current state
//! as often as it likes; a background task writes only the changes, in
//! order, retrying a write etcd did not take. The leader sees a request
//! one watch event after the put and checks it at its next checkpoint
//! tick, so a request costs at most one extra checkpoint after the input
//! it asked for was released (the delete arrives after the commit that
//! released it). A new leader lists the directory when it starts to lead,
//! so requests made under its predecessor still count.

use std::sync::Arc;

use etcd_client::PutOptions;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::ClusterError;
use crate::session::{Session, ASK_AGAIN};
use crate::watch::{self as key_watch, Snapshot};

/// A follower's side: its request key kept equal to its latest state.
#[derive(Debug)]
pub(crate) struct CheckpointRequests {
    wanted: watch::Sender<bool>,
    writer: JoinHandle<()>,
}

impl CheckpointRequests {
    /// Start the writer of `session`'s request key (inside a tokio
    /// runtime). Nothing is requested until [`Self::set`] says so.
    pub(crate) fn start(session: Arc<Session>) -> Self {
        let (wanted, rx) = watch::channel(false);
        let writer = tokio::spawn(write_changes(session, rx));
        Self { wanted, writer }
    }

    /// This node holds input only a commit releases (`true`) or none.
    pub(crate) fn set(&self, holding: bool) {
        self.wanted
            .send_if_modified(|w| std::mem::replace(w, holding) != holding);
    }
}

impl Drop for CheckpointRequests {
    fn drop(&mut self) {
        // A key left behind lapses with the lease; until then it costs
        // the leader a checkpoint per interval, nothing worse.
        self.writer.abort();
    }
}

/// Keep the request key equal to the latest state, until the sender drops.
async fn write_changes(session: Arc<Session>, mut wanted: watch::Receiver<bool>) {
    // The key is known absent at start (a new session's lease holds nothing).
    let mut written = false;
    loop {
        let want = *wanted.borrow_and_update();
        if want != written {
            match write(&session, want).await {
                Ok(()) => written = want,
                Err(e) => {
                    tracing::debug!(node = %session.node(), want, error = %e, "checkpoint request not written; asking again");
                    tokio::time::sleep(ASK_AGAIN).await;
                    continue;
                }
            }
        }
        if wanted.changed().await.is_err() {
            return;
        }
    }
}

async fn write(session: &Session, want: bool) -> Result<(), ClusterError> {
    let key = session.keys().checkpoint_request(session.node());
    let mut client = session.client();
    let what = || format!("checkpoint request of node '{}'", session.node());
    if want {
        let options = PutOptions::new().with_lease(session.lease_id());
        client
            .put(key, Vec::new(), Some(options))
            .await
            .map_err(|e| ClusterError::etcd(what(), e))?;
    } else {
        client
            .delete(key, None)
            .await
            .map_err(|e| ClusterError::etcd(what(), e))?;
    }
    tracing::debug!(node = %session.node(), want, "checkpoint request written");
    Ok(())
}

/// The leader's side: the request directory, mirrored by a watch.
#[derive(Debug)]
pub(crate) struct RequestWatch {
    requests: watch::Receiver<Snapshot>,
    own_key: String,
}

impl RequestWatch {
    /// Watch the requests of `session`'s cluster (inside a tokio runtime).
    pub(crate) fn start(session: &Session) -> Self {
        let keys = session.keys();
        let requests = key_watch::spawn(session.client(), keys.checkpoint_requests(), true);
        Self {
            requests,
            own_key: keys.checkpoint_request(session.node()),
        }
    }

    /// Whether any other node asks for checkpoints.
    pub(crate) fn any(&self) -> bool {
        self.requests
            .borrow()
            .entries
            .keys()
            .any(|k| *k != self.own_key)
    }
}
