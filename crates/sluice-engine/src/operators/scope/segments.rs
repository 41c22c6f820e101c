//! Accumulators cut into segments of a fixed number of groups.
//!
//! DataFusion's `GroupsAccumulator` hands its state out only by draining,
//! and only all of it at once: `EmitTo::First(n)` copies the groups it
//! keeps, so draining a large accumulator in pieces is quadratic. A
//! checkpoint tail that drains an aggregation of ten million groups would
//! therefore do one long unit of memory-bound copying, which slows the
//! compute thread on the other core however the rest of the tail is paced
//! (see `state::pace`).
//!
//! So every set of accumulators a scope keeps (the live layer on the
//! compute thread, a delta in flight, the base) is a [`Segments`]: group
//! `g` lives in segment `g / size` at offset `g % size`, each segment its
//! own accumulators. Draining is one segment at a time, so no unit of a
//! tail grows with the state. The segment size is the base's chunk size,
//! so a drained segment is exactly one frozen chunk of the base.
//!
//! ```text
//!  groups:    0 .. size-1 | size .. 2*size-1 | 2*size .. len-1
//!  segments:  [ accs 0 ]    [ accs 1 ]          [ accs 2 (partial) ]
//!  a batch:   rows routed by segment (counting sort, one `take` of the
//!             inputs when they interleave), one update per touched segment
//! ```
//!
//! A scope under `size` groups has one segment and updates exactly as a
//! single set of accumulators would.

use std::borrow::Cow;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, UInt32Array};
use arrow::compute::{concat, interleave, take};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use crate::error::{EngineError, Result};
use crate::operators::groups::{AggregateFunctions, AggregateInputs};
use crate::state::pace;

/// One segment's accumulators, one per aggregate.
type Accumulators = Vec<Box<dyn GroupsAccumulator>>;

/// Per aggregate, its state columns (what `GroupsAccumulator::state`
/// returns for each aggregate of one set).
pub(super) type States = Vec<Vec<ArrayRef>>;

/// Accumulators over groups `0..len`, in segments of `size` groups.
pub(super) struct Segments {
    size: usize,
    segs: Vec<Accumulators>,
    funcs: AggregateFunctions,
}

/// Where each row of a batch goes: rows grouped by segment.
struct Routing<'a> {
    /// The order to take the rows in (None: they are already grouped).
    perm: Option<UInt32Array>,
    /// Each row's offset in its segment, in `perm` order.
    offsets: Cow<'a, [usize]>,
    /// Consecutive rows (in `perm` order) bound for one segment.
    runs: Vec<Run>,
}

struct Run {
    segment: usize,
    start: usize,
    len: usize,
    /// Groups of the segment (its `total_num_groups`).
    groups: usize,
}

impl Segments {
    /// No groups yet (one empty segment, so results have their types).
    pub fn new(funcs: &AggregateFunctions, size: usize) -> Result<Self> {
        Ok(Self {
            size: size.max(1),
            segs: vec![funcs.accumulators()?],
            funcs: funcs.clone(),
        })
    }

    /// Segments of `size` groups from accumulators already cut that way
    /// (segment `i` over groups `i * size ..`).
    fn from_parts(
        funcs: &AggregateFunctions,
        size: usize,
        segs: Vec<Accumulators>,
    ) -> Result<Self> {
        if segs.is_empty() {
            return Self::new(funcs, size);
        }
        Ok(Self {
            size: size.max(1),
            segs,
            funcs: funcs.clone(),
        })
    }

    /// A set over `len` groups thawed from drained segments (`states[i]`
    /// holds segment `i`'s groups).
    pub fn thaw<'a>(
        funcs: &AggregateFunctions,
        size: usize,
        states: impl Iterator<Item = (&'a States, usize)>,
    ) -> Result<Self> {
        let mut segs = Vec::new();
        for (state, len) in states {
            let mut accs = funcs.accumulators()?;
            let at: Vec<usize> = (0..len).collect();
            for (acc, cols) in accs.iter_mut().zip(state) {
                acc.merge_batch(cols, &at, len)?;
            }
            segs.push(accs);
        }
        Self::from_parts(funcs, size, segs)
    }

    /// Groups per segment.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Groups of segment `i` when the set holds `total` groups.
    fn groups_of(&self, i: usize, total: usize) -> usize {
        total.saturating_sub(i * self.size).min(self.size)
    }

    /// Route `idx` (group per row, all below `total`), adding the segments
    /// `total` groups need.
    fn route<'a>(&mut self, idx: &'a [usize], total: usize) -> Result<Routing<'a>> {
        let count = total.div_ceil(self.size).max(1);
        while self.segs.len() < count {
            self.segs.push(self.funcs.accumulators()?);
        }
        if count == 1 {
            return Ok(Routing {
                perm: None,
                offsets: Cow::Borrowed(idx),
                runs: vec![Run {
                    segment: 0,
                    start: 0,
                    len: idx.len(),
                    groups: total,
                }],
            });
        }
        let size = self.size;
        let mut runs: Vec<Run> = Vec::new();
        let mut grouped = true;
        for (row, &g) in idx.iter().enumerate() {
            let segment = g / size;
            match runs.last_mut() {
                Some(run) if run.segment == segment => run.len += 1,
                Some(run) if run.segment > segment => {
                    grouped = false;
                    break;
                }
                _ => runs.push(Run {
                    segment,
                    start: row,
                    len: 1,
                    groups: self.groups_of(segment, total),
                }),
            }
        }
        if grouped {
            // Rows already in segment order (a restore, keys created in
            // order): slices, no copy of the inputs.
            let offsets = idx.iter().map(|g| g % size).collect();
            return Ok(Routing {
                perm: None,
                offsets: Cow::Owned(offsets),
                runs,
            });
        }
        // A counting sort of the rows by segment.
        let mut starts = vec![0usize; count + 1];
        for &g in idx {
            let slot = starts
                .get_mut(g / size + 1)
                .ok_or_else(|| out_of_range(g))?;
            *slot += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut next = starts.clone();
        let mut perm = vec![0u32; idx.len()];
        let mut offsets = vec![0usize; idx.len()];
        for (row, &g) in idx.iter().enumerate() {
            let at = next[g / size];
            next[g / size] += 1;
            perm[at] = row as u32;
            offsets[at] = g % size;
        }
        let runs = (0..count)
            .filter(|&s| starts[s + 1] > starts[s])
            .map(|s| Run {
                segment: s,
                start: starts[s],
                len: starts[s + 1] - starts[s],
                groups: self.groups_of(s, total),
            })
            .collect();
        Ok(Routing {
            perm: Some(UInt32Array::from(perm)),
            offsets: Cow::Owned(offsets),
            runs,
        })
    }

    /// Fold a batch's rows (group `idx[i]` for row `i`) into the
    /// accumulators, the set then holding `total` groups.
    pub fn update(&mut self, idx: &[usize], total: usize, inputs: &AggregateInputs) -> Result<()> {
        let routing = self.route(idx, total)?;
        let taken;
        let inputs = match &routing.perm {
            None => inputs,
            Some(perm) => {
                taken = inputs
                    .iter()
                    .map(|(values, filter)| {
                        let filter = match filter {
                            Some(f) => Some(take_boolean(f, perm)?),
                            None => None,
                        };
                        Ok((take_columns(values, perm)?, filter))
                    })
                    .collect::<Result<AggregateInputs>>()?;
                &taken
            }
        };
        let whole = routing.runs.len() == 1;
        self.each_run(&routing, |seg, run, offsets| {
            for (acc, (values, filter)) in seg.iter_mut().zip(inputs) {
                if whole {
                    acc.update_batch(values, offsets, filter.as_ref(), run.groups)?;
                } else {
                    let values = slice_columns(values, run.start, run.len);
                    let filter = filter.as_ref().map(|f| f.slice(run.start, run.len));
                    acc.update_batch(&values, offsets, filter.as_ref(), run.groups)?;
                }
            }
            Ok(())
        })
    }

    /// Call `f` with each run's segment, the run, and its rows' offsets.
    fn each_run(
        &mut self,
        routing: &Routing<'_>,
        mut f: impl FnMut(&mut Accumulators, &Run, &[usize]) -> Result<()>,
    ) -> Result<()> {
        for run in &routing.runs {
            let seg = self
                .segs
                .get_mut(run.segment)
                .ok_or_else(|| out_of_range(run.segment * self.size))?;
            let offsets = routing
                .offsets
                .get(run.start..run.start + run.len)
                .unwrap_or_default();
            f(seg, run, offsets)?;
        }
        Ok(())
    }

    /// Merge intermediate states (per aggregate; `None` leaves that
    /// aggregate alone) of rows `idx[i]` into the accumulators, the set
    /// then holding `total` groups.
    pub fn merge(
        &mut self,
        states: &[Option<Vec<ArrayRef>>],
        idx: &[usize],
        total: usize,
    ) -> Result<()> {
        let routing = self.route(idx, total)?;
        let taken;
        let states = match &routing.perm {
            None => states,
            Some(perm) => {
                taken = states
                    .iter()
                    .map(|s| s.as_ref().map(|cols| take_columns(cols, perm)).transpose())
                    .collect::<Result<Vec<_>>>()?;
                &taken
            }
        };
        self.each_run(&routing, |seg, run, offsets| {
            for (acc, state) in seg.iter_mut().zip(states) {
                if let Some(cols) = state {
                    let cols = slice_columns(cols, run.start, run.len);
                    acc.merge_batch(&cols, offsets, run.groups)?;
                }
            }
            Ok(())
        })
    }

    /// Drain every segment of a set holding `total` groups, one at a time
    /// with a pace point after each: per segment, its states and its
    /// number of groups. At least one segment. The accumulators are left
    /// empty.
    pub fn drain(&mut self, total: usize) -> Result<Vec<(States, usize)>> {
        let count = total.div_ceil(self.size).max(1);
        while self.segs.len() < count {
            self.segs.push(self.funcs.accumulators()?);
        }
        let mut out = Vec::with_capacity(count);
        for (i, seg) in self.segs.iter_mut().take(count).enumerate() {
            let states = seg
                .iter_mut()
                .map(|acc| Ok(acc.state(EmitTo::All)?))
                .collect::<Result<States>>()?;
            out.push((states, total.saturating_sub(i * self.size).min(self.size)));
            pace::point();
        }
        Ok(out)
    }

    /// Final values of every group (draining the accumulators), per
    /// aggregate in group order.
    pub fn evaluate(&mut self) -> Result<Vec<ArrayRef>> {
        let per_segment = self
            .segs
            .iter_mut()
            .map(|seg| {
                seg.iter_mut()
                    .map(|acc| Ok(acc.evaluate(EmitTo::All)?))
                    .collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        concat_segments(per_segment)
    }

    /// Current values of every group of a set holding `total` groups,
    /// leaving the accumulators as they were.
    pub fn current_values(&mut self, total: usize) -> Result<Vec<ArrayRef>> {
        let mut per_segment = Vec::with_capacity(self.segs.len());
        for (i, seg) in self.segs.iter_mut().enumerate() {
            let n = total.saturating_sub(i * self.size).min(self.size);
            if n == 0 && i > 0 {
                break;
            }
            let identity: Vec<usize> = (0..n).collect();
            let mut fresh = self.funcs.accumulators()?;
            let mut out = Vec::with_capacity(seg.len());
            for (acc, tmp) in seg.iter_mut().zip(fresh.iter_mut()) {
                let state = acc.state(EmitTo::All)?;
                acc.merge_batch(&state, &identity, n)?;
                tmp.merge_batch(&state, &identity, n)?;
                out.push(tmp.evaluate(EmitTo::All)?);
            }
            per_segment.push(out);
        }
        concat_segments(per_segment)
    }
}

/// Per aggregate, the concatenation of each segment's column.
fn concat_segments(per_segment: Vec<Vec<ArrayRef>>) -> Result<Vec<ArrayRef>> {
    let mut segments = per_segment.into_iter();
    let Some(first) = segments.next() else {
        return Err(EngineError::Internal(
            "accumulators without a segment".into(),
        ));
    };
    let rest: Vec<Vec<ArrayRef>> = segments.collect();
    if rest.is_empty() {
        return Ok(first);
    }
    first
        .iter()
        .enumerate()
        .map(|(a, head)| {
            let mut parts: Vec<&dyn Array> = vec![head.as_ref()];
            parts.extend(rest.iter().filter_map(|s| s.get(a).map(|c| c.as_ref())));
            Ok(concat(&parts)?)
        })
        .collect()
}

/// Rows of drained segments: for aggregate `a`, row `k` of the result is
/// group `locals[k]` of a set whose segments (of `size` groups) were
/// drained into `drained`.
pub(super) fn gather(
    drained: &[(States, usize)],
    a: usize,
    locals: &[usize],
    size: usize,
) -> Result<Vec<ArrayRef>> {
    let width = drained
        .first()
        .and_then(|(s, _)| s.get(a))
        .map_or(0, Vec::len);
    if let [(only, _)] = drained {
        let at = UInt32Array::from_iter_values(locals.iter().map(|&l| l as u32));
        let cols = only.get(a).ok_or_else(|| missing_aggregate(a))?;
        return take_columns(cols, &at);
    }
    let at: Vec<(usize, usize)> = locals.iter().map(|&l| (l / size, l % size)).collect();
    (0..width)
        .map(|c| {
            let arrays = drained
                .iter()
                .map(|(s, _)| {
                    s.get(a)
                        .and_then(|cols| cols.get(c))
                        .map(|col| col.as_ref())
                        .ok_or_else(|| missing_aggregate(a))
                })
                .collect::<Result<Vec<&dyn Array>>>()?;
            Ok(interleave(&arrays, &at)?)
        })
        .collect()
}

fn take_columns(cols: &[ArrayRef], at: &UInt32Array) -> Result<Vec<ArrayRef>> {
    cols.iter()
        .map(|c| Ok(take(c.as_ref(), at, None)?))
        .collect()
}

fn take_boolean(f: &BooleanArray, at: &UInt32Array) -> Result<BooleanArray> {
    Ok(take(f, at, None)?.as_boolean().clone())
}

fn slice_columns(cols: &[ArrayRef], start: usize, len: usize) -> Vec<ArrayRef> {
    cols.iter().map(|c| c.slice(start, len)).collect()
}

fn out_of_range(g: usize) -> EngineError {
    EngineError::Internal(format!("aggregate group index {g} is out of range"))
}

fn missing_aggregate(a: usize) -> EngineError {
    EngineError::Internal(format!("a drained aggregate segment has no aggregate {a}"))
}
