//! Splitting a batch by vnode owner: the vectorized half of the sender.
//!
//! One pass over the vnode column buckets row indices per owner, then one
//! `take` per non-empty owner builds its batch, so rows keep their relative
//! order within each destination.

use arrow::array::{Array, UInt32Array};
use arrow::compute::take_record_batch;
use arrow::record_batch::RecordBatch;

use crate::config::OwnerTable;
use crate::error::{Result, ShuffleError};

/// Split `batch` into one batch per owner of `table` (indexed like
/// `table.nodes()`; `None` where an owner gets no rows) by the vnode of each
/// row in `vnodes`.
pub fn split_by_vnode(
    edge: &str,
    batch: &RecordBatch,
    vnodes: &UInt32Array,
    table: &OwnerTable,
) -> Result<Vec<Option<RecordBatch>>> {
    let fail = |detail: String| ShuffleError::Routing {
        edge: edge.to_string(),
        detail,
        source: None,
    };
    if vnodes.len() != batch.num_rows() {
        return Err(fail(format!(
            "{} vnodes for {} rows",
            vnodes.len(),
            batch.num_rows()
        )));
    }
    if vnodes.null_count() > 0 {
        return Err(fail(format!("{} rows have no vnode", vnodes.null_count())));
    }
    let n = table.nodes().len();
    let mut buckets: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (row, vnode) in vnodes.values().iter().enumerate() {
        let owner = table.owner_index(*vnode).ok_or_else(|| {
            fail(format!(
                "row {row} has vnode {vnode}, outside the table's {} vnodes",
                table.vnode_count()
            ))
        })?;
        let row = u32::try_from(row).map_err(|_| fail(format!("row {row} exceeds u32")))?;
        buckets[owner as usize].push(row);
    }
    let mut out = Vec::with_capacity(n);
    for rows in buckets {
        if rows.is_empty() {
            out.push(None);
        } else if rows.len() == batch.num_rows() {
            // Every row goes one way (rows are in order): no copy.
            out.push(Some(batch.clone()));
        } else {
            let indices = UInt32Array::from(rows);
            let part =
                take_record_batch(batch, &indices).map_err(|source| ShuffleError::Routing {
                    edge: edge.to_string(),
                    detail: "take failed".to_string(),
                    source: Some(source),
                })?;
            out.push(Some(part));
        }
    }
    Ok(out)
}

/// The vnode column `column` of `batch` as `UInt32`.
pub fn vnode_column<'a>(
    edge: &str,
    batch: &'a RecordBatch,
    column: usize,
) -> Result<&'a UInt32Array> {
    let array = batch
        .columns()
        .get(column)
        .ok_or_else(|| ShuffleError::Routing {
            edge: edge.to_string(),
            detail: format!(
                "vnode column {column} does not exist ({} columns)",
                batch.num_columns()
            ),
            source: None,
        })?;
    array
        .as_any()
        .downcast_ref::<UInt32Array>()
        .ok_or_else(|| ShuffleError::Routing {
            edge: edge.to_string(),
            detail: format!("vnode column {column} is {}, not UInt32", array.data_type()),
            source: None,
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    fn batch(keys: Vec<i64>, vnodes: Vec<u32>) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::UInt32, false),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys)),
                Arc::new(UInt32Array::from(vnodes)),
            ],
        )
        .unwrap()
    }

    #[test]
    fn splits_rows_to_their_owner_in_order() {
        let table =
            OwnerTable::new(vec!["a".into(), "b".into(), "c".into()], vec![0, 1, 1, 0]).unwrap();
        let b = batch(vec![10, 11, 12, 13, 14], vec![3, 1, 0, 2, 0]);
        let parts = split_by_vnode("e", &b, vnode_column("e", &b, 1).unwrap(), &table).unwrap();
        let keys = |p: &Option<RecordBatch>| -> Vec<i64> {
            p.as_ref()
                .map(|p| {
                    p.column(0)
                        .as_any()
                        .downcast_ref::<Int64Array>()
                        .unwrap()
                        .values()
                        .to_vec()
                })
                .unwrap_or_default()
        };
        assert_eq!(keys(&parts[0]), vec![10, 12, 14]);
        assert_eq!(keys(&parts[1]), vec![11, 13]);
        assert!(parts[2].is_none());
    }

    #[test]
    fn refuses_out_of_range_vnode_and_wrong_type() {
        let table = OwnerTable::new(vec!["a".into()], vec![0, 0]).unwrap();
        let b = batch(vec![1, 2], vec![0, 2]);
        let err = split_by_vnode("e", &b, vnode_column("e", &b, 1).unwrap(), &table).unwrap_err();
        assert_eq!(err.code(), "SLC-SHF-008");
        assert!(err.to_string().contains("row 1 has vnode 2"), "{err}");
        let err = vnode_column("e", &b, 0).unwrap_err();
        assert!(err.to_string().contains("is Int64, not UInt32"), "{err}");
    }
}
