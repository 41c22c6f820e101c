//! State in two layers, so a checkpoint captures it in time proportional to
//! what changed, and the copy of the whole is built off the compute thread.
//!
//! # Architecture
//!
//! A checkpoint captures every stateful operator at a barrier, on the
//! compute thread. Copying a large state there costs time in proportion to
//! it (seconds at a gigabyte), with every row stalled behind it. So an
//! operator with large state keeps, besides what it works on, a *base*: a
//! copy as of the last capture, shared with the checkpoint tail.
//!
//! ```text
//!   compute thread                  Layers (shared by Arc)             checkpoint tail
//!   ──────────────                  ──────────────────────             ───────────────
//!   works on its state, and         pending deltas, in order
//!   notes what changed    ─capture─▶  [seq 4][seq 5]                  part.produce():
//!                        queues the                                     build every earlier
//!                        delta, gets   base: the state as of            capture, then lock the
//!                        Capture(5)    the deltas merged  ◀───────────  base, merge deltas ≤ 5,
//!                                                                       build the batches
//! ```
//!
//! A capture hands the layers a delta (what changed since the previous
//! one: O(changes)) and returns a [`Capture`]; its parts are deferred
//! batches that the tail builds by merging the deltas up to its own into
//! the base and encoding the base (O(state), off the compute thread).
//!
//! Rules that keep every capture exact:
//!
//! - Deltas are merged in the order they were queued, and a capture merges
//!   only the deltas up to its own, so the base it builds from is the state
//!   at its barrier even while the compute thread queues later deltas.
//! - Building a capture first builds every earlier capture still held, so
//!   the order in which tails (or the compute thread) build them does not
//!   matter.
//! - A delta is queued before its capture exists, so a capture dropped
//!   unbuilt (a failed or cancelled tail) loses nothing: the next one
//!   merges its delta.
//! - An error or a panic while the base is changed marks it damaged (the
//!   lock does not poison): every later use fails instead of reading half-
//!   merged state, and the operator is recovered from a checkpoint.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Weak};

use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;

use super::DeferredBatch;
use crate::error::{EngineError, Result};

/// The base layer of one operator's state.
pub trait Base: Send + 'static {
    /// What changed between two captures.
    type Delta: Send + 'static;

    /// Fold one delta in. An error leaves the base damaged.
    fn absorb(&mut self, delta: Self::Delta) -> Result<()>;
}

/// The delta of a base that is a map by key: each changed key's value now
/// (None: the key is gone), or, with `replace_all`, every key's (the first
/// capture of an operator that tracked nothing before it).
pub struct KeyedChanges<V> {
    /// Whether `entries` is the whole map.
    pub replace_all: bool,
    /// Changed keys and their values now.
    pub entries: Vec<(Vec<u8>, Option<V>)>,
}

impl<V> KeyedChanges<V> {
    /// Apply to the map it is a delta of.
    pub fn apply(self, map: &mut std::collections::BTreeMap<Vec<u8>, V>) {
        if self.replace_all {
            map.clear();
        }
        for (key, value) in self.entries {
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
    }
}

/// Builds a capture's parts from the base as of its barrier: per part, its
/// batches (chunks that a reader concatenates, so that no step of building
/// or encoding one copies a whole large state at once).
pub type Build<B> = Box<dyn FnOnce(&mut B) -> Result<Vec<Vec<RecordBatch>>> + Send>;

struct Guarded<B> {
    base: B,
    /// The last delta merged.
    seq: u64,
    /// Set while the base is being changed: still set after an error or a
    /// panic part-way.
    damaged: bool,
}

impl<B: Base> Guarded<B> {
    fn change<T>(&mut self, f: impl FnOnce(&mut B) -> Result<T>) -> Result<T> {
        if self.damaged {
            return Err(EngineError::Internal(
                "operator state was left half-merged by an earlier failure".into(),
            ));
        }
        self.damaged = true;
        let out = f(&mut self.base)?;
        self.damaged = false;
        Ok(out)
    }
}

struct Pending<D> {
    deltas: VecDeque<(u64, D)>,
    /// The last sequence number handed out.
    last: u64,
}

/// A base, the deltas not yet merged into it, and the captures taken.
pub struct Layers<B: Base> {
    base: Mutex<Guarded<B>>,
    pending: Mutex<Pending<B::Delta>>,
    /// Captures not yet dropped, oldest first.
    captures: Mutex<Vec<Weak<Capture<B>>>>,
}

impl<B: Base> Layers<B> {
    /// Layers over `base`.
    pub fn new(base: B) -> Arc<Self> {
        Arc::new(Self {
            base: Mutex::new(Guarded {
                base,
                seq: 0,
                damaged: false,
            }),
            pending: Mutex::new(Pending {
                deltas: VecDeque::new(),
                last: 0,
            }),
            captures: Mutex::new(Vec::new()),
        })
    }

    /// Queue a delta (never waits for a tail building from the base).
    pub fn queue(&self, delta: B::Delta) {
        let mut pending = self.pending.lock();
        pending.last += 1;
        let seq = pending.last;
        pending.deltas.push_back((seq, delta));
    }

    /// A capture of the state as of every delta queued so far; `build`
    /// makes its batches from the base, once, when a part is first asked
    /// for. Returns the capture's `parts` deferred batches.
    pub fn capture(self: &Arc<Self>, parts: usize, build: Build<B>) -> Vec<Arc<dyn DeferredBatch>> {
        let through = self.pending.lock().last;
        let capture = Arc::new(Capture {
            layers: Arc::clone(self),
            through,
            build: Mutex::new(Some(build)),
            built: Mutex::new(None),
        });
        {
            let mut captures = self.captures.lock();
            captures.retain(|c| c.strong_count() > 0);
            captures.push(Arc::downgrade(&capture));
        }
        (0..parts)
            .map(|index| {
                let part: Arc<dyn DeferredBatch> = Arc::new(CapturePart {
                    capture: Arc::clone(&capture),
                    index,
                });
                part
            })
            .collect()
    }

    /// Run `f` on the base with every queued delta merged, after building
    /// every capture still held (they must not see what is merged now).
    pub fn with_latest<T>(&self, f: impl FnOnce(&mut B) -> Result<T>) -> Result<T> {
        self.build_captures_before(u64::MAX)?;
        let through = self.pending.lock().last;
        self.with_base_through(through, |b| f(b))
    }

    /// Lock the base, merge the queued deltas up to `through`, check that
    /// it is then exactly at `through`, and run `f` on it.
    fn with_base_through<T>(&self, through: u64, f: impl FnOnce(&mut B) -> Result<T>) -> Result<T> {
        let mut guarded = self.base.lock();
        loop {
            let next = {
                let mut pending = self.pending.lock();
                match pending.deltas.front() {
                    Some((seq, _)) if *seq <= through => pending.deltas.pop_front(),
                    _ => None,
                }
            };
            let Some((seq, delta)) = next else { break };
            guarded.change(|b| b.absorb(delta))?;
            guarded.seq = seq;
        }
        if guarded.seq > through {
            return Err(EngineError::Internal(format!(
                "operator state captured at delta {through} built after delta {} was merged",
                guarded.seq
            )));
        }
        guarded.change(f)
    }

    /// Build every capture still held whose barrier is before delta
    /// `before`, oldest first.
    fn build_captures_before(&self, before: u64) -> Result<()> {
        let earlier: Vec<Arc<Capture<B>>> = self
            .captures
            .lock()
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|c| c.through < before)
            .collect();
        for c in earlier {
            c.batches()?;
        }
        Ok(())
    }
}

/// An operator's state captured at a barrier, built when first asked for.
pub struct Capture<B: Base> {
    layers: Arc<Layers<B>>,
    through: u64,
    build: Mutex<Option<Build<B>>>,
    built: Mutex<Option<Vec<Vec<RecordBatch>>>>,
}

impl<B: Base> Capture<B> {
    /// The capture's parts, built on first use.
    fn batches(&self) -> Result<Vec<Vec<RecordBatch>>> {
        let mut built = self.built.lock();
        if let Some(b) = built.as_ref() {
            return Ok(b.clone());
        }
        self.layers.build_captures_before(self.through)?;
        let build = self.build.lock().take().ok_or_else(|| {
            EngineError::Internal("a capture whose build failed was asked for again".into())
        })?;
        let batches = self.layers.with_base_through(self.through, build)?;
        *built = Some(batches.clone());
        Ok(batches)
    }
}

/// One batch of a [`Capture`].
struct CapturePart<B: Base> {
    capture: Arc<Capture<B>>,
    index: usize,
}

impl<B: Base> DeferredBatch for CapturePart<B> {
    fn produce(&self) -> Result<RecordBatch> {
        let chunks = self.produce_chunks()?;
        let first = chunks
            .first()
            .ok_or_else(|| EngineError::Internal(format!("part {} has no batch", self.index)))?;
        Ok(arrow::compute::concat_batches(&first.schema(), &chunks)?)
    }

    fn produce_chunks(&self) -> Result<Vec<RecordBatch>> {
        self.capture
            .batches()?
            .get(self.index)
            .cloned()
            .ok_or_else(|| EngineError::Internal(format!("a capture has no part {}", self.index)))
    }
}

impl<B: Base> fmt::Debug for CapturePart<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CapturePart")
            .field("through", &self.capture.through)
            .field("index", &self.index)
            .field("built", &self.capture.built.lock().is_some())
            .finish()
    }
}
