//! Session window aggregation.
//!
//! Sessions are per key: a row at time `t` opens `[t, t + gap)`; sessions
//! that overlap merge, and their aggregate states merge with them. A session
//! closes when the watermark passes its end (last event + gap). Because
//! sessions merge, each holds DataFusion row `Accumulator`s, whose
//! intermediate state can be merged into another session's.

use std::collections::BTreeMap;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take;
use arrow::record_batch::RecordBatch;
use arrow::row::OwnedRow;
use datafusion::common::ScalarValue;
use datafusion::logical_expr::Accumulator;

use super::changelog::{output_batch, Op};
use super::expr::{eval, event_time_ms, overflow};
use super::groups::{select_inputs, KeyRows};
use super::stateful::{no_such_port, Port, StatefulOperator};
use super::window::WindowedGroupBy;
use crate::error::Result;
use crate::state::{SnapshotReader, SnapshotWriter};
use arrow::array::{Array, AsArray};
use arrow::datatypes::Int64Type;
use sluice_sql::EmitMode;

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
    sessions: BTreeMap<Option<OwnedRow>, Vec<Session>>,
    /// Rows retracted by merges this cycle: (key, start, end, values).
    pending_retractions: Vec<(Option<OwnedRow>, i64, i64, Vec<ScalarValue>)>,
    closed_through: i64,
    /// Rows dropped because their session had already closed.
    dropped_late: u64,
}

impl SessionAggregate {
    /// A new operator.
    pub fn new(def: WindowedGroupBy, gap_ms: i64) -> Self {
        Self {
            def,
            gap_ms,
            sessions: BTreeMap::new(),
            pending_retractions: Vec::new(),
            closed_through: i64::MIN,
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
        // Rows per key, then sorted by event time.
        let mut per_key: BTreeMap<Option<OwnedRow>, Vec<(i64, u32)>> = BTreeMap::new();
        for (row, t) in times.iter().enumerate() {
            let Some(t) = t else { continue };
            if t.saturating_add(self.gap_ms) <= self.closed_through {
                self.dropped_late += 1;
                continue;
            }
            let key = match &keys {
                KeyRows::Rows(r) => Some(r.row(row).owned()),
                KeyRows::Unit(_) => None,
            };
            per_key.entry(key).or_default().push((t, row as u32));
        }
        for (key, mut rows) in per_key {
            rows.sort_unstable();
            // Split into runs where consecutive events are closer than the gap.
            let mut run_start = 0;
            for i in 1..=rows.len() {
                if i == rows.len() || rows[i].0 >= rows[i - 1].0 + self.gap_ms {
                    let run = &rows[run_start..i];
                    self.fold_run(key.clone(), run, &inputs)?;
                    run_start = i;
                }
            }
        }
        Ok(())
    }

    fn fold_run(
        &mut self,
        key: Option<OwnedRow>,
        run: &[(i64, u32)],
        inputs: &super::groups::AggregateInputs,
    ) -> Result<()> {
        let start = run[0].0;
        let end = run[run.len() - 1].0 + self.gap_ms;
        let list = self.sessions.entry(key.clone()).or_default();
        // Sessions overlapping [start, end) merge with the run.
        let (overlapping, rest): (Vec<Session>, Vec<Session>) = std::mem::take(list)
            .into_iter()
            .partition(|s| s.start < end && start < s.end);
        *list = rest;
        let mut merged = Session {
            start,
            end,
            accs: self.def.funcs.row_accumulators()?,
            changed: true,
            emitted: None,
        };
        for mut s in overlapping {
            merged.start = merged.start.min(s.start);
            merged.end = merged.end.max(s.end);
            for (dst, src) in merged.accs.iter_mut().zip(s.accs.iter_mut()) {
                let state = src.state()?;
                let arrays = state
                    .iter()
                    .map(|v| Ok(v.to_array()?))
                    .collect::<Result<Vec<ArrayRef>>>()?;
                dst.merge_batch(&arrays)?;
            }
            if let Some(values) = s.emitted.take() {
                self.pending_retractions
                    .push((key.clone(), s.start, s.end, values));
            }
        }
        let rows: Vec<u32> = run.iter().map(|(_, r)| *r).collect();
        let selected = select_inputs(inputs, Some(&rows))?;
        for (acc, (values, filter)) in merged.accs.iter_mut().zip(selected.iter()) {
            match filter {
                Some(f) => {
                    let keep = arrow::compute::filter(
                        &(std::sync::Arc::new(UInt32Array::from_iter_values(0..rows.len() as u32))
                            as ArrayRef),
                        f,
                    )?;
                    let idx =
                        arrow::array::AsArray::as_primitive::<arrow::datatypes::UInt32Type>(&keep)
                            .clone();
                    let vals = values
                        .iter()
                        .map(|v| Ok(take(v.as_ref(), &idx, None)?))
                        .collect::<Result<Vec<_>>>()?;
                    acc.update_batch(&vals)?;
                }
                None => acc.update_batch(values)?,
            }
        }
        list.push(merged);
        Ok(())
    }

    fn key_columns(&self, keys: &[Option<OwnedRow>]) -> Result<Vec<ArrayRef>> {
        let rows: Vec<_> = keys.iter().flatten().map(|k| k.row()).collect();
        if rows.is_empty() && keys.iter().all(Option::is_none) {
            return Ok(vec![]);
        }
        let mut buf = self.def.codec.empty();
        if let KeyRows::Rows(r) = &mut buf {
            for row in rows {
                r.push(row);
            }
        }
        let n = keys.len();
        self.def.codec.decode(&buf, &(0..n).collect::<Vec<_>>())
    }

    fn emit_rows(
        &self,
        rows: Vec<(Option<OwnedRow>, i64, i64, Vec<ScalarValue>)>,
        kinds: Option<Vec<Op>>,
    ) -> Result<Option<RecordBatch>> {
        if rows.is_empty() {
            return Ok(None);
        }
        let n = rows.len();
        let keys: Vec<Option<OwnedRow>> = rows.iter().map(|r| r.0.clone()).collect();
        let key_cols = self.key_columns(&keys)?;
        let naggs = rows[0].3.len();
        let mut values = Vec::with_capacity(naggs);
        for a in 0..naggs {
            values.push(ScalarValue::iter_to_array(
                rows.iter().map(|r| r.3[a].clone()),
            )?);
        }
        // Window bounds differ per row: build them per row, then concatenate.
        let mut cols: Vec<Vec<ArrayRef>> = Vec::with_capacity(n);
        for (i, r) in rows.iter().enumerate() {
            let k: Vec<ArrayRef> = key_cols.iter().map(|c| c.slice(i, 1)).collect();
            let v: Vec<ArrayRef> = values.iter().map(|c| c.slice(i, 1)).collect();
            cols.push(self.def.columns(k, r.1, r.2, v, 1)?);
        }
        let width = cols[0].len();
        let mut merged = Vec::with_capacity(width);
        for c in 0..width {
            let parts: Vec<&dyn arrow::array::Array> =
                cols.iter().map(|row| row[c].as_ref()).collect();
            merged.push(arrow::compute::concat(&parts)?);
        }
        Ok(Some(output_batch(
            &self.def.schema,
            merged,
            kinds.as_deref(),
        )?))
    }
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
        let mut keys: Vec<Option<Vec<u8>>> = Vec::new();
        let (mut starts, mut ends, mut changed) = (Vec::new(), Vec::new(), Vec::new());
        let mut states: Vec<Vec<ScalarValue>> = Vec::new();
        let mut widths: Vec<usize> = Vec::new();
        let mut emitted: Vec<Option<Vec<ScalarValue>>> = Vec::new();
        for (key, list) in self.sessions.iter_mut() {
            for sess in list.iter_mut() {
                keys.push(key.as_ref().map(|k| k.row().as_ref().to_vec()));
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
            std::sync::Arc::new(arrow::array::BinaryArray::from_iter(
                keys.iter().map(|k| k.as_deref()),
            )),
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
        let parser = self.def.codec.parser();
        for row in 0..part.num_rows() {
            let key = if keys.is_null(row) {
                None
            } else {
                let p = parser.as_ref().ok_or_else(bad)?;
                Some(p.parse(keys.value(row)).owned())
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
            for (key, list) in self.sessions.iter_mut() {
                for s in list.iter_mut().filter(|s| s.changed) {
                    let values = s
                        .accs
                        .iter_mut()
                        .map(|a| Ok(a.evaluate()?))
                        .collect::<Result<Vec<_>>>()?;
                    if let Some(old) = s.emitted.take() {
                        rows.push((key.clone(), s.start, s.end, old));
                        kinds.push(Op::Retract);
                    }
                    rows.push((key.clone(), s.start, s.end, values.clone()));
                    kinds.push(Op::Insert);
                    s.emitted = Some(values);
                    s.changed = false;
                }
            }
        } else {
            rows.clear();
            kinds.clear();
        }
        for (key, list) in self.sessions.iter_mut() {
            let (closed, open): (Vec<Session>, Vec<Session>) = std::mem::take(list)
                .into_iter()
                .partition(|s| s.end <= watermark);
            *list = open;
            if !changes_mode {
                for mut s in closed {
                    let values = s
                        .accs
                        .iter_mut()
                        .map(|a| Ok(a.evaluate()?))
                        .collect::<Result<Vec<_>>>()?;
                    rows.push((key.clone(), s.start, s.end, values));
                }
            }
        }
        self.sessions.retain(|_, l| !l.is_empty());
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
