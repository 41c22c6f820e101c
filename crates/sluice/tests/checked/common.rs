//! A one-source pipeline run to completion with a timeout.

use std::sync::Arc;
use std::time::Duration;

use sluice::arrow::array::{
    ArrayRef, Decimal128Array, Int64Array, TimestampMillisecondArray, UInt64Array,
};
use sluice::arrow::compute::cast;
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::display::array_value_to_string;
use sluice::{Database, Error};

/// Every integer type SQL can declare: (SQL name, Arrow type, min, max).
pub const INTEGER_TYPES: [(&str, DataType, i128, i128); 8] = [
    ("TINYINT", DataType::Int8, i8::MIN as i128, i8::MAX as i128),
    (
        "SMALLINT",
        DataType::Int16,
        i16::MIN as i128,
        i16::MAX as i128,
    ),
    ("INT", DataType::Int32, i32::MIN as i128, i32::MAX as i128),
    (
        "BIGINT",
        DataType::Int64,
        i64::MIN as i128,
        i64::MAX as i128,
    ),
    ("TINYINT UNSIGNED", DataType::UInt8, 0, u8::MAX as i128),
    ("SMALLINT UNSIGNED", DataType::UInt16, 0, u16::MAX as i128),
    ("INT UNSIGNED", DataType::UInt32, 0, u32::MAX as i128),
    ("BIGINT UNSIGNED", DataType::UInt64, 0, u64::MAX as i128),
];

/// A column of `dt` holding `values` (each within the type's range; for a
/// DECIMAL, unscaled values).
pub fn int_column(dt: &DataType, values: &[i128]) -> ArrayRef {
    if let DataType::Decimal128(precision, scale) = dt {
        return Arc::new(
            Decimal128Array::from_iter_values(values.iter().copied())
                .with_precision_and_scale(*precision, *scale)
                .unwrap(),
        );
    }
    let wide: ArrayRef = if dt.is_unsigned_integer() {
        Arc::new(UInt64Array::from_iter_values(
            values.iter().map(|v| u64::try_from(*v).unwrap()),
        ))
    } else {
        Arc::new(Int64Array::from_iter_values(
            values.iter().map(|v| i64::try_from(*v).unwrap()),
        ))
    };
    cast(&wide, dt).unwrap()
}

/// Rows `(k, v, w, ts)` of source `s`, `v` and `w` of type `dt`.
pub fn batch(dt: &DataType, rows: &[(i64, i128, i128, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", dt.clone(), true),
        Field::new("w", dt.clone(), true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let col = |f: fn(&(i64, i128, i128, i64)) -> i128| {
        int_column(dt, &rows.iter().map(f).collect::<Vec<_>>())
    };
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            col(|r| r.1),
            col(|r| r.2),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.3),
            )),
        ],
    )
    .unwrap()
}

/// Declare `s (k BIGINT, v <ty>, w <ty>, ts TIMESTAMP)` with `watermark`,
/// run `statements`, push `batches`, finish, run to completion (30 s at
/// most), and return the view `out` as text rows, sorted.
pub async fn run(
    ty: &str,
    watermark: &str,
    statements: &[&str],
    batches: Vec<RecordBatch>,
) -> Result<Vec<String>, Error> {
    let db = Database::open_in_memory().await?;
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        db.execute(&format!(
            "CREATE SOURCE s (k BIGINT, v {ty}, w {ty}, ts TIMESTAMP, WATERMARK FOR ts AS {watermark})"
        ))
        .await?;
        for s in statements {
            db.execute(s).await?;
        }
        let src = db.source("s").await?;
        // After a halt, pushing is refused; the halt itself is what
        // `run_to_completion` reports.
        for b in batches {
            if src.push(b).await.is_err() {
                break;
            }
        }
        src.finish().await.ok();
        db.run_to_completion().await?;
        select(&db, "SELECT * FROM out").await
    })
    .await
    .expect("the pipeline finished within 30 s");
    db.shutdown().await.ok();
    outcome
}

/// Rows of a one-shot query as `a|b|c` text, sorted.
pub async fn select(db: &Database, sql: &str) -> Result<Vec<String>, Error> {
    let batches = db.execute(sql).await?;
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            let cells: Vec<String> = b
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, r).unwrap())
                .collect();
            rows.push(cells.join("|"));
        }
    }
    rows.sort();
    Ok(rows)
}

/// The halt a cycle error turns into, with its code and message.
pub fn halted(r: Result<Vec<String>, Error>) -> (String, String) {
    let e = r.expect_err("the pipeline must fail");
    assert!(matches!(e, Error::Halted { .. }), "{e}");
    (e.code().to_string(), e.to_string())
}

/// Every streaming aggregation `SUM(v) AS total` can run in.
pub const AGGREGATIONS: [(&str, &[&str]); 5] = [
    (
        "updating GROUP BY",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, SUM(v) AS total FROM s GROUP BY k"],
    ),
    (
        "tumble window",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, tumble(ts, INTERVAL '10' SECOND) AS ws, SUM(v) AS total FROM s GROUP BY k, tumble(ts, INTERVAL '10' SECOND)"],
    ),
    (
        "hop window",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, hop(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND) AS ws, SUM(v) AS total FROM s GROUP BY k, hop(ts, INTERVAL '5' SECOND, INTERVAL '10' SECOND)"],
    ),
    (
        "session window",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, session(ts, INTERVAL '10' SECOND) AS ss, SUM(v) AS total FROM s GROUP BY k, session(ts, INTERVAL '10' SECOND)"],
    ),
    (
        "tumble window, EMIT CHANGES",
        &["CREATE MATERIALIZED VIEW out AS SELECT k, tumble(ts, INTERVAL '10' SECOND) AS ws, SUM(v) AS total FROM s GROUP BY k, tumble(ts, INTERVAL '10' SECOND) EMIT CHANGES"],
    ),
];
