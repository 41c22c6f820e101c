//! Every error that quotes input quotes at most 200 characters of it,
//! followed by the value's length: a runaway value cannot produce a
//! megabyte-long message.

use std::str::FromStr;

use arrow::datatypes::{DataType, TimeUnit};
use sluice_connectors::nexmark::{NexmarkConfig, NexmarkStream};
use sluice_connectors::{FileFormat, FileSourceReader, NexmarkReader, OnError};

use crate::support::*;

const LEN: usize = 1_000_000;

fn long() -> String {
    "x".repeat(LEN)
}

/// How a quoted runaway value of `LEN` bytes appears.
fn quoted() -> String {
    format!("{}… ({LEN} bytes)", "x".repeat(200))
}

/// Every declared type that parses text.
fn parsed_types() -> Vec<DataType> {
    vec![
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Int64,
        DataType::UInt8,
        DataType::UInt16,
        DataType::UInt32,
        DataType::UInt64,
        DataType::Float32,
        DataType::Float64,
        DataType::Boolean,
        DataType::Date32,
        DataType::Timestamp(TimeUnit::Millisecond, None),
        DataType::Timestamp(TimeUnit::Nanosecond, Some("Europe/Paris".into())),
        DataType::Decimal128(10, 2),
    ]
}

#[test]
fn unparsable_values_are_quoted_bounded_for_every_type_and_text_format() {
    let dir = tempfile::tempdir().unwrap();
    let csv = write_file(dir.path(), "v.csv", &format!("v\n{}\n", long()));
    let json = write_file(
        dir.path(),
        "v.jsonl",
        &format!("{{\"v\": \"{}\"}}\n", long()),
    );
    for data_type in parsed_types() {
        for (file, format, path, line) in [
            ("v.csv", FileFormat::Csv, &csv, 2),
            ("v.jsonl", FileFormat::JsonLines, &json, 1),
        ] {
            let err = read_err(config(
                dir.path(),
                file,
                format,
                schema(&[("v", data_type.clone())]),
                10,
                OnError::Fail,
            ));
            assert_eq!(err.code(), "SLC-CONN-002");
            assert_eq!(
                err.to_string(),
                format!(
                    "{}:{line}: column 'v': cannot parse '{}' as {data_type}",
                    path.display(),
                    quoted()
                ),
                "{file} {data_type}"
            );
        }
    }
}

#[test]
fn json_syntax_errors_quote_the_line_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "s.jsonl", &format!("\"{}\"\n", long()));
    let err = read_err(config(
        dir.path(),
        "s.jsonl",
        FileFormat::JsonLines,
        schema(&[("v", DataType::Utf8)]),
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-002");
    let text = err.to_string();
    let prefix = format!(
        "{}:1: invalid JSON at character {}: invalid type: string \"xxx",
        path.display(),
        LEN + 2
    );
    assert!(
        text.starts_with(&prefix),
        "{}",
        &text[..300.min(text.len())]
    );
    assert!(
        text.ends_with(" bytes)"),
        "{}",
        &text[..300.min(text.len())]
    );
    assert!(text.len() < prefix.len() + 250, "{} bytes", text.len());
}

#[test]
fn csv_header_is_quoted_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "h.csv", &format!("{}\n1\n", long()));
    let err = open_err(config(
        dir.path(),
        "h.csv",
        FileFormat::Csv,
        schema(&[("v", DataType::Int64)]),
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-003");
    assert_eq!(
        err.to_string(),
        format!(
            "{}: column 'v' is declared but missing from the CSV header (found: {})",
            path.display(),
            quoted()
        )
    );
}

/// Option values and checkpointed offsets are input too.
#[test]
fn option_values_and_offsets_are_quoted_bounded() {
    let value = long();
    let option =
        |name: &str, message: String| format!("invalid value for option '{name}': {message}");
    let err = FileFormat::from_str(&value).unwrap_err();
    assert_eq!(
        err.to_string(),
        option(
            "format",
            format!(
                "unknown file format '{}' (accepted: csv, json, jsonl, ndjson, parquet)",
                quoted()
            )
        )
    );
    let err = OnError::from_str(&value).unwrap_err();
    assert_eq!(
        err.to_string(),
        option(
            "on_error",
            format!("unknown value '{}' (accepted: fail, skip)", quoted())
        )
    );
    let err = NexmarkStream::from_str(&value).unwrap_err();
    assert_eq!(
        err.to_string(),
        option(
            "stream",
            format!(
                "unknown Nexmark stream '{}' (accepted: person, auction, bid)",
                quoted()
            )
        )
    );
    let err = NexmarkConfig::full(NexmarkStream::Bid)
        .set("rate", &value)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        option(
            "rate",
            format!("'{}' is not an integer from 0 to 1000000000", quoted())
        )
    );
    let err =
        NexmarkReader::open_at_offset(NexmarkConfig::full(NexmarkStream::Bid), &value).unwrap_err();
    assert!(
        err.to_string().starts_with(&option(
            "offset",
            format!("checkpointed Nexmark offset '{}' is unreadable: ", quoted())
        )),
        "{}",
        &err.to_string()[..300]
    );
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "a.csv", "v\n1\n");
    let cfg = config(
        dir.path(),
        "a.csv",
        FileFormat::Csv,
        schema(&[("v", DataType::Int64)]),
        10,
        OnError::Fail,
    );
    let err = FileSourceReader::open_at_offset(cfg, &value).unwrap_err();
    assert!(
        err.to_string().starts_with(&option(
            "offset",
            format!("checkpointed file offset '{}' is unreadable: ", quoted())
        )),
        "{}",
        &err.to_string()[..300]
    );
    // A path pattern that matches nothing.
    let pattern = format!("{value}*.csv");
    let err = open_err(config(
        dir.path(),
        &pattern,
        FileFormat::Csv,
        schema(&[("v", DataType::Int64)]),
        10,
        OnError::Fail,
    ));
    let text = err.to_string();
    assert!(
        text.starts_with("no files match pattern '") && text.ends_with(" bytes)'"),
        "{}",
        &text[..300.min(text.len())]
    );
    assert!(text.len() < 600, "{} bytes", text.len());
}
