//! Every kind of stateful operator recovers exactly from checkpoints taken
//! every 20 ms: windows (closing and EMIT CHANGES), a non-windowed
//! updating aggregate, an aggregate over its changelog, an interval join
//! and session windows. Their captures hand over only what changed since
//! the previous checkpoint and are built by the checkpoint tail, so this
//! drives many small deltas, a fault part-way and an in-process restore,
//! and compares every materialized view with a run without the fault.

use std::path::Path;

use sluice::Database;
use sluice_engine::fault::FaultAction;

use crate::common::{bounded, once_at_row};

const ROWS: usize = 20_000;
const AT: u64 = 13_000;

const VIEWS: [(&str, &str); 6] = [
    ("windows", "w, k"),
    ("window_changes", "w, k"),
    ("per_key", "k"),
    ("per_count", "b"),
    ("pairs", "id, bid"),
    ("sessions", "k, s"),
];

fn write_input(path: &Path) {
    let mut s = String::from("id,k,ts\n");
    for i in 0..ROWS {
        // Bursts of seven rows per key, 70 ms apart; a key comes back
        // 1.4 s later, so sessions (300 ms gap) close all along.
        s.push_str(&format!("{i},{},{}\n", (i / 7) % 20, i * 10));
    }
    std::fs::write(path, s).unwrap();
}

async fn open(dir: &Path, input: &Path) -> Database {
    let db = Database::builder()
        .state_dir(dir.join("state"))
        .set("checkpoint_interval", "20ms")
        .unwrap()
        .set("delivery", "exactly_once")
        .unwrap()
        .set("restart_budget", "2")
        .unwrap()
        .set("restart_backoff", "1ms")
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute(&format!(
        "CREATE SOURCE src (id BIGINT, k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = '{}', format = 'csv', batch_size = '100');
         CREATE STREAM f AS SELECT id, k, ts FROM src;
         CREATE MATERIALIZED VIEW windows AS SELECT tumble(ts, INTERVAL '1' SECOND) AS w, k,
           COUNT(*) AS n, SUM(id) AS s, MAX(id) AS top
           FROM f GROUP BY tumble(ts, INTERVAL '1' SECOND), k;
         CREATE MATERIALIZED VIEW window_changes AS SELECT tumble(ts, INTERVAL '2' SECOND) AS w, k,
           COUNT(*) AS n, MIN(id) AS low FROM f GROUP BY tumble(ts, INTERVAL '2' SECOND), k
           EMIT CHANGES;
         CREATE STREAM per_key_s AS SELECT k, COUNT(*) AS n, SUM(id) AS s FROM f GROUP BY k;
         CREATE MATERIALIZED VIEW per_key AS SELECT k, n, s FROM per_key_s;
         CREATE MATERIALIZED VIEW per_count AS SELECT n % 7 AS b, COUNT(*) AS c, MAX(s) AS top
           FROM per_key_s GROUP BY n % 7;
         CREATE MATERIALIZED VIEW pairs AS SELECT a.id, b.id AS bid FROM f a JOIN f b
           ON a.k = b.k AND b.ts BETWEEN a.ts AND a.ts + INTERVAL '20' MILLISECOND;
         CREATE MATERIALIZED VIEW sessions AS SELECT k, session(ts, INTERVAL '300' MILLISECOND) AS s,
           COUNT(*) AS n FROM f GROUP BY k, session(ts, INTERVAL '300' MILLISECOND);",
        input.display()
    ))
    .await
    .unwrap();
    db
}

/// Every view's rows, in a fixed order, as text.
async fn views(db: &Database) -> Vec<String> {
    let mut out = Vec::new();
    for (view, order) in VIEWS {
        let batches = db
            .execute(&format!("SELECT * FROM {view} ORDER BY {order}"))
            .await
            .unwrap();
        let text = sluice::arrow::util::pretty::pretty_format_batches(&batches)
            .unwrap()
            .to_string();
        out.push(format!("{view}:\n{text}"));
    }
    out
}

async fn run(dir: &Path, input: &Path, fault: bool) -> (Vec<String>, u32) {
    let db = open(dir, input).await;
    let armed = fault.then(|| once_at_row("f", FaultAction::Fail, AT));
    bounded(db.run_to_completion()).await.unwrap();
    let seen = views(&db).await;
    let restarts = db.restarts().await;
    if let Some(f) = armed {
        assert_eq!(f.fired(), 1);
    }
    bounded(db.shutdown()).await.unwrap();
    (seen, restarts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stateful_operator_recovers_exactly_from_incremental_captures() {
    let root = tempfile::tempdir().unwrap();
    let input = root.path().join("in.csv");
    write_input(&input);
    let clean_dir = root.path().join("clean");
    let faulty_dir = root.path().join("faulty");
    let (clean, _) = run(&clean_dir, &input, false).await;
    let (recovered, restarts) = run(&faulty_dir, &input, true).await;
    assert_eq!(restarts, 1, "the fault restarts the pipeline once");
    for (c, r) in clean.iter().zip(recovered.iter()) {
        assert_eq!(c, r);
    }
    // The views are not trivially empty (a title, a table frame of four
    // lines, and at least one row).
    for v in &clean {
        assert!(v.lines().count() > 5, "{v}");
    }
}
