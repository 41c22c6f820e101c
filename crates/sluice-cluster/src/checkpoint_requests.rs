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
//! order, retrying a write etcd did not take (and writing the current
//! state again after any failed call, which may have been applied). The
//! pipeline withdraws its request when it stops. The leader sees a request
//! one watch event after the put and checks it at its next checkpoint
//! tick, so a request costs at most one extra checkpoint after the input
//! it asked for was released (the delete arrives after the commit that
//! released it). A new leader lists the directory when it starts to lead,
//! so requests made under its predecessor still count.

use std::sync::Arc;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
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
    /// runtime). Its first write sets the key to the current state (absent
    /// until [`Self::set`] says otherwise), whatever an earlier record of
    /// the same session left there.
    pub(crate) fn start(session: Arc<Session>) -> Self {
        let (wanted, rx) = watch::channel(false);
        let writer = tokio::spawn(write_changes(session, rx, token()));
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
        // A key left behind goes with the lease, or with the first write
        // of the session's next record; until then it costs the leader a
        // checkpoint per interval, nothing worse. The pipeline withdraws
        // its request when it stops, before the record goes.
        self.writer.abort();
    }
}

/// This record's token, the value of its puts: the wall clock in
/// nanoseconds, 20 digits, so a later record's token sorts after an
/// earlier one's and a late delete of the earlier record (see [`write`])
/// never removes the later one's request.
fn token() -> String {
    let ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{ns:020}")
}

/// Failed writes in a row from which each is logged as a warning (the
/// leader's checkpoints, and so this node's held input, depend on them).
const WARN_AFTER: u32 = 5;

/// Keep the request key equal to the latest state, until the sender drops
/// or the session's lease is lost (its keys are gone with it).
async fn write_changes(session: Arc<Session>, mut wanted: watch::Receiver<bool>, token: String) {
    let mut lost = session.lost();
    // What etcd holds, as far as this writer knows: nothing at first (an
    // earlier record may have left a key), and nothing after a failed
    // call (it may have been applied all the same).
    let mut written: Option<bool> = None;
    let mut failures = 0u32;
    loop {
        let want = *wanted.borrow_and_update();
        if written != Some(want) {
            match write(&session, want, &token).await {
                Ok(()) => {
                    written = Some(want);
                    failures = 0;
                }
                Err(e) => {
                    written = None;
                    failures += 1;
                    if failures >= WARN_AFTER {
                        tracing::warn!(node = %session.node(), want, failures, error = %e, "checkpoint request not written; asking again");
                    } else {
                        tracing::debug!(node = %session.node(), want, error = %e, "checkpoint request not written; asking again");
                    }
                    tokio::select! {
                        () = tokio::time::sleep(ASK_AGAIN) => continue,
                        _ = lost.wait_for(|l| *l) => return,
                    }
                }
            }
        }
        tokio::select! {
            changed = wanted.changed() => if changed.is_err() { return },
            _ = lost.wait_for(|l| *l) => return,
        }
    }
}

/// Put the request (attached to the lease, valued `token`), or delete it
/// unless a later record of this node put it (its token sorts after).
async fn write(session: &Session, want: bool, token: &str) -> Result<(), ClusterError> {
    let key = session.keys().checkpoint_request(session.node());
    let mut client = session.client();
    let what = || format!("checkpoint request of node '{}'", session.node());
    if want {
        let options = PutOptions::new().with_lease(session.lease_id());
        client
            .put(key, token, Some(options))
            .await
            .map_err(|e| ClusterError::etcd(what(), e))?;
    } else {
        let newer = Compare::value(key.clone(), CompareOp::Greater, token);
        let txn = Txn::new().when([newer]).or_else([TxnOp::delete(key, None)]);
        client
            .txn(txn)
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
