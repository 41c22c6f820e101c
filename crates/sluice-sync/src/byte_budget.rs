//! Byte budgets for the queues between pipeline stages, and the wake-up a
//! paused coordinator waits for.
//!
//! # Architecture
//!
//! A queue bounded by a count alone (a channel of 16 batches) holds
//! anything from kilobytes to gigabytes, depending on how wide the batches
//! are. A [`ByteBudget`] adds a bound in bytes (the engine measures a batch
//! with `RecordBatch::get_array_memory_size()`):
//!
//! ```text
//!  producer ── admit() ─┬─ queued < high (80%) ─► charge(n), send ──► queue ──► consumer
//!                       └─ queued ≥ high ─► wait ◄── release: wake waiters ◄── (ticket dropped)
//!                                                     └── relief.notify() ──► paused coordinator
//! ```
//!
//! Backpressure starts at 80% of the budget (as LaminarDB does for its
//! connector queues), not at 100%: a producer already holding a batch may
//! still put it in, so the queue overshoots the high mark by at most one
//! batch per producer and stays near the budget. Bytes are released by
//! dropping the [`BudgetTicket`] that travels with the queued item, so no
//! consumer can forget to release. [`ByteBudget::close`] lets every waiter
//! through (the consumer is gone).
//!
//! Two handshakes must never lose a wake-up, and `tests/loom.rs` checks
//! every interleaving of both:
//!
//! * **A producer against the releases.** [`ByteBudget::admit`] checks the
//!   queued bytes and registers its waker under one mutex, and a release
//!   takes that mutex after lowering the count and before waking. So a
//!   release lands either before the check (the producer sees the room) or
//!   after the registration (the producer is woken).
//! * **The coordinator against its outputs' releases.** A coordinator that
//!   found an output full waits on a [`Relief`] that every release of that
//!   output notifies. A notification with nobody waiting is kept as a
//!   permit, so a release between the coordinator's check and its wait
//!   still wakes it (a stale permit costs one spurious re-check).
//!
//! Counters (`queued`, `items`, `peak`) are atomics, so the coordinator's
//! per-cycle pressure check takes no lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};
use std::task::{Context, Poll, Waker};

use crate::primitives::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};

/// Backpressure starts when this share of the budget (in percent) is queued.
pub const HIGH_WATER_PERCENT: u64 = 80;

/// A bound on the bytes queued between two stages. Shared (`Arc`) by its
/// producers, its consumer (through the tickets) and observers.
#[derive(Debug)]
pub struct ByteBudget {
    limit: u64,
    high: u64,
    queued: AtomicU64,
    peak: AtomicU64,
    items: AtomicU64,
    closed: AtomicBool,
    /// Producers waiting in [`Self::admit`].
    waiters: Mutex<Vec<Waker>>,
    /// Also told of every release: wakes a coordinator paused on a full
    /// output.
    relief: Option<Arc<Relief>>,
}

impl ByteBudget {
    /// A budget of `limit` bytes; producers wait from 80% of it on.
    pub fn new(limit: u64) -> Arc<Self> {
        Self::with_relief(limit, None)
    }

    /// As [`Self::new`]; every release also notifies `relief`.
    pub fn with_relief(limit: u64, relief: Option<Arc<Relief>>) -> Arc<Self> {
        let limit = limit.max(1);
        Arc::new(Self {
            limit,
            high: (limit / 100 * HIGH_WATER_PERCENT).max(1),
            queued: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            items: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
            relief,
        })
    }

    /// The budget in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes queued now.
    pub fn queued(&self) -> u64 {
        self.queued.load(Ordering::Acquire)
    }

    /// Items (batches) queued now.
    pub fn items(&self) -> u64 {
        self.items.load(Ordering::Acquire)
    }

    /// The most bytes ever queued at once.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Acquire)
    }

    /// Whether producers must wait (80% of the budget or more is queued).
    pub fn is_over_high_water(&self) -> bool {
        self.queued() >= self.high
    }

    /// Wait until the queue is below its high-water mark or the budget is
    /// closed. The future's output: `true` when there is room, `false`
    /// when the budget was closed (the consumer is gone; the caller should
    /// stop producing).
    pub fn admit(&self) -> Admit<'_> {
        Admit { budget: self }
    }

    /// Put `bytes` in the queue; the ticket gives them back when dropped.
    pub fn charge(self: &Arc<Self>, bytes: u64) -> BudgetTicket {
        self.items.fetch_add(1, Ordering::AcqRel);
        let now = self.queued.fetch_add(bytes, Ordering::AcqRel) + bytes;
        self.peak.fetch_max(now, Ordering::AcqRel);
        BudgetTicket {
            budget: Arc::clone(self),
            bytes,
        }
    }

    fn release(&self, bytes: u64) {
        self.queued.fetch_sub(bytes, Ordering::AcqRel);
        self.items.fetch_sub(1, Ordering::AcqRel);
        self.wake_all();
        if let Some(r) = &self.relief {
            r.notify();
        }
    }

    /// Let every waiting and later producer through (the consumer is gone).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake_all();
    }

    /// Wake every registered producer. The lock orders this after any
    /// producer's check-and-register that began before the count changed.
    fn wake_all(&self) {
        let woken = std::mem::take(&mut *self.lock_waiters());
        for w in woken {
            w.wake();
        }
    }

    fn lock_waiters(&self) -> MutexGuard<'_, Vec<Waker>> {
        // A waker list stays consistent whatever panicked while it was held.
        self.waiters.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The future of [`ByteBudget::admit`].
#[derive(Debug)]
#[must_use = "a producer must wait for the budget before charging it"]
pub struct Admit<'a> {
    budget: &'a ByteBudget,
}

impl Future for Admit<'_> {
    type Output = bool;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<bool> {
        let b = self.budget;
        let mut waiters = b.lock_waiters();
        if b.closed.load(Ordering::Acquire) {
            return Poll::Ready(false);
        }
        if !b.is_over_high_water() {
            return Poll::Ready(true);
        }
        // Registered under the lock a release takes before waking. A
        // producer polled again registers again; the duplicate is one
        // spurious wake-up, and the list empties at every release.
        if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
            waiters.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Bytes held in a queue; released when dropped.
#[derive(Debug)]
pub struct BudgetTicket {
    budget: Arc<ByteBudget>,
    bytes: u64,
}

impl BudgetTicket {
    /// The bytes this ticket holds.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for BudgetTicket {
    fn drop(&mut self) {
        self.budget.release(self.bytes);
    }
}

/// A wake-up for one waiter (the coordinator) that is never lost: a
/// [`Relief::notify`] with nobody waiting is kept as a permit, and the next
/// [`Relief::notified`] returns at once, consuming it.
#[derive(Debug, Default)]
pub struct Relief(Mutex<ReliefState>);

#[derive(Debug, Default)]
struct ReliefState {
    permit: bool,
    waiter: Option<Waker>,
}

impl Relief {
    /// A relief with no permit.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Wake the waiter, or leave a permit for the next wait.
    pub fn notify(&self) {
        let waiter = {
            let mut s = self.lock();
            s.permit = true;
            s.waiter.take()
        };
        if let Some(w) = waiter {
            w.wake();
        }
    }

    /// Completes once a notification arrived since the last wait
    /// completed (at once if one is pending).
    pub fn notified(&self) -> Notified<'_> {
        Notified { relief: self }
    }

    fn lock(&self) -> MutexGuard<'_, ReliefState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The future of [`Relief::notified`].
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct Notified<'a> {
    relief: &'a Relief,
}

impl Future for Notified<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut s = self.relief.lock();
        if std::mem::take(&mut s.permit) {
            return Poll::Ready(());
        }
        s.waiter = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A waker that counts its wake-ups.
    fn counting_waker() -> (Waker, Arc<std::sync::atomic::AtomicUsize>) {
        struct Count(Arc<std::sync::atomic::AtomicUsize>);
        impl std::task::Wake for Count {
            fn wake(self: Arc<Self>) {
                self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        }
        let n = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        (Waker::from(Arc::new(Count(Arc::clone(&n)))), n)
    }

    fn poll<F: Future + Unpin>(f: &mut F, waker: &Waker) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(waker))
    }

    #[test]
    fn backpressure_starts_at_eighty_percent_and_ends_when_bytes_drain() {
        let b = ByteBudget::new(1000);
        let t1 = b.charge(799);
        assert!(!b.is_over_high_water());
        let t2 = b.charge(1);
        assert!(b.is_over_high_water());
        assert_eq!((b.queued(), b.items()), (800, 2));
        drop(t1);
        assert!(!b.is_over_high_water());
        assert_eq!(b.queued(), 1);
        drop(t2);
        assert_eq!((b.queued(), b.peak()), (0, 800));
    }

    #[test]
    fn a_waiting_producer_is_woken_by_a_release_and_let_through_by_close() {
        let b = ByteBudget::new(100);
        let (waker, woken) = counting_waker();
        let held = b.charge(100);
        let mut admit = b.admit();
        assert_eq!(poll(&mut admit, &waker), Poll::Pending);
        assert_eq!(poll(&mut admit, &waker), Poll::Pending, "polled twice");
        drop(held);
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(poll(&mut admit, &waker), Poll::Ready(true));

        let _held = b.charge(100);
        let mut admit = b.admit();
        assert_eq!(poll(&mut admit, &waker), Poll::Pending);
        b.close();
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(poll(&mut admit, &waker), Poll::Ready(false));
    }

    #[test]
    fn a_relief_keeps_one_permit_for_a_late_waiter_and_every_release_gives_one() {
        let relief = Relief::new();
        let b = ByteBudget::with_relief(100, Some(Arc::clone(&relief)));
        let (waker, woken) = counting_waker();
        let mut wait = relief.notified();
        assert_eq!(poll(&mut wait, &waker), Poll::Pending);
        drop(b.charge(10));
        assert_eq!(woken.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(poll(&mut wait, &waker), Poll::Ready(()));
        // Two releases with nobody waiting leave one permit, not two.
        drop(b.charge(10));
        drop(b.charge(10));
        assert_eq!(poll(&mut relief.notified(), &waker), Poll::Ready(()));
        assert_eq!(poll(&mut relief.notified(), &waker), Poll::Pending);
    }
}
