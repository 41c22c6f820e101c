//! What a source reader thread does next, and who may change it.
//!
//! # Architecture
//!
//! A connector's reader runs on its own thread and reads batch after batch.
//! Between two batches it asks its gate for the next [`Step`]; the
//! coordinator changes the answer from its own thread:
//!
//! ```text
//!  coordinator thread                    ReaderGate                 reader thread
//!  request_barrier(a) ──store──► requested = a ──┐
//!  stop()             ──store──► stop = true   ──┤ wake: lock, notify_all
//!  hold(true/false)   ──lock───► held          ──┘ (notify on release)
//!                                                        next_step(&mut answered):
//!                                                         requested ∉ {0, answered} ─► Barrier(a)
//!                                                         stop                     ─► Stop
//!                                                         held ─► wait (lock held from
//!                                                                 the check to the wait),
//!                                                                 then look again
//!                                                         otherwise                ─► Read
//! ```
//!
//! The order of the checks is the contract: a barrier request is answered
//! before a stop and even while held (a held reader must not stall a
//! checkpoint), and a held reader reads nothing until released.
//!
//! No lost wake-up: the reader checks `held`, `requested` and `stop` and
//! starts waiting with the mutex held, and every change that concerns a
//! waiting reader takes that mutex before it notifies. So a change lands
//! either before the reader's check (it sees it) or after its wait began
//! (the notification reaches it). The production wait also wakes itself
//! every [`HOLD_RECHECK`] as a backstop; the loom model (`tests/loom.rs`)
//! runs without it, since loom's timed waits never time out.

use std::sync::PoisonError;
use std::time::Duration;

use crate::primitives::{AtomicBool, AtomicU64, Condvar, Mutex, MutexGuard, Ordering};

/// Longest a held reader sleeps before it looks again: a backstop only,
/// every change that concerns it wakes it at once.
pub const HOLD_RECHECK: Duration = Duration::from_millis(100);

/// What the reader does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Send the barrier of this checkpoint attempt (with the reader's
    /// current offset), then ask again.
    Barrier(u64),
    /// Exit: the coordinator no longer wants input.
    Stop,
    /// Read the next batch, then ask again.
    Read,
}

/// The coordinator's requests to one reader thread: a checkpoint barrier,
/// a hold (watermark alignment) and a stop. Shared by both sides (`Arc`).
#[derive(Debug)]
pub struct ReaderGate {
    /// The attempt whose barrier is wanted; 0 for none.
    requested: AtomicU64,
    stop: AtomicBool,
    /// Whether the reader must not read. Also the mutex every wake-up
    /// takes, so none slips between the reader's check and its wait.
    held: Mutex<bool>,
    wake: Condvar,
}

impl Default for ReaderGate {
    fn default() -> Self {
        Self::new()
    }
}

impl ReaderGate {
    /// A gate with nothing requested: the reader reads.
    pub fn new() -> Self {
        Self {
            requested: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            held: Mutex::new(false),
            wake: Condvar::new(),
        }
    }

    /// Ask for the barrier of `attempt` (attempt ids start at 1; 0 asks for
    /// nothing) after the reader's current batch. A newer request replaces
    /// one not yet answered.
    pub fn request_barrier(&self, attempt: u64) {
        self.requested.store(attempt, Ordering::Release);
        self.wake();
    }

    /// Withdraw a barrier request (the attempt was abandoned). A reader
    /// that already answered it is not told.
    pub fn withdraw(&self) {
        self.requested.store(0, Ordering::Release);
    }

    /// Make the reader exit at its next step.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
    }

    /// Whether [`Self::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Hold the reader before its next batch (`true`) or let it read again
    /// (`false`). A held reader still answers barrier requests and stops
    /// when asked. Returns whether the state changed.
    pub fn hold(&self, held: bool) -> bool {
        let mut h = self.lock();
        let changed = *h != held;
        *h = held;
        if changed && !held {
            self.wake.notify_all();
        }
        changed
    }

    /// The reader's next step. `answered` is the last attempt whose barrier
    /// the reader sent (0 for none); a [`Step::Barrier`] updates it. Blocks
    /// while the reader is held and nothing else needs it.
    pub fn next_step(&self, answered: &mut u64) -> Step {
        loop {
            let wanted = self.requested.load(Ordering::Acquire);
            if wanted != 0 && wanted != *answered {
                *answered = wanted;
                return Step::Barrier(wanted);
            }
            if self.is_stopped() {
                return Step::Stop;
            }
            if !self.wait_while_held(*answered) {
                return Step::Read;
            }
        }
    }

    /// Wait while the reader is held and nothing else needs it (a barrier
    /// other than `answered`, or a stop). Returns `true` if it waited, so
    /// the caller looks at barriers and stop again before reading.
    fn wait_while_held(&self, answered: u64) -> bool {
        let held = self.lock();
        if !*held {
            return false;
        }
        let wanted = self.requested.load(Ordering::Acquire);
        if self.is_stopped() || (wanted != 0 && wanted != answered) {
            return true;
        }
        // Whether it woke or timed out, the caller looks again.
        drop(
            self.wake
                .wait_timeout(held, HOLD_RECHECK)
                .unwrap_or_else(PoisonError::into_inner),
        );
        true
    }

    /// Notify a waiting reader, under the mutex it checks and waits with.
    fn wake(&self) {
        let _held = self.lock();
        self.wake.notify_all();
    }

    /// The mutex. A panic while holding it leaves a plain flag behind, so a
    /// poisoned lock is used as it is.
    fn lock(&self) -> MutexGuard<'_, bool> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_steps_come_in_the_contract_order() {
        let gate = ReaderGate::new();
        let mut answered = 0;
        assert_eq!(gate.next_step(&mut answered), Step::Read);
        gate.request_barrier(3);
        gate.stop();
        // A barrier before a stop, once per attempt.
        assert_eq!(gate.next_step(&mut answered), Step::Barrier(3));
        assert_eq!(answered, 3);
        assert_eq!(gate.next_step(&mut answered), Step::Stop);
        assert!(gate.is_stopped());
    }

    #[test]
    fn a_withdrawn_request_is_not_answered() {
        let gate = ReaderGate::new();
        let mut answered = 0;
        gate.request_barrier(1);
        gate.withdraw();
        assert_eq!(gate.next_step(&mut answered), Step::Read);
        assert_eq!(answered, 0);
    }

    #[test]
    fn hold_reports_whether_it_changed_anything() {
        let gate = ReaderGate::new();
        assert!(!gate.hold(false));
        assert!(gate.hold(true));
        assert!(!gate.hold(true));
        assert!(gate.hold(false));
    }

    #[test]
    fn a_held_reader_reads_only_after_its_release() {
        let gate = Arc::new(ReaderGate::new());
        gate.hold(true);
        let reader = {
            let gate = Arc::clone(&gate);
            std::thread::spawn(move || {
                let mut answered = 0;
                let step = gate.next_step(&mut answered);
                (step, Instant::now())
            })
        };
        // Long enough for the reader to be waiting, past several backstops.
        std::thread::sleep(HOLD_RECHECK * 3);
        let released = Instant::now();
        gate.hold(false);
        let joined = reader.join();
        assert!(joined.is_ok(), "the reader panicked");
        if let Ok((step, at)) = joined {
            assert_eq!(step, Step::Read);
            assert!(at >= released, "read while held");
        }
    }
}
