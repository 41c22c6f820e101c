//! CSV source: types, header mapping, errors, skip mode.

use arrow::array::AsArray;
use arrow::datatypes::*;
use sluice_connectors::{FileFormat, FileSinkWriter, OnError};

use crate::support::*;

fn all_types_schema() -> SchemaRef {
    schema(&[
        ("i8", DataType::Int8),
        ("i16", DataType::Int16),
        ("i32", DataType::Int32),
        ("i64", DataType::Int64),
        ("u8", DataType::UInt8),
        ("u16", DataType::UInt16),
        ("u32", DataType::UInt32),
        ("u64", DataType::UInt64),
        ("f32", DataType::Float32),
        ("f64", DataType::Float64),
        ("b", DataType::Boolean),
        ("s", DataType::Utf8),
        ("ls", DataType::LargeUtf8),
        ("d", DataType::Date32),
        ("ts", DataType::Timestamp(TimeUnit::Millisecond, None)),
        (
            "tsz",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        ),
        ("tss", DataType::Timestamp(TimeUnit::Second, None)),
        ("tsn", DataType::Timestamp(TimeUnit::Nanosecond, None)),
        ("dec", DataType::Decimal128(10, 2)),
    ])
}

const ALL_TYPES_CSV: &str = "\
i8,i16,i32,i64,u8,u16,u32,u64,f32,f64,b,s,ls,d,ts,tsz,tss,tsn,dec
-128,-32768,-2147483648,-9223372036854775808,255,65535,4294967295,18446744073709551615,1.5,-2.25,true,\"hello, world\",\"multi
line\",2024-02-29,2024-01-01 00:00:10,2024-01-01T00:00:00.5Z,2024-01-01T02:00:00+02:00,2024-01-01T00:00:00.123456789,-12.34
,,,,,,,,,,,,,,,,,,
127,32767,2147483647,9223372036854775807,0,0,0,0,-0.5,1e10,F,\"say \"\"hi\"\"\",plain,1969-12-31,1704067200123,2024-01-01 00:00:00,1704067200000,1704067200001,0.005
";

const T0: i64 = 1_704_067_200; // 2024-01-01T00:00:00Z

fn check_all_types(batch: &arrow::array::RecordBatch) {
    assert_eq!(batch.num_rows(), 3);
    assert_eq!(prim::<Int8Type>(batch, "i8"), [Some(-128), None, Some(127)]);
    assert_eq!(
        prim::<Int16Type>(batch, "i16"),
        [Some(-32768), None, Some(32767)]
    );
    assert_eq!(
        prim::<Int32Type>(batch, "i32"),
        [Some(i32::MIN), None, Some(i32::MAX)]
    );
    assert_eq!(i64s(batch, "i64"), [Some(i64::MIN), None, Some(i64::MAX)]);
    assert_eq!(prim::<UInt8Type>(batch, "u8"), [Some(255), None, Some(0)]);
    assert_eq!(
        prim::<UInt16Type>(batch, "u16"),
        [Some(65535), None, Some(0)]
    );
    assert_eq!(
        prim::<UInt32Type>(batch, "u32"),
        [Some(u32::MAX), None, Some(0)]
    );
    assert_eq!(
        prim::<UInt64Type>(batch, "u64"),
        [Some(u64::MAX), None, Some(0)]
    );
    assert_eq!(
        prim::<Float32Type>(batch, "f32"),
        [Some(1.5), None, Some(-0.5)]
    );
    assert_eq!(
        prim::<Float64Type>(batch, "f64"),
        [Some(-2.25), None, Some(1e10)]
    );
    let b: Vec<_> = batch
        .column_by_name("b")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    assert_eq!(b, [Some(true), None, Some(false)]);
    assert_eq!(
        strs(batch, "s"),
        [Some("hello, world".into()), None, Some("say \"hi\"".into())]
    );
    let ls: Vec<_> = batch
        .column_by_name("ls")
        .unwrap()
        .as_string::<i64>()
        .iter()
        .map(|s| s.map(str::to_string))
        .collect();
    assert_eq!(ls, [Some("multi\nline".into()), None, Some("plain".into())]);
    assert_eq!(
        prim::<Date32Type>(batch, "d"),
        [Some(19_782), None, Some(-1)]
    );
    assert_eq!(
        prim::<TimestampMillisecondType>(batch, "ts"),
        [Some(T0 * 1000 + 10_000), None, Some(T0 * 1000 + 123)]
    );
    assert_eq!(
        prim::<TimestampMicrosecondType>(batch, "tsz"),
        [Some(T0 * 1_000_000 + 500_000), None, Some(T0 * 1_000_000)]
    );
    assert_eq!(
        prim::<TimestampSecondType>(batch, "tss"),
        [Some(T0), None, Some(T0)]
    );
    assert_eq!(
        prim::<TimestampNanosecondType>(batch, "tsn"),
        [
            Some(T0 * 1_000_000_000 + 123_456_789),
            None,
            Some(T0 * 1_000_000_000 + 1_000_000)
        ]
    );
    assert_eq!(
        prim::<Decimal128Type>(batch, "dec"),
        [Some(-1234), None, Some(1)]
    );
    for field in batch.schema().fields() {
        assert_eq!(null_count(batch, field.name()), 1, "{}", field.name());
    }
}

#[test]
fn csv_all_types_nulls_quotes_and_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "all.csv", ALL_TYPES_CSV);
    let schema = all_types_schema();
    let cfg = config(
        dir.path(),
        "all.csv",
        FileFormat::Csv,
        schema.clone(),
        100,
        OnError::Fail,
    );
    let batch = read_one(cfg);
    assert_eq!(batch.schema(), schema);
    check_all_types(&batch);

    // Write it back through the sink and read it again: identical batch.
    let out = dir.path().join("out/all.csv");
    let mut sink = FileSinkWriter::create(&out, FileFormat::Csv, schema.clone()).unwrap();
    sink.write(&batch).unwrap();
    assert_eq!(sink.finish().unwrap(), 3);
    let again = read_one(config(
        dir.path(),
        "out/all.csv",
        FileFormat::Csv,
        schema,
        2,
        OnError::Fail,
    ));
    assert_eq!(again, batch);
}

#[test]
fn csv_header_matched_by_name() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "r.csv", "extra,price,id\nx,1.5,7\ny,,8\n");
    let schema = schema(&[("id", DataType::Int64), ("price", DataType::Float64)]);
    let batch = read_one(config(
        dir.path(),
        "r.csv",
        FileFormat::Csv,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(batch.num_columns(), 2);
    assert_eq!(i64s(&batch, "id"), [Some(7), Some(8)]);
    assert_eq!(prim::<Float64Type>(&batch, "price"), [Some(1.5), None]);
}

#[test]
fn csv_missing_column_is_schema_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "m.csv", "id,qty\n1,2\n");
    let schema = schema(&[("id", DataType::Int64), ("price", DataType::Int64)]);
    let err = open_err(config(
        dir.path(),
        "m.csv",
        FileFormat::Csv,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-003");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 'price' is declared but missing from the CSV header (found: id, qty)",
            path.display()
        )
    );
}

#[test]
fn csv_malformed_value_names_file_line_column() {
    let dir = tempfile::tempdir().unwrap();
    // Line 1 header, record 1 spans lines 2-4, record 2 on line 5, bad on 6.
    let path = write_file(
        dir.path(),
        "bids.csv",
        "id,note,price\n1,\"a\nb\nc\",10\n2,x,20\n3,y,abc\n4,z,40\n",
    );
    let schema = schema(&[("id", DataType::Int64), ("price", DataType::Int64)]);
    let err = read_err(config(
        dir.path(),
        "bids.csv",
        FileFormat::Csv,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-002");
    assert_eq!(
        err.to_string(),
        format!(
            "{}:6: column 'price': cannot parse 'abc' as Int64",
            path.display()
        )
    );
    match err {
        sluice_connectors::ConnectorError::Malformed {
            file, line, column, ..
        } => {
            assert_eq!(file, path);
            assert_eq!(line, 6);
            assert_eq!(column, "price");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn csv_wrong_field_count_and_range_errors() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "f.csv", "a,b,c\n1,2,3\n4,5\n");
    let schema3 = schema(&[("a", DataType::Int8), ("c", DataType::Int8)]);
    let err = read_err(config(
        dir.path(),
        "f.csv",
        FileFormat::Csv,
        schema3.clone(),
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}:3: column 'c': expected 3 fields, found 2",
            path.display()
        )
    );

    let path = write_file(dir.path(), "g.csv", "a,b,c\n1,2,3,4\n");
    let err = read_err(config(
        dir.path(),
        "g.csv",
        FileFormat::Csv,
        schema3.clone(),
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2: column 'field 4': expected 3 fields, found 4",
            path.display()
        )
    );

    let path = write_file(dir.path(), "h.csv", "a,c\n1,300\n");
    let err = read_err(config(
        dir.path(),
        "h.csv",
        FileFormat::Csv,
        schema3,
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}:2: column 'c': value 300 is out of range for Int8",
            path.display()
        )
    );
}

#[test]
fn csv_non_nullable_empty_field_is_malformed() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "n.csv", "id\n1\n\"\"\n");
    let schema = std::sync::Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false)]));
    let err = read_err(config(
        dir.path(),
        "n.csv",
        FileFormat::Csv,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}:3: column 'id': null value in non-nullable column",
            path.display()
        )
    );
}

#[test]
fn csv_skip_mode_counts_and_continues() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        dir.path(),
        "s.csv",
        "id,ts\n1,2024-01-01 00:00:01\nx,2024-01-01 00:00:02\n3,2024-01-01 00:00:03\n4,bad\n5\n6,2024-01-01 00:00:06\n",
    );
    let schema = schema(&[
        ("id", DataType::Int64),
        ("ts", DataType::Timestamp(TimeUnit::Second, None)),
    ]);
    let cfg = config(
        dir.path(),
        "s.csv",
        FileFormat::Csv,
        schema,
        2,
        OnError::Skip,
    );
    let mut reader = sluice_connectors::FileSourceReader::open(cfg).unwrap();
    let batches = read_all(&mut reader, 2);
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
        [2, 1]
    );
    let all = arrow::compute::concat_batches(&reader.schema(), &batches).unwrap();
    assert_eq!(i64s(&all, "id"), [Some(1), Some(3), Some(6)]);
    assert_eq!(
        prim::<TimestampSecondType>(&all, "ts"),
        [Some(T0 + 1), Some(T0 + 3), Some(T0 + 6)]
    );
    assert_eq!(reader.skipped_rows(), 3);
    assert_eq!(reader.position().rows_consumed, 6);
}

#[test]
fn csv_timestamp_in_declared_zone_and_unsupported_type() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        dir.path(),
        "z.csv",
        "ts\n2024-01-01 02:00:00\n2024-01-01T02:00:00Z\n",
    );
    let schema1 = schema(&[(
        "ts",
        DataType::Timestamp(TimeUnit::Second, Some("+02:00".into())),
    )]);
    let batch = read_one(config(
        dir.path(),
        "z.csv",
        FileFormat::Csv,
        schema1,
        10,
        OnError::Fail,
    ));
    // Naive text is local time in the declared zone; explicit Z is UTC.
    assert_eq!(
        prim::<TimestampSecondType>(&batch, "ts"),
        [Some(T0), Some(T0 + 7200)]
    );

    let bad = schema(&[("ts", DataType::Binary)]);
    let err = open_err(config(
        dir.path(),
        "z.csv",
        FileFormat::Csv,
        bad,
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-004");
    assert_eq!(
        err.to_string(),
        "invalid value for option 'schema': column 'ts': type Binary is not supported by the csv reader"
    );
}

#[test]
fn csv_line_numbers_with_blank_lines_and_crlf() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "b.csv", "id\r\n1\r\n\r\n\r\n2\r\nabc\r\n");
    let schema = schema(&[("id", DataType::Int64)]);
    let err = read_err(config(
        dir.path(),
        "b.csv",
        FileFormat::Csv,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}:6: column 'id': cannot parse 'abc' as Int64",
            path.display()
        )
    );
}

#[test]
fn csv_line_numbers_with_blank_lines_lf_and_bom() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(
        dir.path(),
        "c.csv",
        "\u{feff}id,t\n1,\"x\n\ny\"\n\n\n2,z\n\n3,\"q\"\nabc,w",
    );
    let schema = schema(&[("id", DataType::Int64)]);
    let err = read_err(config(
        dir.path(),
        "c.csv",
        FileFormat::Csv,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        format!(
            "{}:10: column 'id': cannot parse 'abc' as Int64",
            path.display()
        )
    );
}
