//! Snapshots written before kept rows had their own encoding (see
//! [`super::payload`]) hold each row in Arrow's row format. Restoring one
//! decodes those rows and encodes them again, so a checkpoint taken by an
//! earlier release still restores.

use arrow::array::{ArrayRef, AsArray, LargeStringArray, StringArray};
use arrow::datatypes::{DataType, SchemaRef};
use arrow::row::{RowConverter, SortField};

use super::partitions::{PartId, Partitions};
use super::payload::PayloadCodec;
use super::{Entry, Partition, CHECK_CHUNK};
use crate::error::{EngineError, Result};

/// The type whose row encoding is `t`'s, with a top-level string type read
/// as binary: arrow-row's own UTF-8 check panics on invalid bytes instead
/// of returning an error, so strings are decoded as binary and checked here.
fn binary_twin(t: &DataType) -> DataType {
    match t {
        DataType::Utf8 => DataType::Binary,
        DataType::LargeUtf8 => DataType::LargeBinary,
        DataType::Utf8View => DataType::BinaryView,
        other => other.clone(),
    }
}

/// The column of type `t` from its binary twin, checking its strings.
fn from_twin(column: ArrayRef, t: &DataType, name: &str) -> Result<ArrayRef> {
    let checked = match t {
        DataType::Utf8 => StringArray::try_from_binary(column.as_binary::<i32>().clone())
            .map(|a| std::sync::Arc::new(a) as ArrayRef),
        DataType::LargeUtf8 => LargeStringArray::try_from_binary(column.as_binary::<i64>().clone())
            .map(|a| std::sync::Arc::new(a) as ArrayRef),
        DataType::Utf8View => column
            .as_binary_view()
            .clone()
            .to_string_view()
            .map(|a| std::sync::Arc::new(a) as ArrayRef),
        _ => Ok(column),
    };
    checked.map_err(|e| {
        EngineError::Internal(format!(
            "damaged top-n snapshot: column {name} of a kept row: {e}"
        ))
    })
}

/// Which kept row: a partition, its shown list or not, and the rank.
type Place = (PartId, bool, usize);

/// Re-encode every kept and shown row of `parts`, restored from a snapshot
/// in Arrow's row format of `input`'s columns, with `codec`.
pub(super) fn recode(
    input: &SchemaRef,
    codec: &PayloadCodec,
    parts: &mut Partitions<Partition>,
) -> Result<()> {
    let twin = RowConverter::new(
        input
            .fields()
            .iter()
            .map(|f| SortField::new(binary_twin(f.data_type())))
            .collect(),
    )?;
    let parser = twin.parser();
    let places: Vec<Place> = parts
        .iter()
        .flat_map(|(id, _, p)| {
            let rows = (0..p.rows.len()).map(move |i| (id, false, i));
            rows.chain((0..p.shown.len()).map(move |i| (id, true, i)))
        })
        .collect();
    let entry = |parts: &Partitions<Partition>, (id, shown, i): Place| -> Result<Entry> {
        let p = parts
            .get(id)
            .ok_or_else(|| EngineError::Internal("top-n partition index out of step".into()))?;
        let list = if shown { &p.shown } else { &p.rows };
        list.get(i)
            .cloned()
            .ok_or_else(|| EngineError::Internal("top-n kept row out of step".into()))
    };
    let mut scratch = Vec::new();
    let mut payload = Vec::new();
    for chunk in places.chunks(CHECK_CHUNK) {
        let old = chunk
            .iter()
            .map(|place| entry(parts, *place))
            .collect::<Result<Vec<_>>>()?;
        let twins = twin.convert_rows(old.iter().map(|e| parser.parse(e.payload())))?;
        let columns = twins
            .into_iter()
            .zip(input.fields())
            .map(|(c, f)| from_twin(c, f.data_type(), f.name()))
            .collect::<Result<Vec<_>>>()?;
        let encoder = codec.encoder(&columns)?;
        for (row, (e, (id, shown, i))) in old.iter().zip(chunk).enumerate() {
            payload.clear();
            encoder.encode(row, &mut payload)?;
            let new = Entry::new(&mut scratch, e.order(), &payload, e.time);
            let p = parts
                .get_mut(*id)
                .ok_or_else(|| EngineError::Internal("top-n partition index out of step".into()))?;
            let list = if *shown { &mut p.shown } else { &mut p.rows };
            if let Some(slot) = list.get_mut(*i) {
                *slot = new;
            }
        }
    }
    Ok(())
}
