//! Unit tests of the top-N operator's own state handling (its results are
//! checked against DataFusion in `tests/differential/top_n*.rs`).

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use arrow::row::SortField;
use datafusion::physical_expr::expressions::Column;
use sluice_sql::TopNMode;

use super::{Entry, TopN, TopNDef};
use crate::operators::stateful::StatefulOperator;
use crate::state::{SnapshotReader, SnapshotWriter};

/// `ROW_NUMBER() OVER (PARTITION BY k ORDER BY k) <= 1` over `(k, s)`, as a
/// changelog.
fn top_one() -> TopN {
    let input = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
        Field::new("rn", DataType::UInt64, false),
        Field::new(sluice_sql::CHANGE_COLUMN, DataType::Utf8, false),
    ]));
    TopN::new(TopNDef {
        partition: vec![Arc::new(Column::new("k", 0))],
        partition_types: vec![DataType::Int64],
        order: vec![Arc::new(Column::new("k", 0))],
        order_fields: vec![SortField::new(DataType::Int64)],
        input: Arc::clone(&input),
        limit: 1,
        mode: TopNMode::Changelog,
        schema,
    })
    .unwrap()
}

fn rows(k: &[i64], s: &[&str]) -> RecordBatch {
    let columns: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(k.to_vec())),
        Arc::new(StringArray::from(s.to_vec())),
    ];
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]));
    RecordBatch::try_new(schema, columns).unwrap()
}

fn snapshot(op: &mut TopN) -> bytes::Bytes {
    let mut w = SnapshotWriter::default();
    op.snapshot(&mut w).unwrap();
    w.finish().unwrap()
}

/// The output decodes kept rows without re-validating their strings, so
/// a restore must refuse a snapshot whose rows hold invalid UTF-8 (a
/// snapshot comes from disk), and take a sound one.
#[test]
fn a_restored_row_with_invalid_utf8_is_refused() {
    let mut op = top_one();
    op.update(0, rows(&[1, 2], &["ab", "cd"])).unwrap();
    let out = op.advance(0).unwrap();
    assert_eq!(out.iter().map(RecordBatch::num_rows).sum::<usize>(), 2);

    // A sound snapshot restores, and its rows come back out unchanged
    // (the restored partitions are re-shown once, as after any restore).
    let sound = snapshot(&mut op);
    let mut back = top_one();
    back.restore(&SnapshotReader::new(&sound).unwrap()).unwrap();
    back.update(0, rows(&[3], &["ef"])).unwrap();
    let out = back.advance(0).unwrap();
    let mut strings: Vec<String> = out
        .iter()
        .flat_map(|b| {
            b.column(1)
                .as_string::<i32>()
                .iter()
                .map(|v| v.unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    strings.sort();
    assert_eq!(strings, ["ef"]);

    // Replace "ab" by the bytes FF 62 in every copy of that row.
    let mut scratch = Vec::new();
    let ids: Vec<_> = op.parts.iter().map(|(id, _, _)| id).collect();
    for id in ids {
        let p = op.parts.get_mut(id).unwrap();
        for list in [&mut p.rows, &mut p.shown] {
            for e in list.iter_mut() {
                let mut payload = e.payload().to_vec();
                if let Some(at) = payload.windows(2).position(|w| w == b"ab") {
                    payload[at] = 0xFF;
                    *e = Entry::new(&mut scratch, e.order(), &payload, e.time);
                }
            }
        }
    }
    let damaged = snapshot(&mut op);
    let err = top_one()
        .restore(&SnapshotReader::new(&damaged).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.to_lowercase().contains("utf"), "{err}");
}
