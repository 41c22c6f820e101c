//! Operator state as bytes: the snapshot format of checkpoints.
//!
//! A snapshot is a sequence of length-prefixed frames: the first is a JSON
//! map of scalar fields, each following frame is an Arrow IPC stream holding
//! one part (a record batch, written as one or more messages that a reader
//! concatenates). Arrow IPC keeps every aggregate's intermediate state
//! (whatever its types) exact, and the framing lets one operator store any
//! number of parts (one per open window, for example).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::RecordBatch;
use bytes::Bytes;

use crate::error::{EngineError, Result};

/// Builds one operator snapshot.
///
/// Batches are kept as they are (Arrow arrays are reference counted, so
/// keeping one shares its buffers instead of copying them); encoding waits
/// for [`StatePart::encode`], which a checkpoint runs off the compute
/// thread.
#[derive(Default)]
pub struct SnapshotWriter {
    meta: BTreeMap<String, String>,
    parts: Vec<PartBatch>,
}

/// A batch part built when the checkpoint tail encodes it, not when the
/// operator is captured: for state whose copy would cost the compute thread
/// time proportional to its size (see `operators::scope`).
pub trait DeferredBatch: Send + Sync + std::fmt::Debug {
    /// The batch, exactly as it was when captured. May be called more than
    /// once (by the tail, or by the operator before it changes the state
    /// the batch is built from); every call returns the same batch. An
    /// error fails the checkpoint that holds the part.
    fn produce(&self) -> Result<RecordBatch>;

    /// The same batch as chunks of rows (at least one), as the tail
    /// encodes it: a message or more per chunk, concatenated again when
    /// read. A part whose building would copy a large state in one step
    /// builds it in chunks instead (see `operators::scope`).
    fn produce_chunks(&self) -> Result<Vec<RecordBatch>> {
        Ok(vec![self.produce()?])
    }
}

/// Batches concatenated into one when the snapshot is encoded: the
/// batches are shared (reference counted), so capturing costs nothing per
/// row, and the copy happens off the compute thread.
#[derive(Debug)]
pub struct ConcatLater {
    schema: arrow::datatypes::SchemaRef,
    batches: Vec<RecordBatch>,
}

impl ConcatLater {
    /// `batches` (all of `schema`), to be concatenated later.
    pub fn new(schema: arrow::datatypes::SchemaRef, batches: Vec<RecordBatch>) -> Arc<Self> {
        Arc::new(Self { schema, batches })
    }
}

impl DeferredBatch for ConcatLater {
    fn produce(&self) -> Result<RecordBatch> {
        Ok(arrow::compute::concat_batches(&self.schema, &self.batches)?)
    }

    /// Runs of batches concatenated up to [`ROWS_PER_MESSAGE`] rows each,
    /// with a pace point after each run.
    fn produce_chunks(&self) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        let mut run: Vec<&RecordBatch> = Vec::new();
        let mut rows = 0;
        for batch in &self.batches {
            if rows > 0 && rows + batch.num_rows() > ROWS_PER_MESSAGE {
                out.push(arrow::compute::concat_batches(&self.schema, run.drain(..))?);
                pace::point();
                rows = 0;
            }
            rows += batch.num_rows();
            run.push(batch);
        }
        if !run.is_empty() || out.is_empty() {
            out.push(arrow::compute::concat_batches(&self.schema, run)?);
        }
        Ok(out)
    }
}

/// One batch of a snapshot: built, or deferred to whoever encodes it.
#[derive(Debug, Clone)]
pub enum PartBatch {
    /// Built at capture (Arrow buffers shared, not copied).
    Ready(RecordBatch),
    /// Built by [`DeferredBatch::produce`] when encoded.
    Deferred(Arc<dyn DeferredBatch>),
}

impl PartBatch {
    /// The batch, producing it if it was deferred.
    pub fn batch(&self) -> Result<RecordBatch> {
        match self {
            PartBatch::Ready(b) => Ok(b.clone()),
            PartBatch::Deferred(d) => d.produce(),
        }
    }

    /// The batch as chunks of rows (at least one; see
    /// [`DeferredBatch::produce_chunks`]).
    pub fn chunks(&self) -> Result<Vec<RecordBatch>> {
        match self {
            PartBatch::Ready(b) => Ok(vec![b.clone()]),
            PartBatch::Deferred(d) => d.produce_chunks(),
        }
    }
}

impl SnapshotWriter {
    /// Record a scalar field.
    pub fn set(&mut self, key: &str, value: impl ToString) {
        self.meta.insert(key.to_string(), value.to_string());
    }

    /// Append a batch as its own part (shared, not copied).
    pub fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        self.parts.push(PartBatch::Ready(batch.clone()));
        Ok(())
    }

    /// Append a part that is built when the snapshot is encoded.
    pub fn push_deferred(&mut self, part: Arc<dyn DeferredBatch>) {
        self.parts.push(PartBatch::Deferred(part));
    }

    /// The snapshot, not yet encoded.
    pub fn finish_deferred(self) -> StatePart {
        StatePart::Deferred {
            meta: self.meta,
            parts: self.parts,
        }
    }

    /// The encoded snapshot.
    pub fn finish(self) -> Result<Bytes> {
        self.finish_deferred().encode()
    }
}

/// One piece of captured state: either bytes already, or Arrow batches
/// whose encoding is left to whoever writes them (a checkpoint tail).
#[derive(Debug, Clone)]
pub enum StatePart {
    /// Encoded when captured.
    Encoded(Bytes),
    /// Captured as shared batches; [`Self::encode`] makes the bytes.
    Deferred {
        /// Scalar fields.
        meta: BTreeMap<String, String>,
        /// Batch parts, in order.
        parts: Vec<PartBatch>,
    },
}

impl StatePart {
    /// The snapshot format's bytes: length-prefixed frames, the JSON map of
    /// scalar fields first, then one Arrow IPC stream per batch.
    ///
    /// The output is sized once, from the batches' memory, and each stream
    /// is written straight into it, a message per [`ROWS_PER_MESSAGE`]
    /// rows or [`MESSAGE_BYTES`] bytes, whichever is fewer: a gigabyte of
    /// state is then copied once, instead of through doubling buffers and
    /// a second copy (which profiles of a 1 GB checkpoint showed as most of
    /// the tail's time, in `memmove` and page zeroing), and no message is a
    /// long step for the pacer (see [`pace`]).
    pub fn encode(self) -> Result<Bytes> {
        let (meta, parts) = match self {
            StatePart::Encoded(b) => return Ok(b),
            StatePart::Deferred { meta, parts } => (meta, parts),
        };
        let meta = serde_json::to_vec(&meta)
            .map_err(|e| EngineError::Internal(format!("encoding snapshot: {e}")))?;
        let parts = parts
            .iter()
            .map(|p| {
                let chunks = p.chunks();
                pace::point();
                chunks
            })
            .collect::<Result<Vec<_>>>()?;
        let estimate =
            8 + meta.len() + parts.iter().flatten().map(encoded_size_hint).sum::<usize>();
        let mut out = Vec::with_capacity(estimate);
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        out.extend_from_slice(&meta);
        for chunks in &parts {
            let first = chunks
                .first()
                .ok_or_else(|| EngineError::Internal("a snapshot part without a batch".into()))?;
            let at = out.len();
            out.extend_from_slice(&[0; 8]);
            {
                let mut w = StreamWriter::try_new(&mut out, &first.schema())?;
                for batch in chunks {
                    let rows = batch.num_rows();
                    let step = rows_per_message(batch);
                    let mut offset = 0;
                    loop {
                        let len = step.min(rows - offset);
                        w.write(&batch.slice(offset, len))?;
                        pace::point();
                        offset += len;
                        if offset >= rows {
                            break;
                        }
                    }
                }
                w.finish()?;
            }
            let len = (out.len() - at - 8) as u64;
            out[at..at + 8].copy_from_slice(&len.to_le_bytes());
        }
        Ok(Bytes::from(out))
    }
}

/// Rows per IPC message in an encoded part, at most. Arrow's encoder copies
/// each message's buffers into a scratch vector before writing it; bounded
/// messages keep that scratch small and reused.
const ROWS_PER_MESSAGE: usize = 65_536;

/// Bytes of Arrow buffers per IPC message, about, at most (rows of wide
/// state, such as long strings or lists, make fewer rows per message): a
/// message is one step of a checkpoint tail between two pace points.
const MESSAGE_BYTES: usize = 8 << 20;

/// Bytes of `batch`'s buffers (as sliced; see [`crate::budget::row_bytes`]).
fn data_size(batch: &RecordBatch) -> usize {
    usize::try_from(crate::budget::row_bytes(batch)).unwrap_or(usize::MAX)
}

/// Rows per message for `batch`: [`ROWS_PER_MESSAGE`], fewer when that
/// many of its rows take more than [`MESSAGE_BYTES`]; at least one.
fn rows_per_message(batch: &RecordBatch) -> usize {
    let rows = batch.num_rows();
    let bytes = data_size(batch);
    if bytes <= MESSAGE_BYTES || rows == 0 {
        return ROWS_PER_MESSAGE;
    }
    let fit = (rows as u128 * MESSAGE_BYTES as u128 / bytes as u128) as usize;
    fit.clamp(1, ROWS_PER_MESSAGE)
}

/// About the bytes `batch` takes encoded: its buffers (as sliced) plus
/// framing per message.
fn encoded_size_hint(batch: &RecordBatch) -> usize {
    let messages = batch.num_rows() / rows_per_message(batch) + 1;
    data_size(batch) + messages * (512 + 64 * batch.num_columns()) + 8
}

/// Reads one operator snapshot.
pub struct SnapshotReader {
    meta: BTreeMap<String, String>,
    parts: Vec<RecordBatch>,
}

fn corrupt(what: &str) -> EngineError {
    EngineError::Internal(format!("damaged operator snapshot: {what}"))
}

impl SnapshotReader {
    /// Decode a snapshot.
    pub fn new(bytes: &[u8]) -> Result<Self> {
        let mut frames = Vec::new();
        let mut pos = 0usize;
        while pos < bytes.len() {
            let len_bytes: [u8; 8] = bytes
                .get(pos..pos + 8)
                .and_then(|b| b.try_into().ok())
                .ok_or_else(|| corrupt("truncated frame header"))?;
            let len = u64::from_le_bytes(len_bytes) as usize;
            let frame = bytes
                .get(pos + 8..pos + 8 + len)
                .ok_or_else(|| corrupt("truncated frame"))?;
            frames.push(frame);
            pos += 8 + len;
        }
        let (meta, rest) = frames.split_first().ok_or_else(|| corrupt("empty"))?;
        let meta: BTreeMap<String, String> =
            serde_json::from_slice(meta).map_err(|e| corrupt(&e.to_string()))?;
        let mut parts = Vec::new();
        for f in rest {
            // A part is written as one stream of one or more messages.
            let reader = StreamReader::try_new(Cursor::new(*f), None)?;
            let schema = reader.schema();
            let mut batches = reader.collect::<std::result::Result<Vec<_>, _>>()?;
            match batches.len() {
                0 => {}
                1 => parts.extend(batches.pop()),
                _ => parts.push(arrow::compute::concat_batches(&schema, &batches)?),
            }
        }
        Ok(Self { meta, parts })
    }

    /// A scalar field.
    pub fn get<T: std::str::FromStr>(&self, key: &str) -> Result<T> {
        self.meta
            .get(key)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| corrupt(&format!("field '{key}'")))
    }

    /// A scalar field that older checkpoints may not have: `None` when
    /// absent, an error when present but unreadable.
    pub fn get_optional<T: std::str::FromStr>(&self, key: &str) -> Result<Option<T>> {
        self.meta
            .get(key)
            .map(|v| v.parse().map_err(|_| corrupt(&format!("field '{key}'"))))
            .transpose()
    }

    /// The batch parts, in order.
    pub fn parts(&self) -> &[RecordBatch] {
        &self.parts
    }
}

pub mod layers;
pub mod pace;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;

    use super::{SnapshotReader, SnapshotWriter, MESSAGE_BYTES, ROWS_PER_MESSAGE};

    fn batch(rows: usize) -> RecordBatch {
        let schema = Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ])
        .with_metadata([("widths".to_string(), "1".to_string())].into());
        let k: ArrayRef = Arc::new(Int64Array::from_iter(
            (0..rows as i64).map(|i| (i % 7 != 0).then_some(i)),
        ));
        let s: ArrayRef = Arc::new(StringArray::from_iter(
            (0..rows).map(|i| (i % 5 != 0).then(|| format!("v{i}"))),
        ));
        RecordBatch::try_new(Arc::new(schema), vec![k, s]).unwrap()
    }

    /// Parts of every size around the message boundary, including empty
    /// ones and slices of larger batches, read back as the same batches,
    /// one part each, schema metadata included.
    #[test]
    fn parts_of_any_size_round_trip_as_one_batch_each() {
        let big = batch(3 * ROWS_PER_MESSAGE + 17);
        let parts = vec![
            batch(0),
            batch(1),
            batch(ROWS_PER_MESSAGE),
            batch(ROWS_PER_MESSAGE + 1),
            big.clone(),
            big.slice(ROWS_PER_MESSAGE - 3, ROWS_PER_MESSAGE + 5),
        ];
        let mut w = SnapshotWriter::default();
        w.set("id", 7);
        for p in &parts {
            w.push(p).unwrap();
        }
        let bytes = w.finish().unwrap();
        let r = SnapshotReader::new(&bytes).unwrap();
        assert_eq!(r.get::<u64>("id").unwrap(), 7);
        assert_eq!(r.parts().len(), parts.len());
        for (got, want) in r.parts().iter().zip(&parts) {
            assert_eq!(got, want);
        }
    }

    /// Wide rows make more, smaller messages: a part of 48 MiB of strings
    /// in 6,000 rows is encoded in messages of about [`MESSAGE_BYTES`],
    /// with a pace point after each, and reads back as the same batch.
    #[test]
    fn wide_rows_are_encoded_in_bounded_messages() {
        use crate::state::pace::{paced, PaceHost, Pacer};

        struct Idle;
        impl PaceHost for Idle {
            fn busy_ns(&self) -> u64 {
                0
            }
            fn rested(&self, _: std::time::Duration) {}
            fn tail_done(&self, _: std::time::Duration) {}
        }

        let rows = 6_000;
        let wide = "x".repeat(8 << 10);
        let schema = Arc::new(Schema::new(vec![Field::new("s", DataType::Utf8, false)]));
        let s: ArrayRef = Arc::new(StringArray::from_iter_values(
            (0..rows).map(|i| format!("{i}{wide}")),
        ));
        let big = RecordBatch::try_new(schema, vec![s]).unwrap();
        let mut w = SnapshotWriter::default();
        w.push(&big).unwrap();
        let mut pacer = Pacer::new(25, Arc::new(Idle));
        let (bytes, _) = paced(&mut pacer, || w.finish());
        let bytes = bytes.unwrap();
        let expect = bytes.len() / MESSAGE_BYTES;
        assert!(
            pacer.points() >= expect as u64,
            "{} points for {} bytes",
            pacer.points(),
            bytes.len()
        );
        let r = SnapshotReader::new(&bytes).unwrap();
        assert_eq!(r.parts(), &[big]);
    }
}
