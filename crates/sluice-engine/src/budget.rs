//! Byte budgets for the queues between pipeline stages.
//!
//! # Architecture
//!
//! A queue bounded by a count alone (a tokio channel of 16 batches) holds
//! anything from kilobytes to gigabytes, depending on how wide the batches
//! are. A [`ByteBudget`] adds a bound in bytes, measured with
//! `RecordBatch::get_array_memory_size()`:
//!
//! ```text
//!  producer ── admit() ─┬─ queued < high (80%) ─► add(n), send ──► queue ──► consumer
//!                       └─ queued ≥ high ─► wait for release() ◄──────────── (ticket dropped)
//! ```
//!
//! Backpressure starts at 80% of the budget (as LaminarDB does for its
//! connector queues), not at 100%: the producer already holding a batch
//! may still put it in, so the queue overshoots the high mark by at most
//! one batch per producer and stays near the budget. Bytes are released by
//! dropping the [`BudgetTicket`] that travels with the queued item, so no
//! consumer can forget to release.
//!
//! The queue itself stays a plain channel (tokio's, with its count bound);
//! the budget only decides when a producer may put the next item in. A
//! producer stops waiting when the channel closes too (see
//! `SourceSender`), so a stopped coordinator never leaves a reader blocked
//! on the budget; [`ByteBudget::close`] lets every waiter through for
//! queues without such a signal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// Backpressure starts when this share of the budget (in percent) is queued.
pub const HIGH_WATER_PERCENT: u64 = 80;

/// A bound on the bytes queued between two stages.
#[derive(Debug)]
pub struct ByteBudget {
    limit: u64,
    high: u64,
    queued: AtomicU64,
    peak: AtomicU64,
    items: AtomicU64,
    closed: AtomicBool,
    drained: Notify,
    /// Also told of every release: wakes a coordinator paused on a full output.
    relief: Option<Arc<Notify>>,
}

impl ByteBudget {
    /// A budget of `limit` bytes; producers wait from 80% of it on.
    pub fn new(limit: u64) -> Arc<Self> {
        Self::with_relief(limit, None)
    }

    /// As [`Self::new`]; every release also wakes `relief` (a permit is
    /// stored when nobody waits, so a wake-up is never lost).
    pub fn with_relief(limit: u64, relief: Option<Arc<Notify>>) -> Arc<Self> {
        let limit = limit.max(1);
        Arc::new(Self {
            limit,
            high: (limit / 100 * HIGH_WATER_PERCENT).max(1),
            queued: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            items: AtomicU64::new(0),
            closed: AtomicBool::new(false),
            drained: Notify::new(),
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

    /// Wait until the queue is below its high-water mark (or the budget is
    /// closed). Returns false when closed.
    pub async fn admit(&self) -> bool {
        loop {
            // Registered before the check, so a release in between wakes us.
            let drained = self.drained.notified();
            tokio::pin!(drained);
            drained.as_mut().enable();
            if self.closed.load(Ordering::Acquire) {
                return false;
            }
            if !self.is_over_high_water() {
                return true;
            }
            drained.await;
        }
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
        self.drained.notify_waiters();
        if let Some(r) = &self.relief {
            r.notify_one();
        }
    }

    /// Let every waiting and later producer through (the consumer is gone).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.drained.notify_waiters();
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

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

    #[tokio::test]
    async fn a_waiting_producer_is_let_through_by_a_release_or_by_close() {
        let b = ByteBudget::new(100);
        let held = b.charge(100);
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.admit().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(held);
        let admitted = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(admitted);

        let _held = b.charge(100);
        let waiter = {
            let b = Arc::clone(&b);
            tokio::spawn(async move { b.admit().await })
        };
        tokio::task::yield_now().await;
        b.close();
        let admitted = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
        assert!(!admitted);
    }
}
