//! Watermark progress with several sources (idleness) and DROP while running.

use std::time::{Duration, Instant};

use sluice::{Database, PushSource, Subscription};

use crate::common::{
    appended, complete, drain, ev, event_batch, next_within, open, rows, source_ddl, Cell, PATIENCE,
};

/// Two push sources `a` and `b` (delay 0) and a 1 s tumbling count over `a`.
async fn two_sources(idle_timeout: &str) -> (Database, Subscription, Instant) {
    let db = Database::open_in_memory().await.expect("open");
    db.execute(&format!("SET idle_timeout = '{idle_timeout}'"))
        .await
        .expect("SET idle_timeout");
    db.execute(&source_ddl("a", 0, "")).await.expect("a");
    let b_created = Instant::now();
    db.execute(&source_ddl("b", 0, "")).await.expect("b");
    db.execute(
        "CREATE STREAM w AS SELECT key, tumble(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n \
         FROM a GROUP BY key, tumble(ts, INTERVAL '1' SECOND)",
    )
    .await
    .expect("stream");
    let sub = db.subscribe("w").await.expect("subscribe");
    (db, sub, b_created)
}

/// Window starts received until one starting at `until` arrives, pushing a
/// heartbeat row to `a` every 50 ms so that `a` itself never goes idle.
async fn windows_until(sub: &mut Subscription, a: &PushSource, until: i64) -> Vec<i64> {
    let deadline = Instant::now() + PATIENCE;
    let mut seen = Vec::new();
    let mut beat = 0;
    while !seen.contains(&until) {
        assert!(
            Instant::now() < deadline,
            "window {until} never closed; saw {seen:?}"
        );
        beat += 1;
        a.push(event_batch(&[ev(9, 4_100 + beat, None)]))
            .await
            .expect("heartbeat");
        while let Some(b) = next_within(sub, Duration::from_millis(50)).await {
            for r in crate::common::batch_rows(&b.data) {
                if let Cell::Int(ws) = r[1] {
                    seen.push(ws);
                }
            }
        }
    }
    seen
}

#[tokio::test]
async fn idle_source_stops_holding_the_watermark() {
    let (db, mut sub, _) = two_sources("200ms").await;
    let a = db.source("a").await.expect("a");
    let b = db.source("b").await.expect("b");
    b.push(event_batch(&[ev(0, 1_000, None)]))
        .await
        .expect("push b");
    a.push(event_batch(&[
        ev(1, 100, None),
        ev(1, 1_100, None),
        ev(1, 2_100, None),
        ev(1, 3_100, None),
        ev(1, 4_100, None),
    ]))
    .await
    .expect("push a");
    // Before b is idle the pipeline watermark is min(4_100, 1_000): only [0, 1 s) closes.
    let first = next_within(&mut sub, PATIENCE).await.expect("first window");
    assert_eq!(
        rows(std::slice::from_ref(&first.data)),
        vec![vec![Cell::Int(1), Cell::Int(0), Cell::Int(1)]]
    );
    // Once b has been quiet for 200 ms, a alone drives the watermark.
    let seen = windows_until(&mut sub, &a, 3_000).await;
    assert_eq!(
        &seen[..3],
        &[1_000, 2_000, 3_000],
        "windows in order, before finish"
    );
    a.finish().await.expect("finish a");
    b.finish().await.expect("finish b");
    complete(&db).await;
    db.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn silent_source_holds_windows_back_until_idle() {
    let (db, mut sub, b_created) = two_sources("2s").await;
    let a = db.source("a").await.expect("a");
    a.push(event_batch(&[
        ev(1, 100, None),
        ev(1, 1_100, None),
        ev(1, 4_100, None),
    ]))
    .await
    .expect("push a");
    // b never sent anything: its watermark is the minimum, and it holds the pipeline.
    let early = next_within(&mut sub, Duration::from_millis(300)).await;
    assert!(
        early.is_none() || b_created.elapsed() >= Duration::from_secs(2),
        "a window closed while the silent source was still active"
    );
    let seen = windows_until(&mut sub, &a, 1_000).await;
    assert!(
        b_created.elapsed() >= Duration::from_secs(2),
        "windows closed after {:?}, before b's idle timeout",
        b_created.elapsed()
    );
    assert_eq!(&seen[..2], &[0, 1_000]);
    a.finish().await.expect("finish a");
    b_finish_and_complete(&db).await;
}

async fn b_finish_and_complete(db: &Database) {
    db.source("b")
        .await
        .expect("b")
        .finish()
        .await
        .expect("finish b");
    complete(db).await;
    db.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn drop_stream_while_running() {
    let ddl = format!(
        "{}; CREATE STREAM positive AS SELECT key, value FROM src WHERE value > 0; \
         CREATE STREAM everything AS SELECT key, value FROM src",
        source_ddl("src", 1_000, "")
    );
    let db = open(&ddl).await;
    let mut positive = db.subscribe("positive").await.expect("subscribe");
    let mut everything = db.subscribe("everything").await.expect("subscribe");
    let src = db.source("src").await.expect("source");
    src.push(event_batch(&[
        ev(1, 1_000, Some(5)),
        ev(2, 1_001, Some(-5)),
    ]))
    .await
    .expect("push");
    let first = next_within(&mut positive, PATIENCE)
        .await
        .expect("first batch");
    assert_eq!(first.data.num_rows(), 1);

    db.execute("DROP STREAM positive").await.expect("drop");
    src.push(event_batch(&[ev(3, 2_000, Some(7))]))
        .await
        .expect("push after drop");
    src.finish().await.expect("finish");
    complete(&db).await;

    // The dropped stream's subscription ends (no error, no more rows).
    let rest = tokio::time::timeout(PATIENCE, positive.next())
        .await
        .expect("dropped subscription did not end");
    assert!(matches!(rest, Ok(None)), "expected Ok(None), got {rest:?}");
    let err = db
        .subscribe("positive")
        .await
        .err()
        .expect("gone")
        .to_string();
    assert!(
        err.contains("no stream, view or source named 'positive'"),
        "{err}"
    );
    let shown = db.execute("SHOW STREAMS").await.expect("show");
    assert!(!sluice::arrow::util::pretty::pretty_format_batches(&shown)
        .expect("format")
        .to_string()
        .contains("positive"));
    db.shutdown().await.expect("shutdown");
    let all = appended(&drain(&mut everything).await).expect("append-only");
    assert_eq!(all.len(), 3, "the other stream saw every row: {all:?}");
}
