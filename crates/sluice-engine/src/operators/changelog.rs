//! Building output batches, with the change column for changelogs.

use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::Result;

/// Value of the change column for an inserted row.
pub const INSERT: &str = "insert";
/// Value of the change column for a retracted row.
pub const RETRACT: &str = "retract";

/// The change column for rows whose kinds are `inserts` (true = insert).
pub fn change_column(inserts: &[bool]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(inserts.iter().map(|i| {
        if *i {
            INSERT
        } else {
            RETRACT
        }
    })))
}

/// A batch of `schema` from columns, appending the change column when given.
pub fn output_batch(
    schema: &SchemaRef,
    mut columns: Vec<ArrayRef>,
    changes: Option<&[bool]>,
) -> Result<RecordBatch> {
    if let Some(kinds) = changes {
        columns.push(change_column(kinds));
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}
