//! JSON-lines source.

use arrow::array::AsArray;
use arrow::datatypes::*;
use sluice_connectors::{FileFormat, FileSinkWriter, FileSourceReader, OnError, SourcePosition};

use crate::support::*;

const T0: i64 = 1_704_067_200;

fn json_schema() -> SchemaRef {
    schema(&[
        ("id", DataType::Int64),
        ("small", DataType::Int8),
        ("u", DataType::UInt32),
        ("price", DataType::Float64),
        ("ok", DataType::Boolean),
        ("name", DataType::Utf8),
        ("day", DataType::Date32),
        ("ts", DataType::Timestamp(TimeUnit::Millisecond, None)),
        ("amount", DataType::Decimal128(12, 3)),
    ])
}

#[test]
fn json_lines_all_types_missing_fields_and_blank_lines() {
    let dir = tempfile::tempdir().unwrap();
    let text = concat!(
        r#"{"id": 1, "small": -5, "u": 7, "price": 2.5, "ok": true, "name": "a\"b\u00e9", "day": "2024-02-29", "ts": "2024-01-01T00:00:01.5Z", "amount": 12.5, "extra": {"nested": [1, 2]}}"#,
        "\n\n   \n",
        r#"{"id": 2, "name": null, "ts": 1704067200123, "amount": "-0.0015", "price": 3}"#,
        "\r\n",
        r#"{"ts": "2024-01-01 00:00:00", "id": 3, "name": "", "u": "42", "price": -1e3}"#,
        "\n",
    );
    write_file(dir.path(), "e.jsonl", text);
    let schema = json_schema();
    let batch = read_one(config(
        dir.path(),
        "e.jsonl",
        FileFormat::JsonLines,
        schema.clone(),
        10,
        OnError::Fail,
    ));
    assert_eq!(batch.schema(), schema);
    assert_eq!(i64s(&batch, "id"), [Some(1), Some(2), Some(3)]);
    assert_eq!(prim::<Int8Type>(&batch, "small"), [Some(-5), None, None]);
    assert_eq!(prim::<UInt32Type>(&batch, "u"), [Some(7), None, Some(42)]);
    assert_eq!(
        prim::<Float64Type>(&batch, "price"),
        [Some(2.5), Some(3.0), Some(-1000.0)]
    );
    let ok: Vec<_> = batch
        .column_by_name("ok")
        .unwrap()
        .as_boolean()
        .iter()
        .collect();
    assert_eq!(ok, [Some(true), None, None]);
    // JSON distinguishes "" from null.
    assert_eq!(
        strs(&batch, "name"),
        [Some("a\"bé".into()), None, Some(String::new())]
    );
    assert_eq!(
        prim::<Date32Type>(&batch, "day"),
        [Some(19_782), None, None]
    );
    assert_eq!(
        prim::<TimestampMillisecondType>(&batch, "ts"),
        [
            Some(T0 * 1000 + 1500),
            Some(T0 * 1000 + 123),
            Some(T0 * 1000)
        ]
    );
    assert_eq!(
        prim::<Decimal128Type>(&batch, "amount"),
        [Some(12_500), Some(-2), None]
    );

    // Round trip through the JSON sink.
    let out = dir.path().join("out.jsonl");
    let mut sink = FileSinkWriter::create(&out, FileFormat::JsonLines, schema.clone()).unwrap();
    sink.write(&batch).unwrap();
    sink.finish().unwrap();
    let again = read_one(config(
        dir.path(),
        "out.jsonl",
        FileFormat::JsonLines,
        schema,
        10,
        OnError::Fail,
    ));
    assert_eq!(again, batch);
}

#[test]
fn json_errors_name_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let schema = json_schema();
    let cases = [
        (
            "{\"id\": 1}\n\n{\"id\": \"abc\"}\n",
            3,
            "column 'id': cannot parse 'abc' as Int64",
        ),
        (
            "{\"id\": 1.5}\n",
            1,
            "column 'id': cannot convert 1.5 to Int64",
        ),
        (
            "{\"small\": 200}\n",
            1,
            "column 'small': value 200 is out of range for Int8",
        ),
        (
            "{\"ok\": 1}\n",
            1,
            "column 'ok': expected Boolean, found a number",
        ),
        (
            "{\"name\": [1]}\n",
            1,
            "column 'name': expected Utf8, found an array",
        ),
        (
            "{\"id\": 1}\n{\"id\": 2,}\n",
            2,
            "invalid JSON at character 10: trailing comma",
        ),
        (
            "[1, 2]\n",
            1,
            "invalid JSON: invalid type: sequence, expected a JSON object",
        ),
        (
            "{\"id\": 1} x\n",
            1,
            "invalid JSON at character 11: trailing characters",
        ),
    ];
    for (i, (text, line, message)) in cases.into_iter().enumerate() {
        let name = format!("bad{i}.jsonl");
        let path = write_file(dir.path(), &name, text);
        let err = read_err(config(
            dir.path(),
            &name,
            FileFormat::JsonLines,
            schema.clone(),
            10,
            OnError::Fail,
        ));
        assert_eq!(err.code(), "SLC-CONN-002");
        assert_eq!(
            err.to_string(),
            format!("{}:{line}: {message}", path.display()),
            "case {i}"
        );
    }
}

#[test]
fn json_skip_mode_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    write_file(
        dir.path(),
        "s.jsonl",
        "{\"id\": 1}\nnot json\n\n{\"id\": 2}\n{\"id\": \"x\"}\n{\"id\": 3}\n{\"id\": 4}\n",
    );
    let schema = schema(&[("id", DataType::Int64)]);
    let cfg = || {
        config(
            dir.path(),
            "s.jsonl",
            FileFormat::JsonLines,
            schema.clone(),
            2,
            OnError::Skip,
        )
    };
    let mut reader = FileSourceReader::open(cfg()).unwrap();
    let first = reader.next_batch().unwrap().unwrap();
    assert_eq!(i64s(&first, "id"), [Some(1), Some(2)]);
    assert_eq!(reader.skipped_rows(), 1);
    let pos = reader.position();
    assert_eq!(
        pos,
        SourcePosition {
            file_index: 0,
            file: dir.path().join("s.jsonl"),
            rows_consumed: 3,
            byte_offset: Some(30),
            share: None,
            key: None,
            ahead: Default::default(),
            done: false,
        }
    );
    let second = reader.next_batch().unwrap().unwrap();
    assert_eq!(i64s(&second, "id"), [Some(3), Some(4)]);
    assert!(reader.next_batch().unwrap().is_none());
    assert_eq!(reader.skipped_rows(), 2);

    let mut resumed = FileSourceReader::open_at(cfg(), &pos).unwrap();
    let tail = read_all(&mut resumed, 2);
    assert_eq!(tail.len(), 1);
    assert_eq!(i64s(&tail[0], "id"), [Some(3), Some(4)]);
}
