//! The batch oracle: DataFusion over the on-time rows.

use std::sync::Arc;

use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use sluice::arrow::array::{ArrayRef, Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;

use crate::common::{rows, Event, Row};

/// A table of events with `key`, `ts` (TIMESTAMP), `ts_ms` (BIGINT), `value`,
/// and extra BIGINT columns (one value per event each).
pub fn table(events: &[Event], extra: &[(&str, Vec<i64>)]) -> RecordBatch {
    let mut fields = vec![
        Field::new("key", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("ts_ms", DataType::Int64, true),
        Field::new("value", DataType::Int64, true),
    ];
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from_iter_values(events.iter().map(|e| e.key))),
        Arc::new(TimestampMillisecondArray::from_iter(
            events.iter().map(|e| e.ts),
        )),
        Arc::new(Int64Array::from_iter(events.iter().map(|e| e.ts))),
        Arc::new(Int64Array::from_iter(events.iter().map(|e| e.value))),
    ];
    for (name, values) in extra {
        assert_eq!(values.len(), events.len(), "extra column {name}");
        fields.push(Field::new(*name, DataType::Int64, true));
        cols.push(Arc::new(Int64Array::from(values.clone())));
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), cols).expect("oracle table")
}

/// A one-column BIGINT table `k` with the values `0..n`.
pub fn offsets(n: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, false)]));
    RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from_iter_values(0..n))])
        .expect("offsets table")
}

/// Run `sql` over the given tables in batch, with Sluice's window UDFs
/// registered (tumble is evaluable row by row), and return the sorted rows.
pub async fn query(tables: &[(&str, RecordBatch)], sql: &str) -> Vec<Row> {
    let ctx = SessionContext::new();
    for udf in sluice_sql::window_udf::window_udfs() {
        ctx.register_udf(udf);
    }
    for (name, batch) in tables {
        let t = MemTable::try_new(batch.schema(), vec![vec![batch.clone()]]).expect("mem table");
        ctx.register_table(*name, Arc::new(t)).expect("register");
    }
    let frame = ctx
        .sql(sql)
        .await
        .unwrap_or_else(|e| panic!("oracle query failed: {e}\n{sql}"));
    let out = frame
        .collect()
        .await
        .unwrap_or_else(|e| panic!("oracle query failed: {e}\n{sql}"));
    rows(&out)
}
