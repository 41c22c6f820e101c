//! Every aggregate DataFusion registers, called on a VARCHAR column, is
//! either planned or refused as a user error, never an internal one.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::{parse_sql, PlanCatalog, SqlError, Statement, StreamPlanner};

struct OneSource(SchemaRef);

impl PlanCatalog for OneSource {
    fn relation_names(&self) -> Vec<String> {
        vec!["t".into()]
    }

    fn relation(&self, name: &str) -> Option<(SchemaRef, bool)> {
        (name == "t").then(|| (Arc::clone(&self.0), false))
    }

    fn time_columns(&self, name: &str) -> Vec<(String, i64)> {
        if name == "t" {
            vec![("ts".into(), 0)]
        } else {
            vec![]
        }
    }
}

fn catalog() -> OneSource {
    OneSource(Arc::new(Schema::new(vec![
        Field::new("v", DataType::Utf8, true),
        Field::new("n", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ])))
}

async fn plan(cat: &OneSource, sql: &str) -> Result<(), SqlError> {
    let stmt = parse_sql(sql)?.pop();
    let Some(Statement::CreateStream(cs)) = stmt else {
        panic!("not a stream: {sql}")
    };
    StreamPlanner::plan_stream(cat, &cs).await.map(|_| ())
}

/// Codes of errors that are the user's to fix.
const USER_CODES: &[&str] = &["SLC-SQL-002", "SLC-SQL-003", "SLC-SQL-004", "SLC-SQL-006"];

fn assert_user_error(sql: &str, e: &SqlError) {
    let msg = e.to_string();
    assert!(USER_CODES.contains(&e.code()), "{sql}: {} {msg}", e.code());
    for internal in ["Internal error", "internal error", "bug in DataFusion"] {
        assert!(!msg.contains(internal), "{sql} reads as a bug: {msg}");
    }
}

#[tokio::test]
async fn every_registered_aggregate_over_varchar_is_planned_or_a_user_error() {
    let cat = catalog();
    let ctx = StreamPlanner::session(&cat).unwrap();
    let mut names: Vec<String> = ctx.state().aggregate_functions().keys().cloned().collect();
    names.sort();
    assert!(
        names.len() > 20,
        "the registry lists the aggregates: {names:?}"
    );
    assert!(names.iter().any(|n| n == "sum"));
    let (mut accepted, mut refused) = (0, 0);
    for name in &names {
        for args in ["v", "v, v", "v, 0.5", ""] {
            for group in ["", " GROUP BY tumble(ts, INTERVAL '1' SECOND)"] {
                let sql = format!("CREATE STREAM x AS SELECT {name}({args}) AS r FROM t{group}");
                match plan(&cat, &sql).await {
                    Ok(()) => accepted += 1,
                    Err(e) => {
                        assert_user_error(&sql, &e);
                        refused += 1;
                    }
                }
            }
        }
    }
    assert!(
        accepted > 0 && refused > 0,
        "{accepted} accepted, {refused} refused"
    );
}

#[tokio::test]
async fn sum_of_varchar_names_the_function_and_the_argument_type() {
    let cat = catalog();
    for group in ["", " GROUP BY tumble(ts, INTERVAL '1' SECOND)"] {
        let sql = format!("CREATE STREAM x AS SELECT SUM(v) AS r FROM t{group}");
        let e = plan(&cat, &sql).await.unwrap_err();
        assert_eq!(e.code(), "SLC-SQL-004", "{e}");
        assert!(matches!(e, SqlError::Signature { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "type error: function sum(VARCHAR) cannot take these argument types (it takes sum(DECIMAL), sum(BIGINT UNSIGNED), sum(BIGINT), sum(DOUBLE), sum(Duration), sum(Interval)); CAST the arguments to a type it takes"
        );
    }
}
