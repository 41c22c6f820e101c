//! Every started pipeline is supervised: a fault restarts it from its last
//! committed checkpoint while `restart_budget` lasts, whether the program
//! waits in [`Database::run_to_completion`] or started it with
//! [`Database::start`] and went on pushing, subscribing and checkpointing.
//!
//! ```text
//!  start() ──spawn (once)──▶ supervisor task (holds the database weakly)
//!                              loop: wait for the coordinator to end
//!                                    fault + budget → restart, loop again
//!                                    otherwise → record the end, stop
//!  run_to_completion() ─────▶ waits for the recorded end
//! ```
//!
//! The task holds only a weak reference between restarts, so dropping the
//! last [`Database`] still shuts the pipeline down (the coordinator's
//! status then ends the wait and the task finds nobody to supervise).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use sluice_engine::coordinator::wait_finished;
use sluice_engine::pipeline::{after_end, AfterEnd};
use tokio::sync::watch;

use super::{Database, Inner};
use crate::Result;

/// The supervisor of one database's pipeline.
pub(super) struct Supervision {
    /// Whether the supervisor was started.
    started: AtomicBool,
    /// Becomes true when the supervisor ended.
    ended: watch::Sender<bool>,
    /// How it ended, until the first waiter takes it.
    result: parking_lot::Mutex<Option<Result<()>>>,
}

impl Default for Supervision {
    fn default() -> Self {
        Self {
            started: AtomicBool::new(false),
            ended: watch::channel(false).0,
            result: parking_lot::Mutex::new(None),
        }
    }
}

impl Database {
    /// Start supervising the pipeline (once; later calls do nothing).
    pub(super) fn supervise(&self) {
        // Outside a tokio runtime nothing runs in the background: then
        // `run_to_completion` supervises in its caller instead.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(
                "no tokio runtime: the pipeline is supervised only in run_to_completion"
            );
            return;
        };
        if self.inner.supervision.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        // The end is recorded through the supervision alone, after
        // `supervise` dropped every strong reference it took: a waiter
        // that wakes and drops the last `Database` must find the state
        // directory's lock released, ready for the next open.
        let end = EndOnDrop(Arc::clone(&self.inner.supervision));
        runtime.spawn(async move {
            let result = supervise(&weak).await;
            drop(weak);
            *end.0.result.lock() = Some(result);
        });
    }

    /// Wait until the supervisor ended, if it was started, leaving how it
    /// ended to [`Self::supervised_end`]. After a stop (which ends the
    /// pipeline and any restart's backoff) this does not wait long.
    pub(super) async fn supervisor_ended(&self) {
        if self.inner.supervision.started.load(Ordering::Acquire) {
            let mut ended = self.inner.supervision.ended.subscribe();
            // The sender lives as long as `self`, and the task marks its
            // end even when dropped: this only returns once it ended.
            let _ = ended.wait_for(|e| *e).await;
        }
    }

    /// Wait until the supervisor ended: `Ok` when the pipeline finished or
    /// was shut down, else the error not recovered from (the first caller
    /// gets it as it was; later ones get what the pipeline's status says).
    pub(super) async fn supervised_end(&self) -> Result<()> {
        if !self.inner.supervision.started.load(Ordering::Acquire) {
            return supervise(&Arc::downgrade(&self.inner)).await;
        }
        self.supervisor_ended().await;
        let taken = self.inner.supervision.result.lock().take();
        match taken {
            Some(r) => r,
            None => match self.inner.pipeline.lock().await.status_receiver() {
                Some(rx) => wait_finished(rx).await,
                None => Ok(()),
            },
        }
    }
}

/// Marks the supervisor ended when its task ends, also when the task is
/// dropped unfinished (its runtime shut down): a later stop, from another
/// runtime, must not wait for a supervisor that will never run again.
struct EndOnDrop(Arc<Supervision>);

impl Drop for EndOnDrop {
    fn drop(&mut self) {
        self.0.ended.send_replace(true);
    }
}

/// The supervisor's loop; see the module docs.
async fn supervise(weak: &Weak<Inner>) -> Result<()> {
    loop {
        let Some(inner) = weak.upgrade() else {
            return Ok(());
        };
        let status = inner.pipeline.lock().await.status_receiver();
        drop(inner);
        let Some(status) = status else {
            return Ok(());
        };
        let ended = wait_finished(status).await;
        let Some(inner) = weak.upgrade() else {
            return ended;
        };
        let db = &Database { inner };
        let store = |o| async move { db.leased_checkpoint_store(&o).await };
        match after_end(&db.inner.pipeline, ended, store).await {
            AfterEnd::Restarted => continue,
            AfterEnd::Ended(r) => return r,
        }
    }
}
