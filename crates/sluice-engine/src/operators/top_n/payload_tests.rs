//! The kept-row codec against every kind of column it encodes: rows come
//! back as they went in, equal rows have equal bytes, and damaged bytes
//! are an error.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, BinaryArray, BinaryViewArray, BooleanArray, Date32Array,
    Decimal128Array, DictionaryArray, DurationMicrosecondArray, Float32Array, Float64Array,
    Int16Array, Int32Array, Int64Array, Int8Array, IntervalMonthDayNanoArray, LargeBinaryArray,
    LargeStringArray, ListArray, StringArray, StringViewArray, StructArray, Time64NanosecondArray,
    TimestampMillisecondArray, UInt16Array, UInt32Array, UInt64Array, UInt8Array,
};
use arrow::datatypes::{DataType, Field, Int32Type, IntervalMonthDayNano, Schema};

use super::PayloadCodec;

const ROWS: usize = 9;

/// A value for row `i` of every column, NULL every third row.
fn some(i: usize) -> bool {
    i % 3 != 1
}

/// One column of each kind the codec tells apart, `ROWS` long, with NULLs.
fn columns() -> Vec<(&'static str, ArrayRef)> {
    let ints = |f: fn(usize) -> i64| -> Vec<Option<i64>> {
        (0..ROWS).map(|i| some(i).then(|| f(i))).collect()
    };
    let v = ints(|i| (i as i64 - 4) * 1_000_003);
    let small = ints(|i| i as i64 * 37 - 100);
    let strs: Vec<Option<String>> = (0..ROWS)
        .map(|i| some(i).then(|| "ü".repeat(i) + &"long text ".repeat(i * 3)))
        .collect();
    let strs = || strs.iter().map(Option::as_deref);
    let bins = || strs().map(|s| s.map(str::as_bytes));
    let list = ListArray::from_iter_primitive::<Int32Type, _, _>(
        (0..ROWS).map(|i| some(i).then(|| (0..i as i32).map(Some).collect::<Vec<_>>())),
    );
    let structs = StructArray::from(vec![
        (
            Arc::new(Field::new("a", DataType::Int64, true)),
            Arc::new(Int64Array::from(v.clone())) as ArrayRef,
        ),
        (
            Arc::new(Field::new("b", DataType::Utf8, true)),
            Arc::new(StringArray::from_iter(strs())) as ArrayRef,
        ),
    ]);
    vec![
        (
            "i8",
            Arc::new(Int8Array::from_iter(
                small.iter().map(|x| x.map(|x| x as i8)),
            )),
        ),
        (
            "i16",
            Arc::new(Int16Array::from_iter(
                small.iter().map(|x| x.map(|x| x as i16)),
            )),
        ),
        (
            "i32",
            Arc::new(Int32Array::from_iter(v.iter().map(|x| x.map(|x| x as i32)))),
        ),
        ("i64", Arc::new(Int64Array::from(v.clone()))),
        (
            "u8",
            Arc::new(UInt8Array::from_iter(
                small.iter().map(|x| x.map(|x| x as u8)),
            )),
        ),
        (
            "u16",
            Arc::new(UInt16Array::from_iter(
                small.iter().map(|x| x.map(|x| x as u16)),
            )),
        ),
        (
            "u32",
            Arc::new(UInt32Array::from_iter(
                v.iter().map(|x| x.map(|x| x as u32)),
            )),
        ),
        (
            "u64",
            Arc::new(UInt64Array::from_iter(
                v.iter().map(|x| x.map(|x| x as u64)),
            )),
        ),
        (
            "f32",
            Arc::new(Float32Array::from_iter((0..ROWS).map(|i| {
                some(i).then_some([-0.0, 0.0, f32::NAN, 1.5, f32::INFINITY][i % 5])
            }))),
        ),
        (
            "f64",
            Arc::new(Float64Array::from_iter(
                v.iter().map(|x| x.map(|x| x as f64 / 7.0)),
            )),
        ),
        (
            "date",
            Arc::new(Date32Array::from_iter(
                small.iter().map(|x| x.map(|x| x as i32)),
            )),
        ),
        ("time", Arc::new(Time64NanosecondArray::from(v.clone()))),
        (
            "ts",
            Arc::new(TimestampMillisecondArray::from(v.clone()).with_timezone("+02:00")),
        ),
        (
            "duration",
            Arc::new(DurationMicrosecondArray::from(v.clone())),
        ),
        (
            "interval",
            Arc::new(IntervalMonthDayNanoArray::from_iter(small.iter().map(
                |x| x.map(|x| IntervalMonthDayNano::new(x as i32, -(x as i32), x * 1000)),
            ))),
        ),
        (
            "decimal",
            Arc::new(
                Decimal128Array::from_iter(v.iter().map(|x| x.map(i128::from)))
                    .with_precision_and_scale(20, 3)
                    .unwrap(),
            ),
        ),
        (
            "bool",
            Arc::new(BooleanArray::from_iter(
                (0..ROWS).map(|i| some(i).then_some(i % 2 == 0)),
            )),
        ),
        ("null", new_null_array(&DataType::Null, ROWS)),
        ("utf8", Arc::new(StringArray::from_iter(strs()))),
        ("large_utf8", Arc::new(LargeStringArray::from_iter(strs()))),
        ("utf8_view", Arc::new(StringViewArray::from_iter(strs()))),
        ("binary", Arc::new(BinaryArray::from_iter(bins()))),
        (
            "large_binary",
            Arc::new(LargeBinaryArray::from_iter(bins())),
        ),
        ("binary_view", Arc::new(BinaryViewArray::from_iter(bins()))),
        ("list", Arc::new(list)),
        ("struct", Arc::new(structs)),
        (
            "dictionary",
            Arc::new(DictionaryArray::<Int32Type>::from_iter(
                (0..ROWS).map(|i| some(i).then(|| ["x", "yy", "x"][i % 3])),
            )),
        ),
    ]
}

fn codec_for(columns: &[(&str, ArrayRef)]) -> PayloadCodec {
    let schema = Schema::new(
        columns
            .iter()
            .map(|(n, c)| Field::new(*n, c.data_type().clone(), true))
            .collect::<Vec<_>>(),
    );
    PayloadCodec::new(Arc::new(schema)).unwrap()
}

fn encode_all(codec: &PayloadCodec, arrays: &[ArrayRef]) -> Vec<Vec<u8>> {
    let encoder = codec.encoder(arrays).unwrap();
    (0..arrays.first().map_or(0, |a| a.len()))
        .map(|i| {
            let mut out = Vec::new();
            encoder.encode(i, &mut out).unwrap();
            out
        })
        .collect()
}

/// Every column kind alone and all together, whole and sliced (an offset
/// into its buffers), and in an order other than the input's: the decoded
/// columns equal the input.
#[test]
fn every_column_kind_comes_back_as_it_went_in() {
    let all = columns();
    let mut cases: Vec<Vec<(&str, ArrayRef)>> = all.iter().map(|c| vec![c.clone()]).collect();
    cases.push(all);
    for case in cases {
        let codec = codec_for(&case);
        let arrays: Vec<ArrayRef> = case.iter().map(|(_, c)| Arc::clone(c)).collect();
        for (offset, len) in [(0, ROWS), (3, ROWS - 4), (ROWS, 0)] {
            let sliced: Vec<ArrayRef> = arrays.iter().map(|a| a.slice(offset, len)).collect();
            let rows = encode_all(&codec, &sliced);
            let decoded = codec.decode(rows.iter().map(Vec::as_slice)).unwrap();
            for ((name, _), (got, want)) in case.iter().zip(decoded.iter().zip(&sliced)) {
                assert_eq!(got.data_type(), want.data_type(), "{name}");
                assert_eq!(got.to_data(), want.to_data(), "{name} at {offset}+{len}");
            }
            // Reversed: rows are decoded in the order given.
            let decoded = codec.decode(rows.iter().rev().map(Vec::as_slice)).unwrap();
            let order: Vec<u64> = (0..len as u64).rev().collect();
            let indices = UInt64Array::from(order);
            for ((name, _), (got, want)) in case.iter().zip(decoded.iter().zip(&sliced)) {
                let want = arrow::compute::take(want.as_ref(), &indices, None).unwrap();
                assert_eq!(got.to_data(), want.to_data(), "{name} reversed");
            }
        }
    }
}

/// Two rows have equal bytes exactly when they are equal (the changelog
/// and the tie-break compare bytes), wherever they sit in their arrays:
/// checked pairwise against Arrow's row format, over every column twice
/// over, so each row has an equal twin, and sliced.
#[test]
fn rows_have_equal_bytes_exactly_when_they_are_equal() {
    let all = columns();
    let codec = codec_for(&all);
    let arrays: Vec<ArrayRef> = all
        .iter()
        .map(|(_, c)| arrow::compute::concat(&[c.as_ref(), c.as_ref()]).unwrap())
        .collect();
    let bytes = encode_all(&codec, &arrays);
    let converter = arrow::row::RowConverter::new(
        arrays
            .iter()
            .map(|a| arrow::row::SortField::new(a.data_type().clone()))
            .collect(),
    )
    .unwrap();
    let rows = converter.convert_columns(&arrays).unwrap();
    for i in 0..bytes.len() {
        for j in 0..bytes.len() {
            assert_eq!(
                bytes[i] == bytes[j],
                rows.row(i) == rows.row(j),
                "rows {i} and {j}"
            );
        }
    }
    let sliced: Vec<ArrayRef> = arrays.iter().map(|a| a.slice(2, ROWS)).collect();
    assert_eq!(encode_all(&codec, &sliced), bytes[2..ROWS + 2]);
}

/// Bytes cut short anywhere, a trailing byte, a flag that is neither NULL
/// nor valid, or a string that is not UTF-8: each is an error, never a
/// panic or a value.
#[test]
fn damaged_rows_are_errors() {
    let all = columns();
    let codec = codec_for(&all);
    let arrays: Vec<ArrayRef> = all.iter().map(|(_, c)| Arc::clone(c)).collect();
    let rows = encode_all(&codec, &arrays);
    for row in &rows {
        for cut in 0..row.len() {
            assert!(
                codec.decode(std::iter::once(&row[..cut])).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = row.clone();
        longer.push(0);
        assert!(codec.decode(std::iter::once(longer.as_slice())).is_err());
        let mut flag = row.clone();
        flag[0] = 2;
        assert!(codec.decode(std::iter::once(flag.as_slice())).is_err());
    }
    // A boolean is 0 or 1.
    let booleans: Vec<(&str, ArrayRef)> = vec![("b", Arc::new(BooleanArray::from(vec![true])))];
    let codec = codec_for(&booleans);
    let mut row = encode_all(&codec, &[Arc::clone(&booleans[0].1)]).remove(0);
    assert_eq!(row, [1, 1]);
    row[1] = 2;
    assert!(codec.decode(std::iter::once(row.as_slice())).is_err());
    // A string column alone: its bytes follow the flag and the length.
    let strings: Vec<(&str, ArrayRef)> = vec![("s", Arc::new(StringArray::from(vec!["abc"])))];
    let codec = codec_for(&strings);
    let mut row = encode_all(&codec, &[Arc::clone(&strings[0].1)]).remove(0);
    assert_eq!(row, [1, 3, 0, 0, 0, b'a', b'b', b'c']);
    row[5] = 0xFF;
    let err = codec.decode(std::iter::once(row.as_slice())).unwrap_err();
    assert!(err.to_string().to_lowercase().contains("utf"), "{err}");
}

/// A batch whose columns do not match the codec's is an error.
#[test]
fn columns_of_other_types_are_refused() {
    let codec = codec_for(&[("a", Arc::new(Int64Array::from(vec![1])) as ArrayRef)]);
    let wrong: ArrayRef = Arc::new(Int32Array::from(vec![1]));
    assert!(codec.encoder(&[wrong]).is_err());
    assert!(codec.encoder(&[]).is_err());
}

/// The order of whole rows (the tie-break among equal `ORDER BY` keys)
/// is Arrow's row format's, ascending with NULLs first: checked pairwise
/// on each column kind alone, with values chosen to straddle signs, and on
/// all together.
#[test]
fn rows_compare_as_arrow_row_format_orders_them() {
    let mut all = columns();
    // Values whose order their bytes do not give: signs, extremes, halves.
    let mixed: Vec<(&str, ArrayRef)> = vec![
        (
            "i64 signs",
            Arc::new(Int64Array::from(vec![
                Some(-1),
                Some(1),
                None,
                Some(i64::MIN),
                Some(i64::MAX),
                Some(256),
                Some(-256),
            ])),
        ),
        (
            "i8 signs",
            Arc::new(Int8Array::from(vec![
                Some(-1),
                Some(1),
                Some(i8::MIN),
                Some(i8::MAX),
                None,
                Some(0),
                Some(-128),
            ])),
        ),
        (
            "u64 top bit",
            Arc::new(UInt64Array::from(vec![
                Some(u64::MAX),
                Some(1),
                Some(1 << 63),
                None,
                Some(0),
                Some(256),
                Some(255),
            ])),
        ),
        (
            "f64 signs",
            Arc::new(Float64Array::from(vec![
                Some(-0.0),
                Some(0.0),
                Some(f64::NAN),
                Some(-f64::NAN),
                Some(f64::NEG_INFINITY),
                Some(-1.5),
                Some(1e-300),
            ])),
        ),
        (
            "f32 signs",
            Arc::new(Float32Array::from(vec![
                Some(-2.0),
                Some(-1.0),
                Some(-0.0),
                Some(f32::MIN_POSITIVE),
                None,
                Some(f32::NAN),
                Some(3.0),
            ])),
        ),
        (
            "decimal256",
            Arc::new(
                arrow::array::Decimal256Array::from(
                    [-5i64, 5, 1 << 40, -(1 << 40), 0, i64::MIN, i64::MAX]
                        .map(|v| Some(arrow::datatypes::i256::from_i128(i128::from(v) << 70)))
                        .to_vec(),
                )
                .with_precision_and_scale(60, 2)
                .unwrap(),
            ),
        ),
        (
            "day time",
            Arc::new(arrow::array::IntervalDayTimeArray::from(
                [(1, -5), (-1, 5), (0, 0), (1, 5), (-1, -5), (0, -1), (0, 1)]
                    .map(|(d, ms)| Some(arrow::datatypes::IntervalDayTime::new(d, ms)))
                    .to_vec(),
            )),
        ),
        (
            "month day nano",
            Arc::new(IntervalMonthDayNanoArray::from(
                [
                    (1, -5, 3),
                    (-1, 5, -3),
                    (0, 0, -1),
                    (0, 0, 1),
                    (1, -5, -3),
                    (0, 1, 0),
                    (-1, 5, 3),
                ]
                .map(|(m, d, n)| Some(IntervalMonthDayNano::new(m, d, n)))
                .to_vec(),
            )),
        ),
        (
            "strings",
            Arc::new(StringArray::from(vec![
                Some("b"),
                Some("ab"),
                Some(""),
                None,
                Some("abc"),
                Some("a"),
                Some("ü"),
            ])),
        ),
    ];
    all.retain(|(n, _)| *n != "null");
    let mut cases: Vec<Vec<(&str, ArrayRef)>> =
        all.iter().chain(&mixed).map(|c| vec![c.clone()]).collect();
    cases.push(all);
    // Several columns whose first ties often, so later ones decide.
    cases.push(vec![
        (
            "bool",
            Arc::new(BooleanArray::from(vec![
                true, true, false, true, false, true, true,
            ])),
        ),
        mixed[1].clone(),
        mixed[8].clone(),
    ]);
    for case in cases {
        let codec = codec_for(&case);
        let arrays: Vec<ArrayRef> = case.iter().map(|(_, c)| Arc::clone(c)).collect();
        let bytes = encode_all(&codec, &arrays);
        let converter = arrow::row::RowConverter::new(
            arrays
                .iter()
                .map(|a| arrow::row::SortField::new(a.data_type().clone()))
                .collect(),
        )
        .unwrap();
        let rows = converter.convert_columns(&arrays).unwrap();
        for i in 0..bytes.len() {
            for j in 0..bytes.len() {
                assert_eq!(
                    codec.compare(&bytes[i], &bytes[j]).unwrap(),
                    rows.row(i).cmp(&rows.row(j)),
                    "{:?}: rows {i} and {j}",
                    case.iter().map(|(n, _)| *n).collect::<Vec<_>>()
                );
            }
        }
    }
}
