//! Materialized view stores: the current result of a continuous query.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::{Array, AsArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use arrow::row::{OwnedRow, RowConverter, SortField};
use parking_lot::RwLock;

use crate::error::{EngineError, Result};
use crate::operators::changelog::RETRACT;

enum MvState {
    /// Append-only input: every row is part of the result.
    Append(Vec<RecordBatch>),
    /// Changelog input: a multiset of current rows.
    Changelog {
        converter: RowConverter,
        counts: HashMap<OwnedRow, i64>,
    },
}

/// The queryable current result of one materialized view.
pub struct MaterializedView {
    schema: SchemaRef,
    state: RwLock<MvState>,
}

impl MaterializedView {
    /// A view over rows of `schema` (the user columns, no change column).
    pub fn new(schema: SchemaRef, changelog: bool) -> Result<Arc<Self>> {
        let state = if changelog {
            MvState::Changelog {
                converter: RowConverter::new(
                    schema
                        .fields()
                        .iter()
                        .map(|f| SortField::new(f.data_type().clone()))
                        .collect(),
                )?,
                counts: HashMap::new(),
            }
        } else {
            MvState::Append(Vec::new())
        };
        Ok(Arc::new(Self {
            schema,
            state: RwLock::new(state),
        }))
    }

    /// The view's columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Apply one cycle's output batch.
    pub fn apply(&self, batch: &RecordBatch) -> Result<()> {
        let mut state = self.state.write();
        match &mut *state {
            MvState::Append(batches) => {
                batches.push(RecordBatch::try_new(
                    Arc::clone(&self.schema),
                    batch.columns().to_vec(),
                )?);
            }
            MvState::Changelog { converter, counts } => {
                let n = self.schema.fields().len();
                let change = batch
                    .columns()
                    .get(n)
                    .and_then(|c| c.as_string_opt::<i32>())
                    .ok_or_else(|| {
                        EngineError::Internal("changelog batch without change column".into())
                    })?
                    .clone();
                let rows = converter.convert_columns(&batch.columns()[..n])?;
                for (i, row) in rows.iter().enumerate() {
                    let delta = if change.is_valid(i) && change.value(i) == RETRACT {
                        -1
                    } else {
                        1
                    };
                    let entry = counts.entry(row.owned()).or_insert(0);
                    *entry += delta;
                    if *entry == 0 {
                        counts.remove(&row.owned());
                    }
                }
            }
        }
        Ok(())
    }

    /// The current rows as snapshot bytes (for checkpoints).
    pub fn snapshot_bytes(&self) -> Result<bytes::Bytes> {
        self.snapshot_part()?.encode()
    }

    /// The current rows as a snapshot part whose encoding is deferred (the
    /// batches of an append-only view are shared, not copied).
    pub fn snapshot_part(&self) -> Result<crate::state::StatePart> {
        let mut w = crate::state::SnapshotWriter::default();
        for b in self.snapshot()? {
            w.push(&b)?;
        }
        Ok(w.finish_deferred())
    }

    /// Replace the contents with a checkpoint's.
    pub fn restore_bytes(&self, bytes: &[u8]) -> Result<()> {
        let snap = crate::state::SnapshotReader::new(bytes)?;
        let mut state = self.state.write();
        match &mut *state {
            MvState::Append(batches) => {
                *batches = snap.parts().to_vec();
            }
            MvState::Changelog { converter, counts } => {
                counts.clear();
                for b in snap.parts() {
                    let rows = converter.convert_columns(b.columns())?;
                    for row in rows.iter() {
                        *counts.entry(row.owned()).or_insert(0) += 1;
                    }
                }
            }
        }
        Ok(())
    }

    /// A copy of the current rows.
    pub fn snapshot(&self) -> Result<Vec<RecordBatch>> {
        let state = self.state.read();
        match &*state {
            MvState::Append(batches) => Ok(batches.clone()),
            MvState::Changelog { converter, counts } => {
                let rows: Vec<_> = counts
                    .iter()
                    .flat_map(|(r, c)| std::iter::repeat_n(r, (*c).max(0) as usize))
                    .map(|r| r.row())
                    .collect();
                if rows.is_empty() {
                    return Ok(vec![]);
                }
                let cols = converter.convert_rows(rows)?;
                Ok(vec![RecordBatch::try_new(Arc::clone(&self.schema), cols)?])
            }
        }
    }
}
