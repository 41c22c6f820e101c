//! The top-N's state as one Arrow batch: every partition's key, time and
//! count, then its kept and last-shown rows in rank order.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array, UInt64Array, UInt8Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, UInt64Type, UInt8Type};
use arrow::record_batch::RecordBatch;

use super::partitions::Partitions;
use super::{Entry, Partition};
use crate::error::{EngineError, Result};

/// What a row of the snapshot batch holds.
const ROWS: u8 = 0;
const SHOWN: u8 = 1;
const META: u8 = 2;

fn snapshot_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("partition", DataType::Binary, false),
        Field::new("list", DataType::UInt8, false),
        Field::new("order", DataType::Binary, false),
        Field::new("payload", DataType::Binary, false),
        Field::new("time", DataType::Int64, true),
        Field::new("emitted", DataType::UInt64, false),
    ]))
}

/// Every partition as rows: one META row (its time and count), then its
/// kept rows and its shown rows, in rank order.
pub(super) fn snapshot_batch(parts: &Partitions<Partition>) -> Result<RecordBatch> {
    let mut key: Vec<&[u8]> = Vec::new();
    let mut list = Vec::new();
    let mut order: Vec<&[u8]> = Vec::new();
    let mut payload: Vec<&[u8]> = Vec::new();
    let mut time = Vec::new();
    let mut emitted = Vec::new();
    for (_, k, p) in parts.iter() {
        key.push(k);
        list.push(META);
        order.push(&[]);
        payload.push(&[]);
        time.push(p.time);
        emitted.push(p.emitted as u64);
        for (tag, rows) in [(ROWS, &p.rows), (SHOWN, &p.shown)] {
            for e in rows {
                key.push(k);
                list.push(tag);
                order.push(e.order());
                payload.push(e.payload());
                time.push(e.time);
                emitted.push(0);
            }
        }
    }
    let columns: Vec<ArrayRef> = vec![
        Arc::new(BinaryArray::from_iter_values(key)),
        Arc::new(UInt8Array::from(list)),
        Arc::new(BinaryArray::from_iter_values(order)),
        Arc::new(BinaryArray::from_iter_values(payload)),
        Arc::new(Int64Array::from(time)),
        Arc::new(UInt64Array::from(emitted)),
    ];
    Ok(RecordBatch::try_new(snapshot_schema(), columns)?)
}

pub(super) fn restore_batch(b: &RecordBatch, parts: &mut Partitions<Partition>) -> Result<()> {
    let bad = || EngineError::Internal("damaged top-n snapshot: unexpected columns".into());
    let binary = |i: usize| b.columns().get(i).and_then(|c| c.as_binary_opt::<i32>());
    let (Some(key), Some(order), Some(payload)) = (binary(0), binary(2), binary(3)) else {
        return Err(bad());
    };
    let list = b
        .columns()
        .get(1)
        .and_then(|c| c.as_primitive_opt::<UInt8Type>())
        .ok_or_else(bad)?;
    let time = b
        .columns()
        .get(4)
        .and_then(|c| c.as_primitive_opt::<arrow::datatypes::Int64Type>())
        .ok_or_else(bad)?;
    let emitted = b
        .columns()
        .get(5)
        .and_then(|c| c.as_primitive_opt::<UInt64Type>())
        .ok_or_else(bad)?;
    let mut scratch = Vec::new();
    for i in 0..b.num_rows() {
        let (_, p, _) = parts
            .find_or_insert(key.value(i), Partition::default)
            .ok_or_else(bad)?;
        let t = time.is_valid(i).then(|| time.value(i));
        match list.value(i) {
            META => {
                p.time = t;
                p.emitted = usize::try_from(emitted.value(i)).map_err(|_| bad())?;
            }
            tag => {
                let e = Entry::new(&mut scratch, order.value(i), payload.value(i), t);
                if tag == SHOWN {
                    p.shown.push(e);
                } else {
                    p.rows.push(e);
                }
            }
        }
    }
    Ok(())
}
