//! Checkpoint tails: the durable half of a checkpoint (encoding, blob
//! writes, the manifest, pruning) runs off the compute thread. The store
//! holds the tail's blob writes on command, so each test acts while a tail
//! is in flight: cycles keep running, a shutdown settles the tail before
//! it tears the sinks down, and a fault cancels it (its manifest is never
//! written and no sink commit is made for it). Push sources cannot run
//! exactly-once, so the tests that push run at-least-once (a failed cycle
//! faults there too, with checkpointing on); the shutdown test runs the
//! file pipeline exactly-once.

use std::sync::Arc;
use std::time::Duration;

use sluice::arrow::array::Int64Array;
use sluice::arrow::datatypes::{DataType, Field, Schema};
use sluice::arrow::record_batch::RecordBatch;
use sluice::object_store::ObjectStore;
use sluice::Database;
use sluice_engine::fault::{arm, Fault, FaultAction, FaultSite, FaultTrigger};
use sluice_storage::testing::FaultyStore;

use crate::common::{bounded, committed, faulty, Fixture};

/// A push source `p`, a pass-through stream `pass_<tag>` and a file sink
/// `out_<tag>` on it, an aggregate (so a checkpoint writes a state blob
/// before its manifest), at-least-once, on `store`; only manual and shutdown
/// checkpoints.
async fn open(dir: &std::path::Path, tag: &str, store: &FaultyStore) -> Database {
    let db = Database::builder()
        .base_dir(dir)
        .checkpoint_object_store(Arc::new(store.clone()) as Arc<dyn ObjectStore>)
        .set("delivery", "at_least_once")
        .unwrap()
        .set("checkpoint_interval", "1h")
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute(&format!(
        "CREATE SOURCE p (k BIGINT, v BIGINT);
         CREATE STREAM pass_{tag} AS SELECT k, v FROM p;
         CREATE STREAM counts_{tag} AS SELECT k, COUNT(*) AS n FROM p GROUP BY k;
         CREATE SINK out_{tag} FROM pass_{tag} WITH (connector = 'file', path = '{}', format = 'csv');",
        dir.join("out.csv").display()
    ))
    .await
    .unwrap();
    db.start().await.unwrap();
    db
}

fn batch(from: i64, to: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]));
    let k: Vec<i64> = (from..to).collect();
    let v: Vec<i64> = k.iter().map(|k| k * 10).collect();
    RecordBatch::try_new(
        schema,
        vec![Arc::new(Int64Array::from(k)), Arc::new(Int64Array::from(v))],
    )
    .unwrap()
}

/// Wait until the pipeline took in `rows` rows.
async fn ingested(db: &Database, rows: u64) {
    bounded("ingesting", async {
        while db.metrics().events_ingested < rows {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Wait until the tail's first blob write is held by the store.
async fn tail_held(store: &FaultyStore) {
    bounded("the tail reaching the store", async {
        while store.held_puts() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// `k,v` lines of rows `from..to`, after the header.
fn csv(from: i64, to: i64) -> String {
    let mut s = String::from("k,v\n");
    for k in from..to {
        s.push_str(&format!("{k},{}\n", k * 10));
    }
    s
}

#[tokio::test]
async fn cycles_run_while_a_checkpoint_tail_is_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _mem) = faulty();
    let db = open(dir.path(), "running", &store).await;
    let src = db.source("p").await.unwrap();
    let mut sub = db.subscribe("pass_running").await.unwrap();
    src.push(batch(0, 10)).await.unwrap();
    ingested(&db, 10).await;
    store.hold_puts("checkpoints/");
    let db = Arc::new(db);
    let cp = tokio::spawn({
        let db = Arc::clone(&db);
        async move { db.checkpoint().await }
    });
    tail_held(&store).await;
    // The tail cannot write: yet the next rows go through a cycle and
    // reach the subscriber.
    src.push(batch(10, 15)).await.unwrap();
    let mut seen = Vec::new();
    bounded("rows during the tail", async {
        while seen.len() < 15 {
            let b = sub.next().await.unwrap().unwrap();
            let k = b
                .data
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .unwrap();
            seen.extend(k.values().iter().copied());
        }
    })
    .await;
    assert_eq!(seen, (0..15).collect::<Vec<_>>());
    assert_eq!(store.held_puts(), 1, "the tail is still held");
    assert!(!cp.is_finished(), "the checkpoint waits for its tail");
    let m = db.metrics();
    assert_eq!(m.checkpoints, 0);
    assert_eq!(m.checkpoint_pauses, 1);
    assert!(m.checkpoint_pause_last_ns > 0);
    assert_eq!(m.checkpoint_pause_max_ns, m.checkpoint_pause_last_ns);
    assert_eq!(m.checkpoint_pause_total_ns, m.checkpoint_pause_last_ns);
    store.release_puts();
    let report = bounded("checkpoint", cp).await.unwrap().unwrap();
    assert_eq!(report.id, 1);
    assert_eq!(committed(&db).await, vec![1]);
    bounded("shutdown", db.shutdown()).await.unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out.csv")).unwrap(),
        csv(0, 15)
    );
}

#[tokio::test]
async fn shutdown_settles_a_checkpoint_tail_in_flight_and_commits_its_output() {
    let fx = Fixture::new();
    let reference = fx.reference("exactly_once").await;
    let (store, _mem) = faulty();
    // Every periodic checkpoint's tail is held from the start. (A manual
    // checkpoint would not do: the Database answers a shutdown only after
    // a manual checkpoint it is waiting for.)
    store.hold_puts("checkpoints/");
    let db = Arc::new(
        fx.open_every(
            "exactly_once",
            Arc::new(store.clone()) as Arc<dyn ObjectStore>,
            "50ms",
        )
        .await,
    );
    bounded("run", db.run_to_completion()).await.unwrap();
    tail_held(&store).await;
    // Nothing is durable, so nothing is visible yet.
    assert_eq!(fx.outputs(), [String::new(), String::new()]);
    let down = tokio::spawn({
        let db = Arc::clone(&db);
        async move { db.shutdown().await }
    });
    // Gives the shutdown time to reach the coordinator, so it meets the
    // tail in flight (the outcome asserted is the same either way).
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!down.is_finished(), "the shutdown waits for the tail");
    store.release_puts();
    bounded("shutdown", down).await.unwrap().unwrap();
    // The held tail's checkpoint, then the shutdown checkpoint after it.
    assert_eq!(committed(&db).await, vec![1, 2]);
    assert_eq!(db.metrics().checkpoints, 2);
    assert_eq!(
        fx.outputs(),
        reference,
        "byte-identical to a run without tails held"
    );
}

#[tokio::test]
async fn a_fault_cancels_a_checkpoint_tail_in_flight_and_commits_nothing_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _mem) = faulty();
    let db = Arc::new(open(dir.path(), "cancel", &store).await);
    let src = db.source("p").await.unwrap();
    let mut sub = db.subscribe("pass_cancel").await.unwrap();
    src.push(batch(0, 20)).await.unwrap();
    ingested(&db, 20).await;
    store.hold_puts("checkpoints/");
    let cp = tokio::spawn({
        let db = Arc::clone(&db);
        async move { db.checkpoint().await }
    });
    tail_held(&store).await;
    // Counts the sink's commits (a stall of nothing, every time).
    let commits = arm(
        "out_cancel",
        Fault {
            site: FaultSite::SinkCommit,
            action: FaultAction::Stall(Duration::ZERO),
            trigger: FaultTrigger::Batch(1),
            once: false,
        },
    );
    // The next cycle fails: a consistency fault, recovery takes over.
    let _fail = arm(
        "pass_cancel",
        Fault {
            site: FaultSite::Stream,
            action: FaultAction::Fail,
            trigger: FaultTrigger::Batch(1),
            once: true,
        },
    );
    src.push(batch(20, 25)).await.unwrap();
    // Subscriptions close when intake stops, after the tail was cancelled.
    bounded("the fault", async {
        while sub.next().await.unwrap().is_some() {}
    })
    .await;
    store.release_puts();
    let err = bounded("checkpoint", cp).await.unwrap().unwrap_err();
    assert_eq!(err.code(), "SLC-ENG-009", "{err}");
    assert_eq!(
        err.to_string(),
        "checkpoint failed: checkpoint 1 was cancelled before its manifest: recovery took over"
    );
    // No manifest was written, and the sink was never asked to commit.
    assert_eq!(committed(&db).await, Vec::<u64>::new());
    assert_eq!(commits.fired(), 0);
    assert_eq!(db.metrics().checkpoints, 0);
    let _ = bounded("abort", db.abort()).await;
    assert_eq!(commits.fired(), 0);
}
