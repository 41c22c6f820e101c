//! Operator-level tests: plans compiled from SQL, driven batch by batch.

use std::sync::Arc;

use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use rustc_hash::FxHashMap;
use sluice_engine::catalog::{Catalog, SourceDef};
use sluice_engine::operators::{CycleInputs, Operator};
use sluice_engine::options::PipelineOptions;
use sluice_sql::{parse_sql, Statement, StreamPlanner};

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]))
}

fn batch(rows: &[(i64, i64, i64)]) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.2),
            )),
        ],
    )
    .unwrap()
}

async fn compile(query: &str) -> Operator {
    let mut catalog = Catalog::default();
    let src =
        parse_sql("CREATE SOURCE s (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
            .unwrap();
    let Statement::CreateSource(src) = src.into_iter().next().unwrap() else {
        unreachable!()
    };
    catalog
        .sources
        .push(SourceDef::from_statement(src, &PipelineOptions::default(), None).unwrap());
    let Statement::CreateStream(cs) = parse_sql(query).unwrap().into_iter().next().unwrap() else {
        unreachable!()
    };
    let plan = StreamPlanner::plan_stream(&catalog, &cs).await.unwrap();
    Operator::compile(&plan.root).unwrap()
}

fn run(op: &mut Operator, rows: &[(i64, i64, i64)], watermark: i64) -> String {
    let mut inputs: CycleInputs = FxHashMap::default();
    if !rows.is_empty() {
        inputs.insert(Arc::from("s"), vec![batch(rows)]);
    }
    let out = op.run(&inputs, watermark).unwrap();
    pretty_format_batches(&out).unwrap().to_string()
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().filter(|l| l.starts_with('|')).skip(1).collect()
}

#[tokio::test]
async fn sessions_merge_across_batches() {
    let mut op = compile(
        "CREATE STREAM x AS SELECT k, session(ts, INTERVAL '10' MILLISECOND) AS s, COUNT(*) AS n, SUM(v) AS total \
         FROM s GROUP BY k, session(ts, INTERVAL '10' MILLISECOND)",
    )
    .await;
    // Two separate sessions for key 1: [0, 15) and [30, 40).
    assert_eq!(
        lines(&run(&mut op, &[(1, 1, 0), (1, 2, 5), (1, 4, 30)], 0)).len(),
        0
    );
    // Rows at 14 and 22 bridge them: [0, 15) + [14, 24) + [22, 32) + [30, 40).
    assert_eq!(lines(&run(&mut op, &[(1, 8, 14), (1, 16, 22)], 5)).len(), 0);
    // The watermark passes everything: one merged session [0, 40) with all five rows.
    let out = run(&mut op, &[], 100);
    assert_eq!(
        lines(&out),
        vec!["| 1 | 1970-01-01T00:00:00 | 5 | 31    |"],
        "{out}"
    );
}

#[tokio::test]
async fn separate_sessions_close_independently() {
    let mut op = compile(
        "CREATE STREAM x AS SELECT k, session(ts, INTERVAL '10' MILLISECOND) AS s, COUNT(*) AS n \
         FROM s GROUP BY k, session(ts, INTERVAL '10' MILLISECOND)",
    )
    .await;
    run(&mut op, &[(1, 0, 0), (2, 0, 3), (1, 0, 50)], 0);
    // Sessions are end-exclusive: [0, 10) closes at watermark 10, [3, 13) at 13.
    let out = run(&mut op, &[], 12);
    assert_eq!(
        lines(&out),
        vec!["| 1 | 1970-01-01T00:00:00 | 1 |"],
        "{out}"
    );
    let out = run(&mut op, &[], 13);
    assert_eq!(
        lines(&out),
        vec!["| 2 | 1970-01-01T00:00:00.003 | 1 |"],
        "{out}"
    );
    let out = run(&mut op, &[], 60);
    assert_eq!(
        lines(&out),
        vec!["| 1 | 1970-01-01T00:00:00.050 | 1 |"],
        "{out}"
    );
}

#[tokio::test]
async fn session_changes_retract_merged_sessions() {
    let mut op = compile(
        "CREATE STREAM x AS SELECT k, session(ts, INTERVAL '10' MILLISECOND) AS s, COUNT(*) AS n \
         FROM s GROUP BY k, session(ts, INTERVAL '10' MILLISECOND) EMIT CHANGES",
    )
    .await;
    let out = run(&mut op, &[(1, 0, 0), (1, 0, 18)], 0);
    assert_eq!(lines(&out).len(), 2, "{out}");
    // A row at 9 opens [9, 19), which overlaps both [0, 10) and [18, 28).
    let out = run(&mut op, &[(1, 0, 9)], 0);
    let got = lines(&out);
    assert_eq!(got.len(), 3, "{out}");
    assert!(
        got.iter().filter(|l| l.contains("retract")).count() == 2,
        "{out}"
    );
    assert!(
        got.iter()
            .any(|l| l.contains("| 3 ") && l.contains("insert")),
        "{out}"
    );
}

#[tokio::test]
async fn hop_emits_every_overlapping_window_once() {
    let mut op = compile(
        "CREATE STREAM x AS SELECT hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '10' MILLISECOND) AS w, COUNT(*) AS n \
         FROM s GROUP BY hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '10' MILLISECOND)",
    )
    .await;
    run(&mut op, &[(1, 0, 7)], 0);
    let out = run(&mut op, &[], 10);
    assert_eq!(lines(&out), vec!["| 1970-01-01T00:00:00 | 1 |"], "{out}");
    let out = run(&mut op, &[], 15);
    assert_eq!(
        lines(&out),
        vec!["| 1970-01-01T00:00:00.005 | 1 |"],
        "{out}"
    );
    // A row for a closed window is dropped and counted.
    run(&mut op, &[(1, 0, 3)], 15);
    assert_eq!(op.dropped_late(), 2);
}

/// A size that is not a multiple of the slide: windows start at every
/// multiple of the slide, last `size`, and each closes when the watermark
/// reaches its own end.
#[tokio::test]
async fn hop_with_a_size_not_a_multiple_of_the_slide() {
    let q = |size: u32| {
        let w = format!("hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '{size}' MILLISECOND)");
        format!("CREATE STREAM x AS SELECT {w} AS w, COUNT(*) AS n, SUM(v) AS total FROM s GROUP BY {w}")
    };
    // Size 7: [0, 7), [5, 12), [10, 17). A row at 6 is in the first two, one
    // at 8 only in [5, 12), one at 11 in [5, 12) and [10, 17).
    let mut op = compile(&q(7)).await;
    run(&mut op, &[(1, 1, 6), (1, 10, 8), (1, 100, 11)], 0);
    assert!(lines(&run(&mut op, &[], 6)).is_empty());
    let out = run(&mut op, &[], 7);
    assert_eq!(
        lines(&out),
        vec!["| 1970-01-01T00:00:00 | 1 | 1     |"],
        "{out}"
    );
    let out = run(&mut op, &[], 12);
    assert_eq!(
        lines(&out),
        vec!["| 1970-01-01T00:00:00.005 | 3 | 111   |"],
        "{out}"
    );
    let out = run(&mut op, &[], 17);
    assert_eq!(
        lines(&out),
        vec!["| 1970-01-01T00:00:00.010 | 1 | 100   |"],
        "{out}"
    );
    // Size 3, smaller than the slide: [0, 3), [5, 8), ...; a row at 4 is in
    // no window, neither emitted nor counted late.
    let mut op = compile(&q(3)).await;
    run(&mut op, &[(1, 1, 2), (1, 10, 4), (1, 100, 7)], 0);
    let out = run(&mut op, &[], 100);
    assert_eq!(
        lines(&out),
        vec![
            "| 1970-01-01T00:00:00     | 1 | 1     |",
            "| 1970-01-01T00:00:00.005 | 1 | 100   |",
        ],
        "{out}"
    );
    assert_eq!(op.dropped_late(), 0);
}

#[tokio::test]
async fn tumble_with_offset_and_window_end() {
    let mut op = compile(
        "CREATE STREAM x AS SELECT tumble(ts, INTERVAL '10' MILLISECOND, INTERVAL '3' MILLISECOND) AS ws, \
         tumble_end(ts, INTERVAL '10' MILLISECOND, INTERVAL '3' MILLISECOND) AS we, SUM(v) AS total FROM s \
         GROUP BY tumble(ts, INTERVAL '10' MILLISECOND, INTERVAL '3' MILLISECOND), tumble_end(ts, INTERVAL '10' MILLISECOND, INTERVAL '3' MILLISECOND)",
    )
    .await;
    run(&mut op, &[(1, 1, 2), (1, 10, 3), (1, 100, 12)], 0);
    let out = run(&mut op, &[], 13);
    assert_eq!(
        lines(&out),
        vec![
            "| 1969-12-31T23:59:59.993 | 1970-01-01T00:00:00.003 | 1     |",
            "| 1970-01-01T00:00:00.003 | 1970-01-01T00:00:00.013 | 110   |",
        ],
        "{out}"
    );
}

/// Cycles to run: (rows, watermark) each.
type Steps<'a> = &'a [(&'a [(i64, i64, i64)], i64)];

/// Snapshot after `first`, restore into a fresh operator, feed `second` to
/// both: the restored one must produce exactly what the original does.
async fn assert_restores(query: &str, first: Steps<'_>, second: Steps<'_>) {
    let mut original = compile(query).await;
    for (rows, wm) in first {
        run(&mut original, rows, *wm);
    }
    let mut parts = Vec::new();
    original.snapshot(&mut parts).unwrap();
    let mut restored = compile(query).await;
    restored.restore(&mut parts.into_iter().collect()).unwrap();
    for (rows, wm) in second {
        let a = run(&mut original, rows, *wm);
        let b = run(&mut restored, rows, *wm);
        assert_eq!(a, b, "{query}");
    }
    assert_eq!(original.dropped_late(), restored.dropped_late());
}

#[tokio::test]
async fn every_aggregation_survives_snapshot_and_restore() {
    let first: Steps<'_> = &[
        (&[(1, 5, 1), (2, 7, 3), (1, 9, 12)], 2),
        (&[(3, 1, 25), (1, 4, 8)], 9),
    ];
    let second: Steps<'_> = &[
        (&[(1, 2, 14), (2, 3, 30), (4, 4, 31)], 20),
        (&[(1, 6, 33)], 25),
        (&[], 1_000),
    ];
    let aggs = "COUNT(*) AS n, SUM(v) AS s, AVG(v) AS a, COUNT(DISTINCT v) AS d, MIN(v) AS lo";
    for (window, emit) in [
        ("tumble(ts, INTERVAL '10' MILLISECOND)", ""),
        ("tumble(ts, INTERVAL '10' MILLISECOND)", "EMIT CHANGES"),
        (
            "hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '15' MILLISECOND)",
            "",
        ),
        // Sizes that are not a multiple of the slide.
        (
            "hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '12' MILLISECOND)",
            "",
        ),
        (
            "hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '12' MILLISECOND)",
            "EMIT CHANGES",
        ),
        (
            "hop(ts, INTERVAL '5' MILLISECOND, INTERVAL '3' MILLISECOND)",
            "",
        ),
        ("session(ts, INTERVAL '6' MILLISECOND)", ""),
        ("session(ts, INTERVAL '6' MILLISECOND)", "EMIT CHANGES"),
    ] {
        let q = format!(
            "CREATE STREAM x AS SELECT k, {window} AS w, {aggs} FROM s GROUP BY k, {window} {emit}"
        );
        assert_restores(&q, first, second).await;
    }
    let q = format!("CREATE STREAM x AS SELECT k, {aggs} FROM s GROUP BY k");
    assert_restores(&q, first, second).await;
    let q = format!("CREATE STREAM x AS SELECT {aggs} FROM s");
    assert_restores(&q, first, second).await;
}

#[tokio::test]
async fn a_self_join_checkpoints_both_sides_exactly() {
    let sql = "CREATE STREAM j AS SELECT a.k, a.v AS av, b.v AS bv FROM s a JOIN s b \
               ON a.k = b.k AND a.v < b.v";
    let first = [(1, 1, 10), (2, 5, 11), (1, 3, 12)];
    let second = [(1, 2, 20), (2, 9, 21), (3, 1, 22)];
    let mut straight = compile(sql).await;
    let a = run(&mut straight, &first, 0);
    let b = run(&mut straight, &second, 0);
    // First cycle: (1,1) < (1,3), once. Second: the new rows first probe
    // the kept right side as the left input ((1,2) < (1,3)), then probe
    // every left row as the right input ((1,1) < (1,2), (2,5) < (2,9));
    // nothing for key 3.
    assert_eq!(lines(&a), ["| 1 | 1  | 3  |"]);
    assert_eq!(
        lines(&b),
        ["| 1 | 2  | 3  |", "| 1 | 1  | 2  |", "| 2 | 5  | 9  |"]
    );

    let mut before = compile(sql).await;
    run(&mut before, &first, 0);
    let mut parts = Vec::new();
    before.snapshot(&mut parts).unwrap();
    let mut resumed = compile(sql).await;
    resumed
        .restore(&mut parts.clone().into_iter().collect())
        .unwrap();
    assert_eq!(run(&mut resumed, &second, 0), b);
    let mut again = Vec::new();
    resumed.snapshot(&mut again).unwrap();
    let mut expected = Vec::new();
    straight.snapshot(&mut expected).unwrap();
    assert_eq!(again, expected, "same state after the same input");
}

#[tokio::test]
async fn an_aggregate_over_a_changelog_checkpoints_its_live_rows() {
    let sql = "CREATE STREAM t AS SELECT mx % 2 AS parity, COUNT(*) AS keys, SUM(mx) AS s \
               FROM (SELECT k, MAX(v) AS mx FROM s GROUP BY k) GROUP BY mx % 2";
    let first = [(1, 4, 10), (2, 7, 11), (3, 2, 12)];
    let second = [(1, 9, 20), (3, 1, 21), (4, 6, 22)];
    let mut straight = compile(sql).await;
    let a = run(&mut straight, &first, 0);
    let b = run(&mut straight, &second, 0);
    // Maxima 4, 7, 2: even {4, 2}, odd {7}. Then key 1 moves to 9 (odd),
    // key 3 stays 2, key 4 adds 6: even {2, 6}, odd {7, 9}.
    assert_eq!(
        lines(&a),
        [
            "| 0      | 2    | 6 | insert   |",
            "| 1      | 1    | 7 | insert   |"
        ]
    );
    assert_eq!(
        lines(&b),
        [
            "| 0      | 2    | 6  | retract  |",
            "| 1      | 1    | 7  | retract  |",
            "| 0      | 2    | 8  | insert   |",
            "| 1      | 2    | 16 | insert   |"
        ]
    );
    let mut before = compile(sql).await;
    run(&mut before, &first, 0);
    let mut parts = Vec::new();
    before.snapshot(&mut parts).unwrap();
    let mut resumed = compile(sql).await;
    resumed.restore(&mut parts.into_iter().collect()).unwrap();
    assert_eq!(run(&mut resumed, &second, 0), b);
}

/// Every stateful operator of a tree is reached through the one trait, in
/// checkpoint part order (inputs first, left before right), and a batch on
/// a port the operator does not have is refused, not folded into a side.
#[tokio::test]
async fn stateful_operators_are_listed_in_part_order_and_check_their_ports() {
    let sql = "CREATE STREAM t AS SELECT n % 2 AS p, COUNT(*) AS c FROM \
               (SELECT a.k, COUNT(*) AS n FROM s a JOIN s b ON a.k = b.k GROUP BY a.k) \
               GROUP BY n % 2";
    let mut op = compile(sql).await;
    let mut ops = Vec::new();
    op.stateful_operators(&mut ops);
    let kinds: Vec<&str> = ops.iter().map(|o| o.kind()).collect();
    assert_eq!(kinds, ["join", "aggregate", "changelog aggregate"]);
    let mut parts = Vec::new();
    op.snapshot(&mut parts).unwrap();
    assert_eq!(parts.len(), 3, "one part per stateful operator");

    let mut window = compile(
        "CREATE STREAM w AS SELECT k, tumble(ts, INTERVAL '10' MILLISECOND) AS w, COUNT(*) AS n \
         FROM s GROUP BY k, tumble(ts, INTERVAL '10' MILLISECOND)",
    )
    .await;
    let mut ops = Vec::new();
    window.stateful_operators(&mut ops);
    let [only] = ops.as_mut_slice() else {
        panic!("one stateful operator expected, got {}", ops.len())
    };
    assert_eq!(only.kind(), "window aggregate");
    let e = only.update(2, batch(&[(1, 1, 1)])).unwrap_err();
    assert_eq!(e.code(), "SLC-ENG-007");
    assert_eq!(
        e.to_string(),
        "internal error: window aggregate has no input port 2"
    );
}

/// A session snapshot whose keys do not fit the query (keyed sessions
/// restored into sessions over all rows, and back) is refused as damaged,
/// not restored under made-up keys.
#[tokio::test]
async fn a_session_snapshot_with_keys_of_another_shape_is_refused() {
    let w = "session(ts, INTERVAL '6' MILLISECOND)";
    let keyed =
        format!("CREATE STREAM x AS SELECT k, {w} AS w, COUNT(*) AS n FROM s GROUP BY k, {w}");
    let global = format!("CREATE STREAM x AS SELECT {w} AS w, COUNT(*) AS n FROM s GROUP BY {w}");
    for (from, to) in [(&keyed, &global), (&global, &keyed)] {
        let mut original = compile(from).await;
        run(&mut original, &[(1, 5, 1), (2, 7, 3)], 0);
        let mut parts = Vec::new();
        original.snapshot(&mut parts).unwrap();
        let mut restored = compile(to).await;
        let err = restored
            .restore(&mut parts.into_iter().collect())
            .unwrap_err();
        assert!(
            err.to_string().contains("damaged session snapshot"),
            "{from} into {to}: {err}"
        );
    }
}
