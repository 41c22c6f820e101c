//! Top-N per partition: `ROW_NUMBER() OVER (PARTITION BY p ORDER BY o)`
//! kept where it is at most N.
//!
//! The input is append-only, so a row pushed out of a partition's first N
//! can never come back: each partition keeps at most N rows, sorted. Rows
//! are compared by their `ORDER BY` keys in Arrow's row format (which
//! encodes direction and null placement), then by the whole row, column by
//! column ascending (see [`payload`]), so equal keys are numbered in one
//! deterministic order. A row's bytes are made only when its key ranks it among the
//! rows its partition still keeps.
//!
//! When rows are emitted depends on the [`TopNMode`] the planner proved:
//! - `Windowed`: a partition's N rows are emitted once, when the watermark
//!   passes its window, and the partition is forgotten;
//! - `Completes`: as `Windowed`, but the partition's time is the largest
//!   completion value (e.g. an auction's `expires`) among its rows, which
//!   may grow as rows arrive: the partition is re-filed under the new time,
//!   and an entry filed under an older time is skipped when reached;
//! - `FirstByTime`: ordered by event time ascending, the front row of a
//!   partition is final once the watermark passes it, so rows are emitted
//!   one by one, in order, until N were; a count per partition remains;
//! - `Changelog`: at the end of each cycle, every partition that changed
//!   is compared rank by rank with what was emitted before: a (row, rank)
//!   that is gone is retracted, a new one inserted.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, UInt64Array};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use sluice_sql::TopNMode;
use smallvec::SmallVec;

use self::partitions::{PartId, Partitions};
use self::payload::{Encoder, PayloadCodec};
use super::changelog::{output_batch, Op};
use super::expr::{eval, event_time_ms, PhysExpr};
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::{EngineError, Result};
use crate::state::{SnapshotReader, SnapshotWriter};

/// One kept row: its sort key and the whole row, in one allocation, and
/// its event time (the partition's time, or the ordering time, as the mode
/// needs).
///
/// The bytes are shared (`Arc`): a changelog keeps each row twice (kept
/// and last shown) and lists it again for the output, and with shared bytes
/// those copies are reference counts, not allocations (q18 spent a third of
/// its time in the allocator before). Key and row share one allocation for
/// the same reason.
///
/// `head` is the sort key's first eight bytes, kept beside the pointer:
/// most comparisons with a new row's key are decided by it, without
/// reading the shared bytes (a cache miss per kept row compared, when the
/// partitions are many).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    /// The sort key's bytes, then the row's.
    bytes: Arc<[u8]>,
    order_len: usize,
    head: u64,
    time: Option<i64>,
}

/// The first eight bytes of a sort key as a number that orders as the
/// bytes do, zero-padded. Two keys with different heads compare as their
/// heads (the first byte they differ at is among the eight, or one key
/// ends there and the other goes on with a byte above zero); equal heads
/// leave it to the bytes.
fn head_of(order: &[u8]) -> u64 {
    let mut head = [0u8; 8];
    let n = order.len().min(8);
    head[..n].copy_from_slice(&order[..n]);
    u64::from_be_bytes(head)
}

impl Entry {
    /// The entry for a row; `scratch` is reused between calls, so the
    /// bytes are two `memcpy`s into it and one allocation of the exact size.
    fn new(scratch: &mut Vec<u8>, order: &[u8], payload: &[u8], time: Option<i64>) -> Self {
        scratch.clear();
        scratch.extend_from_slice(order);
        scratch.extend_from_slice(payload);
        Self::from_joined(scratch, order.len(), time)
    }

    /// The entry whose sort key is the first `order_len` of `bytes` and
    /// whose row is the rest.
    fn from_joined(bytes: &[u8], order_len: usize, time: Option<i64>) -> Self {
        Self {
            head: head_of(bytes.get(..order_len).unwrap_or_default()),
            bytes: Arc::from(bytes),
            order_len,
            time,
        }
    }

    /// How this entry's sort key compares with `order`, whose head
    /// ([`head_of`]) is `head`.
    fn cmp_order(&self, head: u64, order: &[u8]) -> std::cmp::Ordering {
        self.head.cmp(&head).then_with(|| self.order().cmp(order))
    }

    /// Whether `other` holds the same row: the same allocation (a rank
    /// unchanged since it was shown) or equal bytes.
    fn same_row(&self, other: &Entry) -> bool {
        Arc::ptr_eq(&self.bytes, &other.bytes) || self.payload() == other.payload()
    }

    /// The `ORDER BY` key in row format.
    fn order(&self) -> &[u8] {
        self.bytes.get(..self.order_len).unwrap_or_default()
    }

    /// The whole row in row format.
    fn payload(&self) -> &[u8] {
        self.bytes.get(self.order_len..).unwrap_or_default()
    }
}

/// A partition's rows; most top-N queries keep one (`rn = 1`, dedup), and
/// that one lives inline in the partition.
type Rows = SmallVec<[Entry; 1]>;

/// Make `shown` equal to `rows`, touching only the ranks that changed: a
/// rank whose entry is the one already shown keeps it, without a
/// reference count taken and given back (a new row at rank 3 of ten
/// changes ranks 3 to 10, and leaves 1 and 2 alone).
fn show(shown: &mut Rows, rows: &Rows) {
    shown.truncate(rows.len());
    for (old, new) in shown.iter_mut().zip(rows.iter()) {
        if !Arc::ptr_eq(&old.bytes, &new.bytes) {
            old.clone_from(new);
        }
    }
    let have = shown.len();
    shown.extend(rows.iter().skip(have).cloned());
}

mod legacy;
mod partitions;
mod payload;
mod snapshot;

/// One partition's state.
#[derive(Debug, Default)]
struct Partition {
    /// The partition's event time (`Windowed`; the largest completion
    /// value for `Completes`, NULL counting as the end of input).
    time: Option<i64>,
    /// Rows emitted so far (`FirstByTime`).
    emitted: usize,
    /// The best rows seen, sorted, at most N (N minus `emitted` for `FirstByTime`).
    rows: Rows,
    /// The rows as last emitted, by rank (`Changelog`).
    shown: Rows,
    /// Whether the partition is listed in [`TopN::dirty`].
    dirty: bool,
}

/// How the operator is built from the plan.
pub struct TopNDef {
    /// Partition key expressions.
    pub partition: Vec<PhysExpr>,
    /// Their types.
    pub partition_types: Vec<DataType>,
    /// `ORDER BY` expressions.
    pub order: Vec<PhysExpr>,
    /// Their types with direction and null placement.
    pub order_fields: Vec<SortField>,
    /// The input schema (the rows kept).
    pub input: SchemaRef,
    /// Rows per partition.
    pub limit: usize,
    /// When rows are final.
    pub mode: TopNMode,
    /// Output schema: input columns, row number, change column if a changelog.
    pub schema: SchemaRef,
}

/// The top-N operator.
pub struct TopN {
    def: TopNDef,
    partition_rows: Option<RowConverter>,
    order_rows: RowConverter,
    payload: PayloadCodec,
    parts: Partitions<Partition>,
    /// Partitions with rows not yet emitted (`FirstByTime`) or changed
    /// since last emitted (`Changelog`), each once (its `dirty` flag).
    dirty: Vec<PartId>,
    /// `Windowed` and `Completes`: partitions by partition time (NULL as
    /// `i64::MAX`), so closing them visits only the windows the watermark
    /// passed. A `Completes` partition may be filed more than once (its
    /// time grew); only the entry at its current time closes it. Every
    /// entry of a partition is at or before its current time, so all are
    /// taken out by the time it closes and its id can be reused.
    closing: BTreeMap<i64, Vec<PartId>>,
    watermark: i64,
    late: u64,
    /// Where an entry's bytes are put together (see [`Entry::new`]).
    scratch: Vec<u8>,
}

/// Restored rows decoded at a time by [`TopN::check_restored_payloads`].
const CHECK_CHUNK: usize = 8192;

/// The snapshot key naming how kept rows are encoded, and its value for
/// [`payload`]'s encoding (a snapshot without it holds Arrow's row format).
const PAYLOAD_KEY: &str = "payload";
const PAYLOAD_COMPACT: &str = "compact";

/// Whether a time is behind the watermark by more than `lag`. A NULL time
/// is final only at the end of input.
fn passed(time: Option<i64>, lag: i64, watermark: i64) -> bool {
    watermark == i64::MAX || time.is_some_and(|t| t.saturating_add(lag) < watermark)
}

impl TopN {
    /// A top-N as `def` describes.
    pub fn new(def: TopNDef) -> Result<Self> {
        let partition_rows = if def.partition_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(
                def.partition_types
                    .iter()
                    .map(|t| SortField::new(t.clone()))
                    .collect(),
            )?)
        };
        let order_rows = RowConverter::new(def.order_fields.clone())?;
        let payload = PayloadCodec::new(Arc::clone(&def.input))?;
        Ok(Self {
            def,
            partition_rows,
            order_rows,
            payload,
            parts: Partitions::default(),
            dirty: Vec::new(),
            closing: BTreeMap::new(),
            watermark: i64::MIN,
            late: 0,
            scratch: Vec::new(),
        })
    }

    /// The event time of every row the mode needs one for.
    fn times(&self, batch: &RecordBatch) -> Result<Option<Int64Array>> {
        let expr = match self.def.mode {
            TopNMode::Windowed { key, .. } => self.def.partition.get(key),
            TopNMode::FirstByTime { .. } => self.def.order.first(),
            TopNMode::Completes { column, .. } => {
                let values = batch.columns().get(column).ok_or_else(|| {
                    EngineError::Internal(format!(
                        "top-n completion column {column} is not in the input"
                    ))
                })?;
                let name = self.def.input.field(column).name().clone();
                return Ok(Some(event_time_ms(values, &name)?));
            }
            TopNMode::Changelog => None,
        };
        expr.map(|e| event_time_ms(&eval(e, batch)?, &e.to_string()))
            .transpose()
    }

    fn lag(&self) -> i64 {
        match self.def.mode {
            TopNMode::Windowed { lag_ms, .. }
            | TopNMode::Completes { lag_ms, .. }
            | TopNMode::FirstByTime { lag_ms } => lag_ms,
            TopNMode::Changelog => 0,
        }
    }

    /// Put row `row` of the batch `payload` encodes in partition `key`'s
    /// sorted rows if it ranks among the rows still to fill; nothing is
    /// encoded or allocated for a row whose sort key does not.
    fn insert(
        &mut self,
        key: &[u8],
        order: &[u8],
        payload: &Encoder<'_>,
        row: usize,
        time: Option<i64>,
    ) -> Result<()> {
        let windowed = matches!(
            self.def.mode,
            TopNMode::Windowed { .. } | TopNMode::Completes { .. }
        );
        let completes = matches!(self.def.mode, TopNMode::Completes { .. });
        let (id, part, created) = self
            .parts
            .find_or_insert(key, || Partition {
                time: if windowed { time } else { None },
                ..Partition::default()
            })
            .ok_or_else(|| EngineError::Internal("top-n partition index out of step".into()))?;
        if created && windowed {
            self.closing
                .entry(time.unwrap_or(i64::MAX))
                .or_default()
                .push(id);
        }
        // A later completion value extends the partition's life.
        let t = time.unwrap_or(i64::MAX);
        if completes && part.time.is_some_and(|old| old < t) {
            part.time = time;
            self.closing.entry(t).or_default().push(id);
        }
        let cap = self.def.limit.saturating_sub(part.emitted);
        // The rows whose keys rank before this one's, then those with its key.
        let head = head_of(order);
        let first = part
            .rows
            .partition_point(|e| e.cmp_order(head, order).is_lt());
        if first >= cap {
            return Ok(());
        }
        let ties = part
            .rows
            .get(first..)
            .unwrap_or_default()
            .partition_point(|e| e.cmp_order(head, order).is_eq());
        self.scratch.clear();
        self.scratch.extend_from_slice(order);
        payload.encode(row, &mut self.scratch)?;
        let bytes = self.scratch.get(order.len()..).unwrap_or_default();
        // Among equal keys, by the whole row (a binary search that may fail).
        let (mut lo, mut hi) = (first, first + ties);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            let kept = part.rows.get(mid).map(Entry::payload).unwrap_or_default();
            if self.payload.compare(kept, bytes)? == std::cmp::Ordering::Greater {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let pos = lo;
        if pos >= cap {
            return Ok(());
        }
        // Drop the row this one pushes out first, so a full partition never
        // grows (and an inline one never spills to the heap).
        if part.rows.len() >= cap {
            part.rows.truncate(cap.saturating_sub(1));
        } else if part.rows.len() == part.rows.capacity() {
            // Spilling to the heap: room for every row the partition may
            // keep at once, instead of doubling through 2, 4, 8, 16.
            part.rows.reserve_exact(cap - part.rows.len());
        }
        part.rows
            .insert(pos, Entry::from_joined(&self.scratch, order.len(), time));
        if !windowed && !part.dirty {
            part.dirty = true;
            self.dirty.push(id);
        }
        Ok(())
    }

    /// Rows (by payload, with rank and change) as one output batch.
    fn output(&self, rows: &[(&[u8], u64, Op)]) -> Result<Vec<RecordBatch>> {
        if rows.is_empty() {
            return Ok(vec![]);
        }
        let mut columns = self.payload.decode(rows.iter().map(|(p, _, _)| *p))?;
        columns.push(Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|(_, r, _)| *r),
        )));
        let ops: Vec<Op> = rows.iter().map(|(_, _, o)| *o).collect();
        let changes = (self.def.mode == TopNMode::Changelog).then_some(ops.as_slice());
        Ok(vec![output_batch(&self.def.schema, columns, changes)?])
    }

    /// Decode every restored row once, so that a damaged snapshot is
    /// refused when it is restored rather than when its rows are emitted.
    fn check_restored_payloads(&self) -> Result<()> {
        let mut chunk = Vec::with_capacity(CHECK_CHUNK);
        for (_, _, p) in self.parts.iter() {
            for e in p.rows.iter().chain(p.shown.iter()) {
                chunk.push(e.payload());
                if chunk.len() == CHECK_CHUNK {
                    self.payload.decode(chunk.iter().copied())?;
                    chunk.clear();
                }
            }
        }
        self.payload.decode(chunk.iter().copied()).map(drop)
    }

    fn advance_windowed(&mut self, lag: i64) -> Result<Vec<RecordBatch>> {
        let wm = self.watermark;
        // Times `t` with `t + lag < wm` (all of them at the end of input).
        let open_from = if wm == i64::MAX {
            i64::MAX
        } else {
            wm.saturating_sub(lag)
        };
        let mut closed = self.closing.split_off(&open_from);
        std::mem::swap(&mut closed, &mut self.closing);
        if wm == i64::MAX {
            closed.append(&mut self.closing);
        }
        // An entry filed under a time the partition has since outgrown
        // (`Completes`) is skipped: the partition is filed again later.
        let gone: Vec<Partition> = closed
            .into_iter()
            .flat_map(|(t, ids)| ids.into_iter().map(move |id| (t, id)))
            .filter_map(|(t, id)| {
                let current = self.parts.get(id)?.time.unwrap_or(i64::MAX);
                (current == t || wm == i64::MAX)
                    .then(|| self.parts.remove(id))
                    .flatten()
            })
            .collect();
        let rows: Vec<(&[u8], u64, Op)> = gone
            .iter()
            .flat_map(|p| {
                p.rows
                    .iter()
                    .enumerate()
                    .map(|(i, e)| (e.payload(), i as u64 + 1, Op::Insert))
            })
            .collect();
        self.output(&rows)
    }

    fn advance_first(&mut self, lag: i64) -> Result<Vec<RecordBatch>> {
        let wm = self.watermark;
        let limit = self.def.limit;
        let mut out: Vec<(Entry, u64)> = Vec::new();
        let mut pending = Vec::new();
        for id in std::mem::take(&mut self.dirty) {
            let Some(p) = self.parts.get_mut(id) else {
                continue;
            };
            let ready = p
                .rows
                .iter()
                .take_while(|e| passed(e.time, lag, wm))
                .count()
                .min(limit.saturating_sub(p.emitted));
            for e in p.rows.drain(..ready) {
                p.emitted += 1;
                out.push((e, p.emitted as u64));
            }
            if p.emitted >= limit {
                p.rows = Rows::new();
            }
            if p.rows.is_empty() {
                p.dirty = false;
            } else {
                pending.push(id);
            }
        }
        self.dirty = pending;
        let rows: Vec<(&[u8], u64, Op)> = out
            .iter()
            .map(|(e, r)| (e.payload(), *r, Op::Insert))
            .collect();
        self.output(&rows)
    }

    fn advance_changes(&mut self) -> Result<Vec<RecordBatch>> {
        let dirty = std::mem::take(&mut self.dirty);
        // First the changes, read in place (no entry is cloned for the
        // output), then the partitions' shown rows brought up to date.
        let mut retracted: Vec<(&[u8], u64, Op)> = Vec::new();
        let mut inserted: Vec<(&[u8], u64, Op)> = Vec::new();
        for p in dirty.iter().filter_map(|id| self.parts.get(*id)) {
            for i in 0..p.rows.len().max(p.shown.len()) {
                let (old, new) = (p.shown.get(i), p.rows.get(i));
                // At least one of the two exists below the longer length.
                if old.zip(new).is_some_and(|(o, n)| o.same_row(n)) {
                    continue;
                }
                let rank = i as u64 + 1;
                if let Some(o) = old {
                    retracted.push((o.payload(), rank, Op::Retract));
                }
                if let Some(n) = new {
                    inserted.push((n.payload(), rank, Op::Insert));
                }
            }
        }
        retracted.append(&mut inserted);
        let out = self.output(&retracted);
        drop(retracted);
        let Ok(out) = out else {
            // Nothing was shown: the partitions stay dirty.
            self.dirty = dirty;
            return out;
        };
        for id in dirty {
            if let Some(p) = self.parts.get_mut(id) {
                p.dirty = false;
                show(&mut p.shown, &p.rows);
            }
        }
        Ok(out)
    }
}

impl StatefulOperator for TopN {
    fn kind(&self) -> &'static str {
        "top-n"
    }

    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        let eval_all = |exprs: &[PhysExpr]| -> Result<Vec<ArrayRef>> {
            exprs.iter().map(|e| eval(e, &batch)).collect()
        };
        let partition = match &self.partition_rows {
            Some(c) => Some(c.convert_columns(&eval_all(&self.def.partition)?)?),
            None => None,
        };
        let order = self
            .order_rows
            .convert_columns(&eval_all(&self.def.order)?)?;
        let payload = self.payload.encoder(batch.columns())?;
        let times = self.times(&batch)?;
        let lag = self.lag();
        let tracks_time = self.def.mode != TopNMode::Changelog;
        for i in 0..batch.num_rows() {
            let time = times
                .as_ref()
                .and_then(|t| t.is_valid(i).then(|| t.value(i)));
            // The watermark has passed what this row belongs to.
            if tracks_time && self.watermark != i64::MIN && passed(time, lag, self.watermark) {
                self.late += 1;
                continue;
            }
            let key = partition.as_ref().map_or(&[][..], |p| p.row(i).data());
            self.insert(key, order.row(i).data(), &payload, i, time)?;
        }
        Ok(vec![])
    }

    fn advance(&mut self, watermark: i64) -> Result<Vec<RecordBatch>> {
        self.watermark = self.watermark.max(watermark);
        match self.def.mode {
            TopNMode::Windowed { lag_ms, .. } | TopNMode::Completes { lag_ms, .. } => {
                self.advance_windowed(lag_ms)
            }
            TopNMode::FirstByTime { lag_ms } => self.advance_first(lag_ms),
            TopNMode::Changelog => self.advance_changes(),
        }
    }

    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        out.set("watermark", self.watermark);
        out.set("late", self.late);
        out.set("partitions", self.parts.len());
        out.set(PAYLOAD_KEY, PAYLOAD_COMPACT);
        let batch = snapshot::snapshot_batch(&self.parts)?;
        if batch.num_rows() > 0 {
            out.push(&batch)?;
        }
        Ok(())
    }

    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        self.watermark = snap.get("watermark")?;
        self.late = snap.get("late")?;
        self.parts.clear();
        self.dirty.clear();
        for b in snap.parts() {
            snapshot::restore_batch(b, &mut self.parts)?;
        }
        let expected: usize = snap.get("partitions")?;
        if expected != self.parts.len() {
            return Err(EngineError::Internal(format!(
                "damaged top-n snapshot: {expected} partitions recorded, {} restored",
                self.parts.len()
            )));
        }
        match snap.get_optional::<String>(PAYLOAD_KEY)?.as_deref() {
            Some(PAYLOAD_COMPACT) => self.check_restored_payloads()?,
            None => legacy::recode(&self.def.input, &self.payload, &mut self.parts)?,
            Some(other) => {
                return Err(EngineError::Internal(format!(
                    "damaged top-n snapshot: kept rows in an unknown encoding {other:?}"
                )))
            }
        }
        self.closing.clear();
        for (id, _, p) in self.parts.iter() {
            let pending = match self.def.mode {
                TopNMode::Windowed { .. } | TopNMode::Completes { .. } => {
                    self.closing
                        .entry(p.time.unwrap_or(i64::MAX))
                        .or_default()
                        .push(id);
                    false
                }
                TopNMode::FirstByTime { .. } => !p.rows.is_empty(),
                TopNMode::Changelog => p.rows != p.shown,
            };
            if pending {
                self.dirty.push(id);
            }
        }
        for id in &self.dirty {
            if let Some(p) = self.parts.get_mut(*id) {
                p.dirty = true;
            }
        }
        Ok(())
    }

    fn dropped_late(&self) -> u64 {
        self.late
    }

    /// Kept and last-shown rows of every partition.
    fn forget_state(&mut self) {
        // One allocation per kept row and per partition key.
        self.parts.forget();
        std::mem::forget(std::mem::take(&mut self.dirty));
        std::mem::forget(std::mem::take(&mut self.closing));
    }

    fn held_rows(&self) -> Option<usize> {
        Some(
            self.parts
                .iter()
                .map(|(_, _, p)| p)
                .map(|p| p.rows.len() + p.shown.len())
                .sum(),
        )
    }
}

#[cfg(test)]
mod tests;
