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

/// Every row of `op`'s output, as (k, s, rank, change), sorted.
fn shown(out: &[RecordBatch]) -> Vec<(i64, String, u64, String)> {
    let mut rows: Vec<_> = out
        .iter()
        .flat_map(|b| {
            let k = b.column(0).as_primitive::<arrow::datatypes::Int64Type>();
            let s = b.column(1).as_string::<i32>();
            let rn = b.column(2).as_primitive::<arrow::datatypes::UInt64Type>();
            let op = b.column(3).as_string::<i32>();
            (0..b.num_rows())
                .map(|i| {
                    (
                        k.value(i),
                        s.value(i).to_string(),
                        rn.value(i),
                        op.value(i).to_string(),
                    )
                })
                .collect::<Vec<_>>()
        })
        .collect();
    rows.sort();
    rows
}

/// A snapshot written before kept rows had their own encoding holds them
/// in Arrow's row format, with no `payload` key: it restores (its rows are
/// encoded again) and the operator goes on exactly as one restored from a
/// current snapshot. A snapshot naming an unknown encoding is refused.
#[test]
fn a_snapshot_with_rows_in_arrow_row_format_restores() {
    use arrow::array::BinaryArray;
    use arrow::row::RowConverter;

    let mut op = top_one();
    op.update(0, rows(&[1, 2, 3], &["ab", "cd", "ü"])).unwrap();
    op.advance(0).unwrap();
    op.update(0, rows(&[2], &["a"])).unwrap();
    let current = snapshot(&mut op);

    // The same state as an earlier release wrote it.
    let read = SnapshotReader::new(&current).unwrap();
    let batch = read.parts()[0].clone();
    let payloads = batch.column(3).as_binary::<i32>();
    let fields = [DataType::Int64, DataType::Utf8]
        .map(SortField::new)
        .to_vec();
    let converter = RowConverter::new(fields).unwrap();
    let old: Vec<Vec<u8>> = payloads
        .iter()
        .map(|p| {
            let p = p.unwrap();
            if p.is_empty() {
                return vec![];
            }
            let columns = op.payload.decode(std::iter::once(p)).unwrap();
            converter
                .convert_columns(&columns)
                .unwrap()
                .row(0)
                .data()
                .to_vec()
        })
        .collect();
    let mut columns = batch.columns().to_vec();
    columns[3] = Arc::new(BinaryArray::from_iter_values(old.iter()));
    let legacy_batch = RecordBatch::try_new(batch.schema(), columns).unwrap();
    let write = |payload_key: Option<&str>| {
        let mut w = SnapshotWriter::default();
        w.set("watermark", read.get::<i64>("watermark").unwrap());
        w.set("late", read.get::<u64>("late").unwrap());
        w.set("partitions", read.get::<usize>("partitions").unwrap());
        if let Some(k) = payload_key {
            w.set("payload", k);
        }
        w.push(&legacy_batch).unwrap();
        w.finish().unwrap()
    };

    let mut from_current = top_one();
    from_current
        .restore(&SnapshotReader::new(&current).unwrap())
        .unwrap();
    let mut from_legacy = top_one();
    from_legacy
        .restore(&SnapshotReader::new(&write(None)).unwrap())
        .unwrap();
    for op in [&mut from_current, &mut from_legacy] {
        op.update(0, rows(&[3, 4], &["0", "zz"])).unwrap();
    }
    let want = shown(&from_current.advance(1).unwrap());
    assert_eq!(shown(&from_legacy.advance(1).unwrap()), want);
    assert_eq!(want.len(), 5, "{want:?}");
    assert_eq!(snapshot(&mut from_legacy), snapshot(&mut from_current));

    let err = top_one()
        .restore(&SnapshotReader::new(&write(Some("zstd-rows"))).unwrap())
        .unwrap_err()
        .to_string();
    assert!(err.contains("zstd-rows"), "{err}");
}

/// An entry's sort key compares with a new row's by its head first
/// ([`super::head_of`]) and by the bytes only on equal heads: the result
/// must be the byte order's for every pair, keys of every length from 0
/// to 12 (shorter, equal to and longer than the head) drawn from bytes
/// that make prefixes, zero padding and ties likely.
#[test]
fn a_sort_key_compares_by_its_head_as_by_its_bytes() {
    use crate::test_rng::Rng;
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let alphabet = [0u8, 1, 0x7f, 0x80, 0xff];
    let mut key = || -> Vec<u8> {
        let len = rng.below(13) as usize;
        (0..len)
            .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
            .collect()
    };
    let mut scratch = Vec::new();
    for _ in 0..20_000 {
        let (a, b) = (key(), key());
        let kept = Entry::new(&mut scratch, &a, b"row", None);
        assert_eq!(
            kept.cmp_order(super::head_of(&b), &b),
            a.cmp(&b),
            "{a:?} against {b:?}"
        );
    }
}

/// `show` leaves the shown rows equal to the kept ones, whatever the two
/// lists were: shorter, longer, sharing some entries or none.
#[test]
fn showing_the_kept_rows_makes_the_shown_rows_equal_to_them() {
    use crate::test_rng::Rng;
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut scratch = Vec::new();
    let pool: Vec<Entry> = (0..6u8)
        .map(|i| Entry::new(&mut scratch, &[i], &[b'r', i], Some(i64::from(i))))
        .collect();
    let list = |rng: &mut Rng| -> super::Rows {
        (0..rng.below(5))
            .map(|_| pool[rng.below(pool.len() as u64) as usize].clone())
            .collect()
    };
    for _ in 0..2_000 {
        let (mut shown, rows) = (list(&mut rng), list(&mut rng));
        super::show(&mut shown, &rows);
        assert_eq!(shown, rows);
        for (a, b) in shown.iter().zip(rows.iter()) {
            assert!(std::sync::Arc::ptr_eq(&a.bytes, &b.bytes));
        }
    }
}
