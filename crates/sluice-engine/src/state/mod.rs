//! Operator state as bytes: the snapshot format of checkpoints.
//!
//! A snapshot is a sequence of length-prefixed frames: the first is a JSON
//! map of scalar fields, each following frame is an Arrow IPC stream holding
//! one record batch. Arrow IPC keeps every aggregate's intermediate state
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
    pub fn encode(self) -> Result<Bytes> {
        let (meta, parts) = match self {
            StatePart::Encoded(b) => return Ok(b),
            StatePart::Deferred { meta, parts } => (meta, parts),
        };
        let meta = serde_json::to_vec(&meta)
            .map_err(|e| EngineError::Internal(format!("encoding snapshot: {e}")))?;
        let mut out = Vec::new();
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        out.extend_from_slice(&meta);
        let mut buf = Vec::new();
        for part in &parts {
            let batch = part.batch()?;
            let batch = &batch;
            buf.clear();
            {
                let mut w = StreamWriter::try_new(&mut buf, &batch.schema())?;
                w.write(batch)?;
                w.finish()?;
            }
            out.extend_from_slice(&(buf.len() as u64).to_le_bytes());
            out.extend_from_slice(&buf);
        }
        Ok(Bytes::from(out))
    }
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
            let reader = StreamReader::try_new(Cursor::new(*f), None)?;
            for b in reader {
                parts.push(b?);
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

    /// The batch parts, in order.
    pub fn parts(&self) -> &[RecordBatch] {
        &self.parts
    }
}

pub mod layers;
