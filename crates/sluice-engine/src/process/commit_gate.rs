//! A process function's input held until the checkpoint that cut it is
//! committed: how a checkpointed split whose rows cross between nodes
//! replays a function's activations exactly.
//!
//! # Why
//!
//! In such a split a function's input merges this node's batches with the
//! rows the other nodes send, and they interleave differently on every
//! run. Replay after a crash must still hand the handler the same
//! activations, in the same order within each vnode, with the same ids
//! (see [`super::keyed`]). Ordering the merge by anything the rows carry
//! does not help: the checkpoint barriers fall at other rows on every run,
//! so whatever ran after the last committed cut would be cut differently
//! when replayed.
//!
//! So the function runs only input whose grouping is durable. Everything
//! it takes in waits in the *open* epoch; when a checkpoint captures the
//! function, the open epoch is *sealed* under that checkpoint's id, and a
//! sealed epoch runs once a checkpoint at or after it has committed. A
//! checkpoint stores the function's state together with every sealed
//! epoch it has not run yet, batch by batch.
//!
//! # Architecture
//!
//! ```text
//!  routed batches ──► open epoch ──(checkpoint c captured: seal)──► sealed [c₁, c₂, …]
//!                                                                      │ a checkpoint ≥ cᵢ
//!                                                                      │ committed
//!                                                                      ▼
//!                          handler: cᵢ's batches in stored order, then a timer cut at
//!                          the watermark cᵢ was sealed at
//! ```
//!
//! Whatever the handler saw came from a sealed epoch that a committed
//! checkpoint either stores (not run yet at its capture) or had run before
//! it (in its state). Recovering from that checkpoint restores the same
//! state and the same stored epochs, so the replay runs them again in the
//! same order from the same state: the same ids, the same timer cuts (the
//! deliveries repeat, as at-least-once allows, and are identical). Input
//! after the last committed checkpoint never ran, so its new grouping on
//! replay is the only one anybody sees.
//!
//! The price is latency: a function's output trails its input by one
//! checkpoint interval and commit. A clean shutdown's checkpoint seals the
//! last input, and the shutdown runs it once that checkpoint commits.

use std::collections::VecDeque;

use arrow::record_batch::RecordBatch;

/// Input sealed by one checkpoint's capture.
#[derive(Debug, Clone)]
pub struct SealedEpoch {
    /// The checkpoint whose capture sealed it.
    pub checkpoint: u64,
    /// The pipeline watermark at that capture: the timer cut after its rows.
    pub watermark: i64,
    /// Its batches (of the function's input schema), in arrival order;
    /// each is one call of the handler, as when it ran ungated.
    pub batches: Vec<RecordBatch>,
}

/// The open and sealed epochs of one gated process function.
#[derive(Debug, Default)]
pub struct CommitGate {
    open: Vec<RecordBatch>,
    /// The latest watermark a cycle ran at since the gate opened.
    watermark: Option<i64>,
    sealed: VecDeque<SealedEpoch>,
    /// The highest checkpoint known committed.
    committed: Option<u64>,
    /// The watermark the latest epoch was sealed at.
    last_cut: Option<i64>,
    /// Bytes of the open epoch's batches, and of the sealed epochs after
    /// the last commit (see [`Self::awaiting_commit_bytes`]): kept as they
    /// change, since the coordinator asks before every intake.
    open_bytes: u64,
    uncommitted_bytes: u64,
    /// Bytes of input this node routed to other nodes' copies of the
    /// function since the last capture, and per capture since (the
    /// checkpoint, the bytes): the receivers hold them in their open
    /// epochs until that checkpoint commits, so they count against this
    /// node's budget too (see [`Self::count_sent`]).
    open_sent: u64,
    sealed_sent: VecDeque<(u64, u64)>,
}

impl CommitGate {
    /// Hold a cycle's input batches (empty ones are dropped: a call with
    /// no rows activates nothing), which ran at `watermark`.
    pub fn hold(&mut self, batches: impl IntoIterator<Item = RecordBatch>, watermark: i64) {
        for b in batches.into_iter().filter(|b| b.num_rows() > 0) {
            self.open_bytes += batch_bytes(&b);
            self.open.push(b);
        }
        self.watermark = Some(self.watermark.map_or(watermark, |w| w.max(watermark)));
    }

    /// This cycle routed `bytes` of the function's input to other nodes.
    /// Their barrier for the next checkpoint follows those rows, so the
    /// receivers seal them under it and hold them until it commits: the
    /// sender counts them as awaiting that commit. Otherwise a node whose
    /// keys all live elsewhere would keep nothing, never reach its budget,
    /// and let its receivers hold everything it reads.
    pub fn count_sent(&mut self, bytes: u64) {
        self.open_sent += bytes;
    }

    /// Checkpoint `checkpoint` captures the function: the open epoch is
    /// sealed under it, with the latest watermark as its cut (or
    /// `fallback`, the function's own, when no cycle ran yet). An epoch
    /// with no rows whose cut is the previous epoch's would activate
    /// nothing and is not sealed: running it would count as a cycle, and
    /// an idle pipeline would take a checkpoint every interval for it.
    pub fn seal(&mut self, checkpoint: u64, fallback: i64) {
        let sent = std::mem::take(&mut self.open_sent);
        if sent > 0 && self.committed.is_none_or(|c| checkpoint > c) {
            self.sealed_sent.push_back((checkpoint, sent));
        }
        let watermark = self.watermark.unwrap_or(fallback);
        if self.open.is_empty() && self.last_cut == Some(watermark) {
            return;
        }
        self.last_cut = Some(watermark);
        let bytes = std::mem::take(&mut self.open_bytes);
        if self.committed.is_none_or(|c| checkpoint > c) {
            self.uncommitted_bytes += bytes;
        }
        self.sealed.push_back(SealedEpoch {
            checkpoint,
            watermark,
            batches: std::mem::take(&mut self.open),
        });
    }

    /// Checkpoint `checkpoint` committed: every epoch sealed at or before
    /// it may run.
    pub fn commit(&mut self, checkpoint: u64) {
        let committed = self.committed.map_or(checkpoint, |c| c.max(checkpoint));
        self.committed = Some(committed);
        self.sealed_sent.retain(|(c, _)| *c > committed);
        self.uncommitted_bytes = self
            .sealed
            .iter()
            .filter(|e| e.checkpoint > committed)
            .flat_map(|e| &e.batches)
            .map(batch_bytes)
            .sum();
    }

    /// Whether a sealed epoch may run now.
    pub fn runnable(&self) -> bool {
        match (self.sealed.front(), self.committed) {
            (Some(e), Some(c)) => e.checkpoint <= c,
            _ => false,
        }
    }

    /// Whether the gate holds rows, open or sealed (an epoch sealed with
    /// no rows only cuts timers, which the next commit releases anyway).
    pub fn holds_rows(&self) -> bool {
        !self.open.is_empty() || self.sealed.iter().any(|e| !e.batches.is_empty())
    }

    /// Bytes of the input no committed checkpoint released yet: the open
    /// epoch and the sealed ones after the last commit, and what this node
    /// sent other nodes since the last commit ([`Self::count_sent`]). Only
    /// a checkpoint's commit makes them runnable, so this is what a byte
    /// budget bounds (released input runs at the next cycle and needs no
    /// bound of its own). In [`crate::budget::row_bytes`]: what the rows
    /// occupy, alike for rows kept, sent and received.
    pub fn awaiting_commit_bytes(&self) -> u64 {
        let sent: u64 = self.sealed_sent.iter().map(|(_, b)| b).sum();
        self.open_bytes + self.uncommitted_bytes + self.open_sent + sent
    }

    /// The next epoch that may run, taken out of the gate.
    pub fn take_runnable(&mut self) -> Option<SealedEpoch> {
        if self.runnable() {
            self.sealed.pop_front()
        } else {
            None
        }
    }

    /// The sealed epochs not run yet, oldest first (what a checkpoint
    /// stores).
    pub fn sealed(&self) -> impl Iterator<Item = &SealedEpoch> {
        self.sealed.iter()
    }

    /// Start again from a committed checkpoint's stored epochs: each may
    /// run (the checkpoint that stored them committed, and sealed them or
    /// came after them); nothing is open.
    pub fn restore(&mut self, epochs: Vec<SealedEpoch>) {
        self.open.clear();
        self.open_bytes = 0;
        // What the node sent before belongs to a run that is over.
        self.open_sent = 0;
        self.sealed_sent.clear();
        // Every restored epoch may run (see `committed` below).
        self.uncommitted_bytes = 0;
        self.watermark = None;
        self.last_cut = None;
        self.committed = epochs.iter().map(|e| e.checkpoint).max();
        self.sealed = epochs.into();
    }
}

fn batch_bytes(b: &RecordBatch) -> u64 {
    crate::budget::row_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    fn rows(n: i64) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))]).unwrap()
    }

    #[test]
    fn an_epoch_runs_once_a_checkpoint_at_or_after_it_committed() {
        let mut g = CommitGate::default();
        g.hold([rows(2), rows(0), rows(1)], 10);
        g.hold([rows(3)], 7);
        assert!(!g.runnable(), "nothing sealed");
        g.seal(4, i64::MIN);
        assert!(!g.runnable(), "sealed, not committed");
        g.hold([rows(5)], 20);
        g.seal(5, i64::MIN);
        g.commit(3);
        assert!(!g.runnable(), "an earlier checkpoint committed");
        // Checkpoint 4 failed; 5 committed: both run, in order.
        g.commit(5);
        let first = g.take_runnable().unwrap();
        assert_eq!(first.checkpoint, 4);
        assert_eq!(first.watermark, 10, "the latest watermark, never lower");
        let sizes: Vec<usize> = first.batches.iter().map(RecordBatch::num_rows).collect();
        assert_eq!(
            sizes,
            [2, 1, 3],
            "empty batches are dropped, the rest keep their bounds"
        );
        let second = g.take_runnable().unwrap();
        assert_eq!((second.checkpoint, second.watermark), (5, 20));
        assert!(g.take_runnable().is_none());
    }

    #[test]
    fn the_gate_holds_rows_until_the_epoch_holding_them_ran() {
        let mut g = CommitGate::default();
        g.hold([rows(0)], 1);
        assert!(!g.holds_rows(), "an empty batch is no input");
        g.seal(1, i64::MIN);
        assert!(!g.holds_rows(), "an empty epoch only cuts timers");
        g.hold([rows(2)], 2);
        assert!(g.holds_rows(), "open");
        g.seal(2, i64::MIN);
        assert!(g.holds_rows(), "sealed, its checkpoint not committed");
        g.commit(2);
        assert!(g.take_runnable().is_some_and(|e| e.batches.is_empty()));
        assert!(g.holds_rows(), "runnable, not run");
        assert!(g.take_runnable().is_some_and(|e| e.batches.len() == 1));
        assert!(!g.holds_rows());
    }

    #[test]
    fn an_epoch_with_nothing_to_activate_is_not_sealed() {
        let mut g = CommitGate::default();
        g.hold([rows(1)], 5);
        g.seal(1, i64::MIN);
        g.seal(2, i64::MIN);
        g.hold([rows(0)], 5);
        g.seal(3, i64::MIN);
        let cuts: Vec<(u64, i64)> = g.sealed().map(|e| (e.checkpoint, e.watermark)).collect();
        assert_eq!(cuts, [(1, 5)], "no rows, the same cut: nothing sealed");
        g.hold([], 6);
        g.seal(4, i64::MIN);
        g.hold([rows(2)], 6);
        g.seal(5, i64::MIN);
        let cuts: Vec<(u64, i64)> = g.sealed().map(|e| (e.checkpoint, e.watermark)).collect();
        assert_eq!(
            cuts,
            [(1, 5), (4, 6), (5, 6)],
            "a later cut fires timers; rows run"
        );
    }

    /// What waits for a commit counts until the commit, not until it ran:
    /// a budget on it must let released input run.
    #[test]
    fn input_counts_against_the_budget_until_its_checkpoint_committed() {
        let mut g = CommitGate::default();
        let (a, b) = (rows(3), rows(5));
        let (na, nb) = (batch_bytes(&a), batch_bytes(&b));
        assert!(na > 0 && nb > 0);
        g.hold([a, rows(0)], 1);
        assert_eq!(
            g.awaiting_commit_bytes(),
            na,
            "open; an empty batch is nothing"
        );
        g.seal(1, i64::MIN);
        assert_eq!(g.awaiting_commit_bytes(), na, "sealed, not committed");
        g.hold([b], 2);
        assert_eq!(g.awaiting_commit_bytes(), na + nb);
        g.commit(1);
        assert_eq!(g.awaiting_commit_bytes(), nb, "released, though not run");
        g.seal(2, i64::MIN);
        assert_eq!(g.awaiting_commit_bytes(), nb);
        g.commit(2);
        assert_eq!(g.awaiting_commit_bytes(), 0);
        g.hold([rows(1)], 3);
        g.seal(3, i64::MIN);
        g.restore(Vec::new());
        assert_eq!(
            g.awaiting_commit_bytes(),
            0,
            "a restore drops what was open"
        );
    }

    #[test]
    fn rows_sent_to_other_nodes_count_until_the_checkpoint_after_them_committed() {
        let mut g = CommitGate::default();
        g.count_sent(100);
        assert_eq!(g.awaiting_commit_bytes(), 100, "sent before any capture");
        // Sealed under checkpoint 1 though this node kept no row.
        g.seal(1, 0);
        g.count_sent(50);
        assert_eq!(g.awaiting_commit_bytes(), 150);
        g.commit(1);
        assert_eq!(
            g.awaiting_commit_bytes(),
            50,
            "what went before checkpoint 1's barrier was released on its receivers"
        );
        g.seal(2, 0);
        g.count_sent(20);
        g.seal(3, 0);
        g.commit(3);
        assert_eq!(g.awaiting_commit_bytes(), 0, "a later commit releases both");
        g.count_sent(7);
        g.restore(Vec::new());
        assert_eq!(g.awaiting_commit_bytes(), 0, "a restore starts a new run");
    }

    #[test]
    fn a_seal_before_any_cycle_takes_the_fallback_watermark() {
        let mut g = CommitGate::default();
        g.seal(1, 42);
        assert_eq!(g.sealed().next().unwrap().watermark, 42);
        assert!(g.sealed().next().unwrap().batches.is_empty());
    }

    #[test]
    fn restored_epochs_all_run_and_nothing_stays_open() {
        let mut g = CommitGate::default();
        g.hold([rows(4)], 1);
        let stored = vec![
            SealedEpoch {
                checkpoint: 8,
                watermark: 3,
                batches: vec![rows(1)],
            },
            SealedEpoch {
                checkpoint: 9,
                watermark: 4,
                batches: vec![],
            },
        ];
        g.restore(stored);
        assert_eq!(g.take_runnable().unwrap().checkpoint, 8);
        assert_eq!(g.take_runnable().unwrap().checkpoint, 9);
        assert!(!g.runnable());
        g.seal(10, 0);
        let open = g.sealed().next().unwrap();
        assert!(
            open.batches.is_empty(),
            "the held input was dropped by the restore"
        );
        assert_eq!(open.watermark, 0);
    }
}
