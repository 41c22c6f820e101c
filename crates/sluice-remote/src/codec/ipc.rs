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
