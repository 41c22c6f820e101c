//! The lookup join: each row of an append-only input enriched with the rows
//! of an external table that have its key (see `sluice_connectors::lookup`).
//!
//! A batch is answered in one pass: the distinct non-NULL keys of the batch
//! are looked up in a bounded cache, those it does not answer are asked of
//! the table in one call, and every input row is then joined with the rows
//! of its key. The residual `ON` condition runs over the joined rows; for a
//! `LEFT` join a row none of whose pairs passes is emitted once with the
//! table's columns NULL. Each row is final when it is processed, so the
//! output is append-only and nothing waits for the watermark.
//!
//! The cache (`quick_cache`, weighed in table rows, a miss counting one) is
//! not state: the snapshot is empty, and a restore clears the cache. Rows
//! are read at processing time, as Flink's lookup join reads them, so a
//! replay after recovery may see a table that changed since.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{new_null_array, Array, ArrayRef, UInt32Array};
use arrow::compute::{concat_batches, filter_record_batch, take};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use rustc_hash::FxHashMap;
use sluice_connectors::LookupError;

use super::expr::{eval, eval_predicate, PhysExpr};
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::{EngineError, Result};
use crate::lookup::LookupBinding;
use crate::state::{SnapshotReader, SnapshotWriter};

/// A key's rows as last read from the table; `at` is when.
#[derive(Clone)]
struct Cached {
    rows: RecordBatch,
    at: Instant,
}

/// Weighs a cache entry in table rows; a miss (no row) weighs one, so
/// negative entries are bounded too.
#[derive(Clone)]
struct RowWeight;

impl quick_cache::Weighter<Vec<u8>, Cached> for RowWeight {
    fn weight(&self, _key: &Vec<u8>, val: &Cached) -> u64 {
        val.rows.num_rows().max(1) as u64
    }
}

type Cache = quick_cache::unsync::Cache<Vec<u8>, Cached, RowWeight>;

/// The lookup join operator.
pub struct LookupJoin {
    binding: Arc<LookupBinding>,
    keys: Vec<PhysExpr>,
    converter: RowConverter,
    left_outer: bool,
    filter: Option<PhysExpr>,
    /// The table's columns in the output (nullable for a LEFT join).
    table_schema: SchemaRef,
    schema: SchemaRef,
    cache: Option<Cache>,
}

impl LookupJoin {
    /// A lookup join reading `binding` with the input's `keys` (of
    /// `key_types`, the leading key columns' types).
    pub fn new(
        binding: Arc<LookupBinding>,
        keys: Vec<PhysExpr>,
        key_types: Vec<arrow::datatypes::DataType>,
        left_outer: bool,
        filter: Option<PhysExpr>,
        schema: SchemaRef,
    ) -> Result<Self> {
        let table_width = binding.schema.fields().len();
        let split = schema
            .fields()
            .len()
            .checked_sub(table_width)
            .ok_or_else(|| {
                EngineError::Internal("lookup join output narrower than its table".into())
            })?;
        let table_schema = Arc::new(arrow::datatypes::Schema::new(
            schema.fields()[split..].to_vec(),
        ));
        let converter = RowConverter::new(key_types.into_iter().map(SortField::new).collect())?;
        let mut op = LookupJoin {
            binding,
            keys,
            converter,
            left_outer,
            filter,
            table_schema,
            schema,
            cache: None,
        };
        op.cache = op.new_cache();
        Ok(op)
    }

    fn new_cache(&self) -> Option<Cache> {
        let max = self.binding.options.max_rows;
        (max > 0).then(|| Cache::with_weighter(max, max as u64, RowWeight))
    }

    /// The cached rows of `key`, unless absent or older than the TTL.
    fn cached(&mut self, key: &[u8], now: Instant) -> Option<RecordBatch> {
        let ttl = self.binding.options.ttl;
        let cache = self.cache.as_mut()?;
        let hit = cache.get(key)?;
        if ttl.is_some_and(|ttl| now.duration_since(hit.at) >= ttl) {
            cache.remove(key);
            return None;
        }
        Some(hit.rows.clone())
    }

    /// Ask the table for `keys` (distinct, non-NULL): per key position, its
    /// rows. The table's errors and panics keep their own codes.
    fn ask(&self, keys: &[ArrayRef], count: usize) -> Result<Vec<RecordBatch>> {
        let b = &self.binding;
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.table.lookup(keys)))
            .map_err(|p| LookupError::Panicked {
                table: b.name.clone(),
                message: crate::panic::panic_message(&*p),
            })?
            .map_err(|e| match e {
                // An implementation names itself as it likes; the error
                // names the table as registered.
                LookupError::Failed { source, .. } => LookupError::Failed {
                    table: b.name.clone(),
                    source,
                },
                other => other,
            })?;
        let contract = |message: String| LookupError::Contract {
            table: b.name.clone(),
            message,
        };
        let rows = found.rows;
        if rows.schema().fields().len() != b.schema.fields().len()
            || rows
                .schema()
                .fields()
                .iter()
                .zip(b.schema.fields())
                .any(|(g, d)| g.data_type() != d.data_type())
        {
            return Err(contract(format!(
                "rows returned with schema {:?}, registered with {:?}",
                rows.schema(),
                b.schema
            ))
            .into());
        }
        if found.key_index.len() != rows.num_rows() || found.key_index.null_count() > 0 {
            return Err(contract(format!(
                "{} key indexes for {} rows",
                found.key_index.len(),
                rows.num_rows()
            ))
            .into());
        }
        let mut per_key: Vec<Vec<u32>> = vec![Vec::new(); count];
        for (row, k) in found.key_index.values().iter().enumerate() {
            let slot = per_key
                .get_mut(*k as usize)
                .ok_or_else(|| contract(format!("key index {k} out of range (0..{count})")))?;
            slot.push(row as u32);
        }
        let rows = RecordBatch::try_new(Arc::clone(&self.table_schema), rows.columns().to_vec())?;
        per_key
            .into_iter()
            .map(|idx| {
                if idx.is_empty() {
                    return Ok(rows.slice(0, 0));
                }
                let idx = UInt32Array::from(idx);
                let cols = rows
                    .columns()
                    .iter()
                    .map(|c| Ok(take(c, &idx, None)?))
                    .collect::<Result<Vec<_>>>()?;
                Ok(RecordBatch::try_new(Arc::clone(&self.table_schema), cols)?)
            })
            .collect()
    }

    fn join(&mut self, batch: &RecordBatch) -> Result<Vec<RecordBatch>> {
        let n = batch.num_rows();
        let cols: Vec<ArrayRef> = self
            .keys
            .iter()
            .map(|k| eval(k, batch))
            .collect::<Result<_>>()?;
        let encoded = self.converter.convert_columns(&cols)?;
        let now = Instant::now();
        // Distinct keys of the batch: their slot, and per row its slot.
        let mut slot_of: FxHashMap<&[u8], usize> = FxHashMap::default();
        let mut row_slot: Vec<Option<usize>> = Vec::with_capacity(n);
        let mut first_row: Vec<usize> = Vec::new();
        for i in 0..n {
            if cols.iter().any(|c| c.is_null(i)) {
                row_slot.push(None);
                continue;
            }
            let k = encoded.row(i).data();
            let next = slot_of.len();
            let s = *slot_of.entry(k).or_insert_with(|| {
                first_row.push(i);
                next
            });
            row_slot.push(Some(s));
        }
        let mut rows_of: Vec<Option<RecordBatch>> = vec![None; first_row.len()];
        let mut missing = Vec::new();
        for (s, &i) in first_row.iter().enumerate() {
            match self.cached(encoded.row(i).data(), now) {
                Some(r) => rows_of[s] = Some(r),
                None => missing.push(s),
            }
        }
        if !missing.is_empty() {
            let idx = UInt32Array::from_iter_values(missing.iter().map(|s| first_row[*s] as u32));
            let keys = cols
                .iter()
                .map(|c| Ok(take(c, &idx, None)?))
                .collect::<Result<Vec<_>>>()?;
            let found = self.ask(&keys, missing.len())?;
            let cache_missing = self.binding.options.cache_missing;
            for (s, rows) in missing.iter().zip(found) {
                if let Some(cache) = self.cache.as_mut() {
                    if rows.num_rows() > 0 || cache_missing {
                        let key = encoded.row(first_row[*s]).data().to_vec();
                        cache.insert(
                            key,
                            Cached {
                                rows: rows.clone(),
                                at: now,
                            },
                        );
                    }
                }
                rows_of[*s] = Some(rows);
            }
        }
        let cached = self.cache.as_ref().map_or(0, |c| c.weight());
        self.binding
            .stats
            .record(first_row.len(), missing.len(), cached);
        self.output(batch, &row_slot, &rows_of)
    }

    /// Join every row with its key's rows, apply the residual condition and
    /// pad the LEFT join's unmatched rows.
    fn output(
        &self,
        batch: &RecordBatch,
        row_slot: &[Option<usize>],
        rows_of: &[Option<RecordBatch>],
    ) -> Result<Vec<RecordBatch>> {
        let pieces: Vec<RecordBatch> = rows_of.iter().flatten().cloned().collect();
        let pool = concat_batches(&self.table_schema, &pieces)?;
        let mut offset = Vec::with_capacity(rows_of.len());
        let mut at = 0u32;
        for r in rows_of {
            offset.push(at);
            at += r.as_ref().map_or(0, |r| r.num_rows() as u32);
        }
        let (mut li, mut ri) = (Vec::new(), Vec::new());
        for (i, s) in row_slot.iter().enumerate() {
            let Some(s) = s else { continue };
            let count = rows_of[*s].as_ref().map_or(0, |r| r.num_rows() as u32);
            for j in 0..count {
                li.push(i as u32);
                ri.push(offset[*s] + j);
            }
        }
        let mut out = Vec::new();
        let mut matched = vec![false; batch.num_rows()];
        if !li.is_empty() {
            let (lidx, ridx) = (UInt32Array::from(li), UInt32Array::from(ri));
            let mut cols = Vec::with_capacity(self.schema.fields().len());
            for c in batch.columns() {
                cols.push(take(c, &lidx, None)?);
            }
            for c in pool.columns() {
                cols.push(take(c, &ridx, None)?);
            }
            let mut joined = RecordBatch::try_new(Arc::clone(&self.schema), cols)?;
            let mut kept = lidx;
            if let Some(f) = &self.filter {
                let mask = eval_predicate(f, &joined)?;
                joined = filter_record_batch(&joined, &mask)?;
                kept = arrow::compute::filter(&kept, &mask)?
                    .as_any()
                    .downcast_ref::<UInt32Array>()
                    .ok_or_else(|| EngineError::Internal("filtered row indexes".into()))?
                    .clone();
            }
            for i in kept.values() {
                matched[*i as usize] = true;
            }
            if joined.num_rows() > 0 {
                out.push(joined);
            }
        }
        if self.left_outer {
            let pad = UInt32Array::from_iter_values(
                (0..batch.num_rows() as u32).filter(|i| !matched[*i as usize]),
            );
            if !pad.is_empty() {
                let mut cols = Vec::with_capacity(self.schema.fields().len());
                for c in batch.columns() {
                    cols.push(take(c, &pad, None)?);
                }
                for f in self.table_schema.fields() {
                    cols.push(new_null_array(f.data_type(), pad.len()));
                }
                out.push(RecordBatch::try_new(Arc::clone(&self.schema), cols)?);
            }
        }
        Ok(out)
    }
}

impl StatefulOperator for LookupJoin {
    fn kind(&self) -> &'static str {
        "lookup join"
    }

    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        if batch.num_rows() == 0 {
            return Ok(vec![]);
        }
        self.join(&batch)
    }

    fn advance(&mut self, _watermark: i64) -> Result<Vec<RecordBatch>> {
        Ok(vec![])
    }

    /// The cache is not state: nothing is written.
    fn snapshot(&mut self, _out: &mut SnapshotWriter) -> Result<()> {
        Ok(())
    }

    /// A restore starts with an empty cache.
    fn restore(&mut self, _snap: &SnapshotReader) -> Result<()> {
        self.cache = self.new_cache();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::lookup::LookupOptions;
    use crate::operators::stateful::{restore_part, snapshot_part};
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use datafusion::common::DFSchema;
    use datafusion::prelude::col;
    use sluice_connectors::MemoryLookupTable;

    /// The cache spares repeated keys, is not in the snapshot, and a
    /// restore empties it: the next batch asks the table again.
    #[test]
    fn cache_is_not_state_and_restore_empties_it() {
        let dim = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let t = Arc::new(MemoryLookupTable::new(Arc::clone(&dim), &["id"]).unwrap());
        t.upsert(
            &RecordBatch::try_new(
                Arc::clone(&dim),
                vec![
                    Arc::new(Int64Array::from(vec![1])),
                    Arc::new(StringArray::from(vec!["a"])),
                ],
            )
            .unwrap(),
        )
        .unwrap();
        let input = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true)]));
        let df = DFSchema::try_from(input.as_ref().clone()).unwrap();
        let binding = LookupBinding::new(
            "dim",
            Arc::clone(&dim),
            &["id"],
            t.clone(),
            LookupOptions::default(),
        )
        .unwrap();
        let out = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let mut op = LookupJoin::new(
            binding,
            vec![crate::operators::expr::compile(&col("k"), &df).unwrap()],
            vec![DataType::Int64],
            false,
            None,
            out,
        )
        .unwrap();
        let batch = RecordBatch::try_new(
            Arc::clone(&input),
            vec![Arc::new(Int64Array::from(vec![Some(1), None, Some(1)]))],
        )
        .unwrap();
        let rows = |b: Vec<RecordBatch>| b.iter().map(RecordBatch::num_rows).sum::<usize>();
        assert_eq!(rows(op.update(0, batch.clone()).unwrap()), 2);
        assert_eq!(rows(op.update(0, batch.clone()).unwrap()), 2);
        assert_eq!((t.calls(), t.keys_asked()), (1, 1));
        let part = snapshot_part(&mut op).unwrap();
        restore_part(&mut op, &part).unwrap();
        assert_eq!(rows(op.update(0, batch).unwrap()), 2);
        assert_eq!((t.calls(), t.keys_asked()), (2, 2));
        assert!(op.update(1, RecordBatch::new_empty(input)).is_err());
    }
}
