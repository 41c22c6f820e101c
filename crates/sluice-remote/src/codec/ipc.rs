//! One record batch as one Arrow IPC stream, decoded under bounds.
//!
//! A payload must hold exactly one batch whose columns have the expected
//! types, and no more rows than the caller allows. The frame that carries
//! it was already bounded in bytes by the transport, so Arrow's decoder
//! (which checks every buffer against the message body) never allocates
//! past that bound.

use std::io::Cursor;
use std::sync::Arc;

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};

use crate::error::{RemoteError, Result};

/// Encode `batch` as an IPC stream of one batch.
pub fn encode(what: &str, batch: &RecordBatch) -> Result<Vec<u8>> {
    let ipc = |source| RemoteError::Ipc {
        what: format!("encoding {what}"),
        source,
    };
    let mut out = Vec::new();
    let mut writer = StreamWriter::try_new(&mut out, &batch.schema()).map_err(ipc)?;
    writer.write(batch).map_err(ipc)?;
    writer.finish().map_err(ipc)?;
    drop(writer);
    Ok(out)
}

/// Decode an IPC stream of exactly one batch whose column types are
/// `expected`'s, with at most `max_rows` rows; the batch is returned under
/// `expected` itself (names and nullability as declared, which Arrow checks
/// against the data).
pub fn decode(
    what: &str,
    bytes: &[u8],
    expected: &SchemaRef,
    max_rows: usize,
) -> Result<RecordBatch> {
    let ipc = |source| RemoteError::Ipc {
        what: format!("decoding {what}"),
        source,
    };
    if bytes.is_empty() {
        return Err(RemoteError::malformed(
            what,
            "the payload is empty; it must be an Arrow IPC stream of one batch",
        ));
    }
    check_framing(bytes).map_err(ipc)?;
    // Arrow's reader still panics on some malformed metadata (a type it
    // does not know, a missing field, a validity buffer shorter than its
    // array): a payload from the other side must never take this process
    // down, so a panic is a decoding error like any other.
    let batch = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        read_one(what, bytes, expected)
    }))
    .unwrap_or_else(|p| {
        Err(ipc(arrow::error::ArrowError::IpcError(format!(
            "the decoder failed: {}",
            sluice_engine::panic::panic_message(&*p)
        ))))
    })?;
    if batch.num_rows() > max_rows {
        return Err(RemoteError::limit(
            format!("{what} rows"),
            batch.num_rows() as u64,
            max_rows as u64,
        ));
    }
    let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(Arc::clone(expected), batch.columns().to_vec(), &options)
        .map_err(|e| RemoteError::malformed(what, e.to_string()))
}

/// The one batch of a stream whose column types are `expected`'s.
fn read_one(what: &str, bytes: &[u8], expected: &SchemaRef) -> Result<RecordBatch> {
    let ipc = |source| RemoteError::Ipc {
        what: format!("decoding {what}"),
        source,
    };
    let mut reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(ipc)?;
    check_types(what, &reader.schema(), expected)?;
    let batch = match reader.next() {
        Some(b) => b.map_err(ipc)?,
        None => {
            return Err(RemoteError::malformed(
                what,
                "the stream holds no record batch",
            ))
        }
    };
    if reader.next().is_some() {
        return Err(RemoteError::malformed(
            what,
            "the stream holds more than one record batch",
        ));
    }
    Ok(batch)
}

/// Walk the stream's message framing before Arrow reads it: Arrow's reader
/// allocates each message's metadata and body at their declared lengths,
/// so a ten-byte payload declaring a 2 GiB message would allocate 2 GiB
/// (and a negative body length becomes a huge one). Every declared length must fit in
/// the bytes that remain, and a stream holds at most two messages (the
/// schema and one batch) before its end.
fn check_framing(bytes: &[u8]) -> std::result::Result<(), arrow::error::ArrowError> {
    use arrow::error::ArrowError;
    let word = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .ok_or_else(|| ArrowError::IpcError(format!("the stream is cut at byte {at}")))
    };
    let (mut at, mut messages) = (0usize, 0usize);
    while at < bytes.len() {
        let mut len = word(at)?;
        at += 4;
        if len == -1 {
            len = word(at)?;
            at += 4;
        }
        if len == 0 {
            break;
        }
        let remaining = bytes.len() - at;
        let meta_len = usize::try_from(len).ok().filter(|&l| l <= remaining);
        let Some(meta_len) = meta_len else {
            return Err(ArrowError::IpcError(format!(
                "message {messages} declares {len} bytes of metadata, but {remaining} remain"
            )));
        };
        let message = arrow::ipc::root_as_message(&bytes[at..at + meta_len])
            .map_err(|e| ArrowError::IpcError(format!("message {messages}: {e}")))?;
        at += meta_len;
        let remaining = bytes.len() - at;
        let body = message.bodyLength();
        let Some(body_len) = usize::try_from(body).ok().filter(|&l| l <= remaining) else {
            return Err(ArrowError::IpcError(format!(
                "message {messages} declares a body of {body} bytes, but {remaining} remain"
            )));
        };
        at += body_len;
        messages += 1;
        if messages > 2 {
            break;
        }
    }
    Ok(())
}

fn check_types(what: &str, got: &Schema, expected: &Schema) -> Result<()> {
    let types = |s: &Schema| {
        s.fields()
            .iter()
            .map(|f| f.data_type().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = got.fields().len() == expected.fields().len()
        && got
            .fields()
            .iter()
            .zip(expected.fields())
            .all(|(g, e)| g.data_type() == e.data_type());
    if same {
        Ok(())
    } else {
        Err(RemoteError::malformed(
            what,
            format!(
                "its columns are ({}), expected ({})",
                types(got),
                types(expected)
            ),
        ))
    }
}
