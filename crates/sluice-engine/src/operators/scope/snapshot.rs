//! The format of one scope's state in a checkpoint: one record batch.

use std::sync::Arc;

use arrow::array::{new_null_array, Array, ArrayRef, UInt32Array};
use arrow::compute::{concat, filter, take};
use arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};
use crate::partition::placement::VnodePlacement;

/// The schema of a batch of state columns: nullable, named by position
/// (`c0`, `c1`, ...), since what a column means is fixed by its place.
pub fn state_schema(cols: &[ArrayRef]) -> arrow::datatypes::Schema {
    let fields: Vec<arrow::datatypes::Field> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| arrow::datatypes::Field::new(format!("c{i}"), c.data_type().clone(), true))
        .collect();
    arrow::datatypes::Schema::new(fields)
}

/// A scope's state as one batch: key columns, then each aggregate's state
/// columns (`widths` of them), then the last emitted values when present.
pub struct ScopeSnapshot {
    /// The columns.
    pub batch: RecordBatch,
    /// State columns per aggregate function.
    pub widths: Vec<usize>,
    /// Groups with an emitted row (changelog mode), if any were emitted.
    pub emitted_len: Option<usize>,
}

impl ScopeSnapshot {
    /// A snapshot of `rows` groups from its columns: keys, then each
    /// aggregate's state (`widths` columns each), then emitted values.
    pub fn from_columns(
        cols: Vec<ArrayRef>,
        rows: usize,
        widths: Vec<usize>,
        emitted_len: Option<usize>,
    ) -> Result<Self> {
        let opts = arrow::record_batch::RecordBatchOptions::new().with_row_count(Some(rows));
        let batch = RecordBatch::try_new_with_options(Arc::new(state_schema(&cols)), cols, &opts)?;
        Ok(Self {
            batch,
            widths,
            emitted_len,
        })
    }

    /// The batch with `widths`, `emitted_len` and `extra` in its schema metadata.
    pub fn to_batch(&self, extra: &[(&str, String)]) -> Result<RecordBatch> {
        let mut meta = std::collections::HashMap::new();
        let widths: Vec<String> = self.widths.iter().map(|w| w.to_string()).collect();
        meta.insert("widths".to_string(), widths.join(","));
        if let Some(e) = self.emitted_len {
            meta.insert("emitted_len".to_string(), e.to_string());
        }
        for (k, v) in extra {
            meta.insert(k.to_string(), v.clone());
        }
        let schema = self.batch.schema().as_ref().clone().with_metadata(meta);
        Ok(self.batch.clone().with_schema(Arc::new(schema))?)
    }

    /// Read back what [`Self::to_batch`] wrote.
    pub fn from_batch(batch: &RecordBatch) -> Result<Self> {
        let schema = batch.schema();
        let meta = schema.metadata();
        let bad = || EngineError::Internal("damaged aggregate snapshot metadata".into());
        let widths = match meta.get("widths").map(String::as_str) {
            Some("") => vec![],
            Some(w) => w
                .split(',')
                .map(|x| x.parse::<usize>().map_err(|_| bad()))
                .collect::<Result<Vec<_>>>()?,
            None => return Err(bad()),
        };
        let emitted_len = match meta.get("emitted_len") {
            Some(v) => Some(v.parse().map_err(|_| bad())?),
            None => None,
        };
        Ok(Self {
            batch: batch.clone(),
            widths,
            emitted_len,
        })
    }
}

impl ScopeSnapshot {
    /// One scope of the groups of `keep`'s vnodes out of `snaps`, scopes
    /// of the same aggregation on the nodes that held those vnodes before
    /// they moved (each group is in at most one of them, since a key's
    /// rows went to its vnode's one owner): what a node that gains vnodes
    /// restores. `nkeys` leading columns are the key's values.
    ///
    /// Groups that emitted a row (changelog mode) come first, as
    /// [`Self::emitted_len`](ScopeSnapshot) requires; a scope without
    /// emitted values contributes nulls to those columns, which no group
    /// past the emitted ones reads.
    pub fn merge_owned(
        snaps: &[ScopeSnapshot],
        nkeys: usize,
        keep: &VnodePlacement,
    ) -> Result<Self> {
        let damaged = |what: &str| EngineError::Internal(format!("moving aggregate state: {what}"));
        let first = snaps.first().ok_or_else(|| damaged("no scope to merge"))?;
        let widths = first.widths.clone();
        let state_end = nkeys + widths.iter().sum::<usize>();
        // The emitted columns' types, from a scope that has them.
        let emitted_types: Option<Vec<arrow::datatypes::DataType>> =
            snaps.iter().find(|s| s.emitted_len.is_some()).map(|s| {
                s.batch.columns()[state_end.min(s.batch.num_columns())..]
                    .iter()
                    .map(|c| c.data_type().clone())
                    .collect()
            });
        let width = state_end + emitted_types.as_ref().map_or(0, Vec::len);
        let mut kept: Vec<Vec<ArrayRef>> = Vec::with_capacity(snaps.len());
        // Per scope: rows kept, and how many of them emitted.
        let mut counts: Vec<(usize, usize)> = Vec::with_capacity(snaps.len());
        for snap in snaps {
            if snap.widths != widths || snap.batch.num_columns() < state_end {
                return Err(damaged("the nodes' scopes have different columns"));
            }
            let rows = snap.batch.num_rows();
            let mask = keep
                .rows_owned(&snap.batch.columns()[..nkeys], rows)
                .map_err(|e| damaged(&e))?;
            let mut cols: Vec<ArrayRef> = snap.batch.columns()[..state_end].to_vec();
            match (&emitted_types, snap.emitted_len) {
                (Some(_), Some(_)) => cols.extend_from_slice(&snap.batch.columns()[state_end..]),
                (Some(types), None) => {
                    cols.extend(types.iter().map(|t| new_null_array(t, rows)));
                }
                (None, _) => {}
            }
            if cols.len() != width {
                return Err(damaged("the nodes' scopes have different emitted columns"));
            }
            let emitted = snap.emitted_len.unwrap_or(0).min(rows);
            let emitted_kept = mask.slice(0, emitted).true_count();
            let cols = cols
                .iter()
                .map(|c| filter(c.as_ref(), &mask))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            counts.push((mask.true_count(), emitted_kept));
            kept.push(cols);
        }
        // Emitted groups of every scope first, then the others.
        let mut order: Vec<u32> = Vec::new();
        let mut at = 0u32;
        let mut tails = Vec::new();
        for &(rows, emitted) in &counts {
            let (rows, emitted) = (rows as u32, emitted as u32);
            order.extend(at..at + emitted);
            tails.push(at + emitted..at + rows);
            at += rows;
        }
        for tail in tails {
            order.extend(tail);
        }
        let order = UInt32Array::from(order);
        let mut cols = Vec::with_capacity(width);
        for c in 0..width {
            let parts: Vec<&dyn Array> = kept.iter().map(|k| k[c].as_ref()).collect();
            cols.push(take(concat(&parts)?.as_ref(), &order, None)?);
        }
        let emitted_len = emitted_types
            .is_some()
            .then(|| counts.iter().map(|(_, e)| e).sum());
        Self::from_columns(cols, at as usize, widths, emitted_len)
    }
}
