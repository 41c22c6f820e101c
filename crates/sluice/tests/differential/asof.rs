//! `ASOF JOIN` of two sources, in Snowflake's spelling (`MATCH_CONDITION`)
//! and DuckDB's (the comparison in `ON`), inner and `LEFT`, backward (`>=`,
//! `>`) and forward (`<=`, `<`), with and without a tolerance.
//!
//! DataFusion has no ASOF join, so the batch oracle is plain SQL over the
//! on-time rows: per left row (numbered by an `id` column), the closest
//! right time by `max()` (backward) or `min()` (forward) over the matching
//! right rows, then a join back to the right rows of that key at that time,
//! of which `ROW_NUMBER()` keeps the smallest by the whole right row (key,
//! ts, value, each ascending with NULLs first: Sluice's tie rule).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, event_batch, interval, next, open, open_tuned,
    push_interleaved, source_ddl, Cell, Event, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

const COLS: &str = "l.key, l.ts AS lts, l.value AS lv, r.ts AS rts, r.value AS rv";

/// One ASOF query of the differential test.
struct Case {
    /// Whether the query is written with MATCH_CONDITION.
    snowflake: bool,
    left: bool,
    op: &'static str,
    tolerance_ms: Option<i64>,
}

const CASES: [Case; 6] = [
    Case {
        snowflake: true,
        left: false,
        op: ">=",
        tolerance_ms: None,
    },
    Case {
        snowflake: false,
        left: true,
        op: ">=",
        tolerance_ms: Some(3_000),
    },
    Case {
        snowflake: false,
        left: false,
        op: ">",
        tolerance_ms: None,
    },
    Case {
        snowflake: true,
        left: true,
        op: "<=",
        tolerance_ms: Some(2_000),
    },
    Case {
        snowflake: true,
        left: false,
        op: "<",
        tolerance_ms: None,
    },
    Case {
        snowflake: false,
        left: true,
        op: "<=",
        tolerance_ms: None,
    },
];

impl Case {
    fn backward(&self) -> bool {
        self.op.starts_with('>')
    }

    /// The tolerance conjunct, in the one spelling Sluice reads.
    fn tolerance(&self) -> String {
        match self.tolerance_ms {
            None => String::new(),
            Some(ms) if self.backward() => format!(" AND r.ts >= l.ts - {}", interval(ms)),
            Some(ms) => format!(" AND r.ts <= l.ts + {}", interval(ms)),
        }
    }

    fn sluice(&self) -> String {
        let kind = if self.left {
            "LEFT ASOF JOIN"
        } else {
            "ASOF JOIN"
        };
        let (op, tol) = (self.op, self.tolerance());
        if self.snowflake {
            format!(
                "SELECT {COLS} FROM l {kind} r MATCH_CONDITION (l.ts {op} r.ts) ON l.key = r.key{tol}"
            )
        } else {
            format!("SELECT {COLS} FROM l {kind} r ON l.key = r.key AND l.ts {op} r.ts{tol}")
        }
    }

    fn oracle(&self) -> String {
        let agg = if self.backward() { "max" } else { "min" };
        let join = if self.left { "LEFT JOIN" } else { "JOIN" };
        let (op, tol) = (self.op, self.tolerance());
        format!(
            "WITH m AS (SELECT l.id, {agg}(r.ts) AS mts FROM l JOIN r \
               ON l.key = r.key AND l.ts {op} r.ts{tol} GROUP BY l.id), \
             c AS (SELECT {COLS}, ROW_NUMBER() OVER (PARTITION BY l.id ORDER BY \
               r.key ASC NULLS FIRST, r.ts ASC NULLS FIRST, r.value ASC NULLS FIRST) AS rn \
               FROM l {join} m ON l.id = m.id \
               {join} r ON r.key = l.key AND r.ts = m.mts) \
             SELECT key, lts, lv, rts, rv FROM c WHERE rn = 1"
        )
    }
}

/// The oracle's table of events, each numbered by `id`.
fn numbered(events: &[Event]) -> sluice::arrow::record_batch::RecordBatch {
    table(events, &[("id", (0..events.len() as i64).collect())])
}

async fn asof_joins(left: &Stream, right: &Stream, pc: usize) -> Result<(), TestCaseError> {
    let mut ddl = format!(
        "{}; {}",
        source_ddl("l", left.delay_ms, ""),
        source_ddl("r", right.delay_ms, "")
    );
    for (i, c) in CASES.iter().enumerate() {
        ddl.push_str(&format!("; CREATE STREAM a{i} AS {}", c.sluice()));
    }
    let db = open_tuned(&ddl, pc).await;
    let mut subs = Vec::new();
    for i in 0..CASES.len() {
        subs.push(db.subscribe(&format!("a{i}")).await.expect("subscribe"));
    }
    push_interleaved(&db, ("l", &left.batches), ("r", &right.batches)).await;
    db.shutdown().await.expect("shutdown");
    let tables = [
        ("l", numbered(&split_late(left).on_time)),
        ("r", numbered(&split_late(right).on_time)),
    ];
    for (sub, c) in subs.iter_mut().zip(&CASES) {
        let got = appended(&drain(sub).await).map_err(TestCaseError::fail)?;
        let expected = query(&tables, &c.oracle()).await;
        prop_assert_eq!(got, expected, "{}", c.sluice());
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn asof_joins_match_batch(left in stream(40), right in stream(40), pc in per_cycle()) {
        block_on(asof_joins(&left, &right, pc))?;
    }
}

/// The rows of a one-source push, for the hand cases.
fn batch(rows: &[(i64, i64, i64)]) -> sluice::arrow::record_batch::RecordBatch {
    event_batch(
        &rows
            .iter()
            .map(|(k, t, v)| ev(*k, BASE + t, Some(*v)))
            .collect::<Vec<_>>(),
    )
}

/// Exact rows: the latest right row at or before each left row (for the
/// tie at 500, the smaller row, value 11, though it arrived second), inner,
/// LEFT, and with a WHERE over the result.
#[tokio::test]
async fn asof_exact_rows() {
    let db = open(&format!(
        "{}; {}; \
         CREATE STREAM i AS SELECT {COLS} FROM l ASOF JOIN r MATCH_CONDITION (l.ts >= r.ts) ON l.key = r.key; \
         CREATE STREAM o AS SELECT {COLS} FROM l LEFT ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts \
           AND r.ts >= l.ts - INTERVAL '1' SECOND; \
         CREATE STREAM w AS SELECT {COLS} FROM l ASOF JOIN r MATCH_CONDITION (l.ts >= r.ts) \
           ON l.key = r.key WHERE r.value = 10",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let mut inner = db.subscribe("i").await.expect("subscribe");
    let mut outer = db.subscribe("o").await.expect("subscribe");
    let mut filtered = db.subscribe("w").await.expect("subscribe");
    let (l, r) = (
        db.source("l").await.expect("l"),
        db.source("r").await.expect("r"),
    );
    r.push(batch(&[
        (1, 100, 10),
        (1, 500, 12),
        (2, 300, 20),
        (1, 500, 11),
    ]))
    .await
    .expect("push r");
    // key 1 at 600: ties at 500 (two rows, 11 picked); at 400: 100 (300 ms back, within
    // the tolerance); at 2000: 500, 1500 ms back (too far for `o`); key 2
    // at 200: nothing at or before; key 3: no right rows at all.
    l.push(batch(&[
        (1, 600, 1),
        (1, 400, 2),
        (1, 2_000, 3),
        (2, 200, 4),
        (3, 700, 5),
    ]))
    .await
    .expect("push l");
    l.finish().await.expect("finish l");
    r.finish().await.expect("finish r");
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let (i, t) = (Cell::Int, |ms: i64| Cell::Int(BASE + ms));
    let got = appended(&drain(&mut inner).await).expect("append-only");
    assert_eq!(
        got,
        vec![
            vec![i(1), t(400), i(2), t(100), i(10)],
            vec![i(1), t(600), i(1), t(500), i(11)],
            vec![i(1), t(2_000), i(3), t(500), i(11)],
        ]
    );
    let got = appended(&drain(&mut outer).await).expect("append-only");
    assert_eq!(
        got,
        vec![
            vec![i(1), t(400), i(2), t(100), i(10)],
            vec![i(1), t(600), i(1), t(500), i(11)],
            vec![i(1), t(2_000), i(3), Cell::Null, Cell::Null],
            vec![i(2), t(200), i(4), Cell::Null, Cell::Null],
            vec![i(3), t(700), i(5), Cell::Null, Cell::Null],
        ]
    ); // WHERE filters the result: the rows at 600 and 2000 picked 500, so
       // they are gone, not matched with the older row at 100.
    let got = appended(&drain(&mut filtered).await).expect("append-only");
    assert_eq!(got, vec![vec![i(1), t(400), i(2), t(100), i(10)]]);
}

/// The lines of an EXPLAIN statement's output, in order.
async fn explain_lines(db: &sluice::Database, sql: &str) -> Vec<String> {
    let out = db.execute(sql).await.expect("explain");
    out.iter()
        .flat_map(crate::common::batch_rows)
        .map(|r| match &r[0] {
            Cell::Str(s) => s.clone(),
            other => panic!("not text: {other:?}"),
        })
        .collect()
}

/// EXPLAIN names the ASOF join and when each side's rows are let go.
#[tokio::test]
async fn asof_explain_shows_state_bounds() {
    let db = open(&format!(
        "{}; {}",
        source_ddl("l", 1_000, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let text = explain_lines(
        &db,
        "EXPLAIN CREATE STREAM x AS SELECT l.key, r.value FROM l LEFT ASOF JOIN r \
         ON l.key = r.key AND l.ts >= r.ts AND r.ts >= l.ts - INTERVAL '5' SECOND",
    )
    .await;
    let at = text
        .iter()
        .position(|l| l.contains("AsofJoin:"))
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(
        text[at].trim(),
        "AsofJoin: left, on=[l.key = r.key], match=l.ts >= r.ts, tolerance=5000ms"
    );
    assert_eq!(
        text[at + 1].trim(),
        "left rows: held until watermark - 0ms > l.ts; right rows: per key, the latest at or \
         before min(watermark - 0ms, held left rows' l.ts) and later ones, none older than that \
         minus 5000ms"
    );
    let text = explain_lines(
        &db,
        "EXPLAIN CREATE STREAM y AS SELECT l.key, r.value FROM l ASOF JOIN r \
         MATCH_CONDITION (l.ts < r.ts) ON l.key = r.key",
    )
    .await;
    let at = text
        .iter()
        .position(|l| l.contains("AsofJoin:"))
        .unwrap_or_else(|| panic!("{text:?}"));
    assert_eq!(
        text[at].trim(),
        "AsofJoin: inner, on=[l.key = r.key], match=l.ts < r.ts"
    );
    assert_eq!(
        text[at + 1].trim(),
        "left rows: held until watermark - 0ms > their closest match's r.ts (a row with no match \
         yet waits for one: state grows with unmatched left rows); right rows: per key, those at \
         or after min(watermark - 0ms, held left rows' l.ts)"
    );
}

/// Every refused shape, with the words its error must contain (all
/// SLC-SQL-002, naming the construct and the supported way).
#[tokio::test]
async fn asof_refusals() {
    let db = open(&format!(
        "{}; {}; CREATE STREAM c AS SELECT key, COUNT(*) AS n FROM r GROUP BY key",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await;
    let refused = [
        (
            "SELECT l.key FROM l RIGHT ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts",
            "RIGHT ASOF JOIN (only ASOF JOIN and LEFT ASOF JOIN are supported); swap the inputs and write LEFT ASOF JOIN",
        ),
        (
            "SELECT l.key FROM l FULL OUTER ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts",
            "FULL ASOF JOIN (only ASOF JOIN and LEFT ASOF JOIN are supported)",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r",
            "ASOF JOIN without a condition; write l ASOF JOIN r ON l.k = r.k AND l.ts >= r.ts",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r MATCH_CONDITION (l.ts >= r.ts) USING (key)",
            "USING (...) after an ASOF JOIN's MATCH_CONDITION; write ON l.k = r.k",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN c ON l.key = c.key AND l.ts >= l.ts",
            "ASOF JOIN over a changelog input",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r ON l.ts >= r.ts",
            "an ASOF JOIN without an equality between its two inputs",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r MATCH_CONDITION (l.value >= r.value) ON l.key = r.key",
            "both sides must be the inputs' event-time columns",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r MATCH_CONDITION (l.ts = r.ts) ON l.key = r.key",
            "it must compare the left input's event time with the right's by >=, >, <= or <",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r ON l.key = r.key",
            "an ASOF JOIN without a comparison of the two inputs' event times",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts AND l.value < r.value",
            "an ASOF JOIN with more than one comparison of the two inputs' columns",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts AND r.value > 3",
            "condition r.value > Int64(3) in an ASOF JOIN (only key equalities, the match condition and one tolerance written r.ts >= l.ts - INTERVAL '...' are allowed)",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts \
             AND r.ts <= l.ts + INTERVAL '1' SECOND",
            "in an ASOF JOIN (only key equalities",
        ),
        (
            "SELECT l.key FROM l ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts OR l.value = 1",
            "an ASOF JOIN condition that is not a conjunction",
        ),
        (
            "SELECT __asof_match(l.value > 1) AS x FROM l",
            "__asof_match() outside an ASOF JOIN condition",
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
        "{}; {}; CREATE STREAM a AS SELECT {COLS} FROM l ASOF JOIN r \
         MATCH_CONDITION (l.ts >= r.ts) ON l.key = r.key",
        source_ddl("l", 0, ""),
        source_ddl("r", 0, "")
    ))
    .await
    .expect("ddl");
    db.start().await.expect("start");
    db
}

/// A held left row and the kept right rows survive a checkpoint and a
/// restart: the row emitted before the checkpoint is not emitted again,
/// the held one is emitted once after it, matched with a right row of the
/// first run.
#[tokio::test]
async fn asof_across_restore() {
    held_left_row_across_restore(|d| async move { open_pair(&d).await }, "r").await;
}

/// The restore case of [`asof_across_restore`] on any pipeline that `open`
/// makes: stream `a` over `l` and the right source `right`, selecting
/// `COLS` of an ASOF `>=` match (the temporal join is one too).
pub(crate) async fn held_left_row_across_restore<F, Fut>(open: F, right: &str)
where
    F: Fn(std::path::PathBuf) -> Fut,
    Fut: std::future::Future<Output = sluice::Database>,
{
    let dir = tempfile::tempdir().expect("tempdir");
    let (i, t) = (Cell::Int, |ms: i64| Cell::Int(BASE + ms));
    let db = open(dir.path().to_path_buf()).await;
    let mut sub = db.subscribe("a").await.expect("subscribe");
    let (l, r) = (
        db.source("l").await.expect("l"),
        db.source(right).await.expect("right"),
    );
    r.push(batch(&[(1, 100, 10), (1, 500, 11)]))
        .await
        .expect("push r");
    l.push(batch(&[(1, 300, 1), (1, 600, 2)]))
        .await
        .expect("push l");
    // The watermark is 500: the row at 300 is final, the one at 600 held.
    let first = appended(&[next(&mut sub).await]).expect("append-only");
    assert_eq!(first, vec![vec![i(1), t(300), i(1), t(100), i(10)]]);
    db.checkpoint().await.expect("checkpoint");
    db.abort().await.expect("abort");
    drop(db);

    let db = open(dir.path().to_path_buf()).await;
    let mut sub = db.subscribe("a").await.expect("subscribe");
    let (l, r) = (
        db.source("l").await.expect("l"),
        db.source(right).await.expect("right"),
    );
    r.push(batch(&[(1, 900, 13)])).await.expect("push r");
    l.push(batch(&[(1, 1_000, 3)])).await.expect("push l");
    l.finish().await.expect("finish l");
    r.finish().await.expect("finish r");
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let second = appended(&drain(&mut sub).await).expect("append-only");
    assert_eq!(
        second,
        vec![
            vec![i(1), t(600), i(2), t(500), i(11)],
            vec![i(1), t(1_000), i(3), t(900), i(13)],
        ]
    );
}

/// A right row exactly at the watermark can still come, so a left row at
/// the watermark is not final yet (backward), nor is a match at it
/// (forward): both wait, and then take the smallest right row at the
/// closest time (value 0, which came in the later cycle).
#[tokio::test]
async fn asof_waits_for_rows_at_the_watermark() {
    let cols = "l.ts AS lts, l.value AS lv, r.value AS rv";
    let db = open_tuned(
        &format!(
            "{}; {}; CREATE STREAM seen AS SELECT key FROM l; \
             CREATE STREAM b AS SELECT {cols} FROM l ASOF JOIN r ON l.key = r.key AND l.ts >= r.ts; \
             CREATE STREAM f AS SELECT {cols} FROM l ASOF JOIN r ON l.key = r.key AND l.ts <= r.ts",
            source_ddl("l", 0, ""),
            source_ddl("r", 0, "")
        ),
        1,
    )
    .await;
    let mut seen = db.subscribe("seen").await.expect("subscribe");
    let mut b = db.subscribe("b").await.expect("subscribe");
    let mut f = db.subscribe("f").await.expect("subscribe");
    let (l, r) = (
        db.source("l").await.expect("l"),
        db.source("r").await.expect("r"),
    );
    r.push(batch(&[(1, 500, 1)])).await.expect("push r");
    l.push(batch(&[(1, 500, 10), (1, 700, 11)]))
        .await
        .expect("push l");
    // The cycle with the left rows has run: the watermark is 500.
    next(&mut seen).await;
    r.push(batch(&[(1, 500, 0), (1, 800, 3)]))
        .await
        .expect("push r");
    l.finish().await.expect("finish l");
    r.finish().await.expect("finish r");
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    let (i, t) = (Cell::Int, |ms: i64| Cell::Int(BASE + ms));
    let got = appended(&drain(&mut b).await).expect("append-only");
    assert_eq!(
        got,
        vec![vec![t(500), i(10), i(0)], vec![t(700), i(11), i(0)],]
    );
    let got = appended(&drain(&mut f).await).expect("append-only");
    assert_eq!(
        got,
        vec![vec![t(500), i(10), i(0)], vec![t(700), i(11), i(3)],]
    );
}
