//! Event-time temporal joins, `l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key
//! = v.key`, against a source declared with `PRIMARY KEY (key)` (its rows
//! are versions of their key, valid from their `ts`).
//!
//! The batch oracle is plain SQL over the on-time rows: per left row
//! (numbered by `id`), the latest version time at or before `l.ts` by
//! `max()`, then the version of that key at that time, of which
//! `ROW_NUMBER()` keeps the smallest by the whole row (key, ts, value, each
//! ascending with NULLs first: Sluice's tie rule for versions at the same
//! time).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, event_batch, interval, open, open_tuned,
    push_interleaved, source_ddl, Cell, Event, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

const COLS: &str = "l.key, l.ts AS lts, l.value AS lv, v.ts AS rts, v.value AS rv";

/// A versioned source: `key` is its primary key, `ts` its version time.
fn versioned_ddl(name: &str, delay_ms: i64) -> String {
    format!(
        "CREATE SOURCE {name} (key BIGINT, ts TIMESTAMP, value BIGINT, PRIMARY KEY (key), \
         WATERMARK FOR ts AS ts - {})",
        interval(delay_ms)
    )
}

/// The Sluice queries of the differential test: inner, and LEFT with the
/// versioned table aliased (Flink puts the alias after the AS OF time).
const QUERIES: [(&str, bool); 2] = [
    (
        "SELECT l.key, l.ts AS lts, l.value AS lv, v.ts AS rts, v.value AS rv \
         FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key",
        false,
    ),
    (
        "SELECT l.key, l.ts AS lts, l.value AS lv, x.ts AS rts, x.value AS rv \
         FROM l LEFT JOIN v FOR SYSTEM_TIME AS OF l.ts AS x ON x.key = l.key",
        true,
    ),
];

fn oracle(left: bool) -> String {
    let join = if left { "LEFT JOIN" } else { "JOIN" };
    format!(
        "WITH m AS (SELECT l.id, max(v.ts) AS mts FROM l JOIN v \
           ON l.key = v.key AND l.ts >= v.ts GROUP BY l.id), \
         c AS (SELECT {COLS}, ROW_NUMBER() OVER (PARTITION BY l.id ORDER BY \
           v.key ASC NULLS FIRST, v.ts ASC NULLS FIRST, v.value ASC NULLS FIRST) AS rn \
           FROM l {join} m ON l.id = m.id \
           {join} v ON v.key = l.key AND v.ts = m.mts) \
         SELECT key, lts, lv, rts, rv FROM c WHERE rn = 1"
    )
}

/// The oracle's table of events, each numbered by `id`.
fn numbered(events: &[Event]) -> sluice::arrow::record_batch::RecordBatch {
    table(events, &[("id", (0..events.len() as i64).collect())])
}

async fn temporal_joins(left: &Stream, right: &Stream, pc: usize) -> Result<(), TestCaseError> {
    let mut ddl = format!(
        "{}; {}",
        source_ddl("l", left.delay_ms, ""),
        versioned_ddl("v", right.delay_ms)
    );
    for (i, (q, _)) in QUERIES.iter().enumerate() {
        ddl.push_str(&format!("; CREATE STREAM t{i} AS {q}"));
    }
    let db = open_tuned(&ddl, pc).await;
    let mut subs = Vec::new();
    for i in 0..QUERIES.len() {
        subs.push(db.subscribe(&format!("t{i}")).await.expect("subscribe"));
    }
    push_interleaved(&db, ("l", &left.batches), ("v", &right.batches)).await;
    db.shutdown().await.expect("shutdown");
    let tables = [
        ("l", numbered(&split_late(left).on_time)),
        ("v", numbered(&split_late(right).on_time)),
    ];
    for (sub, (q, left)) in subs.iter_mut().zip(&QUERIES) {
        let got = appended(&drain(sub).await).map_err(TestCaseError::fail)?;
        let expected = query(&tables, &oracle(*left)).await;
        prop_assert_eq!(got, expected, "{}", q);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn temporal_joins_match_batch(left in stream(40), right in stream(40), pc in per_cycle()) {
        block_on(temporal_joins(&left, &right, pc))?;
    }
}

/// The rows of a one-source push, for the hand cases.
fn batch(rows: &[(i64, i64, i64)]) -> sluice::arrow::record_batch::RecordBatch {
    event_batch(
        &rows
            .iter()
            .map(|(k, t, val)| ev(*k, BASE + t, Some(*val)))
            .collect::<Vec<_>>(),
    )
}

/// Exact rows: each left row gets its key's version valid at its time (the
/// latest at or before it, so a row at 500 gets a version of 500; of the
/// two versions at 500, the smaller row, value 11, though it arrived
/// second); a row before its key's first
/// version, or of a key without versions, has none (LEFT pads it).
#[tokio::test]
async fn temporal_exact_rows() {
    let db = open(&format!(
        "{}; {}; \
         CREATE STREAM i AS SELECT {COLS} FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key; \
         CREATE STREAM o AS SELECT {COLS} FROM l LEFT JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key",
        source_ddl("l", 0, ""),
        versioned_ddl("v", 0)
    ))
    .await;
    let mut inner = db.subscribe("i").await.expect("subscribe");
    let mut outer = db.subscribe("o").await.expect("subscribe");
    let (l, v) = (
        db.source("l").await.expect("l"),
        db.source("v").await.expect("v"),
    );
    v.push(batch(&[
        (1, 100, 10),
        (1, 500, 12),
        (2, 300, 20),
        (1, 500, 11),
    ]))
    .await
    .expect("push v");
    l.push(batch(&[
        (1, 50, 1),
        (1, 400, 2),
        (1, 600, 3),
        (2, 1_000, 4),
        (3, 700, 5),
        (1, 500, 6),
    ]))
    .await
    .expect("push l");
    l.finish().await.expect("finish l");
    v.finish().await.expect("finish v");
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let (i, t) = (Cell::Int, |ms: i64| Cell::Int(BASE + ms));
    let got = appended(&drain(&mut inner).await).expect("append-only");
    assert_eq!(
        got,
        vec![
            vec![i(1), t(400), i(2), t(100), i(10)],
            vec![i(1), t(500), i(6), t(500), i(11)],
            vec![i(1), t(600), i(3), t(500), i(11)],
            vec![i(2), t(1_000), i(4), t(300), i(20)],
        ]
    );
    let got = appended(&drain(&mut outer).await).expect("append-only");
    assert_eq!(
        got,
        vec![
            vec![i(1), t(50), i(1), Cell::Null, Cell::Null],
            vec![i(1), t(400), i(2), t(100), i(10)],
            vec![i(1), t(500), i(6), t(500), i(11)],
            vec![i(1), t(600), i(3), t(500), i(11)],
            vec![i(2), t(1_000), i(4), t(300), i(20)],
            vec![i(3), t(700), i(5), Cell::Null, Cell::Null],
        ]
    );
}

/// The rows of a statement's output.
async fn rows(db: &sluice::Database, sql: &str) -> Vec<Vec<Cell>> {
    let out = db.execute(sql).await.expect(sql);
    out.iter().flat_map(crate::common::batch_rows).collect()
}

/// EXPLAIN names the temporal join, its versioned table and key, and when
/// each side's rows are let go; DESCRIBE shows the PRIMARY KEY.
#[tokio::test]
async fn temporal_explain_and_describe() {
    let db = open(&format!(
        "{}; {}",
        source_ddl("l", 1_000, ""),
        versioned_ddl("v", 0)
    ))
    .await;
    let text: Vec<String> = rows(
        &db,
        "EXPLAIN CREATE STREAM x AS SELECT l.key, v.value FROM l LEFT JOIN v \
         FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key",
    )
    .await
    .into_iter()
    .map(|r| match &r[0] {
        Cell::Str(s) => s.clone(),
        other => panic!("not text: {other:?}"),
    })
    .collect();
    let at = text
        .iter()
        .position(|l| l.contains("TemporalJoin:"))
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(
        text[at].trim(),
        "TemporalJoin: left, versioned=v PRIMARY KEY (key), on=[l.key = v.key], as of l.ts (version time v.ts)"
    );
    assert_eq!(
        text[at + 1].trim(),
        "left rows: held until watermark - 0ms > l.ts; right rows: per key, the latest at or \
         before min(watermark - 0ms, held left rows' l.ts) and later ones"
    );
    let described = rows(&db, "DESCRIBE v").await;
    let s = |x: &str| Cell::Str(x.to_string());
    assert_eq!(described[0], vec![s("key"), s("Int64 PRIMARY KEY")]);
    assert_eq!(described[2], vec![s("value"), s("Int64")]);
}

/// Every refused shape, with the words its error must contain (all
/// SLC-SQL-002, naming the construct and the supported way).
#[tokio::test]
async fn temporal_refusals() {
    let db = open(&format!(
        "{}; {}; {}; \
         CREATE SOURCE nt (key BIGINT, ts TIMESTAMP, value BIGINT, PRIMARY KEY (key)); \
         CREATE STREAM c AS SELECT key, COUNT(*) AS n FROM v GROUP BY key",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, ""),
        versioned_ddl("v", 0)
    ))
    .await;
    let refused = [
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF PROCTIME() ON l.key = v.key",
            "a processing-time temporal join (FOR SYSTEM_TIME AS OF PROCTIME())",
        ),
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF l.value ON l.key = v.key",
            "FOR SYSTEM_TIME AS OF l.value: it must be the left input's event-time column",
        ),
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.value = v.value",
            "a temporal join whose ON does not equate exactly 'v''s PRIMARY KEY (key) with the left input",
        ),
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key AND l.value = v.value",
            "a temporal join whose ON does not equate exactly 'v''s PRIMARY KEY (key)",
        ),
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key AND v.value > 3",
            "in a temporal join (only equalities of 'v''s PRIMARY KEY are allowed)",
        ),
        (
            "SELECT l.key FROM l JOIN r FOR SYSTEM_TIME AS OF l.ts ON l.key = r.key",
            "FOR SYSTEM_TIME AS OF 'r', which has no PRIMARY KEY",
        ),
        (
            "SELECT l.key FROM l JOIN nt FOR SYSTEM_TIME AS OF l.ts ON l.key = nt.key",
            "FOR SYSTEM_TIME AS OF 'nt', which has no version time (a WATERMARK FOR column)",
        ),
        (
            "SELECT l.key FROM l JOIN c FOR SYSTEM_TIME AS OF l.ts ON l.key = c.key",
            "FOR SYSTEM_TIME AS OF a changelog stream (an updating aggregate)",
        ),
        (
            "SELECT l.key FROM l RIGHT JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key",
            "JOIN ... FOR SYSTEM_TIME AS OF (only JOIN and LEFT JOIN are supported",
        ),
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts",
            "FOR SYSTEM_TIME AS OF without an ON condition",
        ),
        (
            "SELECT l.key FROM l JOIN v FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key OR l.value = 1",
            "a temporal join condition that is not a conjunction",
        ),
        (
            "SELECT __temporal_as_of(l.ts) AS x FROM l",
            "__temporal_as_of() outside a temporal join",
        ),
    ];
    for (query, expected) in refused {
        let sql = format!("CREATE STREAM z AS {query}");
        let err = db.execute(&sql).await.expect_err(&sql);
        assert_eq!(err.code(), "SLC-SQL-002", "{sql}: {err}");
        assert!(err.to_string().contains(expected), "{sql}: {err}");
    }
}

async fn open_pair(dir: &std::path::Path) -> sluice::Database {
    let db = sluice::Database::builder()
        .state_dir(dir)
        .set("checkpoint_interval", "1h")
        .expect("option")
        .open()
        .await
        .expect("open");
    db.execute(&format!(
        "{}; {}; CREATE STREAM a AS SELECT {COLS} FROM l JOIN v \
         FOR SYSTEM_TIME AS OF l.ts ON l.key = v.key",
        source_ddl("l", 0, ""),
        versioned_ddl("v", 0)
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// A held left row and the kept versions survive a checkpoint and a
/// restart: the row emitted before the checkpoint is not emitted again,
/// the held one is emitted once after it, with a version of the first run
/// (the ASOF join's restore case, on the versioned source `v`).
#[tokio::test]
async fn temporal_across_restore() {
    crate::asof::held_left_row_across_restore(|d| async move { open_pair(&d).await }, "v").await;
}
