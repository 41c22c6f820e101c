//! Changelog rows: the typed kind of a change ([`Op`]) and building output
//! batches that carry it.
//!
//! Inside the engine a change's kind is always an [`Op`]; only at the edge of
//! an output batch does it become the text of the change column
//! (`"insert"` / `"retract"`), which is what sinks write and subscribers read.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::Result;

/// The kind of one changelog row.
///
/// An updated row is a [`Op::Retract`] of its old values followed by an
/// [`Op::Insert`] of its new ones, so two kinds cover every change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// The row is added to the result.
    Insert,
    /// The row, emitted before, is taken back.
    Retract,
}

/// Value of the change column for an inserted row.
pub const INSERT: &str = Op::Insert.as_str();
/// Value of the change column for a retracted row.
pub const RETRACT: &str = Op::Retract.as_str();

impl Op {
    /// The change column's text for this kind.
    pub const fn as_str(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Retract => "retract",
        }
    }

    /// The kind of row `i` of a change column: a retraction only where the
    /// column says `retract`; anything else (a NULL included) inserts, which
    /// is how every reader of the column has always read it.
    pub fn at(column: &StringArray, i: usize) -> Op {
        if column.is_valid(i) && column.value(i) == RETRACT {
            Op::Retract
        } else {
            Op::Insert
        }
    }
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The change column for rows of kinds `ops`.
pub fn change_column(ops: &[Op]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(
        ops.iter().map(|o| o.as_str()),
    ))
}

/// A batch of `schema` from columns, appending the change column when given.
pub fn output_batch(
    schema: &SchemaRef,
    mut columns: Vec<ArrayRef>,
    changes: Option<&[Op]>,
) -> Result<RecordBatch> {
    if let Some(ops) = changes {
        columns.push(change_column(ops));
    }
    Ok(RecordBatch::try_new(Arc::clone(schema), columns)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_change_column_reads_back_as_the_ops_written() {
        let ops = [Op::Retract, Op::Insert, Op::Insert, Op::Retract];
        let col = change_column(&ops);
        let text = arrow::array::AsArray::as_string::<i32>(&col);
        let words: Vec<&str> = text.iter().flatten().collect();
        assert_eq!(words, ["retract", "insert", "insert", "retract"]);
        let back: Vec<Op> = (0..text.len()).map(|i| Op::at(text, i)).collect();
        assert_eq!(back, ops);
    }

    #[test]
    fn only_the_word_retract_retracts() {
        let col = StringArray::from(vec![Some("retract"), None, Some("Retract"), Some("")]);
        let got: Vec<Op> = (0..col.len()).map(|i| Op::at(&col, i)).collect();
        assert_eq!(got, [Op::Retract, Op::Insert, Op::Insert, Op::Insert]);
    }
}
