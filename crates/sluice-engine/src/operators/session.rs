//! Session window aggregation.
//!
//! Sessions are per key: a row at time `t` opens `[t, t + gap)`; sessions
//! that overlap merge, and their aggregate states merge with them. A session
//! closes when the watermark passes its end (last event + gap). Because
//! sessions merge, each holds DataFusion row `Accumulator`s, whose
//! intermediate state can be merged into another session's.
//!
//! A batch is folded in per key, not per row: its rows are numbered by key
//! (a hash of the encoded key), ordered by (key, event time) and the
//! aggregate inputs taken once in that order, so each run of a key's rows
//! closer than the gap is one slice of them. A run that overlaps one open
//! session extends it in place; only a run that bridges two or more
//! sessions merges accumulator states.

use std::hash::BuildHasher;
use std::ops::Range;

use arrow::array::{ArrayRef, Int64Array};
use arrow::record_batch::RecordBatch;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;
use hashbrown::{HashMap, HashTable};
use rustc_hash::FxBuildHasher;

use super::changelog::{output_batch, Op};
use super::expr::{eval, event_time_ms, overflow};
use super::groups::{select_inputs, AggregateInputs, KeyRows};
use super::stateful::{no_such_port, Port, StatefulOperator};
use super::window::WindowedGroupBy;
use crate::error::{EngineError, Result};
use crate::partition::placement::VnodePlacement;
use crate::state::{SnapshotReader, SnapshotWriter};
use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use sluice_sql::EmitMode;

/// A session's GROUP BY key in Arrow's row format; empty when the
/// aggregate has no key columns (a row-format key never is).
type Key = Vec<u8>;

/// An output row: key, window start and end, aggregate values.
type SessionRow = (Key, i64, i64, Vec<ScalarValue>);

struct Session {
    start: i64,
    /// Last event time + gap (exclusive).
    end: i64,
    accs: Vec<Box<dyn Accumulator>>,
    changed: bool,
    /// The row last emitted for this session (changelog mode).
    emitted: Option<Vec<ScalarValue>>,
}

/// Session window aggregation over one input.
pub struct SessionAggregate {
    def: WindowedGroupBy,
    gap_ms: i64,
    /// Each key's open sessions, ordered by start (a key's sessions never
    /// overlap, so they are ordered by end too).
    sessions: HashMap<Key, Vec<Session>, FxBuildHasher>,
    /// Rows retracted by merges this cycle.
    pending_retractions: Vec<SessionRow>,
    closed_through: i64,
    /// No open session ends before this (a lower bound, as sessions only
    /// grow): below it a watermark closes nothing and the scan is skipped.
    earliest_end: i64,
    /// Rows dropped because their session had already closed.
    dropped_late: u64,
}

/// A batch's on-time rows ordered by (key number, event time, row), and
/// the first row of each key number.
struct Ordered {
    rows: Vec<(u32, i64, u32)>,
    firsts: Vec<u32>,
}

impl SessionAggregate {
    /// Which of `keys` (this operator's encoded group keys) are of a vnode
    /// `keep` holds: each decoded to the key's values, as the exchange
    /// routes them.
    fn owned_keys(
        &self,
        keys: &[Key],
        keep: &VnodePlacement,
    ) -> Result<arrow::array::BooleanArray> {
        let columns = match self.def.codec.parser() {
            Some(parser) => self
                .def
                .codec
                .decode_rows(keys.iter().map(|k| parser.parse(k)))?,
            None => Vec::new(),
        };
        keep.rows_owned(&columns, keys.len())
            .map_err(|e| EngineError::Internal(format!("moving session state: {e}")))
    }

    /// A new operator.
    pub fn new(def: WindowedGroupBy, gap_ms: i64) -> Self {
        Self {
            def,
            gap_ms,
            sessions: HashMap::default(),
            pending_retractions: Vec::new(),
            closed_through: i64::MIN,
            earliest_end: i64::MAX,
            dropped_late: 0,
        }
    }

    /// Number of open sessions.
    pub fn open_sessions(&self) -> usize {
        self.sessions.values().map(Vec::len).sum()
    }

    /// Fold a batch in, merging sessions as needed.
    fn fold(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let times = event_time_ms(&eval(&self.def.time, batch)?, &self.def.time_name)?;
        // A session ends `gap` after its last event: that end must be a
        // BIGINT, and then every sum below is too.
        if let Some(t) = times
            .iter()
            .flatten()
            .find(|t| t.checked_add(self.gap_ms).is_none())
        {
            return Err(overflow(
                &self.def.time_name,
                format!(
                    "event time {t} ms: its session end (gap {} ms) is outside the BIGINT millisecond range",
                    self.gap_ms
                ),
            ));
        }
        let keys = self.def.encode_keys(batch)?;
        let inputs = self.def.funcs.evaluate_inputs(batch)?;
        let ordered = self.order(&times, &keys);
        if ordered.rows.is_empty() {
            return Ok(());
        }
        let perm: Vec<u32> = ordered.rows.iter().map(|r| r.2).collect();
        let inputs = select_inputs(&inputs, Some(&perm))?;
        let rows = &ordered.rows;
        let mut from = 0;
        while from < rows.len() {
            let id = rows[from].0;
            let to = from + rows[from..].partition_point(|r| r.0 == id);
            let key: &[u8] = match &keys {
                KeyRows::Rows(r) => r.row(ordered.firsts[id as usize] as usize).data(),
                KeyRows::Unit(_) => &[],
            };
            // Split into runs where consecutive events are closer than the gap.
            let mut run = from;
            for i in from + 1..=to {
                if i == to || rows[i].1 >= rows[i - 1].1 + self.gap_ms {
                    let bounds = (rows[run].1, rows[i - 1].1 + self.gap_ms);
                    self.fold_run(key, bounds, &inputs, run..i)?;
                    run = i;
                }
            }
            from = to;
        }
        Ok(())
    }

    /// Number the on-time rows of a batch by key and order them by (key,
    /// event time); rows whose session would already have closed are
    /// counted as late. In `EMIT CHANGES` mode key numbers follow key
    /// order, so retractions come out in the same order however the input
    /// was cut.
    fn order(&mut self, times: &Int64Array, keys: &KeyRows) -> Ordered {
        let mut rows = Vec::with_capacity(times.len());
        let mut firsts: Vec<u32> = Vec::new();
        let mut index: HashTable<(u64, u32)> = HashTable::new();
        let hasher = FxBuildHasher;
        for (row, t) in times.iter().enumerate() {
            let Some(t) = t else { continue };
            if t.saturating_add(self.gap_ms) <= self.closed_through {
                self.dropped_late += 1;
                continue;
            }
            let id = match keys {
                KeyRows::Rows(r) => {
                    let bytes = r.row(row).data();
                    let hash = hasher.hash_one(bytes);
                    let found = index.find(hash, |(h, id)| {
                        *h == hash && r.row(firsts[*id as usize] as usize).data() == bytes
                    });
                    match found {
                        Some((_, id)) => *id,
                        None => {
                            let id = firsts.len() as u32;
                            firsts.push(row as u32);
                            index.insert_unique(hash, (hash, id), |(h, _)| *h);
                            id
                        }
                    }
                }
                KeyRows::Unit(_) => 0,
            };
            rows.push((id, t, row as u32));
        }
        if let (EmitMode::Changes, KeyRows::Rows(r)) = (self.def.emit, keys) {
            let mut by_key: Vec<u32> = (0..firsts.len() as u32).collect();
            by_key.sort_unstable_by(|a, b| {
                r.row(firsts[*a as usize] as usize)
                    .cmp(&r.row(firsts[*b as usize] as usize))
            });
            let mut rank = vec![0u32; firsts.len()];
            for (i, id) in by_key.iter().enumerate() {
                rank[*id as usize] = i as u32;
            }
            rows.iter_mut().for_each(|r| r.0 = rank[r.0 as usize]);
            firsts = by_key.iter().map(|id| firsts[*id as usize]).collect();
        }
        rows.sort_unstable();
        Ordered { rows, firsts }
    }

    /// Fold one run of a key's rows (`rows` of the ordered `inputs`,
    /// spanning `[start, end)` with the gap) into that key's sessions.
    fn fold_run(
        &mut self,
        key: &[u8],
        (start, end): (i64, i64),
        inputs: &AggregateInputs,
        rows: Range<usize>,
    ) -> Result<()> {
        let list = self.sessions.entry_ref(key).or_default();
        // The key's sessions overlapping [start, end): those ending after
        // `start` and starting before `end`, a contiguous range.
        let first = list.partition_point(|s| s.end <= start);
        let last = first + list[first..].partition_point(|s| s.start < end);
        if first == last {
            let mut session = Session {
                start,
                end,
                accs: self.def.funcs.row_accumulators()?,
                changed: true,
                emitted: None,
            };
            update_accumulators(&mut session.accs, inputs, rows)?;
            list.insert(first, session);
            self.earliest_end = self.earliest_end.min(end);
            return Ok(());
        }
        // The first overlapping session takes in the run and the others.
        let bridged: Vec<Session> = list.drain(first + 1..last).collect();
        let Some(base) = list.get_mut(first) else {
            return Ok(());
        };
        if let Some(values) = base.emitted.take() {
            self.pending_retractions
                .push((key.into(), base.start, base.end, values));
        }
        for mut s in bridged {
            base.end = base.end.max(s.end);
            for (dst, src) in base.accs.iter_mut().zip(s.accs.iter_mut()) {
                let arrays = src
                    .state()?
                    .iter()
                    .map(|v| Ok(v.to_array()?))
                    .collect::<Result<Vec<ArrayRef>>>()?;
                dst.merge_batch(&arrays)?;
            }
            if let Some(values) = s.emitted.take() {
                self.pending_retractions
                    .push((key.into(), s.start, s.end, values));
            }
        }
        base.start = base.start.min(start);
        base.end = base.end.max(end);
        base.changed = true;
        update_accumulators(&mut base.accs, inputs, rows)
    }

    /// The earliest end of an open session (`i64::MAX` if none).
    fn earliest_end(&self) -> i64 {
        let firsts = self.sessions.values().filter_map(|l| l.first());
        firsts.map(|s| s.end).min().unwrap_or(i64::MAX)
    }

    fn key_columns(&self, keys: &[Key]) -> Result<Vec<ArrayRef>> {
        let Some(parser) = self.def.codec.parser() else {
            return Ok(vec![]);
        };
        self.def
            .codec
            .decode_rows(keys.iter().map(|k| parser.parse(k)))
    }

    fn emit_rows(
        &self,
        rows: Vec<SessionRow>,
        kinds: Option<Vec<Op>>,
    ) -> Result<Option<RecordBatch>> {
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let naggs = first.3.len();
        let mut values = Vec::with_capacity(naggs);
        for a in 0..naggs {
            values.push(ScalarValue::iter_to_array(
                rows.iter().map(|r| r.3[a].clone()),
            )?);
        }
        let starts: Vec<i64> = rows.iter().map(|r| r.1).collect();
        let ends: Vec<i64> = rows.iter().map(|r| r.2).collect();
        let keys: Vec<Key> = rows.into_iter().map(|r| r.0).collect();
        let key_cols = self.key_columns(&keys)?;
        let cols = self.def.columns_per_row(key_cols, &starts, &ends, values)?;
        Ok(Some(output_batch(
            &self.def.schema,
            cols,
            kinds.as_deref(),
        )?))
    }
}

/// Each accumulator's current value.
fn evaluate(accs: &mut [Box<dyn Accumulator>]) -> Result<Vec<ScalarValue>> {
    accs.iter_mut().map(|a| Ok(a.evaluate()?)).collect()
}

/// Fold `rows` of the ordered aggregate inputs into a session's accumulators
/// (each function's FILTER applied).
fn update_accumulators(
    accs: &mut [Box<dyn Accumulator>],
    inputs: &AggregateInputs,
    rows: Range<usize>,
) -> Result<()> {
    for (acc, (values, filter)) in accs.iter_mut().zip(inputs) {
        let values: Vec<ArrayRef> = values
            .iter()
            .map(|v| v.slice(rows.start, rows.len()))
            .collect();
        match filter {
            Some(f) => {
                let keep = f.slice(rows.start, rows.len());
                let values = values
                    .iter()
                    .map(|v| Ok(arrow::compute::filter(v.as_ref(), &keep)?))
                    .collect::<Result<Vec<_>>>()?;
                acc.update_batch(&values)?;
            }
            None => acc.update_batch(&values)?,
        }
    }
    Ok(())
}

impl StatefulOperator for SessionAggregate {
    fn kind(&self) -> &'static str {
        "session aggregate"
    }

    /// Fold a batch in, merging sessions as needed; returns nothing
    /// (sessions emit in [`Self::advance`]). Rows whose session would
    /// already have closed are counted in `dropped_late`.
    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        self.fold(&batch)?;
        Ok(vec![])
    }

    /// Write every open session: key, bounds, aggregate state, last emitted row.
    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        out.set("closed_through", self.closed_through);
        out.set("dropped_late", self.dropped_late);
        let naggs = self.def.funcs.len();
        let keyed = self.def.codec.parser().is_some();
        let mut keys: Vec<Option<&[u8]>> = Vec::new();
        let (mut starts, mut ends, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let mut states: Vec<Vec<ScalarValue>> = Vec::new();
        let mut widths: Vec<usize> = Vec::new();
        let mut emitted: Vec<Option<Vec<ScalarValue>>> = Vec::new();
        for (key, list) in self.sessions.iter_mut() {
            for sess in list.iter_mut() {
                keys.push(keyed.then_some(&key[..]));
                starts.push(sess.start);
                ends.push(sess.end);
                changed.push(sess.changed);
                let mut row_state = Vec::new();
                let mut fresh = self.def.funcs.row_accumulators()?;
                widths.clear();
                for (acc, new_acc) in sess.accs.iter_mut().zip(fresh.iter_mut()) {
                    let st = acc.state()?;
                    let arrays = st
                        .iter()
                        .map(|v| Ok(v.to_array()?))
                        .collect::<Result<Vec<ArrayRef>>>()?;
                    new_acc.merge_batch(&arrays)?;
                    widths.push(st.len());
                    row_state.extend(st);
                }
                sess.accs = fresh;
                states.push(row_state);
                emitted.push(sess.emitted.clone());
            }
        }
        if keys.is_empty() {
            return Ok(());
        }
        let mut cols: Vec<ArrayRef> = vec![
            std::sync::Arc::new(arrow::array::BinaryArray::from_iter(keys.iter().copied())),
            std::sync::Arc::new(arrow::array::Int64Array::from(starts)),
            std::sync::Arc::new(arrow::array::Int64Array::from(ends)),
            std::sync::Arc::new(arrow::array::BooleanArray::from(changed)),
            std::sync::Arc::new(arrow::array::BooleanArray::from(
                emitted.iter().map(|e| e.is_some()).collect::<Vec<_>>(),
            )),
        ];
        let width: usize = widths.iter().sum();
        for c in 0..width {
            cols.push(ScalarValue::iter_to_array(
                states.iter().map(|r| r[c].clone()),
            )?);
        }
        let out_types = self.def.funcs.output_types()?;
        for (a, dt) in out_types.iter().enumerate().take(naggs) {
            let vals = emitted
                .iter()
                .map(|e| match e {
                    Some(v) => Ok(v[a].clone()),
                    None => Ok(ScalarValue::try_new_null(dt)?),
                })
                .collect::<Result<Vec<_>>>()?;
            cols.push(ScalarValue::iter_to_array(vals)?);
        }
        let meta = std::collections::HashMap::from([(
            "widths".to_string(),
            widths
                .iter()
                .map(|w| w.to_string())
                .collect::<Vec<_>>()
                .join(","),
        )]);
        let schema = super::scope::state_schema(&cols).with_metadata(meta);
        out.push(&RecordBatch::try_new(std::sync::Arc::new(schema), cols)?)
    }

    /// Replace state with a snapshot's.
    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        self.closed_through = snap.get("closed_through")?;
        self.dropped_late = snap.get("dropped_late")?;
        self.sessions.clear();
        let Some(part) = snap.parts().first() else {
            return Ok(());
        };
        let bad = || crate::error::EngineError::Internal("damaged session snapshot".into());
        let widths: Vec<usize> = part
            .schema()
            .metadata()
            .get("widths")
            .ok_or_else(bad)?
            .split(',')
            .filter(|w| !w.is_empty())
            .map(|w| w.parse().map_err(|_| bad()))
            .collect::<Result<_>>()?;
        let width: usize = widths.iter().sum();
        let col = |i: usize| part.columns().get(i).ok_or_else(bad);
        let keys = col(0)?.as_binary_opt::<i32>().ok_or_else(bad)?.clone();
        let starts = col(1)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(bad)?
            .clone();
        let ends = col(2)?
            .as_primitive_opt::<Int64Type>()
            .ok_or_else(bad)?
            .clone();
        let changed = col(3)?.as_boolean_opt().ok_or_else(bad)?.clone();
        let has_emitted = col(4)?.as_boolean_opt().ok_or_else(bad)?.clone();
        let naggs = self.def.funcs.len();
        let keyed = self.def.codec.parser().is_some();
        for row in 0..part.num_rows() {
            let key: Key = match (keys.is_null(row), keyed) {
                (true, false) => Key::default(),
                (false, true) => keys.value(row).into(),
                _ => return Err(bad()),
            };
            let mut accs = self.def.funcs.row_accumulators()?;
            let mut off = 5;
            for (acc, w) in accs.iter_mut().zip(widths.iter()) {
                let arrays: Vec<ArrayRef> = (off..off + w)
                    .map(|c| Ok(col(c)?.slice(row, 1)))
                    .collect::<Result<_>>()?;
                acc.merge_batch(&arrays)?;
                off += w;
            }
            let emitted = if has_emitted.value(row) {
                Some(
                    (0..naggs)
                        .map(|a| Ok(ScalarValue::try_from_array(col(5 + width + a)?, row)?))
                        .collect::<Result<Vec<_>>>()?,
                )
            } else {
                None
            };
            self.sessions.entry(key).or_default().push(Session {
                start: starts.value(row),
                end: ends.value(row),
                accs,
                changed: changed.value(row),
                emitted,
            });
        }
        for list in self.sessions.values_mut() {
            list.sort_by_key(|s| s.start);
        }
        self.earliest_end = self.earliest_end();
        Ok(())
    }

    /// The sessions of keys of `keep`'s vnodes, from every old owner's:
    /// each snapshot is restored in turn and its keys of other vnodes
    /// dropped. Sessions are closed through the earliest of the owners'
    /// points; the late-row count starts afresh on this node.
    fn restore_moved(&mut self, snaps: &[SnapshotReader], keep: &VnodePlacement) -> Result<()> {
        let mut sessions: HashMap<Key, Vec<Session>, FxBuildHasher> = HashMap::default();
        let mut closed_through: Option<i64> = None;
        for snap in snaps {
            self.restore(snap)?;
            closed_through =
                Some(closed_through.map_or(self.closed_through, |c| c.min(self.closed_through)));
            let keys: Vec<Key> = self.sessions.keys().cloned().collect();
            let owned = self.owned_keys(&keys, keep)?;
            for (key, own) in keys.into_iter().zip(owned.iter()) {
                if let (Some(true), Some(list)) = (own, self.sessions.remove(&key)) {
                    sessions.insert(key, list);
                }
            }
        }
        self.sessions = sessions;
        self.pending_retractions.clear();
        self.closed_through = closed_through.unwrap_or(i64::MIN);
        self.dropped_late = 0;
        self.earliest_end = self.earliest_end();
        Ok(())
    }

    /// Emit closed sessions (or this cycle's changes) and free closed state.
    /// In `EMIT ON WINDOW CLOSE` mode: one batch of the sessions ending at or
    /// before `watermark`, in (end, key, start) order. In `EMIT CHANGES`
    /// mode: one batch retracting sessions merged away or changed and
    /// inserting their current rows.
    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        let changes_mode = self.def.emit == EmitMode::Changes;
        let mut rows = std::mem::take(&mut self.pending_retractions);
        let mut kinds = vec![Op::Retract; rows.len()];
        if changes_mode {
            // Changed sessions in (key, start) order, so the output does not
            // depend on the map's order.
            let mut changed: Vec<(&Key, &mut Session)> = self
                .sessions
                .iter_mut()
                .flat_map(|(k, list)| list.iter_mut().filter(|s| s.changed).map(move |s| (k, s)))
                .collect();
            changed.sort_unstable_by(|a, b| (a.0, a.1.start).cmp(&(b.0, b.1.start)));
            for (key, s) in changed {
                let values = evaluate(&mut s.accs)?;
                if let Some(old) = s.emitted.take() {
                    rows.push((key.clone(), s.start, s.end, old));
                    kinds.push(Op::Retract);
                }
                rows.push((key.clone(), s.start, s.end, values.clone()));
                kinds.push(Op::Insert);
                s.emitted = Some(values);
                s.changed = false;
            }
        } else {
            rows.clear();
            kinds.clear();
        }
        if watermark >= self.earliest_end {
            for (key, list) in self.sessions.iter_mut() {
                // Ordered by end: the closed sessions are a prefix.
                let closed = list.partition_point(|s| s.end <= watermark);
                for mut s in list.drain(..closed) {
                    if !changes_mode {
                        rows.push((key.clone(), s.start, s.end, evaluate(&mut s.accs)?));
                    }
                }
            }
            self.sessions.retain(|_, l| !l.is_empty());
            self.earliest_end = self.earliest_end();
        }
        if !changes_mode {
            // Final rows in (end, key, start) order, so the output does not
            // depend on how input was cut into cycles.
            rows.sort_by(|a, b| (a.2, &a.0, a.1).cmp(&(b.2, &b.0, b.1)));
        }
        self.closed_through = self.closed_through.max(watermark);
        let batch = self.emit_rows(rows, changes_mode.then_some(kinds))?;
        Ok(batch.into_iter().collect())
    }

    fn dropped_late(&self) -> u64 {
        self.dropped_late
    }
}
