//! The fence between cancelling a checkpoint tail and its manifest write.
//!
//! # Architecture
//!
//! A checkpoint tail writes its state off the compute thread, then its
//! manifest, which makes the checkpoint durable. When recovery takes over
//! (a fault), the coordinator cancels the tail in flight from its own
//! thread. The two race, and exactly one of them must win:
//!
//! ```text
//!  tail (checkpoint worker)                 coordinator (compute thread)
//!  ────────────────────────                 ───────────────────────────
//!  writing blobs; is_cancelled()? ─┐        cancel():
//!  begin_manifest():               │          Writing    → Cancelled, true
//!    Writing   → Committing, true  ├─ lock ─  Committing → false (the tail
//!    Cancelled → false (stop)      │                        finishes and is
//!                                  ┘                        completed)
//! ```
//!
//! `cancel() == true` means the manifest is never written (so no sink epoch
//! of that checkpoint may commit, and its staged files can be discarded);
//! `begin_manifest() == true` means the cancel lost and the checkpoint will
//! be completed as usual. `tests/loom.rs` checks every interleaving.

use std::sync::PoisonError;

use crate::primitives::Mutex;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum State {
    #[default]
    Writing,
    Committing,
    Cancelled,
}

/// One tail's fence; shared by the tail and the coordinator (`Arc`).
#[derive(Debug, Default)]
pub struct ManifestFence(Mutex<State>);

impl ManifestFence {
    /// A fence before the manifest: neither side has moved.
    pub fn new() -> Self {
        Self::default()
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        // A panic while the lock is held cannot leave a half-made state
        // (each transition is one assignment), so poisoning is ignored.
        let mut s = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut s)
    }

    /// The tail is about to write its manifest: true if it may (the cancel,
    /// if any comes, is too late), false if it was cancelled (stop here).
    pub fn begin_manifest(&self) -> bool {
        self.with(|s| match *s {
            State::Cancelled => false,
            State::Writing | State::Committing => {
                *s = State::Committing;
                true
            }
        })
    }

    /// Whether the tail was cancelled (it stops at its next step).
    pub fn is_cancelled(&self) -> bool {
        self.with(|s| *s == State::Cancelled)
    }

    /// Recovery takes over: true when this call stopped a tail that had not
    /// begun its manifest (it never will); false when the manifest write
    /// had begun (the tail finishes) or the fence was cancelled already.
    pub fn cancel(&self) -> bool {
        self.with(|s| match *s {
            State::Writing => {
                *s = State::Cancelled;
                true
            }
            State::Committing | State::Cancelled => false,
        })
    }
}
