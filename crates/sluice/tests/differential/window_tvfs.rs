//! Flink's window table-valued functions (`TABLE(TUMBLE(TABLE src,
//! DESCRIPTOR(ts), size))`, `HOP`, `SESSION`): the same rows as the
//! `GROUP BY tumble(...)` form and as the batch oracle, on disordered input;
//! the columns they add; their EXPLAIN; and the shapes refused at CREATE.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, ev, interval, open, open_tuned, push_all, select,
    source_ddl, Cell, BASE,
};
use crate::gen::{per_cycle, split_late, stream, Split, Stream};
use crate::windows::{Win, AGGS};

/// The TVF call over `src` for a window, positional or with Flink's argument names.
fn tvf_call(w: &Win, named: bool) -> String {
    let (name, rest) = match *w {
        Win::Tumble { size, .. } => ("TUMBLE", vec![("SIZE", interval(size))]),
        Win::Hop { slide, size, .. } => (
            "HOP",
            vec![("SLIDE", interval(slide)), ("SIZE", interval(size))],
        ),
        Win::Session { gap, .. } => ("SESSION", vec![("GAP", interval(gap))]),
        Win::TumbleOffset { .. } => unreachable!("not generated here"),
    };
    let mut args = vec![
        ("DATA", "TABLE src".to_string()),
        ("TIMECOL", "DESCRIPTOR(ts)".to_string()),
    ];
    args.extend(rest);
    let args: Vec<String> = args
        .into_iter()
        .map(|(n, a)| if named { format!("{n} => {a}") } else { a })
        .collect();
    format!("TABLE({name}({}))", args.join(", "))
}

/// The TVF query with the same output columns, in the same order, as the
/// `GROUP BY` form of [`Win::engine_sql`].
fn tvf_query(w: &Win, named: bool) -> String {
    let from = tvf_call(w, named);
    let cols = match w {
        Win::Session { .. } => "window_start AS ss, key",
        _ => "key, window_start AS ws, window_end AS we",
    };
    format!("SELECT {cols}, {AGGS} FROM {from} GROUP BY key, window_start, window_end")
}

/// Both forms in one database; each output compared with the oracle.
async fn check(s: &Stream, w: &Win, named: bool, pc: usize) -> Result<(), TestCaseError> {
    let Split { on_time, .. } = split_late(s);
    let (cols, group) = w.engine_sql();
    let grouped = format!("SELECT {cols}, {AGGS} FROM src GROUP BY {group}");
    let tvf = tvf_query(w, named);
    let ddl = format!(
        "{}; \
         CREATE STREAM tvf AS {tvf} EMIT ON WINDOW CLOSE; \
         CREATE STREAM grouped AS {grouped} EMIT ON WINDOW CLOSE; \
         CREATE MATERIALIZED VIEW tvf_changes AS {tvf} EMIT CHANGES",
        source_ddl("src", s.delay_ms, "")
    );
    let db = open_tuned(&ddl, pc).await;
    let mut tvf_sub = db.subscribe("tvf").await.expect("subscribe");
    let mut grouped_sub = db.subscribe("grouped").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let changes_view = select(&db, "SELECT * FROM tvf_changes").await;
    db.shutdown().await.expect("shutdown");
    let fail = TestCaseError::fail;
    let tvf_rows = appended(&drain(&mut tvf_sub).await).map_err(fail)?;
    let grouped_rows = appended(&drain(&mut grouped_sub).await).map_err(fail)?;
    let expected = w.oracle(&on_time).await;
    prop_assert_eq!(&tvf_rows, &grouped_rows, "TVF form vs GROUP BY form");
    prop_assert_eq!(&tvf_rows, &expected, "TVF form vs batch oracle");
    prop_assert_eq!(&changes_view, &expected, "TVF form, EMIT CHANGES view");
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn tumble_tvf_matches_group_by_and_batch(s in stream(60), pc in per_cycle(), size in prop_oneof![Just(5_000i64), Just(10_000)], named in any::<bool>()) {
        block_on(check(&s, &Win::Tumble { size, with_end: true, keyed: true }, named, pc))?;
    }

    #[test]
    fn hop_tvf_matches_group_by_and_batch(s in stream(60), pc in per_cycle(), slide in prop_oneof![Just(2_000i64), Just(3_000)], size in prop_oneof![Just(4_000i64), Just(5_000), Just(10_000)], named in any::<bool>()) {
        block_on(check(&s, &Win::Hop { slide, size, with_end: true }, named, pc))?;
    }

    #[test]
    fn session_tvf_matches_group_by_and_batch(s in stream(60), pc in per_cycle(), gap in prop_oneof![Just(1_000i64), Just(3_000), Just(8_000)], named in any::<bool>()) {
        block_on(check(&s, &Win::Session { gap, keyed: true }, named, pc))?;
    }
}

/// One on-time batch through `query` (EMIT ON WINDOW CLOSE), all rows out.
async fn run_one(query: &str, events: &[crate::common::Event]) -> Vec<Vec<Cell>> {
    let db = open(&format!(
        "{}; CREATE STREAM out AS {query} EMIT ON WINDOW CLOSE",
        source_ddl("src", 0, "")
    ))
    .await;
    let mut sub = db.subscribe("out").await.expect("subscribe");
    push_all(&db, "src", &[events.to_vec()]).await;
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
    appended(&drain(&mut sub).await).expect("append-only")
}

/// `window_end` of a session is its last event plus the gap, and
/// `window_time` is one millisecond before `window_end`, for every TVF.
#[tokio::test]
async fn window_end_and_window_time_columns() {
    let events = [
        ev(1, BASE + 100, Some(1)),
        ev(1, BASE + 900, Some(2)),
        ev(2, BASE + 5_000, Some(3)),
    ];
    let session = run_one(
        "SELECT key, window_start, window_end, window_time, COUNT(*) AS n \
         FROM TABLE(SESSION(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND)) \
         GROUP BY window_start, window_end, key",
        &events,
    )
    .await;
    let i = Cell::Int;
    assert_eq!(
        session,
        vec![
            vec![i(1), i(BASE + 100), i(BASE + 1_900), i(BASE + 1_899), i(2)],
            vec![
                i(2),
                i(BASE + 5_000),
                i(BASE + 6_000),
                i(BASE + 5_999),
                i(1)
            ],
        ]
    );
    // A qualified reference through the TVF's alias, and HAVING on a window column.
    let tumble = run_one(
        "SELECT w.window_start, w.window_time, COUNT(*) AS n \
         FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '2' SECOND)) AS w \
         GROUP BY w.window_start, w.window_end HAVING w.window_end > w.window_start",
        &events,
    )
    .await;
    assert_eq!(
        tumble,
        vec![
            vec![i(BASE), i(BASE + 1_999), i(2)],
            vec![i(BASE + 4_000), i(BASE + 5_999), i(1)],
        ]
    );
}

/// EXPLAIN shows the TVF as the window aggregation it runs as, with the
/// same plan text as the GROUP BY form.
#[tokio::test]
async fn explain_of_a_tvf_query() {
    let db = open(&source_ddl("src", 1_000, "")).await;
    let explain = |q: String| {
        let db = &db;
        async move {
            let out = db
                .execute(&format!("EXPLAIN CREATE STREAM x AS {q}"))
                .await
                .expect("explain");
            crate::common::rows(&out)
                .into_iter()
                .map(|r| match &r[0] {
                    Cell::Str(s) => s.clone(),
                    other => panic!("not text: {other:?}"),
                })
                .collect::<Vec<_>>()
        }
    };
    let tvf = explain(
        "SELECT key, window_start, window_end, COUNT(*) AS n FROM TABLE(HOP(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '3' SECOND)) GROUP BY key, window_start, window_end".into(),
    )
    .await;
    let grouped = explain(
        "SELECT key, hop(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND) AS window_start, hop_end(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND) AS window_end, COUNT(*) AS n FROM src GROUP BY key, hop(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND), hop_end(ts, INTERVAL '1' SECOND, INTERVAL '3' SECOND)".into(),
    )
    .await;
    assert_eq!(tvf, grouped);
    assert!(
        tvf.iter().any(|l| l
            == "  WindowAggregate: window=hop(slide=1000ms, size=3000ms) on src.ts, keys=[src.key], aggregates=[count(Int64(1))], emit=on window close"),
        "{tvf:?}"
    );
}

/// The exact error of a refused statement.
async fn refusal(sql: &str) -> String {
    let db = open(&format!(
        "{}; CREATE STREAM named AS SELECT key, ts, value, key AS window_end FROM src",
        source_ddl("src", 1_000, "")
    ))
    .await;
    match db.execute(sql).await {
        Ok(_) => panic!("accepted: {sql}"),
        Err(e) => e.to_string(),
    }
}

/// Each shape Sluice cannot run over a window TVF, refused at CREATE with
/// the construct named and the spelling that works.
#[tokio::test]
async fn refused_shapes() {
    let cases = [
        (
            "CREATE STREAM x AS SELECT key, window_start FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND))",
            "unsupported: TUMBLE(TABLE ...) without GROUP BY window_start, window_end: Sluice runs a window TVF only as a windowed aggregation; write SELECT window_start, window_end, k, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, COUNT(*) AS n FROM TABLE(HOP(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND, INTERVAL '2' SECOND)) GROUP BY window_start",
            "unsupported: an aggregation over HOP(TABLE ...) must GROUP BY both window_start and window_end (Flink's rule); write SELECT window_start, window_end, k, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND)) AS w JOIN src ON w.key = src.key GROUP BY window_start, window_end",
            "unsupported: TUMBLE(TABLE ...) joined with another relation: a window TVF must be the only relation in FROM; write SELECT window_start, window_end, k, COUNT(*) FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(SESSION(TABLE src PARTITION BY key, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "unsupported: PARTITION BY inside SESSION(TABLE ...): sessions are already per GROUP BY key; write SESSION(TABLE t, DESCRIPTOR(ts), gap) and GROUP BY window_start, window_end and the partition columns",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND) GROUP BY window_start, window_end",
            "unsupported: TUMBLE(TABLE ...) outside TABLE(...): write FROM TABLE(TUMBLE(TABLE t, DESCRIPTOR(ts), ...))",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND)) WHERE window_start > ts GROUP BY window_start, window_end",
            "unsupported: window_start / window_end / window_time in the WHERE of a query over TUMBLE(TABLE ...): filter on them in HAVING, or in a query over this stream",
        ),
        (
            "CREATE STREAM x AS SELECT window_time, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end, window_time",
            "unsupported: GROUP BY window_time over TUMBLE(TABLE ...): group by window_start and window_end, and select window_time",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE src, ts, INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "syntax error: TUMBLE(TABLE ...): the time argument must be DESCRIPTOR(column), found ts",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(HOP(TABLE src, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "syntax error: HOP(TABLE ...): missing argument SIZE",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(HOP(DATA => TABLE src, TIMECOL => DESCRIPTOR(ts), SLIDE => INTERVAL '1' SECOND, SIZE => INTERVAL '2' SECOND, OFFSET => INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "syntax error: HOP(TABLE ...): unknown argument name 'OFFSET' (known: DATA, TIMECOL, SLIDE, SIZE)",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE named, DESCRIPTOR(ts), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "unsupported: TUMBLE(TABLE named, ...): 'named' already has a column named 'window_end', which the window TVF adds; rename it in a stream first",
        ),
        (
            "CREATE STREAM x AS SELECT window_start, window_end, COUNT(*) AS n FROM TABLE(TUMBLE(TABLE src, DESCRIPTOR(nope), INTERVAL '1' SECOND)) GROUP BY window_start, window_end",
            "TUMBLE(TABLE src, DESCRIPTOR(nope), ...): 'src' has no column 'nope'",
        ),
    ];
    for (sql, expected) in cases {
        assert_eq!(refusal(sql).await, expected, "{sql}");
    }
}
