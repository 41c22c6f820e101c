//! Resuming from a checkpoint in a file that shrank or was replaced is
//! refused with an error naming the file, the checkpointed position and the
//! file's size now; a file that only grew resumes with the new rows.

use arrow::datatypes::DataType;
use sluice_connectors::{BatchReader, FileFormat, FileSourceConfig, FileSourceReader, OnError};

use crate::parquet_source::write_parquet;
use crate::support::*;

fn cfg(dir: &std::path::Path, file: &str, format: FileFormat) -> FileSourceConfig {
    config(
        dir,
        file,
        format,
        schema(&[("id", DataType::Int64)]),
        4,
        OnError::Fail,
    )
}

fn csv_rows(ids: std::ops::Range<i64>) -> String {
    ids.fold("id\n".to_string(), |s, i| s + &format!("{i}\n"))
}

fn json_rows(ids: std::ops::Range<i64>) -> String {
    ids.map(|i| format!("{{\"id\": {i}}}\n")).collect()
}

/// Read two batches (8 rows) and return the checkpointed offset, as the
/// engine stores it.
fn offset_after_8(config: FileSourceConfig) -> String {
    let mut reader = FileSourceReader::open(config).unwrap();
    for _ in 0..2 {
        reader.next_batch().unwrap().unwrap();
    }
    assert_eq!(reader.position().rows_consumed, 8);
    BatchReader::offset(&reader).unwrap()
}

fn refused(config: FileSourceConfig, offset: &str) -> String {
    let err = FileSourceReader::open_at_offset(config, offset).unwrap_err();
    assert_eq!(err.code(), "SLC-CONN-006", "{err}");
    err.to_string()
}

const ADVICE: &str = "the file shrank or was replaced since the checkpoint, so its rows cannot \
                      be resumed; restore the file, or start again without the checkpoint (an \
                      empty state directory)";

#[test]
fn text_files_that_shrank_or_were_replaced_are_refused() {
    type Rows = fn(std::ops::Range<i64>) -> String;
    let cases: [(&str, FileFormat, Rows); 2] = [
        ("f.csv", FileFormat::Csv, csv_rows),
        ("f.jsonl", FileFormat::JsonLines, json_rows),
    ];
    for (file, format, rows) in cases {
        let dir = tempfile::tempdir().unwrap();
        let path = write_file(dir.path(), file, &rows(0..10));
        let offset = offset_after_8(cfg(dir.path(), file, format));
        let at = rows(0..8).len();

        // Shrank: 5 rows left.
        write_file(dir.path(), file, &rows(0..5));
        let size = rows(0..5).len();
        assert_eq!(
            refused(cfg(dir.path(), file, format), &offset),
            format!(
                "cannot resume at {p}: the checkpoint resumes after row 8 at byte {at}, but the \
                 file now has 5 rows and is {size} bytes: {ADVICE}",
                p = path.display()
            ),
            "{file}"
        );

        // Replaced: as many rows, other values (wider).
        write_file(dir.path(), file, &rows(100..110));
        let now = rows(100..108).len();
        let size = rows(100..110).len();
        assert_eq!(
            refused(cfg(dir.path(), file, format), &offset),
            format!(
                "cannot resume at {p}: the checkpoint resumes after row 8 at byte {at}, but row \
                 8 now ends at byte {now} and the file is {size} bytes: {ADVICE}",
                p = path.display()
            ),
            "{file}"
        );

        // Grew (appended to): resumes with the rows after the checkpoint.
        write_file(dir.path(), file, &rows(0..12));
        let mut resumed =
            FileSourceReader::open_at_offset(cfg(dir.path(), file, format), &offset).unwrap();
        let tail = read_all(&mut resumed, 4);
        let ids: Vec<_> = tail.iter().flat_map(|b| i64s(b, "id")).collect();
        assert_eq!(ids, (8..12).map(Some).collect::<Vec<_>>(), "{file}");
    }
}

#[test]
fn parquet_file_that_shrank_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.parquet");
    write_parquet(&path, 10);
    let offset = offset_after_8(cfg(dir.path(), "p.parquet", FileFormat::Parquet));
    write_parquet(&path, 5);
    let size = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        refused(cfg(dir.path(), "p.parquet", FileFormat::Parquet), &offset),
        format!(
            "cannot resume at {}: the checkpoint resumes after row 8, but the file now has 5 \
             rows and is {size} bytes: {ADVICE}",
            path.display()
        )
    );
    // Exactly at the end is fine (nothing left to read).
    write_parquet(&path, 8);
    let mut resumed = FileSourceReader::open_at_offset(
        cfg(dir.path(), "p.parquet", FileFormat::Parquet),
        &offset,
    )
    .unwrap();
    assert!(resumed.next_batch().unwrap().is_none());
}

/// Offsets written before byte offsets existed (rows only) still resume,
/// and are still refused when the file has fewer rows.
#[test]
fn offsets_without_byte_offset_check_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_file(dir.path(), "f.csv", &csv_rows(0..10));
    let old = format!(
        "{{\"file_index\":0,\"file\":{:?},\"rows_consumed\":8}}",
        path.display().to_string()
    );
    let mut resumed =
        FileSourceReader::open_at_offset(cfg(dir.path(), "f.csv", FileFormat::Csv), &old).unwrap();
    let ids: Vec<_> = read_all(&mut resumed, 4)
        .iter()
        .flat_map(|b| i64s(b, "id"))
        .collect();
    assert_eq!(ids, [Some(8), Some(9)]);
    write_file(dir.path(), "f.csv", &csv_rows(0..5));
    assert_eq!(
        refused(cfg(dir.path(), "f.csv", FileFormat::Csv), &old),
        format!(
            "cannot resume at {}: the checkpoint resumes after row 8, but the file now has 5 \
             rows and is 13 bytes: {ADVICE}",
            path.display()
        )
    );
}
