//! The lookup connector interface: enrichment of a stream against an
//! external table, read by key (Flink's lookup join).
//!
//! A [`LookupTable`] answers, for many keys at once, the rows of a table
//! that have those keys. The engine calls it from a lookup join with the
//! keys of one input batch that its cache could not answer, so one call
//! serves a batch, not a row. A real database's lookup comes with its
//! connector; [`MemoryLookupTable`] is an in-process table, updatable from
//! Rust while the pipeline runs, that tests and small reference tables use.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{ArrayRef, UInt32Array};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, SortField};
use parking_lot::RwLock;
use thiserror::Error;

/// A lookup failed. Each variant has a stable code (see [`LookupError::code`]).
#[derive(Debug, Error)]
pub enum LookupError {
    /// The table could not answer (connection lost, timeout, ...); the
    /// implementation's own error is kept as the source.
    #[error("lookup table '{table}' failed: {source}")]
    Failed {
        /// The table, as registered.
        table: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The table answered something that breaks the interface's contract
    /// (wrong schema, a row index out of range).
    #[error("lookup table '{table}' broke the lookup contract: {message}")]
    Contract {
        /// The table, as registered.
        table: String,
        /// Which rule was broken.
        message: String,
    },
    /// The table's code panicked; the panic was contained.
    #[error("lookup table '{table}' panicked: {message}")]
    Panicked {
        /// The table, as registered.
        table: String,
        /// The panic's message.
        message: String,
    },
    /// The table's registration is invalid (unknown key column, bad option).
    #[error("lookup table '{table}': {message}")]
    Invalid {
        /// The table, as registered.
        table: String,
        /// What is wrong.
        message: String,
    },
}

impl LookupError {
    /// Stable code: the text may be reworded, the codes never change meaning.
    pub fn code(&self) -> &'static str {
        match self {
            LookupError::Failed { .. } => "SLC-LKP-001",
            LookupError::Contract { .. } => "SLC-LKP-002",
            LookupError::Panicked { .. } => "SLC-LKP-003",
            LookupError::Invalid { .. } => "SLC-LKP-004",
        }
    }

    /// A failure of `table` caused by `source`.
    pub fn failed(
        table: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        LookupError::Failed {
            table: table.into(),
            source: source.into(),
        }
    }
}

/// What one [`LookupTable::lookup`] call found.
#[derive(Debug, Clone)]
pub struct LookupRows {
    /// Every row found, with the table's full schema (the schema it was
    /// registered with), in any order. A key with no row contributes none;
    /// a key that is a prefix of the table's key may contribute many.
    pub rows: RecordBatch,
    /// For each row of `rows`, the position (in the key arrays passed to
    /// `lookup`) of the key it matched. Same length as `rows`.
    pub key_index: UInt32Array,
}

/// A table the engine can read by key.
///
/// Implementations must be safe to call from the pipeline's compute thread
/// while other threads update the table: each call sees the table as it is
/// when the call runs (processing time), so a lookup join is not
/// replay-deterministic.
pub trait LookupTable: Send + Sync {
    /// The rows whose leading key columns equal each given key.
    ///
    /// `keys` holds one array per key column used (the first `keys.len()`
    /// key columns of the registration, in that order), all of the same
    /// length; position `i` of every array together is one key. The engine
    /// passes no NULL key and no key twice in one call. An error halts the
    /// pipeline (or faults it, when checkpoints are on) with this error's
    /// code.
    fn lookup(&self, keys: &[ArrayRef]) -> Result<LookupRows, LookupError>;
}

/// An in-memory lookup table keyed by its key columns: rows are inserted,
/// replaced (same key) and deleted from Rust at any time, also while a
/// pipeline reads it.
///
/// It counts its calls and the keys asked, so a test can see what a cache
/// in front of it spared.
pub struct MemoryLookupTable {
    schema: SchemaRef,
    key_columns: Vec<usize>,
    converter: RowConverter,
    /// Encoded full key to the one-row batch with that key. Arrow's row
    /// format concatenates column encodings, so the keys of every row whose
    /// leading columns equal a prefix key are one byte-prefix range.
    rows: RwLock<BTreeMap<Vec<u8>, RecordBatch>>,
    calls: AtomicU64,
    keys_asked: AtomicU64,
}

impl std::fmt::Debug for MemoryLookupTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemoryLookupTable({} rows)", self.rows.read().len())
    }
}

impl MemoryLookupTable {
    /// An empty table with `schema`, keyed by `key_columns` (names of
    /// columns of `schema`, the leading key first).
    pub fn new(schema: SchemaRef, key_columns: &[&str]) -> Result<Self, ArrowError> {
        let key_columns = key_columns
            .iter()
            .map(|k| schema.index_of(k))
            .collect::<Result<Vec<_>, _>>()?;
        let converter = RowConverter::new(
            key_columns
                .iter()
                .map(|i| SortField::new(schema.field(*i).data_type().clone()))
                .collect(),
        )?;
        Ok(MemoryLookupTable {
            schema,
            key_columns,
            converter,
            rows: RwLock::default(),
            calls: AtomicU64::new(0),
            keys_asked: AtomicU64::new(0),
        })
    }

    /// Insert the rows of `batch`, replacing any row with the same key.
    /// Rows with a NULL key are skipped (no lookup can find them).
    pub fn upsert(&self, batch: &RecordBatch) -> Result<(), ArrowError> {
        let batch = batch.clone().with_schema(Arc::clone(&self.schema))?;
        let cols: Vec<ArrayRef> = self
            .key_columns
            .iter()
            .map(|i| Arc::clone(batch.column(*i)))
            .collect();
        let encoded = self.converter.convert_columns(&cols)?;
        let mut rows = self.rows.write();
        for i in 0..batch.num_rows() {
            if cols.iter().any(|c| c.is_null(i)) {
                continue;
            }
            rows.insert(encoded.row(i).as_ref().to_vec(), batch.slice(i, 1));
        }
        Ok(())
    }

    /// Delete the rows whose full key is one of `keys` (one array per key
    /// column, in key order).
    pub fn delete(&self, keys: &[ArrayRef]) -> Result<(), ArrowError> {
        let encoded = self.converter.convert_columns(keys)?;
        let mut rows = self.rows.write();
        for r in encoded.iter() {
            rows.remove(r.as_ref());
        }
        Ok(())
    }

    /// Rows in the table.
    pub fn len(&self) -> usize {
        self.rows.read().len()
    }

    /// Whether the table has no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole table as one batch (for a test's oracle).
    pub fn snapshot(&self) -> Result<RecordBatch, ArrowError> {
        let rows = self.rows.read();
        arrow::compute::concat_batches(&self.schema, rows.values())
    }

    /// Calls of [`LookupTable::lookup`] so far.
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Keys asked for by all calls so far.
    pub fn keys_asked(&self) -> u64 {
        self.keys_asked.load(Ordering::Relaxed)
    }
}

impl LookupTable for MemoryLookupTable {
    fn lookup(&self, keys: &[ArrayRef]) -> Result<LookupRows, LookupError> {
        let contract = |message: String| LookupError::Contract {
            table: "memory".into(),
            message,
        };
        if keys.is_empty() || keys.len() > self.key_columns.len() {
            return Err(contract(format!(
                "{} key columns asked, the table has {}",
                keys.len(),
                self.key_columns.len()
            )));
        }
        let n = keys[0].len();
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.keys_asked.fetch_add(n as u64, Ordering::Relaxed);
        // A prefix key is encoded with the converter of the leading columns.
        let prefix = RowConverter::new(
            self.key_columns[..keys.len()]
                .iter()
                .map(|i| SortField::new(self.schema.field(*i).data_type().clone()))
                .collect(),
        )
        .map_err(|e| LookupError::failed("memory", e))?;
        let encoded = prefix
            .convert_columns(keys)
            .map_err(|e| LookupError::failed("memory", e))?;
        let rows = self.rows.read();
        let mut found = Vec::new();
        let mut key_index = Vec::new();
        for i in 0..n {
            let k = encoded.row(i);
            let k = k.as_ref();
            for (full, row) in rows.range(k.to_vec()..) {
                if !full.starts_with(k) {
                    break;
                }
                found.push(row.clone());
                key_index.push(i as u32);
            }
        }
        let rows = arrow::compute::concat_batches(&self.schema, &found)
            .map_err(|e| LookupError::failed("memory", e))?;
        Ok(LookupRows {
            rows,
            key_index: UInt32Array::from(key_index),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};

    #[test]
    fn finds_full_and_prefix_keys_and_sees_updates() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("region", DataType::Utf8, true),
            Field::new("id", DataType::Int64, true),
            Field::new("name", DataType::Utf8, true),
        ]));
        let t = MemoryLookupTable::new(Arc::clone(&schema), &["region", "id"]).unwrap();
        let batch = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(StringArray::from(vec!["eu", "eu", "us"])),
                Arc::new(Int64Array::from(vec![1, 2, 1])),
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
            ],
        )
        .unwrap();
        t.upsert(&batch).unwrap();
        let keys: Vec<ArrayRef> = vec![Arc::new(StringArray::from(vec!["us", "eu", "xx"]))];
        let got = t.lookup(&keys).unwrap();
        assert_eq!(got.rows.num_rows(), 3);
        assert_eq!(got.key_index.values().to_vec(), vec![0, 1, 1]);
        let full: Vec<ArrayRef> = vec![
            Arc::new(StringArray::from(vec!["eu"])),
            Arc::new(Int64Array::from(vec![2])),
        ];
        t.delete(&full).unwrap();
        let got = t.lookup(&keys).unwrap();
        assert_eq!(got.key_index.values().to_vec(), vec![0, 1]);
        assert_eq!((t.calls(), t.keys_asked(), t.len()), (2, 6, 2));
    }
}
