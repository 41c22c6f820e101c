//! The sender's view of one channel's credit: what it may still send, and
//! the channel's fate (failed or closed) as its reader task learns it.
//!
//! The reader task adds grants and records failures; the sending half takes
//! credit before every frame and parks on [`CreditWindow::acquire`] when
//! there is none. Nothing is queued here: a frame without credit is simply
//! not produced yet.

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::CreditBudget;
use crate::error::{Result, ShuffleError};

#[derive(Debug)]
struct State {
    frames: u64,
    bytes: u64,
    waiting: bool,
    failure: Option<ShuffleError>,
    /// The receiver ended the stream normally (after our end of stream).
    closed: bool,
}

/// One channel's credit.
#[derive(Debug)]
pub struct CreditWindow {
    edge: String,
    node: String,
    budget: CreditBudget,
    state: Mutex<State>,
    changed: Notify,
}

impl CreditWindow {
    /// A window of the channel to `node` on `edge`, holding the
    /// receiver's initial grant.
    pub fn new(edge: &str, node: &str, budget: CreditBudget) -> Self {
        Self {
            edge: edge.to_string(),
            node: node.to_string(),
            budget,
            state: Mutex::new(State {
                frames: budget.frames,
                bytes: budget.bytes,
                waiting: false,
                failure: None,
                closed: false,
            }),
            changed: Notify::new(),
        }
    }

    /// The budget the receiver granted.
    pub fn budget(&self) -> CreditBudget {
        self.budget
    }

    /// Wait for credit for one frame of `size` encoded bytes and take it.
    pub async fn acquire(&self, size: u64) -> Result<()> {
        let charge = self.budget.charge(size);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.state.lock();
                if let Some(failure) = state.failure.take() {
                    // The failure is reported once; later sends see the
                    // channel as gone.
                    state.closed = true;
                    return Err(failure);
                }
                if state.closed {
                    return Err(self.closed_error());
                }
                if state.frames >= 1 && state.bytes >= charge {
                    state.frames -= 1;
                    state.bytes -= charge;
                    state.waiting = false;
                    return Ok(());
                }
                state.waiting = true;
            }
            notified.await;
        }
    }

    fn closed_error(&self) -> ShuffleError {
        ShuffleError::PeerGone {
            edge: self.edge.clone(),
            node: self.node.clone(),
            detail: "the channel is closed".to_string(),
            source: None,
        }
    }

    /// The receiver granted more.
    pub fn grant(&self, frames: u64, bytes: u64) {
        let mut state = self.state.lock();
        state.frames = state.frames.saturating_add(frames);
        state.bytes = state.bytes.saturating_add(bytes);
        drop(state);
        self.changed.notify_waiters();
    }

    /// The channel failed; the next send reports `failure`.
    pub fn fail(&self, failure: ShuffleError) {
        let mut state = self.state.lock();
        if state.failure.is_none() && !state.closed {
            state.failure = Some(failure);
        }
        drop(state);
        self.changed.notify_waiters();
    }

    /// The receiver closed the stream normally.
    pub fn close(&self) {
        self.state.lock().closed = true;
        self.changed.notify_waiters();
    }

    /// Whether the stream is closed or failed.
    pub fn is_done(&self) -> bool {
        let state = self.state.lock();
        state.closed || state.failure.is_some()
    }

    /// Wait until the stream is closed or failed.
    pub async fn wait_done(&self) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.is_done() {
                return;
            }
            notified.await;
        }
    }

    /// Take the failure, if the channel failed.
    pub fn take_failure(&self) -> Option<ShuffleError> {
        self.state.lock().failure.take()
    }

    /// True when a send is parked for credit or no credit is left.
    pub fn is_backpressured(&self) -> bool {
        let state = self.state.lock();
        state.waiting || state.frames == 0 || state.bytes == 0
    }

    /// Frames and bytes of credit left.
    pub fn available(&self) -> (u64, u64) {
        let state = self.state.lock();
        (state.frames, state.bytes)
    }
}
