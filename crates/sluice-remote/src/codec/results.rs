//! A call's results as four record batches.
//!
//! * results: `activation_id` UInt64, one row per result in order;
//! * mutations: `result` UInt32 (index into results), `kind` UInt8 (0 set,
//!   1 clear), `value` Int64 nullable (a set's value; null sets a present
//!   null);
//! * timers: `result` UInt32, `op` UInt8 (0 set, 1 delete), `name` Utf8,
//!   `at_ms` Int64 nullable (a set's time);
//! * output: `result` UInt32, then the output columns (`out.<name>`), one
//!   row per output row, in result order.
//!
//! Rows of the last three are grouped by result in increasing order; the
//! decoder refuses anything else, so one result's items are always one
//! contiguous run.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Int64Array, StringArray, UInt32Array, UInt64Array, UInt8Array,
};
use arrow::datatypes::{
    DataType, Field, Int64Type, Schema, SchemaRef, UInt32Type, UInt64Type, UInt8Type,
};
use arrow::record_batch::RecordBatch;
use sluice_engine::process::{ProcessActivationResult, TimerOperation, ValueMutation};

use crate::error::{RemoteError, Result};

/// The four batches of one call's results.
pub struct ResultBatches {
    /// One row per result.
    pub results: RecordBatch,
    /// State mutations.
    pub mutations: RecordBatch,
    /// Timer operations.
    pub timers: RecordBatch,
    /// Output rows.
    pub output: RecordBatch,
}

/// Schema of the results batch.
pub fn results_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        "activation_id",
        DataType::UInt64,
        false,
    )]))
}

/// Schema of the mutations batch.
pub fn mutations_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("result", DataType::UInt32, false),
        Field::new("kind", DataType::UInt8, false),
        Field::new("value", DataType::Int64, true),
    ]))
}

/// Schema of the timers batch.
pub fn timers_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("result", DataType::UInt32, false),
        Field::new("op", DataType::UInt8, false),
        Field::new("name", DataType::Utf8, false),
        Field::new("at_ms", DataType::Int64, true),
    ]))
}

/// Schema of the output batch for a function writing `output`.
pub fn output_schema(output: &Schema) -> SchemaRef {
    let mut fields = vec![Field::new("result", DataType::UInt32, false)];
    fields.extend(output.fields().iter().map(|f| {
        Field::new(
            format!("out.{}", f.name()),
            f.data_type().clone(),
            f.is_nullable(),
        )
    }));
    Arc::new(Schema::new(fields))
}

fn built(
    what: &str,
    r: std::result::Result<RecordBatch, arrow::error::ArrowError>,
) -> Result<RecordBatch> {
    r.map_err(|source| RemoteError::Ipc {
        what: format!("building the {what} batch"),
        source,
    })
}

fn index(i: usize) -> Result<u32> {
    u32::try_from(i)
        .map_err(|_| RemoteError::limit("results in one call", i as u64, u64::from(u32::MAX)))
}

/// Encode a handler's results for a function writing `output`.
pub fn encode(output: &SchemaRef, results: &[ProcessActivationResult]) -> Result<ResultBatches> {
    let ids = UInt64Array::from_iter_values(results.iter().map(|r| r.activation_id));
    let results_batch = built(
        "results",
        RecordBatch::try_new(results_schema(), vec![Arc::new(ids)]),
    )?;

    let (mut m_result, mut m_kind, mut m_value) = (Vec::new(), Vec::new(), Vec::new());
    let (mut t_result, mut t_op, mut t_name, mut t_at) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut o_result = Vec::new();
    let mut o_batches = Vec::new();
    for (i, r) in results.iter().enumerate() {
        let i = index(i)?;
        for m in &r.mutations {
            m_result.push(i);
            let (kind, value) = match m {
                ValueMutation::Set(v) => (0u8, *v),
                ValueMutation::Clear => (1, None),
            };
            m_kind.push(kind);
            m_value.push(value);
        }
        for t in &r.timers {
            t_result.push(i);
            let (op, name, at) = match t {
                TimerOperation::Set { name, at_ms } => (0u8, name.as_str(), Some(*at_ms)),
                TimerOperation::Delete { name } => (1, name.as_str(), None),
            };
            t_op.push(op);
            t_name.push(name);
            t_at.push(at);
        }
        if let Some(b) = &r.output {
            o_result.extend(std::iter::repeat_n(i, b.num_rows()));
            o_batches.push(b.clone());
        }
    }
    let mutations = built(
        "mutations",
        RecordBatch::try_new(
            mutations_schema(),
            vec![
                Arc::new(UInt32Array::from(m_result)),
                Arc::new(UInt8Array::from(m_kind)),
                Arc::new(Int64Array::from(m_value)),
            ],
        ),
    )?;
    let timers = built(
        "timers",
        RecordBatch::try_new(
            timers_schema(),
            vec![
                Arc::new(UInt32Array::from(t_result)),
                Arc::new(UInt8Array::from(t_op)),
                Arc::new(StringArray::from(t_name)),
                Arc::new(Int64Array::from(t_at)),
            ],
        ),
    )?;
    let rows = if o_batches.is_empty() {
        RecordBatch::new_empty(Arc::clone(output))
    } else {
        built("output", arrow::compute::concat_batches(output, &o_batches))?
    };
    let mut columns: Vec<ArrayRef> = vec![Arc::new(UInt32Array::from(o_result))];
    columns.extend(rows.columns().iter().cloned());
    let output = built(
        "output",
        RecordBatch::try_new(output_schema(output), columns),
    )?;
    Ok(ResultBatches {
        results: results_batch,
        mutations,
        timers,
        output,
    })
}

/// The contiguous run of rows of each result in `result_col` (which must be
/// non-decreasing and below `results`): `runs[i]` is `(start, len)`.
fn runs(what: &str, result_col: &UInt32Array, results: usize) -> Result<Vec<(usize, usize)>> {
    let mut runs = vec![(0usize, 0usize); results];
    let mut last = 0u32;
    for (row, r) in result_col.values().iter().copied().enumerate() {
        if r < last {
            return Err(RemoteError::malformed(what, format!("row {row} belongs to result {r} after a row of result {last}; rows must be grouped by result in order")));
        }
        last = r;
        let Some(run) = runs.get_mut(r as usize) else {
            return Err(RemoteError::malformed(
                what,
                format!("row {row} names result {r}, but the call has {results} results"),
            ));
        };
        if run.1 == 0 {
            run.0 = row;
        }
        run.1 += 1;
    }
    Ok(runs)
}

/// Decode the four batches (already checked against their schemas) into
/// results for a function writing `output`.
pub fn decode(output: &SchemaRef, b: &ResultBatches) -> Result<Vec<ProcessActivationResult>> {
    let ids = b.results.column(0).as_primitive::<UInt64Type>();
    let n = ids.len();
    let mut results: Vec<ProcessActivationResult> = ids
        .values()
        .iter()
        .map(|&id| ProcessActivationResult {
            activation_id: id,
            ..Default::default()
        })
        .collect();

    let m_result = b.mutations.column(0).as_primitive::<UInt32Type>();
    let m_kind = b.mutations.column(1).as_primitive::<UInt8Type>();
    let m_value = b.mutations.column(2).as_primitive::<Int64Type>();
    runs("mutations", m_result, n)?;
    for row in 0..b.mutations.num_rows() {
        let m = match m_kind.value(row) {
            0 => ValueMutation::Set(m_value.is_valid(row).then(|| m_value.value(row))),
            1 if m_value.is_null(row) => ValueMutation::Clear,
            k => {
                return Err(RemoteError::malformed(
                    "mutations",
                    format!(
                        "row {row} has kind {k}{}",
                        if k == 1 { " with a value" } else { "" }
                    ),
                ))
            }
        };
        if let Some(r) = results.get_mut(m_result.value(row) as usize) {
            r.mutations.push(m);
        }
    }

    let t_result = b.timers.column(0).as_primitive::<UInt32Type>();
    let t_op = b.timers.column(1).as_primitive::<UInt8Type>();
    let t_name = b.timers.column(2).as_string::<i32>();
    let t_at = b.timers.column(3).as_primitive::<Int64Type>();
    runs("timers", t_result, n)?;
    for row in 0..b.timers.num_rows() {
        let name = t_name.value(row).to_string();
        let t = match (t_op.value(row), t_at.is_valid(row)) {
            (0, true) => TimerOperation::Set {
                name,
                at_ms: t_at.value(row),
            },
            (1, false) => TimerOperation::Delete { name },
            (op, _) => {
                return Err(RemoteError::malformed(
                    "timers",
                    format!(
                        "row {row} has op {op} {} a time",
                        if t_at.is_valid(row) {
                            "with"
                        } else {
                            "without"
                        }
                    ),
                ))
            }
        };
        if let Some(r) = results.get_mut(t_result.value(row) as usize) {
            r.timers.push(t);
        }
    }

    let o_result = b.output.column(0).as_primitive::<UInt32Type>();
    let output_runs = runs("output", o_result, n)?;
    let columns: Vec<ArrayRef> = b.output.columns().iter().skip(1).cloned().collect();
    for (r, (start, len)) in results.iter_mut().zip(output_runs) {
        if len == 0 {
            continue;
        }
        let cols: Vec<ArrayRef> = columns.iter().map(|c| c.slice(start, len)).collect();
        let batch = RecordBatch::try_new(Arc::clone(output), cols)
            .map_err(|e| RemoteError::malformed("output", e.to_string()))?;
        r.output = Some(batch);
    }
    Ok(results)
}
