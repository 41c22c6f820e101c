//! Entry points shared by the fuzz targets (`fuzz/` at the repository root)
//! and the proptest-driven fuzz tests of this crate.
//!
//! Both drive the *same* code: [`check_file_input`] writes the bytes to a
//! scratch file and reads them through the public [`FileSourceReader`] under
//! a handful of fixed reader configurations that together cover every
//! column type the text decoders support, both error policies, tiny and
//! large batches, unread columns and resuming from a saved position.
//!
//! The contract checked is the one a user relies on: whatever the bytes,
//! the reader either returns batches of the declared schema or a typed
//! [`ConnectorError`] with a stable code and a message. A panic, or a batch
//! that breaks the reader's own invariants, is a bug; the checks panic so a
//! fuzzer (or proptest) reports the input.
//!
//! This module is not a stable API; it is public only so the fuzz crate,
//! which lives outside the workspace, can reach it.

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::{ConnectorError, FileFormat, FileSourceConfig, FileSourceReader, OnError};

/// Every code a [`ConnectorError`] may carry; an error outside this list
/// means a new variant was added without a documented code.
pub const CONNECTOR_CODES: &[&str] = &[
    "SLC-CONN-001",
    "SLC-CONN-002",
    "SLC-CONN-003",
    "SLC-CONN-004",
    "SLC-CONN-005",
    "SLC-CONN-006",
    "SLC-CONN-007",
    "SLC-CONN-008",
];

/// Upper bound on batches read from one input, so a decoder that stops
/// making progress is reported instead of looping forever.
const MAX_BATCHES: usize = 100_000;

/// The columns of the wide fixed schema: one per type the text decoders
/// support, named after the SQL type they stand for. The seed corpus uses
/// these names as CSV headers, JSON keys and Parquet columns.
pub fn all_type_fields() -> Vec<(&'static str, DataType)> {
    vec![
        ("big", DataType::Int64),
        ("int", DataType::Int32),
        ("small", DataType::Int16),
        ("tiny", DataType::Int8),
        ("ubig", DataType::UInt64),
        ("uint", DataType::UInt32),
        ("usmall", DataType::UInt16),
        ("utiny", DataType::UInt8),
        ("dbl", DataType::Float64),
        ("flt", DataType::Float32),
        ("flag", DataType::Boolean),
        ("name", DataType::Utf8),
        ("long_name", DataType::LargeUtf8),
        ("day", DataType::Date32),
        ("ts", DataType::Timestamp(TimeUnit::Millisecond, None)),
        (
            "ts_utc",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
        ),
        ("ts_s", DataType::Timestamp(TimeUnit::Second, None)),
        (
            "ts_us",
            DataType::Timestamp(TimeUnit::Microsecond, Some("+05:30".into())),
        ),
        (
            "ts_ns",
            DataType::Timestamp(TimeUnit::Nanosecond, Some("America/New_York".into())),
        ),
        ("amount", DataType::Decimal128(10, 2)),
        ("wide", DataType::Decimal128(38, 10)),
        ("whole", DataType::Decimal128(5, 0)),
    ]
}

/// The fixed schemas inputs are read with.
pub fn schemas() -> Vec<SchemaRef> {
    let fields = all_type_fields();
    let nullable = fields
        .iter()
        .map(|(n, t)| Field::new(*n, t.clone(), true))
        .collect::<Vec<_>>();
    let required = fields
        .iter()
        .map(|(n, t)| Field::new(*n, t.clone(), false))
        .collect::<Vec<_>>();
    // A narrow schema over a few of the same columns, so inputs that lack
    // most of the wide header still reach the row decoders.
    let narrow = vec![
        Field::new("big", DataType::Int64, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("amount", DataType::Decimal128(10, 2), true),
    ];
    vec![
        Arc::new(Schema::new(nullable)),
        Arc::new(Schema::new(required)),
        Arc::new(Schema::new(narrow)),
    ]
}

/// One way of reading an input.
#[derive(Debug, Clone)]
pub struct ReadCase {
    /// Index into [`schemas`].
    pub schema: usize,
    /// Error policy.
    pub on_error: OnError,
    /// Rows per batch.
    pub batch_size: usize,
    /// Declared columns left unparsed.
    pub unread: Vec<String>,
    /// Reopen at the position after the first batch and read on from there.
    pub resume: bool,
}

/// The reader configurations every input is read with.
pub fn read_cases() -> Vec<ReadCase> {
    let case = |schema, on_error, batch_size, unread: &[&str], resume| ReadCase {
        schema,
        on_error,
        batch_size,
        unread: unread.iter().map(|s| s.to_string()).collect(),
        resume,
    };
    vec![
        case(0, OnError::Fail, 1024, &[], false),
        case(0, OnError::Skip, 3, &["name", "ts_ns", "wide", "flt"], true),
        case(1, OnError::Skip, 1, &[], true),
        case(2, OnError::Fail, 2, &[], false),
        case(2, OnError::Skip, 7, &["name"], true),
    ]
}

/// What reading one input under one [`ReadCase`] gave.
#[derive(Debug)]
pub enum ReadOutcome {
    /// Read to the end: the rows returned and the malformed rows skipped.
    Rows {
        /// Rows in all returned batches.
        rows: usize,
        /// Rows the reader reported as skipped.
        skipped: u64,
    },
    /// A clean error.
    Error(ConnectorError),
}

/// A scratch directory holding the file the current input is written to.
struct Scratch {
    dir: PathBuf,
}

impl Scratch {
    fn new() -> std::io::Result<Scratch> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-fuzz-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(Scratch { dir })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

thread_local! {
    static SCRATCH: RefCell<Option<Scratch>> = const { RefCell::new(None) };
}

/// Write `input` to this thread's scratch file for `format` and return
/// its path.
fn scratch_file(format: FileFormat, input: &[u8]) -> PathBuf {
    SCRATCH.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(Scratch::new().unwrap_or_else(|e| panic!("fuzz scratch dir: {e}")));
        }
        let dir = slot.as_ref().map(|s| s.dir.clone()).unwrap_or_default();
        let path = dir.join(format!("input.{}", format.name()));
        std::fs::write(&path, input).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
        path
    })
}

/// Read `input` as a `format` file under every [`read_cases`] entry,
/// checking the reader's contract (see the module docs); panics on a
/// violation. Returns the outcome of each case, in order.
pub fn check_file_input(format: FileFormat, input: &[u8]) -> Vec<ReadOutcome> {
    let path = scratch_file(format, input);
    let schemas = schemas();
    read_cases()
        .iter()
        .map(|case| {
            let schema = &schemas[case.schema];
            let (outcome, batches) = read_batches(format, &path, schema, case);
            if case.resume {
                // Resuming from a saved position must give exactly the rows
                // of an uninterrupted read, as a restart from a checkpoint
                // relies on.
                let straight = ReadCase {
                    resume: false,
                    ..case.clone()
                };
                let (expected, expected_batches) = read_batches(format, &path, schema, &straight);
                check_same_read(&outcome, &batches, &expected, &expected_batches, schema);
            }
            outcome
        })
        .collect()
}

fn check_same_read(
    resumed: &ReadOutcome,
    resumed_batches: &[RecordBatch],
    straight: &ReadOutcome,
    straight_batches: &[RecordBatch],
    schema: &SchemaRef,
) {
    match (resumed, straight) {
        (ReadOutcome::Rows { .. }, ReadOutcome::Rows { .. }) => {
            let concat = |b: &[RecordBatch]| {
                concat_batches(schema, b).unwrap_or_else(|e| panic!("concatenating batches: {e}"))
            };
            assert_eq!(
                concat(resumed_batches),
                concat(straight_batches),
                "resuming from the position after the first batch changed the rows read"
            );
        }
        (ReadOutcome::Error(a), ReadOutcome::Error(b)) => assert_eq!(
            a.code(),
            b.code(),
            "resumed read failed with {a}, an uninterrupted one with {b}"
        ),
        // The parquet crate notices some corruption only on one of the two
        // read paths (a resume skips rows with a row selection, which may
        // never decode the damaged page): a corrupt Parquet file may fail
        // one way and not the other. Text formats have no such excuse.
        (ReadOutcome::Error(e), _) | (_, ReadOutcome::Error(e))
            if matches!(e.code(), "SLC-CONN-007" | "SLC-CONN-008") => {}
        _ => panic!("resumed read gave {resumed:?}, an uninterrupted one {straight:?}"),
    }
}

fn config(
    format: FileFormat,
    path: &Path,
    schema: &SchemaRef,
    case: &ReadCase,
) -> FileSourceConfig {
    FileSourceConfig {
        path: path.display().to_string(),
        base_dir: None,
        format,
        schema: Arc::clone(schema),
        batch_size: case.batch_size,
        on_error: case.on_error,
        unread_columns: case.unread.clone(),
        max_record_bytes: crate::DEFAULT_MAX_RECORD_BYTES,
        share: None,
    }
}

/// Read one input under one case.
pub fn read_case(
    format: FileFormat,
    path: &Path,
    schema: &SchemaRef,
    case: &ReadCase,
) -> ReadOutcome {
    read_batches(format, path, schema, case).0
}

/// Read one input under one case, keeping the batches.
fn read_batches(
    format: FileFormat,
    path: &Path,
    schema: &SchemaRef,
    case: &ReadCase,
) -> (ReadOutcome, Vec<RecordBatch>) {
    let cfg = config(format, path, schema, case);
    let mut reader = match FileSourceReader::open(cfg.clone()) {
        Ok(r) => r,
        Err(e) => return (clean(e), Vec::new()),
    };
    let mut rows = 0;
    let mut batches = Vec::new();
    let mut resumed = !case.resume;
    for _ in 0..MAX_BATCHES {
        match reader.next_batch() {
            Ok(Some(batch)) => {
                check_batch(&batch, schema, case.batch_size);
                rows += batch.num_rows();
                batches.push(batch);
                if !resumed {
                    // Continue from the saved position in a fresh reader,
                    // the way a restart after a checkpoint does.
                    resumed = true;
                    let skipped = reader.skipped_rows();
                    let pos = reader.position();
                    reader = match FileSourceReader::open_at(cfg.clone(), &pos) {
                        Ok(r) => r,
                        Err(e) => return (clean(e), batches),
                    };
                    if case.on_error == OnError::Fail {
                        assert_eq!(skipped, 0, "rows skipped under on_error = fail");
                    }
                }
            }
            Ok(None) => {
                let skipped = reader.skipped_rows();
                if case.on_error == OnError::Fail {
                    assert_eq!(skipped, 0, "rows skipped under on_error = fail");
                }
                // An exhausted reader stays exhausted.
                match reader.next_batch() {
                    Ok(None) => {}
                    Ok(Some(b)) => panic!("{} rows after the end of input", b.num_rows()),
                    Err(e) => panic!("error after the end of input: {e}"),
                }
                return (ReadOutcome::Rows { rows, skipped }, batches);
            }
            Err(e) => return (clean(e), batches),
        }
    }
    panic!(
        "no end of input after {MAX_BATCHES} batches of at most {}",
        case.batch_size
    );
}

fn check_batch(batch: &RecordBatch, schema: &SchemaRef, batch_size: usize) {
    assert!(batch.num_rows() > 0, "empty batch returned");
    assert!(
        batch.num_rows() <= batch_size,
        "batch of {} rows exceeds batch_size {batch_size}",
        batch.num_rows()
    );
    assert_eq!(
        &batch.schema(),
        schema,
        "batch schema differs from the declared one"
    );
    for (field, column) in schema.fields().iter().zip(batch.columns()) {
        if !field.is_nullable() {
            assert_eq!(
                column.null_count(),
                0,
                "NULL in NOT NULL column '{}'",
                field.name()
            );
        }
    }
}

/// Check that an error is a clean one and wrap it.
fn clean(e: ConnectorError) -> ReadOutcome {
    assert!(
        CONNECTOR_CODES.contains(&e.code()),
        "error without a documented code: {e:?}"
    );
    assert!(
        !e.to_string().trim().is_empty(),
        "empty error message: {e:?}"
    );
    ReadOutcome::Error(e)
}
