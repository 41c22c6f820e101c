//! File list, batching across files, positions and resume; option parsing.

use std::path::PathBuf;

use arrow::compute::concat_batches;
use arrow::datatypes::DataType;
use sluice_connectors::{ConnectorError, FileFormat, FileSourceReader, OnError, SourcePosition};

use crate::support::*;

/// Three CSV files `part-{a,b,c}.csv` with ids 0..15 (5 per file), written
/// out of order, plus decoys the glob must not pick up.
fn three_files(dir: &std::path::Path) {
    for (name, start) in [("part-c.csv", 10), ("part-a.csv", 0), ("part-b.csv", 5)] {
        let mut text = String::from("id\n");
        for i in start..start + 5 {
            text.push_str(&format!("{i}\n"));
        }
        write_file(dir, name, &text);
    }
    write_file(dir, ".part-z.csv", "id\n999\n");
    write_file(dir, "part-x.txt", "id\n999\n");
    std::fs::create_dir_all(dir.join("part-d.csv")).unwrap();
}

fn id_schema() -> arrow::datatypes::SchemaRef {
    schema(&[("id", DataType::Int64)])
}

fn ids(batches: &[arrow::array::RecordBatch]) -> Vec<i64> {
    let all = concat_batches(&id_schema(), batches).unwrap();
    i64s(&all, "id").into_iter().map(|v| v.unwrap()).collect()
}

#[test]
fn glob_reads_files_in_sorted_order() {
    let dir = tempfile::tempdir().unwrap();
    three_files(dir.path());
    // `*.csv` also matches the hidden file and the directory, which must be
    // ignored.
    let cfg = config(
        dir.path(),
        "*.csv",
        FileFormat::Csv,
        id_schema(),
        100,
        OnError::Fail,
    );
    let mut reader = FileSourceReader::open(cfg).unwrap();
    let expected: Vec<PathBuf> = ["part-a.csv", "part-b.csv", "part-c.csv"]
        .iter()
        .map(|n| dir.path().join(n))
        .collect();
    assert_eq!(reader.files(), expected.as_slice());
    let batches = read_all(&mut reader, 100);
    // Batches span files: one batch holds all 15 rows.
    assert_eq!(batches.len(), 1);
    assert_eq!(ids(&batches), (0..15).collect::<Vec<_>>());
    assert_eq!(
        reader.position(),
        SourcePosition {
            file_index: 2,
            file: dir.path().join("part-c.csv"),
            rows_consumed: 5,
            byte_offset: Some(18),
            share: None,
            key: None,
            ahead: Default::default(),
            done: false,
        }
    );
}

#[test]
fn glob_without_match_is_an_error_naming_the_pattern() {
    let dir = tempfile::tempdir().unwrap();
    three_files(dir.path());
    let err = open_err(config(
        dir.path(),
        "nothing-*.csv",
        FileFormat::Csv,
        id_schema(),
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-005");
    let pattern = format!("{}/nothing-*.csv", dir.path().display());
    assert_eq!(
        err.to_string(),
        format!("no files match pattern '{pattern}'")
    );
    assert!(matches!(err, ConnectorError::NoFiles { pattern: p } if p == pattern));
}

#[test]
fn missing_single_file_is_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = open_err(config(
        dir.path(),
        "absent.csv",
        FileFormat::Csv,
        id_schema(),
        10,
        OnError::Fail,
    ));
    assert_eq!(err.code(), "SLC-CONN-001");
    assert!(
        err.to_string()
            .starts_with(&format!("{}: ", dir.path().join("absent.csv").display())),
        "{err}"
    );
}

#[test]
fn batch_size_respected_across_file_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    three_files(dir.path());
    let cfg = config(
        dir.path(),
        "part-*.csv",
        FileFormat::Csv,
        id_schema(),
        4,
        OnError::Fail,
    );
    let mut reader = FileSourceReader::open(cfg).unwrap();
    let batches = read_all(&mut reader, 4);
    assert_eq!(
        batches.iter().map(|b| b.num_rows()).collect::<Vec<_>>(),
        [4, 4, 4, 3]
    );
    assert_eq!(ids(&batches), (0..15).collect::<Vec<_>>());
}

#[test]
fn zero_batch_size_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    three_files(dir.path());
    let err = open_err(config(
        dir.path(),
        "part-a.csv",
        FileFormat::Csv,
        id_schema(),
        0,
        OnError::Fail,
    ));
    assert_eq!(
        err.to_string(),
        "invalid value for option 'batch_size': 0 is not from 1 to 1048576"
    );
}

#[test]
fn open_at_resumes_exactly_after_last_batch() {
    let dir = tempfile::tempdir().unwrap();
    three_files(dir.path());
    let cfg = || {
        config(
            dir.path(),
            "part-*.csv",
            FileFormat::Csv,
            id_schema(),
            4,
            OnError::Fail,
        )
    };
    let mut reader = FileSourceReader::open(cfg()).unwrap();
    assert_eq!(reader.position().rows_consumed, 0);
    assert_eq!(reader.position().file_index, 0);
    let first: Vec<_> = (0..2)
        .map(|_| reader.next_batch().unwrap().unwrap())
        .collect();
    assert_eq!(ids(&first), (0..8).collect::<Vec<_>>());
    let pos = reader.position();
    assert_eq!(
        pos,
        SourcePosition {
            file_index: 1,
            file: dir.path().join("part-b.csv"),
            rows_consumed: 3,
            byte_offset: Some(9),
            share: None,
            key: None,
            ahead: Default::default(),
            done: false,
        }
    );

    let mut resumed = FileSourceReader::open_at(cfg(), &pos).unwrap();
    assert_eq!(resumed.position(), pos);
    let tail = read_all(&mut resumed, 4);
    assert_eq!(ids(&tail), (8..15).collect::<Vec<_>>());

    // A position at the very end of a file continues with the next file.
    let end_of_a = SourcePosition {
        file_index: 0,
        file: dir.path().join("part-a.csv"),
        rows_consumed: 5,
        byte_offset: None,
        share: None,
        key: None,
        ahead: Default::default(),
        done: false,
    };
    let mut resumed = FileSourceReader::open_at(cfg(), &end_of_a).unwrap();
    assert_eq!(ids(&read_all(&mut resumed, 4)), (5..15).collect::<Vec<_>>());

    // A new file sorting earlier does not shift the position (found by path).
    write_file(dir.path(), "part-0.csv", "id\n100\n");
    let mut resumed = FileSourceReader::open_at(cfg(), &pos).unwrap();
    assert_eq!(resumed.position().file_index, 2);
    assert_eq!(ids(&read_all(&mut resumed, 4)), (8..15).collect::<Vec<_>>());

    let gone = SourcePosition {
        file_index: 0,
        file: dir.path().join("part-gone.csv"),
        rows_consumed: 1,
        byte_offset: None,
        share: None,
        key: None,
        ahead: Default::default(),
        done: false,
    };
    let err = FileSourceReader::open_at(cfg(), &gone).unwrap_err();
    assert_eq!(err.code(), "SLC-CONN-006");
}

#[test]
fn open_at_counts_skipped_rows_in_position() {
    let dir = tempfile::tempdir().unwrap();
    write_file(dir.path(), "s.csv", "id\n1\nbad\n2\n3\nbad\n4\n");
    let cfg = || {
        config(
            dir.path(),
            "s.csv",
            FileFormat::Csv,
            id_schema(),
            2,
            OnError::Skip,
        )
    };
    let mut reader = FileSourceReader::open(cfg()).unwrap();
    let first = reader.next_batch().unwrap().unwrap();
    assert_eq!(ids(&[first]), [1, 2]);
    let pos = reader.position();
    assert_eq!(pos.rows_consumed, 3);
    let mut resumed = FileSourceReader::open_at(cfg(), &pos).unwrap();
    assert_eq!(ids(&read_all(&mut resumed, 2)), [3, 4]);
    assert_eq!(resumed.skipped_rows(), 1);
}

#[test]
fn option_parsing() {
    assert_eq!("skip".parse::<OnError>().unwrap(), OnError::Skip);
    assert_eq!("FAIL".parse::<OnError>().unwrap(), OnError::Fail);
    let err = "ignore".parse::<OnError>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value for option 'on_error': unknown value 'ignore' (accepted: fail, skip)"
    );
    assert_eq!(
        "ndjson".parse::<FileFormat>().unwrap(),
        FileFormat::JsonLines
    );
    assert!("xml"
        .parse::<FileFormat>()
        .unwrap_err()
        .to_string()
        .contains("'xml'"));
}
