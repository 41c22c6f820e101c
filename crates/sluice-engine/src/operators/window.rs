//! Tumbling and hopping window aggregation.
//!
//! Each open window instance is one aggregation scope (its own group table
//! and grouped accumulators), kept in a map ordered by window start. A batch
//! is split by window once; each window folds its rows in one vectorized
//! update. When the watermark passes a window's end, its final rows are
//! emitted (EMIT ON WINDOW CLOSE) and its state is freed; with EMIT CHANGES
//! each cycle emits retractions and new rows for the groups it changed.

use std::collections::BTreeMap;

use arrow::array::ArrayRef;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use sluice_sql::plan::GroupSlot;
use sluice_sql::window_udf::tumble_start;
use sluice_sql::{EmitMode, WindowKind};

use super::changelog::output_batch;
use super::expr::{eval, event_time_ms, overflow, time_column, time_values, PhysExpr};
use super::groups::{AggregateFunctions, KeyCodec, KeyRows};
use super::scope::{GroupedAggregates, ScopeSnapshot};
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::Result;
use crate::partition::placement::VnodePlacement;
use crate::state::{SnapshotReader, SnapshotWriter};

/// The start of the window whose scope `part` (a snapshot part) holds.
fn window_start(part: &RecordBatch) -> Result<i64> {
    part.schema()
        .metadata()
        .get("window_start")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| crate::error::EngineError::Internal("window snapshot without start".into()))
}

/// Window starts a row at `t` belongs to, for fixed-size windows.
///
/// Every window must be representable: its start and its end (start +
/// size) are BIGINT milliseconds. A row near either end of the range whose
/// window is not gets the reason as an error, never a wrapped window (an
/// event time of `i64::MIN` used to land in a window near `i64::MAX`).
pub fn window_starts(
    kind: WindowKind,
    t: i64,
    out: &mut Vec<i64>,
) -> std::result::Result<(), String> {
    out.clear();
    let outside =
        |what: String| format!("event time {t} ms: {what} is outside the BIGINT millisecond range");
    let fits = |start: i64, size: i64| start.checked_add(size).is_some();
    match kind {
        WindowKind::Tumble { size_ms, offset_ms } => {
            let what = || format!("its tumble window of {size_ms} ms (offset {offset_ms} ms)");
            match tumble_start(t, size_ms, offset_ms) {
                Some(start) if fits(start, size_ms) => out.push(start),
                _ => return Err(outside(what())),
            }
        }
        WindowKind::Hop { slide_ms, size_ms } => {
            let what = |start: i128| {
                format!(
                    "its hop window [{start}, {}) ms (slide {slide_ms} ms, size {size_ms} ms)",
                    start + i128::from(size_ms)
                )
            };
            // Per row: i64 steps when the latest start, its end and the
            // lowest bound all fit (every window then fits).
            let fast = t
                .div_euclid(slide_ms)
                .checked_mul(slide_ms)
                .filter(|last| last.checked_add(size_ms).is_some())
                .zip(t.checked_sub(size_ms));
            if let Some((last, floor)) = fast {
                let mut start = last;
                while start > floor {
                    out.push(start);
                    match start.checked_sub(slide_ms) {
                        Some(s) => start = s,
                        None => break,
                    }
                }
                return Ok(());
            }
            // Exactly, in i128: the lowest start, t - size + slide, may be
            // below i64::MIN.
            let (t128, slide, size) = (i128::from(t), i128::from(slide_ms), i128::from(size_ms));
            let mut start = t128.div_euclid(slide) * slide;
            while start > t128 - size {
                match i64::try_from(start) {
                    Ok(s) if fits(s, size_ms) => out.push(s),
                    _ => return Err(outside(what(start))),
                }
                start -= slide;
            }
        }
        WindowKind::Session { .. } => {}
    }
    Ok(())
}

/// The end of an open window; every window was checked to have one when it
/// opened, so a failure here means damaged state (e.g. a checkpoint).
fn window_end(start: i64, size: i64) -> Result<i64> {
    start.checked_add(size).ok_or_else(|| {
        crate::error::EngineError::Internal(format!(
            "open window at {start} ms has no representable end (size {size} ms)"
        ))
    })
}

fn window_size(kind: WindowKind) -> i64 {
    match kind {
        WindowKind::Tumble { size_ms, .. } | WindowKind::Hop { size_ms, .. } => size_ms,
        WindowKind::Session { gap_ms } => gap_ms,
    }
}

/// The shared pieces of a windowed aggregation's definition.
pub struct WindowedGroupBy {
    /// Event-time expression.
    pub time: PhysExpr,
    /// Its name, for errors about a row's window.
    pub time_name: String,
    /// Type of the event time, for window bound columns.
    pub time_type: DataType,
    /// Key expressions.
    pub keys: Vec<PhysExpr>,
    /// GROUP BY entries in output order.
    pub slots: Vec<GroupSlot>,
    /// Key encoding.
    pub codec: KeyCodec,
    /// Aggregate functions.
    pub funcs: AggregateFunctions,
    /// Output schema.
    pub schema: SchemaRef,
    /// Emit mode.
    pub emit: EmitMode,
}

impl WindowedGroupBy {
    /// Evaluate and encode the key columns of a batch.
    pub fn encode_keys(&self, batch: &RecordBatch) -> Result<KeyRows> {
        let cols = self
            .keys
            .iter()
            .map(|k| eval(k, batch))
            .collect::<Result<Vec<_>>>()?;
        self.codec.encode(&cols, batch.num_rows())
    }

    /// Assemble output columns: GROUP BY entries in written order, then aggregates.
    pub fn columns(
        &self,
        keys: Vec<ArrayRef>,
        start: i64,
        end: i64,
        values: Vec<ArrayRef>,
        len: usize,
    ) -> Result<Vec<ArrayRef>> {
        self.columns_with(keys, values, |bound, name| {
            let ms = match bound {
                GroupSlot::WindowEnd => end,
                _ => start,
            };
            time_column(ms, &self.time_type, len, name)
        })
    }

    /// Assemble output columns as [`Self::columns`] does, with window bounds
    /// that differ per row (sessions'): `starts[i]` and `ends[i]` are row
    /// `i`'s, in milliseconds.
    pub fn columns_per_row(
        &self,
        keys: Vec<ArrayRef>,
        starts: &[i64],
        ends: &[i64],
        values: Vec<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        self.columns_with(keys, values, |bound, name| {
            let ms = match bound {
                GroupSlot::WindowEnd => ends,
                _ => starts,
            };
            time_values(ms, &self.time_type, name)
        })
    }

    /// GROUP BY entries in written order (a window bound's column made by
    /// `bound(slot, column name)`), then aggregates.
    fn columns_with(
        &self,
        keys: Vec<ArrayRef>,
        values: Vec<ArrayRef>,
        bound: impl Fn(&GroupSlot, &str) -> Result<ArrayRef>,
    ) -> Result<Vec<ArrayRef>> {
        let mut cols = Vec::with_capacity(self.slots.len() + values.len() + 1);
        for (i, slot) in self.slots.iter().enumerate() {
            let name = self.schema.field(i).name();
            cols.push(match slot {
                GroupSlot::Key(i) => std::sync::Arc::clone(&keys[*i]),
                GroupSlot::WindowStart | GroupSlot::WindowEnd => bound(slot, name)?,
            });
        }
        cols.extend(values);
        Ok(cols)
    }
}

/// Tumbling or hopping window aggregation over one input.
pub struct WindowAggregate {
    def: WindowedGroupBy,
    kind: WindowKind,
    windows: BTreeMap<i64, GroupedAggregates>,
    /// Every window ending at or before this has been closed.
    closed_through: i64,
    /// Rows dropped because their window had already closed.
    dropped_late: u64,
}

impl WindowAggregate {
    /// A new operator.
    pub fn new(def: WindowedGroupBy, kind: WindowKind) -> Self {
        Self {
            def,
            kind,
            windows: BTreeMap::new(),
            closed_through: i64::MIN,
            dropped_late: 0,
        }
    }

    /// Number of open windows (for tests and metrics).
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }
}

impl StatefulOperator for WindowAggregate {
    fn kind(&self) -> &'static str {
        "window aggregate"
    }

    /// Fold one batch into its windows; returns nothing (windows emit in
    /// [`Self::advance`]). Rows whose every window has closed are counted in
    /// `dropped_late`.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        let batch = &batch;
        if batch.num_rows() == 0 {
            return Ok(vec![]);
        }
        let times = event_time_ms(&eval(&self.def.time, batch)?, &self.def.time_name)?;
        let size = window_size(self.kind);
        let mut by_window: FxHashMap<i64, Vec<u32>> = FxHashMap::default();
        let mut starts = Vec::new();
        for (row, t) in times.iter().enumerate() {
            let Some(t) = t else { continue };
            window_starts(self.kind, t, &mut starts)
                .map_err(|detail| overflow(&self.def.time_name, detail))?;
            for s in &starts {
                if s.saturating_add(size) <= self.closed_through {
                    self.dropped_late += 1;
                    continue;
                }
                by_window.entry(*s).or_default().push(row as u32);
            }
        }
        if by_window.is_empty() {
            return Ok(vec![]);
        }
        let keys = self.def.encode_keys(batch)?;
        let inputs = self.def.funcs.evaluate_inputs(batch)?;
        let all_rows = by_window.len() == 1
            && by_window
                .values()
                .next()
                .is_some_and(|r| r.len() == batch.num_rows());
        for (start, rows) in by_window {
            let scope = match self.windows.entry(start) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => {
                    e.insert(GroupedAggregates::new(&self.def.codec, &self.def.funcs)?)
                }
            };
            let sel = if all_rows {
                None
            } else {
                Some(rows.as_slice())
            };
            scope.update(&self.def.codec, &keys, sel, &inputs)?;
        }
        Ok(vec![])
    }

    /// Write every open window's state.
    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        out.set("closed_through", self.closed_through);
        out.set("dropped_late", self.dropped_late);
        for (start, scope) in self.windows.iter_mut() {
            let extra = vec![("window_start".to_string(), start.to_string())];
            out.push_deferred(scope.capture(&self.def.codec, extra)?);
        }
        Ok(())
    }

    /// Replace state with a snapshot's.
    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        self.closed_through = snap.get("closed_through")?;
        self.dropped_late = snap.get("dropped_late")?;
        self.windows.clear();
        let nkeys = self.def.keys.len();
        for part in snap.parts() {
            let start = window_start(part)?;
            let scope = ScopeSnapshot::from_batch(part)?;
            self.windows.insert(
                start,
                GroupedAggregates::restore(&self.def.codec, &self.def.funcs, nkeys, &scope)?,
            );
        }
        Ok(())
    }

    /// Each window's groups of `keep`'s vnodes, from every old owner's
    /// scope of that window. Windows are closed through the earliest of
    /// the owners' points, so no window any of them held open is closed
    /// here; the late-row count starts afresh on this node.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let mut by_start: BTreeMap<i64, Vec<ScopeSnapshot>> = BTreeMap::new();
        let mut closed_through: Option<i64> = None;
        for snap in snaps {
            let closed: i64 = snap.get("closed_through")?;
            closed_through = Some(closed_through.map_or(closed, |c| c.min(closed)));
            for part in snap.parts() {
                by_start
                    .entry(window_start(part)?)
                    .or_default()
                    .push(ScopeSnapshot::from_batch(part)?);
            }
        }
        self.closed_through = closed_through.unwrap_or(i64::MIN);
        self.dropped_late = 0;
        self.windows.clear();
        let nkeys = self.def.keys.len();
        for (start, scopes) in by_start {
            let merged = ScopeSnapshot::merge_owned(&scopes, nkeys, keep)?;
            if merged.batch.num_rows() > 0 {
                self.windows.insert(
                    start,
                    GroupedAggregates::restore(&self.def.codec, &self.def.funcs, nkeys, &merged)?,
                );
            }
        }
        Ok(())
    }

    /// Emit what the watermark makes final (or, in changelog mode, what
    /// changed) and free closed windows. In `EMIT ON WINDOW CLOSE` mode the
    /// batches are the final rows of the windows ending at or before
    /// `watermark`; in `EMIT CHANGES` mode, each window's retractions and
    /// inserts of this cycle.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        let size = window_size(self.kind);
        let mut out = Vec::new();
        if self.def.emit == EmitMode::Changes {
            for (start, scope) in self.windows.iter_mut() {
                if let Some((keys, values, kinds)) = scope.changes(&self.def.codec)? {
                    let len = kinds.len();
                    let cols =
                        self.def
                            .columns(keys, *start, window_end(*start, size)?, values, len)?;
                    out.push(output_batch(&self.def.schema, cols, Some(&kinds))?);
                }
            }
        }
        while let Some(entry) = self.windows.first_entry() {
            let start = *entry.key();
            if start.saturating_add(size) > watermark {
                break;
            }
            let scope = entry.remove();
            if self.def.emit == EmitMode::OnWindowClose && !scope.is_empty() {
                let (keys, values, len) = scope.finish(&self.def.codec)?;
                let cols = self
                    .def
                    .columns(keys, start, window_end(start, size)?, values, len)?;
                out.push(output_batch(&self.def.schema, cols, None)?);
            }
        }
        self.closed_through = self.closed_through.max(watermark);
        Ok(out.into_iter().filter(|b| b.num_rows() > 0).collect())
    }

    fn dropped_late(&self) -> u64 {
        self.dropped_late
    }
}

/// Non-windowed GROUP BY: one scope that never closes, changelog output.
pub struct UpdatingAggregate {
    keys: Vec<PhysExpr>,
    codec: KeyCodec,
    funcs: AggregateFunctions,
    scope: GroupedAggregates,
    schema: SchemaRef,
}

impl UpdatingAggregate {
    /// A new operator.
    pub fn new(
        keys: Vec<PhysExpr>,
        codec: KeyCodec,
        funcs: AggregateFunctions,
        schema: SchemaRef,
    ) -> Result<Self> {
        let scope = GroupedAggregates::new(&codec, &funcs)?;
        Ok(Self {
            keys,
            codec,
            funcs,
            scope,
            schema,
        })
    }
}

impl StatefulOperator for UpdatingAggregate {
    fn kind(&self) -> &'static str {
        "aggregate"
    }

    /// Fold a batch in; returns nothing (changes are emitted once per cycle
    /// by [`Self::advance`]).
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        let batch = &batch;
        if batch.num_rows() == 0 {
            return Ok(vec![]);
        }
        let key_cols = self
            .keys
            .iter()
            .map(|k| eval(k, batch))
            .collect::<Result<Vec<_>>>()?;
        let keys = self.codec.encode(&key_cols, batch.num_rows())?;
        let inputs = self.funcs.evaluate_inputs(batch)?;
        self.scope.update(&self.codec, &keys, None, &inputs)?;
        Ok(vec![])
    }

    /// Write the state.
    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        out.push_deferred(self.scope.capture(&self.codec, vec![])?);
        Ok(())
    }

    /// Replace state with a snapshot's.
    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        let part = snap.parts().first().ok_or_else(|| {
            crate::error::EngineError::Internal("aggregate snapshot is empty".into())
        })?;
        let scope = ScopeSnapshot::from_batch(part)?;
        self.scope = GroupedAggregates::restore(&self.codec, &self.funcs, self.keys.len(), &scope)?;
        Ok(())
    }

    /// The groups of `keep`'s vnodes from every old owner's scope.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let scopes = snaps
            .iter()
            .map(|snap| {
                let part = snap.parts().first().ok_or_else(|| {
                    crate::error::EngineError::Internal("aggregate snapshot is empty".into())
                })?;
                ScopeSnapshot::from_batch(part)
            })
            .collect::<Result<Vec<_>>>()?;
        self.scope = if scopes.is_empty() {
            GroupedAggregates::new(&self.codec, &self.funcs)?
        } else {
            let merged = ScopeSnapshot::merge_owned(&scopes, self.keys.len(), keep)?;
            GroupedAggregates::restore(&self.codec, &self.funcs, self.keys.len(), &merged)?
        };
        Ok(())
    }

    /// Emit the changes of this cycle: at most one batch, a retraction of
    /// every changed group's previous row and an insert of its new one. The
    /// watermark does not matter: a non-windowed group never closes.
    fn advance(&mut self, _watermark: i64) -> Result<Vec<RecordBatch>> {
        match self.scope.changes(&self.codec)? {
            None => Ok(vec![]),
            Some((mut keys, values, kinds)) => {
                keys.extend(values);
                let b = output_batch(&self.schema, keys, Some(&kinds))?;
                Ok(vec![b])
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn starts(kind: WindowKind, t: i64) -> Vec<i64> {
        let mut v = Vec::new();
        window_starts(kind, t, &mut v).unwrap();
        v.sort();
        v
    }

    #[test]
    fn tumble_assignment_with_offset() {
        let k = WindowKind::Tumble {
            size_ms: 10,
            offset_ms: 0,
        };
        assert_eq!(starts(k, 0), vec![0]);
        assert_eq!(starts(k, 9), vec![0]);
        assert_eq!(starts(k, 10), vec![10]);
        assert_eq!(starts(k, -3), vec![-10]);
        let k = WindowKind::Tumble {
            size_ms: 10,
            offset_ms: 4,
        };
        assert_eq!(starts(k, 3), vec![-6]);
        assert_eq!(starts(k, 4), vec![4]);
        assert_eq!(starts(k, 13), vec![4]);
        assert_eq!(starts(k, 14), vec![14]);
    }

    /// Hop windows by the exact `i128` definition: every start `s` with
    /// `s % slide == 0` and `s <= t < s + size`, or an error when one of them
    /// (or its end) is not a BIGINT.
    fn exact_hop(t: i64, slide: i64, size: i64) -> Option<Vec<i64>> {
        let (t, slide, size) = (i128::from(t), i128::from(slide), i128::from(size));
        let mut out = Vec::new();
        let mut start = t.div_euclid(slide) * slide;
        while start > t - size {
            let s = i64::try_from(start).ok()?;
            i64::try_from(start + size).ok()?;
            out.push(s);
            start -= slide;
        }
        out.sort();
        Some(out)
    }

    /// The i64 fast path of hop assignment agrees with the exact definition,
    /// the ends of the time range included.
    #[test]
    fn hop_assignment_matches_the_exact_definition_everywhere() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as i64
        };
        let mut times = vec![i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX];
        for _ in 0..300 {
            let t = next();
            times.push(t);
            times.push(i64::MIN.saturating_add(t & 0xffff));
            times.push(i64::MAX.saturating_sub(t & 0xffff));
        }
        for (slide, size) in [(1, 1), (5, 15), (7, 20), (1000, 10_000), (3, 3000)] {
            let kind = WindowKind::Hop {
                slide_ms: slide,
                size_ms: size,
            };
            for &t in &times {
                let mut got = Vec::new();
                let got = window_starts(kind, t, &mut got).ok().map(|()| {
                    got.sort();
                    got
                });
                assert_eq!(
                    got,
                    exact_hop(t, slide, size),
                    "t {t} slide {slide} size {size}"
                );
            }
        }
    }

    #[test]
    fn hop_assignment_overlaps() {
        let k = WindowKind::Hop {
            slide_ms: 5,
            size_ms: 15,
        };
        assert_eq!(starts(k, 0), vec![-10, -5, 0]);
        assert_eq!(starts(k, 4), vec![-10, -5, 0]);
        assert_eq!(starts(k, 5), vec![-5, 0, 5]);
        assert_eq!(starts(k, 14), vec![0, 5, 10]);
        let k = WindowKind::Hop {
            slide_ms: 10,
            size_ms: 10,
        };
        assert_eq!(starts(k, 19), vec![10]);
    }
}
