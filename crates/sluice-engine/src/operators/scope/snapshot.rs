//! The format of one scope's state in a checkpoint: one record batch.

use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::record_batch::RecordBatch;

use crate::error::{EngineError, Result};

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
