//! The base layer of a scope's state, and the captures checkpoint tails
//! build from it.
//!
//! # Architecture
//!
//! A checkpoint captures every scope at a barrier, on the compute thread.
//! Copying each group's accumulator state there costs time in proportion
//! to the state: seconds at a gigabyte, with every row stalled behind it.
//! So a scope keeps its state in two layers which together are the state:
//!
//! ```text
//!   compute thread                    shared by Arc (Layers)           checkpoint tail
//!   ──────────────                    ──────────────────────           ───────────────
//!   update ─▶ live accumulators       pending deltas, in order
//!             only the groups changed   [seq 4][seq 5]  ◀── capture 5 queues delta 5
//!             since the last delta,                                    Capture(5).produce():
//!             dense local indices     base accumulators                  lock the base,
//!                                       every group, as of               merge deltas ≤ 5,
//!                                       the deltas merged  ◀──────────   copy the base out,
//!                                       key columns, in chunks           encode, write
//! ```
//!
//! A capture drains the live layer into a [`Delta`] (the global index of
//! each changed group, their intermediate state, and the keys of the groups
//! created since the previous delta), queues it, and hands the tail a
//! [`Capture`]: a deferred batch the tail builds by merging the queued
//! deltas up to its own into the base and copying the base out. The pause
//! on the compute thread is then proportional to the groups changed since
//! the previous checkpoint, not to the whole state.
//!
//! Rules that keep every capture exact:
//!
//! - Deltas are merged in the order they were queued, and a capture merges
//!   only the deltas up to its own, so the base it copies is the state at
//!   its barrier even while the compute thread queues later deltas.
//! - The compute thread reads results from the base (a window closing, a
//!   changelog emission) only after producing every capture still
//!   outstanding: usually its tail already has and the batch is cached;
//!   otherwise the compute thread builds it itself, once, before it merges
//!   newer deltas in.
//! - Building a capture first builds every earlier capture still held, so
//!   the order tails build them in does not matter.
//! - A delta is queued before its capture exists, so a capture that is
//!   dropped unproduced (a failed or cancelled tail) loses nothing: the next
//!   capture or read merges its delta.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Weak};

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use parking_lot::{Mutex, MutexGuard};

use super::ScopeSnapshot;
use crate::error::{EngineError, Result};
use crate::state::DeferredBatch;

/// What the live layer held at one moment, handed to the base.
pub(super) struct Delta {
    /// Position in the scope's sequence of deltas (from 1).
    pub seq: u64,
    /// Global group index of each live group, in local-index order.
    pub groups: Vec<usize>,
    /// Each accumulator's intermediate state over `groups`.
    pub state: Vec<Vec<ArrayRef>>,
    /// Key columns of the groups created since the previous delta.
    pub new_keys: Vec<ArrayRef>,
    /// Number of groups in the scope when the delta was taken.
    pub total: usize,
}

/// Every group's accumulated state, as of the deltas merged so far.
pub(super) struct Base {
    accs: Vec<Box<dyn GroupsAccumulator>>,
    /// Key columns in group-index order, as chunks (one per delta) that a
    /// copy concatenates.
    key_chunks: Vec<Vec<ArrayRef>>,
    /// Number of groups.
    len: usize,
    /// The last delta merged.
    seq: u64,
    /// Set while the accumulators are being changed, so an error or a
    /// panic part-way (the lock does not poison) leaves it set and every
    /// later use fails instead of reading half-merged state.
    damaged: bool,
}

impl Base {
    /// Fold one delta in.
    fn absorb(&mut self, delta: Delta) -> Result<()> {
        self.damaged = true;
        if !delta.new_keys.is_empty() {
            self.key_chunks.push(delta.new_keys);
        }
        if !delta.groups.is_empty() {
            for (acc, state) in self.accs.iter_mut().zip(delta.state.iter()) {
                acc.merge_batch(state, &delta.groups, delta.total)?;
            }
        }
        self.len = delta.total;
        self.seq = delta.seq;
        self.damaged = false;
        Ok(())
    }

    /// Run `read` on the accumulators (groups `0..len`, in group-index
    /// order); it may drain and merge back, so an error or a panic in it
    /// marks the base damaged.
    pub fn read<T>(
        &mut self,
        read: impl FnOnce(&mut [Box<dyn GroupsAccumulator>]) -> Result<T>,
    ) -> Result<T> {
        self.damaged = true;
        let out = read(&mut self.accs)?;
        self.damaged = false;
        Ok(out)
    }

    /// Key columns of every group, in group-index order (chunks are
    /// concatenated once and kept that way).
    fn keys(&mut self) -> Result<Vec<ArrayRef>> {
        if self.key_chunks.len() > 1 {
            let width = self.key_chunks.first().map_or(0, Vec::len);
            let mut merged = Vec::with_capacity(width);
            for col in 0..width {
                let parts: Vec<&dyn arrow::array::Array> = self
                    .key_chunks
                    .iter()
                    .filter_map(|c| c.get(col).map(|a| a.as_ref()))
                    .collect();
                merged.push(arrow::compute::concat(&parts)?);
            }
            self.key_chunks = vec![merged];
        }
        Ok(self.key_chunks.first().cloned().unwrap_or_default())
    }

    /// Copy out every group's keys and intermediate state, leaving the
    /// accumulators as they were: (key columns, state columns per
    /// accumulator, number of groups).
    fn copy_out(&mut self) -> Result<(Vec<ArrayRef>, Vec<Vec<ArrayRef>>, usize)> {
        let n = self.len;
        let keys = self.keys()?;
        let all: Vec<usize> = (0..n).collect();
        let mut states = Vec::with_capacity(self.accs.len());
        self.damaged = true;
        for acc in self.accs.iter_mut() {
            let state = acc.state(EmitTo::All)?;
            acc.merge_batch(&state, &all, n)?;
            states.push(state);
        }
        self.damaged = false;
        Ok((keys, states, n))
    }
}

/// The base and the queue of deltas not yet merged into it.
pub(super) struct Layers {
    base: Mutex<Base>,
    pending: Mutex<VecDeque<Delta>>,
    /// Captures not yet dropped, in the order they were taken.
    captures: Mutex<Vec<Weak<Capture>>>,
}

impl Layers {
    /// Layers over `accs` (fresh, or holding `len` restored groups whose
    /// keys are `keys`).
    pub fn new(accs: Vec<Box<dyn GroupsAccumulator>>, keys: Vec<ArrayRef>, len: usize) -> Self {
        Self {
            base: Mutex::new(Base {
                accs,
                key_chunks: vec![keys],
                len,
                seq: 0,
                damaged: false,
            }),
            pending: Mutex::new(VecDeque::new()),
            captures: Mutex::new(Vec::new()),
        }
    }

    /// A capture of these layers as of delta `through` (the last queued).
    pub fn capture(
        self: &Arc<Self>,
        through: u64,
        emitted: Option<Vec<ArrayRef>>,
        extra: Vec<(String, String)>,
    ) -> Arc<Capture> {
        let capture = Arc::new(Capture {
            layers: Arc::clone(self),
            through,
            emitted,
            extra,
            built: Mutex::new(None),
        });
        let mut captures = self.captures.lock();
        captures.retain(|c| c.strong_count() > 0);
        captures.push(Arc::downgrade(&capture));
        capture
    }

    /// Build every capture still held whose barrier is before delta
    /// `before` (all of them with `u64::MAX`), oldest first: once a later
    /// delta is merged they could no longer be built.
    pub fn build_captures_before(&self, before: u64) -> Result<()> {
        let earlier: Vec<Arc<Capture>> = self
            .captures
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| c.through < before)
            .collect();
        for c in earlier {
            c.produce()?;
        }
        Ok(())
    }

    /// Queue a delta (never blocks on a tail copying the base).
    pub fn queue(&self, delta: Delta) {
        self.pending.lock().push_back(delta);
    }

    /// The base with every queued delta up to `through` merged, locked.
    /// An error loses the delta being merged: the scope must not run on.
    pub fn base_through(&self, through: u64) -> Result<MutexGuard<'_, Base>> {
        let mut base = self.base.lock();
        if base.damaged {
            return Err(EngineError::Internal(
                "aggregate state was left half-merged by an earlier failure".into(),
            ));
        }
        loop {
            let next = {
                let mut pending = self.pending.lock();
                match pending.front() {
                    Some(d) if d.seq <= through => pending.pop_front(),
                    _ => None,
                }
            };
            match next {
                Some(delta) => base.absorb(delta)?,
                None => break,
            }
        }
        Ok(base)
    }
}

/// A scope captured at a checkpoint barrier: the deltas up to `through`
/// merged into the base, built when first asked for.
pub(super) struct Capture {
    layers: Arc<Layers>,
    through: u64,
    /// The last emitted values at the barrier (changelog mode), shared.
    emitted: Option<Vec<ArrayRef>>,
    /// Schema metadata the batch carries (a window's start).
    extra: Vec<(String, String)>,
    built: Mutex<Option<RecordBatch>>,
}

impl Capture {
    fn build(&self) -> Result<RecordBatch> {
        let (keys, states, n) = {
            let mut base = self.layers.base_through(self.through)?;
            if base.seq != self.through {
                return Err(EngineError::Internal(format!(
                    "aggregate capture at delta {} built after delta {} was merged",
                    self.through, base.seq
                )));
            }
            base.copy_out()?
        };
        let widths: Vec<usize> = states.iter().map(Vec::len).collect();
        let mut cols = keys;
        cols.extend(states.into_iter().flatten());
        let emitted_len = match &self.emitted {
            Some(prev) => {
                let len = prev.first().map_or(0, |a| a.len());
                for a in prev {
                    let pad = arrow::array::new_null_array(a.data_type(), n.saturating_sub(len));
                    cols.push(arrow::compute::concat(&[a.as_ref(), pad.as_ref()])?);
                }
                Some(len)
            }
            None => None,
        };
        let extra: Vec<(&str, String)> = self
            .extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        ScopeSnapshot::from_columns(cols, n, widths, emitted_len)?.to_batch(&extra)
    }
}

impl DeferredBatch for Capture {
    fn produce(&self) -> Result<RecordBatch> {
        let mut built = self.built.lock();
        if let Some(b) = built.as_ref() {
            return Ok(b.clone());
        }
        self.layers.build_captures_before(self.through)?;
        let b = self.build()?;
        *built = Some(b.clone());
        Ok(b)
    }
}

impl fmt::Debug for Capture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capture")
            .field("through", &self.through)
            .field("built", &self.built.lock().is_some())
            .finish()
    }
}
