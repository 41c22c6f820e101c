//! End-to-end latency: from the moment an input batch is handed to
//! `push()` to the moment the subscriber receives the output it caused.
//!
//! Outputs are attributed to inputs without any marker travelling through
//! the query:
//!
//! * **Windowed outputs** (a `window_end` column): a window's rows become
//!   final when the source's watermark (largest event time so far minus the
//!   declared delay) reaches the window end. They are attributed to the
//!   first pushed batch after which that holds, which is exactly the input
//!   that closed the window. Windows closed by the end of input rather than
//!   by a pushed batch are counted as unattributed.
//! * **Row-for-row outputs** (projections and filters): the output is an
//!   order-preserving subsequence of the input, so each output row is
//!   matched to the next input row with equal values in the columns both
//!   share (same name and type), compared in Arrow's row format. Exact for
//!   projections; for a filter a skipped input row can only be taken for a
//!   match when it has equal values in every shared column.
//!
//! Other outputs (changelogs, aggregates without windows) are not measured.

use std::time::Instant;

use arrow::array::AsArray;
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type, SchemaRef};
use arrow::record_batch::RecordBatch;
use arrow::row::{RowConverter, Rows, SortField};
use serde::Serialize;

use crate::error::Result;

/// How output rows are tied to the input batches that caused them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attribution {
    /// By the `window_end` column (index in the output) against the watermark.
    Watermark {
        /// `window_end` column in the output.
        column: usize,
        /// Event-time column in the input.
        time_column: usize,
        /// The source's watermark delay.
        delay_ms: i64,
    },
    /// By matching rows on the columns input and output share.
    RowMatch {
        /// Shared columns in the input.
        input: Vec<usize>,
        /// The same columns in the output.
        output: Vec<usize>,
    },
}

impl Attribution {
    /// How to attribute a query's outputs, if it can be done.
    pub fn for_query(
        input: &SchemaRef,
        output: &SchemaRef,
        watermark: Option<(&str, i64)>,
    ) -> Option<Attribution> {
        if let (Ok(column), Some((time, delay_ms))) = (output.index_of("window_end"), watermark) {
            return input
                .index_of(time)
                .ok()
                .map(|time_column| Attribution::Watermark {
                    column,
                    time_column,
                    delay_ms,
                });
        }
        let (inp, out): (Vec<usize>, Vec<usize>) = output
            .fields()
            .iter()
            .enumerate()
            .filter_map(|(o, f)| {
                let (i, g) = input.column_with_name(f.name())?;
                (g.data_type() == f.data_type()).then_some((i, o))
            })
            .unzip();
        (!inp.is_empty()).then_some(Attribution::RowMatch {
            input: inp,
            output: out,
        })
    }
}

/// Output rows received together.
#[derive(Debug)]
pub struct Delivery {
    /// When the subscriber received them.
    pub at: Instant,
    /// The rows.
    pub batch: RecordBatch,
}

/// Latency percentiles over output rows, in microseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
    /// Rows measured.
    pub samples: u64,
    /// Rows not attributable to a pushed batch (windows closed by the end
    /// of input, or rows without a matching input row).
    pub unattributed: u64,
}

fn ms_column(batch: &RecordBatch, column: usize) -> Result<Vec<Option<i64>>> {
    let ms = cast(batch.column(column), &DataType::Int64)?;
    Ok(ms.as_primitive::<Int64Type>().iter().collect())
}

/// Per-row latencies of `deliveries`, given the input `batches` and the
/// instant each was pushed.
pub fn percentiles(
    how: &Attribution,
    batches: &[RecordBatch],
    pushed: &[Instant],
    deliveries: &[Delivery],
) -> Result<Percentiles> {
    let mut lat_ns: Vec<u64> = Vec::new();
    let mut unattributed = 0u64;
    let mut record = |at: Instant, cause: Option<Instant>| match cause {
        Some(p) => lat_ns
            .push(u64::try_from(at.saturating_duration_since(p).as_nanos()).unwrap_or(u64::MAX)),
        None => unattributed += 1,
    };
    match how {
        Attribution::Watermark {
            column,
            time_column,
            delay_ms,
        } => {
            let mut max = i64::MIN;
            let mut running_max = Vec::with_capacity(batches.len());
            for b in batches {
                for t in ms_column(b, *time_column)?.into_iter().flatten() {
                    max = max.max(t);
                }
                running_max.push(max);
            }
            for d in deliveries {
                for end in ms_column(&d.batch, *column)? {
                    let cause = end.and_then(|e| {
                        let need = e.saturating_add(*delay_ms);
                        let i = running_max.partition_point(|m| *m < need);
                        pushed.get(i).copied()
                    });
                    record(d.at, cause);
                }
            }
        }
        Attribution::RowMatch { input, output } => {
            let fields: Vec<SortField> = input
                .iter()
                .filter_map(|i| {
                    batches
                        .first()
                        .map(|b| b.schema().field(*i).data_type().clone())
                })
                .map(SortField::new)
                .collect();
            let converter = RowConverter::new(fields)?;
            let encode = |b: &RecordBatch, cols: &[usize]| -> Result<Rows> {
                let arrays: Vec<_> = cols.iter().map(|c| b.column(*c).clone()).collect();
                Ok(converter.convert_columns(&arrays)?)
            };
            let inputs: Vec<Rows> = batches
                .iter()
                .map(|b| encode(b, input))
                .collect::<Result<_>>()?;
            // Cursor into the input: (batch, row).
            let (mut bi, mut ri) = (0usize, 0usize);
            for d in deliveries {
                let out = encode(&d.batch, output)?;
                for o in 0..out.num_rows() {
                    let want = out.row(o);
                    let (mut b, mut r) = (bi, ri);
                    let found = loop {
                        let Some(rows) = inputs.get(b) else {
                            break None;
                        };
                        if r >= rows.num_rows() {
                            b += 1;
                            r = 0;
                            continue;
                        }
                        if rows.row(r) == want {
                            break Some(b);
                        }
                        r += 1;
                    };
                    match found {
                        Some(b_found) => {
                            record(d.at, pushed.get(b_found).copied());
                            (bi, ri) = (b, r + 1);
                        }
                        None => record(d.at, None),
                    }
                }
            }
        }
    }
    lat_ns.sort_unstable();
    let pick = |q: f64| -> f64 {
        if lat_ns.is_empty() {
            return 0.0;
        }
        let idx = ((lat_ns.len() as f64 * q).ceil() as usize).clamp(1, lat_ns.len()) - 1;
        lat_ns[idx] as f64 / 1000.0
    };
    Ok(Percentiles {
        p50_us: pick(0.50),
        p99_us: pick(0.99),
        p999_us: pick(0.999),
        max_us: lat_ns.last().map_or(0.0, |v| *v as f64 / 1000.0),
        samples: lat_ns.len() as u64,
        unattributed,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use arrow::array::{Int64Array, TimestampMillisecondArray};
    use arrow::datatypes::{Field, Schema, TimeUnit};

    use super::*;

    fn input(times: &[i64], keys: &[i64]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new(
                "ts",
                DataType::Timestamp(TimeUnit::Millisecond, None),
                false,
            ),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(Int64Array::from(keys.to_vec())),
                Arc::new(TimestampMillisecondArray::from(times.to_vec())),
            ],
        )
        .expect("batch")
    }

    #[test]
    fn windows_are_attributed_to_the_batch_that_closed_them() {
        let t0 = Instant::now();
        let pushed: Vec<Instant> = (0..3).map(|i| t0 + Duration::from_millis(i * 10)).collect();
        let batches = [
            input(&[100], &[1]),
            input(&[200], &[1]),
            input(&[300], &[1]),
        ];
        let ends = Arc::new(Schema::new(vec![Field::new(
            "window_end",
            DataType::Int64,
            false,
        )]));
        let out = |v: Vec<i64>| {
            RecordBatch::try_new(Arc::clone(&ends), vec![Arc::new(Int64Array::from(v))])
                .expect("out")
        };
        let how =
            Attribution::for_query(&batches[0].schema(), &ends, Some(("ts", 50))).expect("how");
        let deliveries = vec![
            Delivery {
                at: t0 + Duration::from_millis(11),
                batch: out(vec![100, 150]),
            },
            Delivery {
                at: t0 + Duration::from_millis(40),
                batch: out(vec![200, 251]),
            },
        ];
        let p = percentiles(&how, &batches, &pushed, &deliveries).expect("percentiles");
        assert_eq!((p.samples, p.unattributed), (3, 1));
        assert_eq!(p.p50_us, 1000.0);
        assert_eq!(p.max_us, 20_000.0);
    }

    #[test]
    fn filtered_rows_are_matched_in_order() {
        let t0 = Instant::now();
        let pushed: Vec<Instant> = (0..2).map(|i| t0 + Duration::from_millis(i * 10)).collect();
        let batches = [input(&[1, 2, 3], &[7, 8, 7]), input(&[4, 5], &[8, 7])];
        // Keep k = 7: rows (7,1), (7,3) from batch 0 and (7,5) from batch 1.
        let kept = input(&[1, 3, 5], &[7, 7, 7]);
        let how = Attribution::for_query(&batches[0].schema(), &kept.schema(), Some(("ts", 0)))
            .expect("how");
        assert!(matches!(how, Attribution::RowMatch { .. }));
        let deliveries = vec![Delivery {
            at: t0 + Duration::from_millis(30),
            batch: kept,
        }];
        let p = percentiles(&how, &batches, &pushed, &deliveries).expect("percentiles");
        assert_eq!((p.samples, p.unattributed), (3, 0));
        assert_eq!(p.p50_us, 30_000.0);
        assert_eq!(p.max_us, 30_000.0);
        let p999 = p.p999_us;
        assert_eq!(p999, 30_000.0);
        let min_is_batch_1 = percentiles(
            &how,
            &batches,
            &pushed,
            &[Delivery {
                at: t0 + Duration::from_millis(30),
                batch: input(&[5], &[7]),
            }],
        )
        .expect("p");
        assert_eq!(min_is_batch_1.p50_us, 20_000.0);
    }
}
