//! Shared helpers for the connector tests.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef};
use sluice_connectors::{ConnectorError, FileFormat, FileSourceConfig, FileSourceReader, OnError};

pub fn write_file(dir: &Path, name: &str, content: &str) -> PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, content).unwrap();
    path
}

pub fn schema(fields: &[(&str, DataType)]) -> SchemaRef {
    Arc::new(Schema::new(
        fields
            .iter()
            .map(|(n, t)| Field::new(*n, t.clone(), true))
            .collect::<Vec<_>>(),
    ))
}

pub fn config(
    base: &Path,
    path: &str,
    format: FileFormat,
    schema: SchemaRef,
    batch_size: usize,
    on_error: OnError,
) -> FileSourceConfig {
    FileSourceConfig {
        path: path.to_string(),
        base_dir: Some(base.to_path_buf()),
        format,
        schema,
        batch_size,
        on_error,
        unread_columns: Vec::new(),
        max_record_bytes: sluice_connectors::DEFAULT_MAX_RECORD_BYTES,
        share: None,
    }
}

/// Read every batch, checking the schema and size invariants on the way.
pub fn read_all(reader: &mut FileSourceReader, batch_size: usize) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    while let Some(batch) = reader.next_batch().unwrap() {
        assert!(batch.num_rows() > 0, "empty batch returned");
        assert!(batch.num_rows() <= batch_size, "batch exceeds batch_size");
        assert_eq!(batch.schema(), reader.schema());
        out.push(batch);
    }
    // Exhausted readers stay exhausted.
    assert!(reader.next_batch().unwrap().is_none());
    out
}

pub fn read_one(config: FileSourceConfig) -> RecordBatch {
    let schema = config.schema.clone();
    let batch_size = config.batch_size;
    let mut reader = FileSourceReader::open(config).unwrap();
    let batches = read_all(&mut reader, batch_size);
    concat_batches(&schema, &batches).unwrap()
}

pub fn open_err(config: FileSourceConfig) -> ConnectorError {
    match FileSourceReader::open(config) {
        Ok(r) => panic!("expected an error, got reader {r:?}"),
        Err(e) => e,
    }
}

/// First error returned by reading to the end.
pub fn read_err(config: FileSourceConfig) -> ConnectorError {
    let mut reader = FileSourceReader::open(config).unwrap();
    loop {
        match reader.next_batch() {
            Ok(Some(_)) => {}
            Ok(None) => panic!("expected an error, reached end of input"),
            Err(e) => return e,
        }
    }
}

pub fn i64s(batch: &RecordBatch, name: &str) -> Vec<Option<i64>> {
    batch
        .column_by_name(name)
        .unwrap()
        .as_primitive::<Int64Type>()
        .iter()
        .collect()
}

pub fn strs(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let col = batch.column_by_name(name).unwrap();
    let col = arrow::compute::cast(col, &DataType::Utf8).unwrap();
    col.as_string::<i32>()
        .iter()
        .map(|s| s.map(str::to_string))
        .collect()
}

pub fn null_count(batch: &RecordBatch, name: &str) -> usize {
    batch.column_by_name(name).unwrap().null_count()
}

pub fn prim<T: arrow::datatypes::ArrowPrimitiveType>(
    batch: &RecordBatch,
    name: &str,
) -> Vec<Option<T::Native>> {
    batch
        .column_by_name(name)
        .unwrap()
        .as_primitive::<T>()
        .iter()
        .collect()
}
