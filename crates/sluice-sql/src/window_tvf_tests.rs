//! The rewrite of window TVFs, seen in the planned stream.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef};

use crate::{parse_sql, PlanCatalog, Statement, StreamPlanner};

/// A source `t` whose event time is BIGINT milliseconds.
struct MillisSource(SchemaRef);

impl PlanCatalog for MillisSource {
    fn relation_names(&self) -> Vec<String> {
        vec!["t".into()]
    }

    fn relation(&self, name: &str) -> Option<(SchemaRef, bool)> {
        (name == "t").then(|| (Arc::clone(&self.0), false))
    }
}

/// On a BIGINT time column `window_time` is `window_end - 1` (no interval
/// arithmetic), and the window columns keep their names.
#[tokio::test]
async fn window_time_on_bigint_milliseconds() {
    let cat = MillisSource(Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Int64, true),
    ])));
    let sql = "CREATE STREAM x AS SELECT k, window_time, COUNT(*) AS n \
               FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), 10000)) \
               GROUP BY k, window_start, window_end";
    let Some(Statement::CreateStream(cs)) = parse_sql(sql).unwrap().pop() else {
        panic!("not a stream")
    };
    let plan = StreamPlanner::plan_stream(&cat, &cs).await.unwrap();
    let names: Vec<&str> = plan
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(names, ["k", "window_time", "n"]);
    assert_eq!(plan.schema.field(1).data_type(), &DataType::Int64);
    let text = plan.root.to_string();
    assert!(
        text.contains("tumble_end(t.ts,Int64(10000)) - Int64(1) AS window_time"),
        "{text}"
    );
}
