//! Throughput of a file pipeline with a fast CSV sink (the existing bench
//! has no sinks). A measurement, not a check: run it by hand with
//! `cargo test -p sluice --test sink_throughput -- --ignored --nocapture`
//! (debug builds measure the debug build; compare like with like).

use std::time::{Duration, Instant};

use sluice::Database;

const ROWS: usize = 1_000_000;
const RUNS: usize = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand"]
async fn fast_csv_sink_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.csv");
    let mut s = String::from("id,ts\n");
    for i in 1..=ROWS {
        s.push_str(&format!("{i},{}\n", i * 10));
    }
    std::fs::write(&input, s).unwrap();
    let mut best = Duration::MAX;
    for run in 0..RUNS {
        let out = dir.path().join(format!("out{run}.csv"));
        let db = Database::open_in_memory().await.unwrap();
        db.execute(&format!(
            "CREATE SOURCE src (id BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
               WITH (connector = 'file', path = '{}', format = 'csv');
             CREATE STREAM q AS SELECT id, id * 2 AS d, ts FROM src;
             CREATE SINK q_out FROM q WITH (connector = 'file', path = '{}', format = 'csv');",
            input.display(),
            out.display()
        ))
        .await
        .unwrap();
        let started = Instant::now();
        db.run_to_completion().await.unwrap();
        db.shutdown().await.unwrap();
        let took = started.elapsed();
        best = best.min(took);
        let lines = std::fs::read_to_string(&out).unwrap().lines().count();
        assert_eq!(lines, ROWS + 1);
        eprintln!("run {run}: {ROWS} rows in {took:?}");
    }
    eprintln!(
        "best of {RUNS}: {best:?}, {:.0} rows/s",
        ROWS as f64 / best.as_secs_f64()
    );
}
