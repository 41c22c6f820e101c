//! The activation sequence depends only on the input, its batches and the
//! watermark after each batch, never on how batches were grouped into
//! cycles: checked against the test harness, which applies the documented
//! ordering rules batch by batch, on generated input with disorder, random
//! batch sizes and random cycle sizes, through a chain of two filters that
//! can each remove whole batches.

use proptest::prelude::*;

use crate::common::{collect, disordered_events, log_rows, open, oracle, Event};

/// `HH:MM:SS.mmm` on 1970-01-01 for `ms` within the first day.
fn timestamp(ms: i64) -> String {
    format!(
        "1970-01-01 {:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1_000 % 60,
        ms % 1_000
    )
}

async fn run_pipeline(
    events: &[Event],
    batch_size: usize,
    per_cycle: usize,
) -> Vec<crate::common::LogRow> {
    let dir = tempfile::tempdir().unwrap();
    let mut csv = String::from("key,amount,ts\n");
    for e in events {
        csv.push_str(&format!("{},{},{}\n", e.0, e.1, timestamp(e.2)));
    }
    let path = dir.path().join("events.csv");
    std::fs::write(&path, csv).unwrap();
    let db = open(None, &[("max_batches_per_cycle", &per_cycle.to_string())]).await;
    db.execute(&format!(
        "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP,
            WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH (connector = 'file', path = '{}', format = 'csv', batch_size = '{batch_size}');
         CREATE STREAM kept AS SELECT key, amount, ts FROM ev WHERE amount % 3 <> 0;
         CREATE STREAM kept2 AS SELECT key, amount FROM kept WHERE key <> 5;
         CREATE STREAM log AS PROCESS activation_log FROM kept2;",
        path.display()
    ))
    .await
    .unwrap();
    let sub = db.subscribe("log").await.unwrap();
    db.run_to_completion().await.unwrap();
    db.shutdown().await.unwrap();
    log_rows(&collect(sub).await)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn activation_ids_do_not_depend_on_cycle_cuts(
        events in disordered_events(150),
        batch_size in 1usize..12,
        per_cycle in prop::sample::select(vec![1usize, 3, 64]),
    ) {
        let batches: Vec<Vec<Event>> = events.chunks(batch_size).map(<[Event]>::to_vec).collect();
        let expected = oracle(&batches, 1_000, 1_000, |e| e.1 % 3 != 0 && e.0 != 5);
        let rt = tokio::runtime::Runtime::new().unwrap();
        let got = rt.block_on(run_pipeline(&events, batch_size, per_cycle));
        prop_assert_eq!(got, expected);
    }
}
