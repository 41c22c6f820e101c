//! Lookup joins: a stream enriched against a lookup table registered from
//! Rust (an in-process `MemoryLookupTable`), against the batch oracle (the
//! same join with the table as a DataFusion MemTable), with the cache's
//! bound, TTL and failures.

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;
use sluice::arrow::array::{ArrayRef, Int64Array, StringArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use sluice::arrow::record_batch::RecordBatch;
use sluice::{
    Database, LookupError, LookupOptions, LookupRows, LookupStats, LookupTable, MemoryLookupTable,
};

use crate::common::{
    appended, block_on, complete, config, drain, ev, event_batch, next_within, open_tuned,
    source_ddl, Cell, BASE, PATIENCE,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

/// Inner join on the key, with a residual condition over both sides.
const INNER: &str = "SELECT s.key, s.value, d.name, d.tier FROM src AS s \
                     JOIN dim AS d ON s.key = d.id AND s.value >= d.tier";
/// LEFT join on an expression that is NULL for NULL values and misses for
/// negative ones, with a residual condition that pads rows too.
const LEFT: &str = "SELECT s.key, s.value, d.id, d.name FROM src s \
                    LEFT JOIN dim d ON s.value % 5 = d.id AND d.tier < 30";

fn dim_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
        Field::new("tier", DataType::Int64, true),
    ]))
}

/// The dimension rows `(id, name, tier)`.
fn dim_batch(rows: &[(i64, Option<&str>, Option<i64>)]) -> RecordBatch {
    RecordBatch::try_new(
        dim_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(StringArray::from_iter(rows.iter().map(|r| r.1))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.2))),
        ],
    )
    .expect("dim batch")
}

/// A database with `dim` registered over `table` with `options`, then `ddl`.
async fn open_with(
    table: Arc<dyn LookupTable>,
    options: LookupOptions,
    ddl: &str,
    per_cycle: usize,
) -> (Database, Arc<LookupStats>) {
    let db = open_tuned("SET max_batches_per_cycle = 64", per_cycle).await;
    let stats = db
        .register_lookup_table("dim", dim_schema(), &["id"], table, options)
        .await
        .expect("register");
    db.execute(ddl)
        .await
        .unwrap_or_else(|e| panic!("DDL failed: {e}\n{ddl}"));
    (db, stats)
}

fn memory(rows: &[(i64, Option<&str>, Option<i64>)]) -> Arc<MemoryLookupTable> {
    let t = MemoryLookupTable::new(dim_schema(), &["id"]).expect("table");
    t.upsert(&dim_batch(rows)).expect("upsert");
    Arc::new(t)
}

fn options(max_rows: usize) -> LookupOptions {
    LookupOptions {
        max_rows,
        ..LookupOptions::default()
    }
}

async fn check(
    s: &Stream,
    dim: &[(i64, Option<i64>)],
    max_rows: usize,
    pc: usize,
) -> Result<(), TestCaseError> {
    let names: Vec<String> = dim.iter().map(|(id, _)| format!("n{id}")).collect();
    let rows: Vec<_> = dim
        .iter()
        .zip(&names)
        .map(|((id, tier), n)| (*id, Some(n.as_str()), *tier))
        .collect();
    let t = memory(&rows);
    let ddl = format!(
        "{}; CREATE STREAM i AS {INNER}; CREATE STREAM l AS {LEFT}",
        source_ddl("src", s.delay_ms, "")
    );
    let (db, stats) = open_with(t.clone(), options(max_rows), &ddl, pc).await;
    let mut subs = [
        db.subscribe("i").await.expect("subscribe"),
        db.subscribe("l").await.expect("subscribe"),
    ];
    crate::common::push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let tables = [
        ("src", table(&split_late(s).on_time, &[])),
        ("dim", t.snapshot().expect("snapshot")),
    ];
    for (sub, sql) in subs.iter_mut().zip([INNER, LEFT]) {
        let got = appended(&drain(sub).await).map_err(TestCaseError::fail)?;
        let expected = query(&tables, sql).await;
        prop_assert_eq!(&got, &expected, "{} vs batch oracle", sql);
    }
    prop_assert!(stats.max_cached_rows() <= max_rows as u64);
    prop_assert_eq!(stats.keys(), stats.hits() + stats.looked_up());
    Ok(())
}

fn dim_rows() -> impl Strategy<Value = Vec<(i64, Option<i64>)>> {
    prop::collection::btree_map(0i64..6, prop::option::weighted(0.9, -10i64..40), 0..6)
        .prop_map(|m| m.into_iter().collect())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn lookup_join_matches_batch(
        s in stream(60),
        dim in dim_rows(),
        max_rows in prop_oneof![Just(0usize), Just(1), Just(3), Just(1000)],
        pc in per_cycle(),
    ) {
        block_on(check(&s, &dim, max_rows, pc))?;
    }
}

/// Exact rows of a hand case: matches, a miss, a NULL key, a residual
/// condition that fails, each in inner and LEFT form.
#[tokio::test]
async fn lookup_join_exact_rows() {
    let t = memory(&[(1, Some("one"), Some(0)), (2, None, Some(50))]);
    let ddl = format!(
        "{}; CREATE STREAM i AS SELECT s.key, s.value, d.name FROM src s JOIN dim d \
         ON s.value = d.id AND s.key >= d.tier; \
         CREATE STREAM l AS SELECT s.key, s.value, d.id, d.name FROM src s LEFT JOIN dim d \
         ON s.value = d.id AND s.key >= d.tier; \
         CREATE STREAM f AS SELECT s.key, s.value, d.name FROM src s JOIN dim \
         FOR SYSTEM_TIME AS OF s.ts AS d ON s.value = d.id AND s.key >= d.tier; \
         CREATE STREAM p AS SELECT s.key, s.value, d.name FROM src s JOIN dim \
         FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.value = d.id AND s.key >= d.tier",
        source_ddl("src", 0, "")
    );
    let (db, _) = open_with(t, LookupOptions::default(), &ddl, 64).await;
    let mut subs = [
        db.subscribe("i").await.unwrap(),
        db.subscribe("l").await.unwrap(),
        db.subscribe("f").await.unwrap(),
        db.subscribe("p").await.unwrap(),
    ];
    let events = vec![
        ev(7, BASE, Some(1)),      // matches 1
        ev(8, BASE + 1, Some(2)),  // key 2, but 8 < tier 50: residual fails
        ev(9, BASE + 2, Some(3)),  // no row 3
        ev(10, BASE + 3, None),    // NULL key
        ev(11, BASE + 4, Some(1)), // matches 1 again (cached)
    ];
    crate::common::push_all(&db, "src", &[events]).await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let (i, s, n) = (Cell::Int, |v: &str| Cell::Str(v.into()), Cell::Null);
    let inner = appended(&drain(&mut subs[0]).await).unwrap();
    assert_eq!(
        inner,
        vec![vec![i(7), i(1), s("one")], vec![i(11), i(1), s("one")]]
    );
    // Flink's spelling, with an event-time column or PROCTIME(): the same.
    for sub in &mut subs[2..] {
        assert_eq!(appended(&drain(sub).await).unwrap(), inner);
    }
    let left = appended(&drain(&mut subs[1]).await).unwrap();
    assert_eq!(
        left,
        vec![
            vec![i(7), i(1), i(1), s("one")],
            vec![i(8), i(2), n.clone(), n.clone()],
            vec![i(9), i(3), n.clone(), n.clone()],
            vec![i(10), n.clone(), n.clone(), n.clone()],
            vec![i(11), i(1), i(1), s("one")],
        ]
    );
}

/// Push one batch and wait for the one output batch it makes.
async fn push_and_get(
    db: &Database,
    sub: &mut sluice::Subscription,
    key: i64,
    ts: i64,
) -> Vec<Vec<Cell>> {
    let src = db.source("src").await.expect("source");
    src.push(event_batch(&[ev(key, ts, Some(key))]))
        .await
        .expect("push");
    let b = next_within(sub, PATIENCE).await.expect("a batch");
    crate::common::batch_rows(&b.data)
}

/// The cache holds at most `lookup.cache.max_rows` rows; a repeated key
/// is a hit until the TTL expires, and an updated value is seen after it.
#[tokio::test]
async fn lookup_cache_bound_ttl_and_updates() {
    let t = memory(&[(1, Some("a"), Some(0)), (2, Some("b"), Some(0))]);
    let ddl = format!(
        "{}; CREATE STREAM o AS SELECT s.key, d.name FROM src s JOIN dim d ON s.key = d.id",
        source_ddl("src", 0, "")
    );
    let opts = LookupOptions::from_pairs(
        "dim",
        &[("lookup.cache.max_rows", "2"), ("lookup.cache.ttl", "1s")],
    )
    .unwrap();
    let (db, stats) = open_with(t.clone(), opts, &ddl, 1).await;
    let mut sub = db.subscribe("o").await.unwrap();
    db.start().await.unwrap();
    let s = |v: &str| Cell::Str(v.into());
    assert_eq!(
        push_and_get(&db, &mut sub, 1, BASE).await,
        vec![vec![Cell::Int(1), s("a")]]
    );
    t.upsert(&dim_batch(&[(1, Some("a2"), Some(0))])).unwrap();
    // Within the TTL the cached row answers.
    assert_eq!(
        push_and_get(&db, &mut sub, 1, BASE + 1).await,
        vec![vec![Cell::Int(1), s("a")]]
    );
    assert_eq!((stats.hits(), stats.looked_up(), t.calls()), (1, 1, 1));
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    // Expired: looked up again, and the update is visible.
    assert_eq!(
        push_and_get(&db, &mut sub, 1, BASE + 2).await,
        vec![vec![Cell::Int(1), s("a2")]]
    );
    assert_eq!((stats.hits(), stats.looked_up(), t.calls()), (1, 2, 2));
    // Misses are cached too, and count against the bound.
    let src = db.source("src").await.unwrap();
    for (n, k) in [2, 3, 4, 5, 2, 1].into_iter().enumerate() {
        src.push(event_batch(&[ev(k, BASE + 3 + n as i64, None)]))
            .await
            .unwrap();
    }
    src.finish().await.unwrap();
    complete(&db).await;
    db.shutdown().await.unwrap();
    assert!(stats.max_cached_rows() <= 2, "{}", stats.max_cached_rows());
    assert_eq!(stats.max_cached_rows(), 2);
    assert_eq!(stats.keys(), stats.hits() + stats.looked_up());
    assert_eq!(t.keys_asked(), stats.looked_up());
}

/// A table that fails every lookup, or panics.
struct Broken {
    panic: bool,
}

impl LookupTable for Broken {
    fn lookup(&self, _keys: &[ArrayRef]) -> Result<LookupRows, LookupError> {
        if self.panic {
            panic!("dimension store on fire");
        }
        Err(LookupError::failed(
            "whatever",
            std::io::Error::other("connection refused"),
        ))
    }
}

/// A failing or panicking table halts the pipeline with the lookup's own
/// code and message.
#[tokio::test]
async fn lookup_failures_surface_with_their_code() {
    for (panic, code, text) in [
        (
            false,
            "SLC-LKP-001",
            "lookup table 'dim' failed: connection refused",
        ),
        (
            true,
            "SLC-LKP-003",
            "lookup table 'dim' panicked: dimension store on fire",
        ),
    ] {
        let ddl = format!(
            "{}; CREATE STREAM o AS SELECT s.key, d.name FROM src s JOIN dim d ON s.key = d.id",
            source_ddl("src", 0, "")
        );
        let (db, _) = open_with(
            Arc::new(Broken { panic }),
            LookupOptions::default(),
            &ddl,
            1,
        )
        .await;
        let src = db.source("src").await.expect("source");
        src.push(event_batch(&[ev(1, BASE, Some(1))]))
            .await
            .expect("push");
        // The pipeline may already have halted on the first cycle.
        let _ = src.finish().await;
        let err = tokio::time::timeout(PATIENCE, db.run_to_completion())
            .await
            .expect("timed out")
            .expect_err("a lookup failure stops the pipeline");
        assert_eq!(err.code(), code, "{err}");
        assert!(err.to_string().contains(text), "{err}");
        let _ = db.shutdown().await;
    }
}

/// EXPLAIN shows the lookup join, its keys, residual and cache; every
/// refused shape names the construct and the supported way.
#[tokio::test]
async fn lookup_explain_and_refusals() {
    let opts = LookupOptions::from_pairs(
        "dim",
        &[("lookup.cache.max_rows", "100"), ("lookup.cache.ttl", "1m")],
    )
    .unwrap();
    let ddl = source_ddl("src", 0, "");
    let (db, _) = open_with(memory(&[]), opts, &ddl, 64).await;
    let out = db
        .execute(&format!("EXPLAIN CREATE STREAM x AS {LEFT}"))
        .await
        .expect("explain");
    let text = crate::common::rows(&out)
        .into_iter()
        .map(|r| match &r[0] {
            Cell::Str(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect::<Vec<_>>()
        .join("\n");
    for line in [
        "LeftLookupJoin: table=dim, on=[s.value % Int64(5) = dim.id], filter=d.tier < Int64(30)",
        "no state (rows read at processing time, not replay-deterministic); cache: at most 100 rows, ttl 1m, misses cached",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    // DESCRIBE lists a lookup table's columns as it does a source's.
    let described = crate::common::select(&db, "DESCRIBE dim").await;
    let str = |v: &str| Cell::Str(v.into());
    assert_eq!(
        described,
        vec![
            vec![str("id"), str("Int64")],
            vec![str("name"), str("Utf8")],
            vec![str("tier"), str("Int64")],
        ]
    );
    let refused = [
        (
            "CREATE STREAM r1 AS SELECT * FROM dim d JOIN src s ON s.key = d.id",
            "lookup table 'dim' on the left of a JOIN; put the stream first",
        ),
        (
            "CREATE STREAM r2 AS SELECT * FROM src s RIGHT JOIN dim d ON s.key = d.id",
            "Right JOIN with lookup table 'dim' (a lookup join is an inner or LEFT JOIN with the lookup table on the right)",
        ),
        (
            "CREATE STREAM r3 AS SELECT * FROM src s FULL JOIN dim d ON s.key = d.id",
            "Full JOIN with lookup table 'dim'",
        ),
        (
            "CREATE STREAM r4 AS SELECT * FROM dim",
            "reading lookup table 'dim' as a stream",
        ),
        (
            "CREATE STREAM r5 AS SELECT tier, COUNT(*) AS n FROM dim GROUP BY tier, tumble(id, INTERVAL '1' SECOND)",
            "reading lookup table 'dim' as a stream",
        ),
        (
            "CREATE STREAM r6 AS SELECT * FROM src s JOIN dim d ON s.value = d.tier",
            "a JOIN with lookup table 'dim' without an equality on its key column 'id'; join ON s.k = dim.id",
        ),
        (
            "CREATE STREAM c AS SELECT key, COUNT(*) AS n FROM src GROUP BY key; \
             CREATE STREAM r7 AS SELECT * FROM c JOIN dim d ON c.key = d.id",
            "a lookup join of a changelog input",
        ),
        (
            "CREATE STREAM r8 AS SELECT * FROM src s JOIN src FOR SYSTEM_TIME AS OF s.ts AS t ON s.key = t.key",
            "FOR SYSTEM_TIME AS OF 'src', which has no PRIMARY KEY",
        ),
    ];
    for (sql, expected) in refused {
        let err = db.execute(sql).await.expect_err(sql);
        assert!(err.to_string().contains(expected), "{sql}: {err}");
        assert_eq!(err.code(), "SLC-SQL-002", "{sql}: {err}");
    }
    // The name is one namespace with sources and streams.
    let err = db.execute(&source_ddl("dim", 0, "")).await.unwrap_err();
    assert_eq!(err.to_string(), "a lookup table named 'dim' already exists");
    let err = db
        .register_lookup_table(
            "src",
            dim_schema(),
            &["id"],
            memory(&[]),
            LookupOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "a source named 'src' already exists");
    let err = db
        .register_lookup_table(
            "d2",
            dim_schema(),
            &["nope"],
            memory(&[]),
            LookupOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.code(), err.to_string()),
        (
            "SLC-LKP-004",
            "lookup table 'd2': key column 'nope' is not a column of its schema".to_string()
        )
    );
}

/// The next `n` rows a subscription delivers (append-only), sorted.
async fn rows_of(sub: &mut sluice::Subscription, n: usize) -> Vec<Vec<Cell>> {
    let mut batches = Vec::new();
    let mut count = 0;
    while count < n {
        let b = next_within(sub, PATIENCE).await.expect("a batch");
        count += b.data.num_rows();
        batches.push(b);
    }
    appended(&batches).unwrap()
}

async fn open_durable(dir: &std::path::Path, t: Arc<MemoryLookupTable>) -> Database {
    let db = Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.register_lookup_table("dim", dim_schema(), &["id"], t, LookupOptions::default())
        .await
        .expect("register");
    db.execute(&format!(
        "{}; CREATE STREAM o AS SELECT s.key, s.value, d.name FROM src s LEFT JOIN dim d ON s.key = d.id",
        source_ddl("src", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// Across a checkpoint and a restart every row is enriched exactly once,
/// and the restored join starts with an empty cache: a value changed in
/// the table while the database was down is seen at once.
#[tokio::test]
async fn lookup_join_across_restore() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = memory(&[(1, Some("a"), None), (2, Some("b"), None)]);
    let (i, s) = (Cell::Int, |v: &str| Cell::Str(v.into()));
    let db = open_durable(dir.path(), t.clone()).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(event_batch(&[ev(1, BASE, Some(10)), ev(3, BASE, Some(30))]))
        .await
        .expect("push");
    let got = rows_of(&mut sub, 2).await;
    assert_eq!(
        got,
        vec![vec![i(1), i(10), s("a")], vec![i(3), i(30), Cell::Null]]
    );
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    t.upsert(&dim_batch(&[(1, Some("a2"), None), (3, Some("c"), None)]))
        .unwrap();
    let db = open_durable(dir.path(), t.clone()).await;
    let mut sub = db.subscribe("o").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(event_batch(&[
        ev(1, BASE + 1, Some(11)),
        ev(3, BASE + 1, Some(31)),
    ]))
    .await
    .expect("push");
    let got = rows_of(&mut sub, 2).await;
    assert_eq!(
        got,
        vec![vec![i(1), i(11), s("a2")], vec![i(3), i(31), s("c")]]
    );
    // Nothing else arrives: no row of the first run is emitted again.
    assert!(next_within(&mut sub, Duration::from_millis(300))
        .await
        .is_none());
    db.abort().await.expect("abort");
    assert_eq!(t.calls(), 2);
}

/// A key the table lacks is cached (asked once over three batches), unless
/// `lookup.cache.missing` is false (asked every batch).
#[tokio::test]
async fn lookup_misses_cached_unless_turned_off() {
    for (missing, calls) in [("true", 1), ("false", 3)] {
        let t = memory(&[(1, Some("a"), None)]);
        let ddl = format!(
            "{}; CREATE STREAM o AS SELECT s.key, d.name FROM src s JOIN dim d ON s.key = d.id",
            source_ddl("src", 0, "")
        );
        let opts = LookupOptions::from_pairs("dim", &[("lookup.cache.missing", missing)]).unwrap();
        let (db, stats) = open_with(t.clone(), opts, &ddl, 1).await;
        let batches: Vec<_> = (0..3).map(|n| vec![ev(9, BASE + n, None)]).collect();
        crate::common::push_all(&db, "src", &batches).await;
        complete(&db).await;
        db.shutdown().await.unwrap();
        assert_eq!(
            (t.calls(), stats.hits()),
            (calls, 3 - calls),
            "missing={missing}"
        );
    }
}

/// A table keyed by `(grp, id)`: joined on `grp` alone every row of the
/// group matches; on both, one row; on `id` alone it is refused.
#[tokio::test]
async fn lookup_join_on_a_key_prefix() {
    let schema = Arc::new(Schema::new(vec![
        Field::new("grp", DataType::Int64, true),
        Field::new("id", DataType::Int64, true),
        Field::new("name", DataType::Utf8, true),
    ]));
    let t = MemoryLookupTable::new(Arc::clone(&schema), &["grp", "id"]).unwrap();
    t.upsert(
        &RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from(vec![1, 1, 2])),
                Arc::new(Int64Array::from(vec![10, 20, 10])),
                Arc::new(StringArray::from(vec!["a", "b", "c"])),
            ],
        )
        .unwrap(),
    )
    .unwrap();
    let db = open_tuned("SET max_batches_per_cycle = 64", 64).await;
    db.register_lookup_table(
        "g",
        schema,
        &["grp", "id"],
        Arc::new(t),
        LookupOptions::default(),
    )
    .await
    .unwrap();
    db.execute(&format!(
        "{}; CREATE STREAM p AS SELECT s.key, d.id, d.name FROM src s JOIN g d ON s.key = d.grp; \
         CREATE STREAM f AS SELECT s.key, d.id, d.name FROM src s JOIN g d ON d.id = s.value AND s.key = d.grp",
        source_ddl("src", 0, "")
    ))
    .await
    .unwrap();
    let err = db
        .execute("CREATE STREAM x AS SELECT * FROM src s JOIN g d ON s.value = d.id")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported: a lookup join on key column 'id' of 'g' without its leading key column 'grp'; the equalities must cover a leading part of its key (grp, id)"
    );
    let mut subs = [
        db.subscribe("p").await.unwrap(),
        db.subscribe("f").await.unwrap(),
    ];
    crate::common::push_all(
        &db,
        "src",
        &[vec![ev(1, BASE, Some(20)), ev(2, BASE, Some(20))]],
    )
    .await;
    complete(&db).await;
    db.shutdown().await.unwrap();
    let (i, s) = (Cell::Int, |v: &str| Cell::Str(v.into()));
    assert_eq!(
        appended(&drain(&mut subs[0]).await).unwrap(),
        vec![
            vec![i(1), i(10), s("a")],
            vec![i(1), i(20), s("b")],
            vec![i(2), i(10), s("c")]
        ]
    );
    assert_eq!(
        appended(&drain(&mut subs[1]).await).unwrap(),
        vec![vec![i(1), i(20), s("b")]]
    );
}
