//! Non-windowed `SELECT DISTINCT`: each distinct row once, the first time it
//! is seen.
//!
//! No window ever closes, so waiting for a final answer would mean never
//! emitting; a distinct row, once seen, is in the result for good, so
//! emitting it at first sight is already exact and the output stays
//! append-only (no retraction, no second emission). The price is state: the
//! set of every distinct row seen, which no watermark frees (EXPLAIN says so).

use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::compute::take;
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use super::expr::{eval, PhysExpr};
use super::groups::{GroupTable, KeyCodec};
use super::stateful::{no_such_port, Port, StatefulOperator};
use crate::error::Result;
use crate::state::{SnapshotReader, SnapshotWriter};

/// The set of distinct rows seen, interned in first-seen order.
pub struct Distinct {
    keys: Vec<PhysExpr>,
    codec: KeyCodec,
    seen: GroupTable,
    schema: SchemaRef,
    scratch: Vec<usize>,
}

impl Distinct {
    /// A distinct over the selected expressions `keys`, producing `schema`.
    pub fn new(keys: Vec<PhysExpr>, codec: KeyCodec, schema: SchemaRef) -> Self {
        let seen = GroupTable::new(&codec);
        Self {
            keys,
            codec,
            seen,
            schema,
            scratch: Vec::new(),
        }
    }

    /// Intern the rows of `columns`; the indices of rows never seen before
    /// (the first of equal rows within the batch).
    fn intern(&mut self, columns: &[ArrayRef], num_rows: usize) -> Result<Vec<u32>> {
        let before = self.seen.len();
        let encoded = self.codec.encode(columns, num_rows)?;
        self.seen.intern(&encoded, None, &mut self.scratch);
        // New keys get consecutive indices in row order, so a row is a first
        // occurrence exactly when its index is the next unassigned one.
        let mut next = before;
        let mut fresh = Vec::new();
        for (row, group) in self.scratch.iter().enumerate() {
            if *group == next {
                fresh.push(row as u32);
                next += 1;
            }
        }
        Ok(fresh)
    }
}

impl StatefulOperator for Distinct {
    fn kind(&self) -> &'static str {
        "distinct"
    }

    fn update(&mut self, port: Port, batch: RecordBatch) -> Result<Vec<RecordBatch>> {
        if port != 0 {
            return Err(no_such_port(self.kind(), port));
        }
        let columns = self
            .keys
            .iter()
            .map(|k| eval(k, &batch))
            .collect::<Result<Vec<_>>>()?;
        let fresh = self.intern(&columns, batch.num_rows())?;
        if fresh.is_empty() {
            return Ok(vec![]);
        }
        let indices = UInt32Array::from(fresh);
        let out = columns
            .iter()
            .map(|c| take(c.as_ref(), &indices, None))
            .collect::<std::result::Result<Vec<_>, _>>()?;
        Ok(vec![RecordBatch::try_new(Arc::clone(&self.schema), out)?])
    }

    fn advance(&mut self, _watermark: i64) -> Result<Vec<RecordBatch>> {
        Ok(vec![])
    }

    fn snapshot(&mut self, out: &mut SnapshotWriter) -> Result<()> {
        let all: Vec<usize> = (0..self.seen.len()).collect();
        let columns = self.seen.decode(&self.codec, &all)?;
        out.set("rows", all.len());
        if !all.is_empty() {
            out.push(&RecordBatch::try_new(Arc::clone(&self.schema), columns)?)?;
        }
        Ok(())
    }

    fn restore(&mut self, snap: &SnapshotReader) -> Result<()> {
        self.seen = GroupTable::new(&self.codec);
        for part in snap.parts() {
            self.intern(part.columns(), part.num_rows())?;
        }
        let rows: usize = snap.get("rows")?;
        if rows != self.seen.len() {
            return Err(crate::error::EngineError::Internal(format!(
                "damaged distinct snapshot: {rows} rows recorded, {} restored",
                self.seen.len()
            )));
        }
        Ok(())
    }
}
