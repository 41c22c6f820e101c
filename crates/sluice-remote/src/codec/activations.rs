//! A call's activations as one record batch, one row per activation.
//!
//! | column | type | meaning |
//! |---|---|---|
//! | `id` | UInt64 | activation id |
//! | `key` | Binary | canonical key encoding |
//! | `state` | UInt8 | 0 absent, 1 present null, 2 a value |
//! | `state_value` | Int64, nullable | the value when `state` is 2 |
//! | `watermark` | Int64 | the pipeline watermark |
//! | `timer_name` | Utf8, nullable | a timer callback's name; null for an input row |
//! | `timer_at` | Int64, nullable | the time the timer was set for |
//! | `in.<column>`... | the input's types, nullable | the input row; null for a timer |

use std::sync::Arc;

use arrow::array::{
    new_null_array, Array, ArrayRef, AsArray, BinaryArray, Int64Array, StringArray, UInt64Array,
    UInt8Array,
};
use arrow::datatypes::{DataType, Field, Int64Type, Schema, SchemaRef, UInt64Type, UInt8Type};
use arrow::record_batch::RecordBatch;
use sluice_engine::process::{ProcessActivation, ProcessCallback, ValueState};

use crate::error::{RemoteError, Result};

const WHAT: &str = "activations";

/// The wire schema of activations for a function reading `input`.
pub fn schema(input: &Schema) -> SchemaRef {
    let mut fields = vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("key", DataType::Binary, false),
        Field::new("state", DataType::UInt8, false),
        Field::new("state_value", DataType::Int64, true),
        Field::new("watermark", DataType::Int64, false),
        Field::new("timer_name", DataType::Utf8, true),
        Field::new("timer_at", DataType::Int64, true),
    ];
    fields.extend(
        input
            .fields()
            .iter()
            .map(|f| Field::new(format!("in.{}", f.name()), f.data_type().clone(), true)),
    );
    Arc::new(Schema::new(fields))
}

const FIXED: usize = 7;

/// Encode activations for a function reading `input`.
pub fn encode(input: &Schema, activations: &[ProcessActivation]) -> Result<RecordBatch> {
    let (kind, value): (Vec<u8>, Vec<Option<i64>>) = activations
        .iter()
        .map(|a| match a.state {
            ValueState::Absent => (0, None),
            ValueState::Null => (1, None),
            ValueState::Int64(v) => (2, Some(v)),
        })
        .unzip();
    fn timer_of(c: &ProcessCallback) -> Option<(&str, i64)> {
        match c {
            ProcessCallback::Timer { name, at_ms } => Some((name.as_str(), *at_ms)),
            ProcessCallback::Input(_) => None,
        }
    }
    let timer = || activations.iter().map(|a| timer_of(&a.callback));
    let mut columns: Vec<ArrayRef> = vec![
        Arc::new(UInt64Array::from_iter_values(
            activations.iter().map(|a| a.id),
        )),
        Arc::new(BinaryArray::from_iter_values(
            activations.iter().map(|a| a.key.as_slice()),
        )),
        Arc::new(UInt8Array::from(kind)),
        Arc::new(Int64Array::from(value)),
        Arc::new(Int64Array::from_iter_values(
            activations.iter().map(|a| a.watermark),
        )),
        Arc::new(StringArray::from_iter(timer().map(|t| t.map(|(n, _)| n)))),
        Arc::new(Int64Array::from_iter(timer().map(|t| t.map(|(_, at)| at)))),
    ];
    for (col, field) in input.fields().iter().enumerate() {
        let null = new_null_array(field.data_type(), 1);
        let mut sources: Vec<ArrayRef> = vec![null];
        let mut picks = Vec::with_capacity(activations.len());
        for a in activations {
            match &a.callback {
                ProcessCallback::Input(row) => {
                    let Some(c) = row.columns().get(col) else {
                        return Err(RemoteError::malformed(
                            WHAT,
                            format!(
                                "an input row of activation {} has {} columns, the input has {}",
                                a.id,
                                row.num_columns(),
                                input.fields().len()
                            ),
                        ));
                    };
                    if row.num_rows() != 1 {
                        return Err(RemoteError::malformed(
                            WHAT,
                            format!(
                                "the input of activation {} has {} rows, not one",
                                a.id,
                                row.num_rows()
                            ),
                        ));
                    }
                    picks.push((sources.len(), 0));
                    sources.push(Arc::clone(c));
                }
                ProcessCallback::Timer { .. } => picks.push((0, 0)),
            }
        }
        let refs: Vec<&dyn Array> = sources.iter().map(|a| a.as_ref()).collect();
        let column =
            arrow::compute::interleave(&refs, &picks).map_err(|source| RemoteError::Ipc {
                what: format!("gathering input column '{}'", field.name()),
                source,
            })?;
        columns.push(column);
    }
    RecordBatch::try_new(schema(input), columns).map_err(|source| RemoteError::Ipc {
        what: "building the activations batch".into(),
        source,
    })
}

/// Decode activations of a function reading `input` (the batch is already
/// checked against [`schema`]).
pub fn decode(input: &SchemaRef, batch: &RecordBatch) -> Result<Vec<ProcessActivation>> {
    let col = |i: usize| batch.column(i);
    let ids = col(0).as_primitive::<UInt64Type>();
    let keys = col(1).as_binary::<i32>();
    let kinds = col(2).as_primitive::<UInt8Type>();
    let values = col(3).as_primitive::<Int64Type>();
    let watermarks = col(4).as_primitive::<Int64Type>();
    let names = col(5).as_string::<i32>();
    let ats = col(6).as_primitive::<Int64Type>();
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        let id = ids.value(row);
        let state = match (kinds.value(row), values.is_valid(row)) {
            (0, false) => ValueState::Absent,
            (1, false) => ValueState::Null,
            (2, true) => ValueState::Int64(values.value(row)),
            (k, v) => {
                return Err(RemoteError::malformed(
                    WHAT,
                    format!(
                        "activation {id} has state kind {k} with a value {}",
                        if v { "present" } else { "absent" }
                    ),
                ))
            }
        };
        let callback = if names.is_valid(row) {
            if !ats.is_valid(row) {
                return Err(RemoteError::malformed(
                    WHAT,
                    format!("timer activation {id} has no timer_at"),
                ));
            }
            ProcessCallback::Timer {
                name: names.value(row).to_string(),
                at_ms: ats.value(row),
            }
        } else {
            let columns: Vec<ArrayRef> = batch.columns()[FIXED..]
                .iter()
                .map(|c| c.slice(row, 1))
                .collect();
            let row_batch = RecordBatch::try_new(Arc::clone(input), columns).map_err(|e| {
                RemoteError::malformed(WHAT, format!("input row of activation {id}: {e}"))
            })?;
            ProcessCallback::Input(row_batch)
        };
        out.push(ProcessActivation {
            id,
            key: keys.value(row).to_vec(),
            state,
            watermark: watermarks.value(row),
            callback,
        });
    }
    Ok(out)
}
