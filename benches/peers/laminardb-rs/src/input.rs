//! Loading the CSV inputs into Arrow batches before the clock starts, and
//! the order in which they are pushed.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::compute::{cast, max};
use arrow::datatypes::{DataType, SchemaRef, TimeUnit};

use crate::error::{BenchError, Result};

/// Rows per pushed batch (what the Python driver gave pyarrow).
pub const BATCH_ROWS: usize = 8_192;

/// Read `path` into batches of exactly `schema` (LaminarDB's source
/// schema: `push_arrow` refuses any other), checking first that the
/// header names the schema's columns in order, since the reader itself
/// maps columns by position.
pub fn load_csv(path: &Path, schema: &SchemaRef) -> Result<Vec<RecordBatch>> {
    let io = |e: std::io::Error| BenchError::Csv {
        path: path.to_path_buf(),
        source: e.into(),
    };
    let mut header = String::new();
    BufReader::new(File::open(path).map_err(io)?)
        .read_line(&mut header)
        .map_err(io)?;
    let found: Vec<String> = header
        .trim_end_matches(['\r', '\n'])
        .split(',')
        .map(str::to_string)
        .collect();
    let expected: Vec<String> = schema.fields().iter().map(|f| f.name().clone()).collect();
    if found != expected {
        return Err(BenchError::Header {
            path: path.to_path_buf(),
            found,
            expected,
        });
    }
    let csv = |e| BenchError::Csv {
        path: path.to_path_buf(),
        source: e,
    };
    arrow::csv::ReaderBuilder::new(schema.clone())
        .with_header(true)
        .with_batch_size(BATCH_ROWS)
        .build(File::open(path).map_err(io)?)
        .map_err(csv)?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(csv)
}

/// One push: the index of its source and the batch.
pub type Push = (usize, RecordBatch);

/// Every source's batches in file order, source after source.
pub fn in_file_order(per_source: Vec<Vec<RecordBatch>>) -> Vec<Push> {
    per_source
        .into_iter()
        .enumerate()
        .flat_map(|(i, batches)| batches.into_iter().map(move |b| (i, b)))
        .collect()
}

/// All sources' batches merged by each batch's largest `column` value
/// (stable, so ties keep source and file order): the streams arrive
/// interleaved roughly as they were generated, the order the Python
/// driver used for the joins.
pub fn interleaved(per_source: Vec<Vec<RecordBatch>>, column: &str) -> Result<Vec<Push>> {
    let mut keyed = Vec::new();
    for (i, batch) in in_file_order(per_source) {
        keyed.push((largest(&batch, column)?, (i, batch)));
    }
    keyed.sort_by_key(|(key, _)| *key);
    Ok(keyed.into_iter().map(|(_, push)| push).collect())
}

/// One row that ends a source's input: its last row with `column` moved
/// one day past the largest value in `batches` (`None` without rows).
///
/// LaminarDB's watermark follows the event times in the data, so the
/// windows still open at the end of the input close only when a later
/// event arrives; an external watermark on the handle races with the
/// batches still queued (it dropped the last of them as late) and is
/// ignored when more than 5 minutes past the wall clock. This row's own
/// windows never close (the watermark stays behind it), so it appears in
/// no windowed result, and its row is not counted as input.
pub fn end_sentinel(batches: &[RecordBatch], column: &str) -> Result<Option<RecordBatch>> {
    let bad = |message: String| BenchError::Interleave {
        column: column.to_string(),
        message,
    };
    let mut end = None;
    for batch in batches {
        end = end.max(largest(batch, column)?);
    }
    let (Some(end), Some(last)) = (end, batches.iter().rev().find(|b| b.num_rows() > 0)) else {
        return Ok(None);
    };
    let index = last
        .schema()
        .index_of(column)
        .map_err(|e| bad(e.to_string()))?;
    let data_type = last.schema().field(index).data_type().clone();
    let day = match &data_type {
        DataType::Timestamp(TimeUnit::Second, _) => 86_400,
        DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Int64 => 86_400_000,
        DataType::Timestamp(TimeUnit::Microsecond, _) => 86_400_000_000,
        DataType::Timestamp(TimeUnit::Nanosecond, _) => 86_400_000_000_000,
        other => {
            return Err(bad(format!(
                "cannot end a {other} column with a later event"
            )))
        }
    };
    let time = Int64Array::from(vec![end.saturating_add(day)]);
    let time = cast(&time, &data_type).map_err(|e| bad(e.to_string()))?;
    let mut columns = last.slice(last.num_rows() - 1, 1).columns().to_vec();
    columns[index] = time;
    RecordBatch::try_new(last.schema(), columns)
        .map(Some)
        .map_err(|e| bad(e.to_string()))
}

fn largest(batch: &RecordBatch, column: &str) -> Result<Option<i64>> {
    let bad = |message: String| BenchError::Interleave {
        column: column.to_string(),
        message,
    };
    let values = batch
        .column_by_name(column)
        .ok_or_else(|| bad("no such column in a source".into()))?;
    // Timestamps and integers alike, as their i64 representation.
    let as_i64 = cast(values, &DataType::Int64).map_err(|e| bad(e.to_string()))?;
    let ints = as_i64
        .as_any()
        .downcast_ref::<Int64Array>()
        .ok_or_else(|| bad("did not cast to BIGINT".into()))?;
    Ok(max(ints))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    fn batch(ts: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            true,
        )]));
        RecordBatch::try_new(
            schema,
            vec![Arc::new(TimestampMillisecondArray::from(ts.to_vec()))],
        )
        .expect("batch")
    }

    fn first_values(pushes: &[Push]) -> Vec<(usize, i64)> {
        pushes
            .iter()
            .map(|(i, b)| {
                let v = cast(b.column(0), &DataType::Int64).expect("cast");
                let v = v.as_any().downcast_ref::<Int64Array>().expect("i64");
                (*i, v.value(0))
            })
            .collect()
    }

    #[test]
    fn the_end_sentinel_is_the_last_row_a_day_after_the_latest_event() {
        let batches = vec![batch(&[5, 90]), batch(&[7, 3]), batch(&[])];
        let end = end_sentinel(&batches, "date_time")
            .expect("sentinel")
            .expect("rows");
        assert_eq!(first_values(&[(0, end)]), vec![(0, 90 + 86_400_000)]);
        assert!(end_sentinel(&[batch(&[])], "date_time")
            .expect("no rows")
            .is_none());
    }

    #[test]
    fn interleaves_by_each_batch_largest_time_stably() {
        let a = vec![batch(&[5, 1]), batch(&[9]), batch(&[20])];
        let b = vec![batch(&[2, 3]), batch(&[9, 8]), batch(&[15])];
        let pushes = interleaved(vec![a, b], "date_time").expect("interleave");
        // Keys: a = 5, 9, 20; b = 3, 9, 15; the tie at 9 keeps a first.
        assert_eq!(
            first_values(&pushes),
            vec![(1, 2), (0, 5), (0, 9), (1, 9), (1, 15), (0, 20)]
        );
    }

    #[test]
    fn file_order_is_source_after_source() {
        let pushes = in_file_order(vec![vec![batch(&[7]), batch(&[1])], vec![batch(&[3])]]);
        assert_eq!(first_values(&pushes), vec![(0, 7), (0, 1), (1, 3)]);
    }

    #[test]
    fn interleave_column_must_exist() {
        let err = interleaved(vec![vec![batch(&[1])]], "ts").expect_err("no column ts");
        assert_eq!(
            err.to_string(),
            "--interleave-by ts: no such column in a source [SLC-LDB-007]"
        );
    }

    fn schema() -> SchemaRef {
        Arc::new(Schema::new(vec![
            Field::new("auction", DataType::Int64, true),
            Field::new(
                "date_time",
                DataType::Timestamp(TimeUnit::Microsecond, None),
                true,
            ),
        ]))
    }

    fn write(name: &str, text: &str) -> std::path::PathBuf {
        let path =
            std::env::temp_dir().join(format!("laminardb-bench-{}-{name}", std::process::id()));
        std::fs::write(&path, text).expect("write");
        path
    }

    #[test]
    fn loads_sluice_csv_timestamps_into_the_source_schema() {
        let path = write(
            "ok.csv",
            "auction,date_time\n1,2015-07-15 00:00:00.001\n2,2015-07-15 00:00:01.250\n",
        );
        let batches = load_csv(&path, &schema()).expect("load");
        std::fs::remove_file(&path).expect("remove");
        assert_eq!(batches.len(), 1);
        assert_eq!(batches[0].schema(), schema());
        let ts = cast(batches[0].column(1), &DataType::Int64).expect("cast");
        let ts = ts.as_any().downcast_ref::<Int64Array>().expect("i64");
        assert_eq!(
            ts.values().to_vec(),
            vec![1_436_918_400_001_000, 1_436_918_401_250_000]
        );
    }

    #[test]
    fn refuses_a_header_in_another_order() {
        let path = write("bad.csv", "date_time,auction\n2015-07-15 00:00:00.001,1\n");
        let err = load_csv(&path, &schema()).expect_err("columns swapped");
        std::fs::remove_file(&path).expect("remove");
        assert!(
            matches!(err, BenchError::Header { ref found, .. } if found == &["date_time", "auction"])
        );
    }
}
