//! `checkpoint_tail_share`: a checkpoint tail rests while the pipeline is
//! busy, in proportion to the work it did, and never while the pipeline is
//! idle or with a share of 100 (`state::pace`). The rests are counted in
//! the `checkpoint_rest_ns` metric, which is what these tests read: a
//! wall-clock comparison would be a timed test.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice::arrow::array::Int64Array;
use sluice::arrow::datatypes::{DataType, Field, Schema};
use sluice::arrow::record_batch::RecordBatch;
use sluice::Database;

/// Distinct groups of the aggregate: enough state that a tail's units of
/// work (a merge chunk, an encoded message) are well over 10 ms in a debug
/// build.
const GROUPS: i64 = 300_000;
const BATCH: i64 = 8_192;

fn batch(from: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]));
    let k: Vec<i64> = (from..from + BATCH).map(|k| k % GROUPS).collect();
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(k.clone())),
            Arc::new(Int64Array::from(k)),
        ],
    )
    .unwrap()
}

/// Fill the aggregate, take one manual checkpoint (with rows pushed as fast
/// as they are taken throughout when `busy`), and return the time its tail
/// rested and the number of checkpoints taken.
async fn rested_ns(share: &str, busy: bool) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::builder()
        .state_dir(dir.path())
        .set("checkpoint_interval", "1h")
        .unwrap()
        .set("checkpoint_tail_share", share)
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute(
        "CREATE SOURCE p (k BIGINT, v BIGINT);
         CREATE STREAM totals AS SELECT k, COUNT(*) AS n, SUM(v) AS s FROM p GROUP BY k;",
    )
    .await
    .unwrap();
    db.start().await.unwrap();
    let src = db.source("p").await.unwrap();
    let mut at = 0;
    while at < GROUPS {
        src.push(batch(at)).await.unwrap();
        at += BATCH;
    }
    ingested(&db, GROUPS as u64).await;
    // A first checkpoint moves the whole state into the base; the second
    // one merges a delta of every group into it, as a loaded pipeline's do.
    db.checkpoint().await.unwrap();
    let rested_before = db.metrics().checkpoint_rest_ns;
    // Every group changes again, so the next tail has as much to do in
    // both cases.
    while at < 2 * GROUPS {
        src.push(batch(at)).await.unwrap();
        at += BATCH;
    }
    ingested(&db, at as u64).await;
    let stop = Arc::new(AtomicBool::new(false));
    let pusher = busy.then(|| {
        let (src, stop) = (src.clone(), Arc::clone(&stop));
        tokio::spawn(async move {
            let mut at = at;
            while !stop.load(Ordering::Relaxed) {
                src.push(batch(at)).await.unwrap();
                at += BATCH;
            }
        })
    });
    if busy {
        // Rows flowing before the checkpoint starts, so every unit of the
        // tail sees a busy compute thread.
        ingested(&db, at as u64 + GROUPS as u64).await;
    }
    db.checkpoint().await.unwrap();
    // A loaded machine can leave one tail's every unit without a busy
    // compute thread (the pusher descheduled); a busy pipeline's tails must
    // rest in a few checkpoints. An idle one's never do, however many.
    for _ in 0..4 {
        if db.metrics().checkpoint_rest_ns > rested_before {
            break;
        }
        if busy {
            let now = db.metrics().events_ingested;
            ingested(&db, now + GROUPS as u64).await;
        }
        db.checkpoint().await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(p) = pusher {
        p.await.unwrap();
    }
    let m = db.metrics();
    db.shutdown().await.unwrap();
    (m.checkpoint_rest_ns - rested_before, m.checkpoints)
}

/// Wait until the pipeline took in `rows` rows.
async fn ingested(db: &Database, rows: u64) {
    while db.metrics().events_ingested < rows {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_pipelines_checkpoint_tail_rests_and_an_idle_ones_does_not() {
    tokio::time::timeout(std::time::Duration::from_secs(300), async {
        let (busy, n) = rested_ns("50", true).await;
        assert!(n >= 2, "{n} checkpoints");
        assert!(busy > 0, "a busy pipeline's tail rested {busy} ns");
        let (idle, _) = rested_ns("50", false).await;
        assert_eq!(idle, 0, "an idle pipeline's tail rests not at all");
        let (unpaced, _) = rested_ns("100", true).await;
        assert_eq!(unpaced, 0, "a share of 100 never rests");
    })
    .await
    .unwrap();
}
