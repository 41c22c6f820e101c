//! Every scalar function in DataFusion's registry, in a projection, a
//! filter and an aggregate argument of a continuous query: either refused
//! at `CREATE` with an error naming it, or run on a pushed batch with
//! exactly the batch `SELECT`'s result, the pipeline still running after.
//!
//! The functions are enumerated from the session, not listed, so a function
//! a DataFusion upgrade adds is covered; their arguments are derived from
//! each signature ([`crate::scalar_candidates`]) and kept where DataFusion's
//! own batch `SELECT` over the same rows runs them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use datafusion::datasource::MemTable;
use datafusion::logical_expr::Volatility;
use datafusion::prelude::SessionContext;
use sluice::arrow::array::{
    ArrayRef, BooleanArray, Date32Array, Decimal128Array, Float64Array, Int32Array, Int64Array,
    StringArray, TimestampMillisecondArray,
};
use sluice::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::display::array_value_to_string;
use sluice::Database;

use crate::common::PATIENCE;
use crate::scalar_candidates::{candidates, pool, SOURCE_COLUMNS};

/// Valid calls run through Sluice per function (more only cost time).
const CALLS_PER_FUNCTION: usize = 2;
/// Candidate lists tried in batch per function before giving up.
const TRIES_PER_FUNCTION: usize = 600;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("n", DataType::Int32, true),
        Field::new("f", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("w", DataType::Utf8, true),
        Field::new("b", DataType::Boolean, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
        Field::new("dec", DataType::Decimal128(10, 2), true),
    ]))
}

/// Four rows, one of them all NULL.
fn rows() -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![Some(3), Some(-2), None, Some(42)])),
        Arc::new(Int32Array::from(vec![Some(1), Some(-2), None, Some(7)])),
        Arc::new(Float64Array::from(vec![
            Some(1.5),
            Some(-0.25),
            None,
            Some(100.0),
        ])),
        Arc::new(StringArray::from(vec![
            Some("2024-01-02"),
            Some("2023-12-31"),
            None,
            Some("1999-07-04"),
        ])),
        Arc::new(StringArray::from(vec![
            Some("Hello World"),
            Some("abc"),
            None,
            Some("ÄÖü x"),
        ])),
        Arc::new(BooleanArray::from(vec![
            Some(true),
            Some(false),
            None,
            Some(true),
        ])),
        Arc::new(Date32Array::from(vec![
            Some(19724),
            Some(0),
            None,
            Some(-365),
        ])),
        Arc::new(TimestampMillisecondArray::from(vec![
            Some(1_700_000_000_000),
            Some(0),
            None,
            Some(86_400_000),
        ])),
        Arc::new(
            Decimal128Array::from(vec![Some(12345), Some(-50), None, Some(0)])
                .with_precision_and_scale(10, 2)
                .expect("decimal"),
        ),
    ];
    RecordBatch::try_new(schema(), cols).expect("rows")
}

/// A result as comparable text: column types, then sorted rows.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Output {
    types: Vec<DataType>,
    rows: Vec<String>,
}

fn output(batches: &[RecordBatch], schema: &Schema) -> Result<Output, String> {
    let mut rows = Vec::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let cells = b
                .columns()
                .iter()
                .map(|c| array_value_to_string(c, r).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, _>>()?;
            rows.push(cells.join(" | "));
        }
    }
    rows.sort();
    Ok(Output {
        types: schema
            .fields()
            .iter()
            .map(|f| f.data_type().clone())
            .collect(),
        rows,
    })
}

/// Some(true) when the column types are equal; Some(false) when they
/// differ only in a DECIMAL's precision (same scale, so the same values
/// print the same). A continuous query is planned without DataFusion's
/// optimizer, so a literal argument coerced by a CAST (`round(dec, 2)`)
/// stays a CAST, and a function that sizes its result from literal
/// arguments chooses the wider type; the values are the same.
fn same_types(got: &[DataType], want: &[DataType]) -> Option<bool> {
    if got == want {
        return Some(true);
    }
    let wider = got.len() == want.len()
        && got.iter().zip(want).all(|(g, w)| match (g, w) {
            (DataType::Decimal128(_, gs), DataType::Decimal128(_, ws)) => gs == ws,
            _ => g == w,
        });
    wider.then_some(false)
}

/// A query in one of the three positions, over relation `rel`.
#[derive(Debug, Clone, Copy)]
enum Position {
    Projection,
    Filter,
    /// Inside an aggregate's argument (falling back to `COUNT` alone when
    /// the value does not cast to VARCHAR).
    Aggregate,
    AggregateCount,
}

impl Position {
    fn sql(self, call: &str, rel: &str) -> String {
        match self {
            Position::Projection => format!("SELECT {call} AS r FROM {rel}"),
            Position::Filter => format!("SELECT i FROM {rel} WHERE {call} IS NOT NULL"),
            Position::Aggregate => format!(
                "SELECT COUNT({call}) AS c, SUM(length(CAST({call} AS VARCHAR))) AS l FROM {rel}"
            ),
            Position::AggregateCount => format!("SELECT COUNT({call}) AS c FROM {rel}"),
        }
    }
}

/// DataFusion in batch over [`rows`] as table `t`.
struct Oracle {
    ctx: SessionContext,
}

impl Oracle {
    fn new() -> Self {
        let ctx = SessionContext::new();
        let t = MemTable::try_new(schema(), vec![vec![rows()]]).expect("mem table");
        ctx.register_table("t", Arc::new(t)).expect("register");
        Self { ctx }
    }

    /// The result, or None when DataFusion refuses, fails or panics (some
    /// functions panic on some arguments, e.g. a negative `lpad` length).
    async fn run(&self, sql: &str) -> Option<Output> {
        let ctx = self.ctx.clone();
        let sql = sql.to_string();
        tokio::spawn(async move {
            let frame = ctx.sql(&sql).await.ok()?;
            let schema = frame.schema().as_arrow().clone();
            let batches = frame.collect().await.ok()?;
            output(&batches, &schema).ok()
        })
        .await
        .ok()
        .flatten()
    }
}

/// The outcome of one call in one position.
enum Outcome {
    Exact,
    /// Exact values, typed as a wider DECIMAL (see [`same_types`]).
    WiderDecimal,
    Refused,
}

/// Everything one function's calls did.
#[derive(Default)]
struct Tally {
    exercised: BTreeSet<String>,
    refused: BTreeSet<String>,
    wider_decimal: BTreeSet<String>,
    no_candidate: BTreeSet<String>,
    calls: usize,
    failures: Vec<String>,
}

/// Run `call` through Sluice in every position the batch `SELECT` accepts
/// (`expected`), comparing each result; a CREATE may instead be refused
/// with an error naming `name`.
async fn check_call(
    name: &str,
    call: &str,
    expected: &[(Position, Output)],
    volatile: bool,
) -> Result<Vec<Outcome>, String> {
    let db = Database::open_in_memory()
        .await
        .map_err(|e| e.to_string())?;
    db.execute(&format!("CREATE SOURCE src ({SOURCE_COLUMNS})"))
        .await
        .map_err(|e| format!("source: {e}"))?;
    let mut outcomes = Vec::new();
    let mut created = Vec::new();
    for (k, (pos, want)) in expected.iter().enumerate() {
        let sql = pos.sql(call, "src");
        match db
            .execute(&format!("CREATE MATERIALIZED VIEW v{k} AS {sql}"))
            .await
        {
            Ok(_) => created.push((k, want, sql)),
            Err(e) => {
                let msg = e.to_string();
                if !msg.to_lowercase().contains(&name.to_lowercase()) {
                    return Err(format!("{sql}: refused without naming {name}: {msg}"));
                }
                outcomes.push(Outcome::Refused);
            }
        }
    }
    if created.is_empty() {
        return Ok(outcomes);
    }
    db.start().await.map_err(|e| format!("start: {e}"))?;
    let src = db.source("src").await.map_err(|e| e.to_string())?;
    src.push(rows()).await.map_err(|e| format!("push: {e}"))?;
    wait_for_rows(&db, rows().num_rows() as u64).await?;
    for (k, want, sql) in created {
        let batches = db
            .execute(&format!("SELECT * FROM v{k}"))
            .await
            .map_err(|e| format!("{sql}: reading the view: {e}"))?;
        let got = match batches.first() {
            Some(b) => output(&batches, &b.schema())?,
            // An empty view has no batch to take the types from.
            None => Output {
                types: want.types.clone(),
                rows: vec![],
            },
        };
        let types = same_types(&got.types, &want.types);
        let same = match volatile {
            true => types.is_some() && got.rows.len() == want.rows.len(),
            false => types.is_some() && got.rows == want.rows,
        };
        if !same {
            return Err(format!("{sql}: Sluice {got:?}, batch {want:?}"));
        }
        outcomes.push(match types {
            Some(true) => Outcome::Exact,
            _ => Outcome::WiderDecimal,
        });
    }
    match db.status().await {
        Some(s) if s.halted.is_none() && s.fault.is_none() && !s.stopped => {}
        other => {
            return Err(format!(
                "{call}: the pipeline is not running after: {other:?}"
            ))
        }
    }
    db.shutdown().await.map_err(|e| format!("shutdown: {e}"))?;
    Ok(outcomes)
}

/// Wait until the pushed rows went through a cycle, or fail with the halt.
async fn wait_for_rows(db: &Database, n: u64) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(s) = db.status().await {
            if let Some(e) = s.halted.as_ref().or(s.fault.as_ref()) {
                return Err(format!("the pipeline halted: {e}"));
            }
        }
        if db.metrics().events_ingested >= n {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("the pushed rows were not processed in time".into());
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The name as SQL: quoted unless plain lower case.
fn sql_name(name: &str) -> String {
    if name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
    }
}

/// Positions a call is checked in, with the batch result of each (the
/// aggregate position in whichever form the batch accepts).
/// Empty when the projection fails: the projection is the call's validity
/// test.
async fn batch_positions(oracle: &Oracle, call: &str) -> Vec<(Position, Output)> {
    let Some(projected) = oracle.run(&Position::Projection.sql(call, "t")).await else {
        return vec![];
    };
    let mut out = vec![(Position::Projection, projected)];
    for pos in [Position::Filter, Position::Aggregate] {
        if let Some(o) = oracle.run(&pos.sql(call, "t")).await {
            out.push((pos, o));
        } else if matches!(pos, Position::Aggregate) {
            let count = Position::AggregateCount;
            if let Some(o) = oracle.run(&count.sql(call, "t")).await {
                out.push((count, o));
            }
        }
    }
    out
}

async fn check_function(oracle: &Oracle, name: &str, tally: &mut Tally) {
    let Some(udf) = oracle.ctx.state().scalar_functions().get(name).cloned() else {
        return;
    };
    let volatile = udf.signature().volatility == Volatility::Volatile;
    let mut lists = candidates(&udf.signature().type_signature);
    // A signature whose named types found nothing valid: the generic pool.
    lists.extend(pool());
    let mut seen = BTreeSet::new();
    lists.retain(|l| seen.insert(l.clone()));
    let mut calls = 0;
    for args in lists.into_iter().take(TRIES_PER_FUNCTION) {
        let call = format!("{}({})", sql_name(name), args.join(", "));
        let positions = batch_positions(oracle, &call).await;
        if positions.is_empty() {
            continue;
        }
        calls += 1;
        tally.calls += 1;
        match check_call(name, &call, &positions, volatile).await {
            Ok(outcomes) => {
                if outcomes.iter().any(|o| matches!(o, Outcome::Refused)) {
                    tally.refused.insert(name.to_string());
                }
                if outcomes.iter().any(|o| matches!(o, Outcome::WiderDecimal)) {
                    tally.wider_decimal.insert(name.to_string());
                }
                if outcomes
                    .iter()
                    .any(|o| matches!(o, Outcome::Exact | Outcome::WiderDecimal))
                {
                    tally.exercised.insert(name.to_string());
                }
            }
            Err(e) => tally.failures.push(format!("{name}: {e}")),
        }
        if calls >= CALLS_PER_FUNCTION {
            break;
        }
    }
    if calls == 0 {
        tally.no_candidate.insert(name.to_string());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_registered_scalar_function_runs_exactly_or_is_refused_by_name() {
    let run = async {
        let oracle = Oracle::new();
        let names: BTreeSet<String> = oracle
            .ctx
            .state()
            .scalar_functions()
            .keys()
            .cloned()
            .collect();
        let mut tally = Tally::default();
        for name in &names {
            check_function(&oracle, name, &mut tally).await;
        }
        (names, tally)
    };
    let (names, tally) = tokio::time::timeout(Duration::from_secs(1200), run)
        .await
        .expect("the registry check timed out");
    println!(
        "scalar registry: {} functions; {} exercised through Sluice exactly ({} calls); \
         {} refused at CREATE: {:?}; {} typed as a wider DECIMAL: {:?}; \
         {} with no call DataFusion's batch SELECT runs: {:?}",
        names.len(),
        tally.exercised.len(),
        tally.calls,
        tally.refused.len(),
        tally.refused,
        tally.wider_decimal.len(),
        tally.wider_decimal,
        tally.no_candidate.len(),
        tally.no_candidate,
    );
    assert!(
        tally.failures.is_empty(),
        "{} failures:\n{}",
        tally.failures.len(),
        tally.failures.join("\n")
    );
    assert!(
        names.len() > 150,
        "only {} functions enumerated",
        names.len()
    );
    assert!(
        tally.exercised.len() > 150,
        "only {} functions exercised",
        tally.exercised.len()
    );
    for f in ["coalesce", "nvl", "nvl2", "arrow_cast"] {
        assert!(tally.exercised.contains(f), "{f} did not run");
        assert!(!tally.refused.contains(f), "{f} was refused");
    }
}

/// The rows of a one-shot `SELECT` as text, sorted.
async fn texts(db: &Database, sql: &str) -> Vec<String> {
    let batches = db
        .execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    match batches.first() {
        Some(b) => output(&batches, &b.schema()).expect("printable").rows,
        None => vec![],
    }
}

/// The functions DataFusion only runs once simplified, in a projection, a
/// GROUP BY key, a filter, aggregate arguments and join keys: exact rows, and the
/// pipeline keeps running; `now()`, which cannot run over a stream, is
/// refused at CREATE by name.
#[tokio::test]
async fn coalesce_nvl_nvl2_and_arrow_cast_run_in_every_position() {
    let db = Database::open_in_memory().await.unwrap();
    let ddl = format!(
        "CREATE SOURCE src ({SOURCE_COLUMNS}); \
         CREATE MATERIALIZED VIEW p AS SELECT coalesce(i, 0) AS c, nvl(w, 'none') AS v, \
           nvl2(i, 'some', 'none') AS v2, arrow_cast(i, 'Int32') AS a FROM src; \
         CREATE MATERIALIZED VIEW g AS SELECT nvl(w, 'none') AS k, COUNT(*) AS c FROM src \
           GROUP BY nvl(w, 'none'); \
         CREATE MATERIALIZED VIEW q AS SELECT i FROM src \
           WHERE coalesce(i, 0) > 0 AND arrow_cast(n, 'Int64') IS NOT NULL; \
         CREATE MATERIALIZED VIEW r AS SELECT SUM(coalesce(i, 100)) AS s, \
           COUNT(nvl2(w, 1, NULL)) AS k, SUM(arrow_cast(n, 'Int64')) AS t FROM src; \
         CREATE MATERIALIZED VIEW j AS SELECT a.i, b.w FROM src a JOIN src b \
           ON coalesce(a.i, 0) = coalesce(b.i, 0) AND nvl(a.w, 'x') = nvl(b.w, 'x')"
    );
    db.execute(&ddl).await.unwrap();
    let e = db
        .execute("CREATE MATERIALIZED VIEW x AS SELECT i, now() AS t FROM src")
        .await
        .unwrap_err();
    assert_eq!(e.code(), "SLC-SQL-002");
    assert_eq!(
        e.to_string(),
        "unsupported: now() (also called current_timestamp()) in a continuous query: \
         DataFusion evaluates it only while planning a one-shot query"
    );
    let explained = db
        .execute("EXPLAIN CREATE MATERIALIZED VIEW x AS SELECT i FROM src WHERE current_date() > d")
        .await
        .unwrap_err();
    assert_eq!(
        explained.to_string(),
        "unsupported: current_date() (also called today()) in a continuous query: \
         DataFusion evaluates it only while planning a one-shot query"
    );
    db.start().await.unwrap();
    db.source("src").await.unwrap().push(rows()).await.unwrap();
    tokio::time::timeout(PATIENCE, wait_for_rows(&db, 4))
        .await
        .expect("timed out")
        .unwrap();
    let p = db.execute("SELECT * FROM p").await.unwrap();
    let types: Vec<DataType> = p[0]
        .schema()
        .fields()
        .iter()
        .map(|f| f.data_type().clone())
        .collect();
    assert_eq!(
        types,
        [
            DataType::Int64,
            DataType::Utf8,
            DataType::Utf8,
            DataType::Int32
        ]
    );
    assert_eq!(
        texts(&db, "SELECT * FROM p").await,
        [
            "-2 | abc | some | -2",
            "0 | none | none | ",
            "3 | Hello World | some | 3",
            "42 | ÄÖü x | some | 42",
        ]
    );
    assert_eq!(
        texts(&db, "SELECT * FROM g").await,
        ["Hello World | 1", "abc | 1", "none | 1", "ÄÖü x | 1"]
    );
    assert_eq!(texts(&db, "SELECT * FROM q").await, ["3", "42"]);
    assert_eq!(texts(&db, "SELECT * FROM r").await, ["143 | 3 | 6"]);
    // Join keys: the NULL row joins itself through coalesce and nvl.
    assert_eq!(
        texts(&db, "SELECT * FROM j").await,
        [" | ", "-2 | abc", "3 | Hello World", "42 | ÄÖü x"]
    );
    let status = db.status().await.unwrap();
    assert!(status.halted.is_none() && !status.stopped, "{status:?}");
    db.shutdown().await.unwrap();
}
