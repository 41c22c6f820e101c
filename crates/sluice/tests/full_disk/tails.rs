//! Checkpoint tails: the durable half of a checkpoint (encoding, blob
//! writes, the manifest, pruning) runs off the compute thread. The store
//! holds the tail's blob writes on command, so each test acts while a tail
//! is in flight: cycles keep running, a shutdown settles the tail before
//! it tears the sinks down, and a fault cancels it (its manifest is never
//! written and no sink commit is made for it), and a stalled sink delays
//! its checkpoint, not the compute thread. Push sources cannot run
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
    open_with(dir, tag, store, &[]).await
}

/// [`open`], with options `set` too.
async fn open_with(
    dir: &std::path::Path,
    tag: &str,
    store: &FaultyStore,
    set: &[(&str, &str)],
) -> Database {
    let mut b = Database::builder()
        .base_dir(dir)
        .checkpoint_object_store(Arc::new(store.clone()) as Arc<dyn ObjectStore>)
        .set("delivery", "at_least_once")
        .unwrap()
        .set("checkpoint_interval", "1h")
        .unwrap();
    for (k, v) in set {
        b = b.set(k, v).unwrap();
    }
    let db = b.open().await.unwrap();
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

/// Wait until `cond` holds.
async fn until(what: &str, cond: impl Fn() -> bool) {
    bounded(what, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// Wait until the pipeline took in `rows` rows.
async fn ingested(db: &Database, rows: u64) {
    until("ingesting", || db.metrics().events_ingested >= rows).await;
}

/// Wait until the tail's first blob write is held by the store.
async fn tail_held(store: &FaultyStore) {
    until("the tail reaching the store", || store.held_puts() > 0).await;
}

/// What the sink `out_<tag>` of [`open`] holds.
fn out(dir: &std::path::Path) -> String {
    std::fs::read_to_string(dir.join("out.csv")).unwrap()
}

/// `k,v` lines of rows `from..to`, after the header.
fn csv(from: i64, to: i64) -> String {
    let mut s = String::from("k,v\n");
    for k in from..to {
        s.push_str(&format!("{k},{}\n", k * 10));
    }
    s
}

/// A manual checkpoint, answered in the background.
fn spawn_checkpoint(
    db: &Arc<Database>,
) -> tokio::task::JoinHandle<Result<sluice::CheckpointReport, sluice::Error>> {
    let db = Arc::clone(db);
    tokio::spawn(async move { db.checkpoint().await })
}

/// The keys a subscriber receives, until it has `n` of them.
async fn keys(sub: &mut sluice::Subscription, n: usize, what: &str) -> Vec<i64> {
    let mut seen = Vec::new();
    bounded(what, async {
        while seen.len() < n {
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
    seen
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
    let cp = spawn_checkpoint(&db);
    tail_held(&store).await;
    // The tail cannot write: yet the next rows go through a cycle and
    // reach the subscriber.
    src.push(batch(10, 15)).await.unwrap();
    let seen = keys(&mut sub, 15, "rows during the tail").await;
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
    assert_eq!(out(dir.path()), csv(0, 15));
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
    let cp = spawn_checkpoint(&db);
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
    // Subscriptions end when intake stops, after the tail was cancelled,
    // with the fault that stopped it (not as if the stream had finished).
    let end = bounded("the fault", async {
        loop {
            match sub.next().await {
                Ok(Some(_)) => continue,
                other => break other,
            }
        }
    })
    .await;
    let fault = end.unwrap_err();
    assert!(matches!(fault, sluice::Error::Fault { .. }), "{fault:?}");
    assert_eq!(
        fault.to_string(),
        "pipeline fault (recover from the last checkpoint): stream 'pass_cancel': \
         injected fault at stream 'pass_cancel' (batch 1, row 5, trip 1)"
    );
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

/// A sink whose writer is stalled delays its checkpoint, not the pipeline:
/// the capture queues the sink's seal without waiting for it (the tail
/// awaits it before the manifest), cycles keep running, and the checkpoint
/// commits exactly the rows before its barrier once the writer catches up.
#[tokio::test]
async fn a_stalled_sink_delays_its_checkpoint_not_the_compute_thread() {
    const STALL: Duration = Duration::from_secs(2);
    let dir = tempfile::tempdir().unwrap();
    let (store, _mem) = faulty();
    let db = Arc::new(open(dir.path(), "stalled", &store).await);
    let src = db.source("p").await.unwrap();
    let mut sub = db.subscribe("pass_stalled").await.unwrap();
    let _stall = arm(
        "out_stalled",
        Fault {
            site: FaultSite::SinkWrite,
            action: FaultAction::Stall(STALL),
            trigger: FaultTrigger::Batch(1),
            once: true,
        },
    );
    src.push(batch(0, 20)).await.unwrap();
    ingested(&db, 20).await;
    // The sink's writer now sleeps in its first write; the checkpoint's
    // capture must not wait for it.
    let cp = spawn_checkpoint(&db);
    until("the capture", || db.metrics().checkpoint_pauses > 0).await;
    src.push(batch(20, 25)).await.unwrap();
    let seen = keys(&mut sub, 25, "rows during the stall").await;
    assert_eq!(seen, (0..25).collect::<Vec<_>>());
    let report = bounded("checkpoint", cp).await.unwrap().unwrap();
    assert_eq!(report.id, 1);
    let pause = Duration::from_nanos(db.metrics().checkpoint_pause_max_ns);
    assert!(
        pause < STALL / 2,
        "the compute thread waited {pause:?} for a sink stalled {STALL:?}"
    );
    // The rows before the barrier are durable when the manual checkpoint
    // returns (at-least-once appends as it goes: later rows may follow).
    let so_far = out(dir.path());
    assert!(so_far.starts_with(&csv(0, 20)), "{so_far}");
    bounded("shutdown", db.shutdown()).await.unwrap();
    assert_eq!(out(dir.path()), csv(0, 25));
}

/// A sink slow to commit its epochs delays its checkpoint's answer, not the
/// pipeline: the tail asks the sink's writer to commit once the manifest is
/// durable, cycles keep running meanwhile, and the manual checkpoint
/// returns only after the commit answered.
#[tokio::test]
async fn a_slow_sink_commit_runs_off_the_compute_thread() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _mem) = faulty();
    let db = Arc::new(open(dir.path(), "slow_commit", &store).await);
    let src = db.source("p").await.unwrap();
    let mut sub = db.subscribe("pass_slow_commit").await.unwrap();
    let commit = arm(
        "out_slow_commit",
        Fault {
            site: FaultSite::SinkCommit,
            action: FaultAction::Stall(Duration::from_secs(2)),
            trigger: FaultTrigger::Batch(1),
            once: true,
        },
    );
    src.push(batch(0, 20)).await.unwrap();
    ingested(&db, 20).await;
    let cp = spawn_checkpoint(&db);
    until("the commit", || commit.fired() > 0).await;
    // The commit sleeps on the sink's writer: these rows still go through.
    src.push(batch(20, 25)).await.unwrap();
    let seen = keys(&mut sub, 25, "rows during the commit").await;
    assert_eq!(seen, (0..25).collect::<Vec<_>>());
    assert!(!cp.is_finished(), "the checkpoint answers after its commit");
    let report = bounded("checkpoint", cp).await.unwrap().unwrap();
    assert_eq!(report.id, 1);
    assert_eq!(committed(&db).await, vec![1]);
    bounded("shutdown", db.shutdown()).await.unwrap();
    assert_eq!(out(dir.path()), csv(0, 25));
}

/// A checkpoint whose manifest is not durable by `checkpoint_timeout` after
/// it started fails with that limit named, whether a sink's seal or a state
/// write holds it; nothing of it is committed, the pipeline carries on
/// (at-least-once), and the next checkpoint commits everything, the epoch
/// the failed one sealed included.
#[tokio::test]
async fn a_checkpoint_past_its_timeout_fails_and_the_next_one_commits_everything() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _mem) = faulty();
    let set = [("checkpoint_timeout", "300ms")];
    let db = Arc::new(open_with(dir.path(), "late", &store, &set).await);
    let src = db.source("p").await.unwrap();
    let _stall = arm(
        "out_late",
        Fault {
            site: FaultSite::SinkWrite,
            action: FaultAction::Stall(Duration::from_secs(2)),
            trigger: FaultTrigger::Batch(1),
            once: true,
        },
    );
    let timed_out = "SLC-ENG-009: checkpoint failed: the checkpoint did not reach its manifest \
                     within checkpoint_timeout (300ms): a state write or a sink's seal took longer";
    // The sink's seal waits behind its stalled write.
    src.push(batch(0, 20)).await.unwrap();
    ingested(&db, 20).await;
    let e = bounded("the sealed checkpoint", db.checkpoint())
        .await
        .unwrap_err();
    assert_eq!(format!("{}: {e}", e.code()), timed_out);
    // A state write that does not return.
    src.push(batch(20, 30)).await.unwrap();
    ingested(&db, 30).await;
    store.hold_puts("checkpoints/");
    let e = bounded("the held checkpoint", db.checkpoint())
        .await
        .unwrap_err();
    assert_eq!(format!("{}: {e}", e.code()), timed_out);
    store.release_puts();
    let m = db.metrics();
    assert_eq!((m.checkpoints, m.checkpoints_failed), (0, 2));
    assert_eq!(committed(&db).await, Vec::<u64>::new());
    // Both failed attempts' ids stay burned. Once the sink caught up
    // (at-least-once appends as it goes), the next checkpoint commits.
    src.push(batch(30, 35)).await.unwrap();
    until("the sink catching up", || {
        std::fs::read_to_string(dir.path().join("out.csv")).is_ok_and(|s| s == csv(0, 35))
    })
    .await;
    let report = bounded("the next checkpoint", db.checkpoint())
        .await
        .unwrap();
    assert_eq!(report.id, 3);
    assert_eq!(committed(&db).await, vec![3]);
    assert_eq!(out(dir.path()), csv(0, 35));
    bounded("shutdown", db.shutdown()).await.unwrap();
    assert_eq!(out(dir.path()), csv(0, 35));
}

/// One tail at a time: while a tail is held, periodic checkpoints that come
/// due are skipped (counted, nothing else written), a manual one waits for
/// the slot, and once the store answers both commit in order.
#[tokio::test]
async fn one_tail_at_a_time_periodic_ones_are_skipped_and_a_manual_one_waits() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _mem) = faulty();
    let set = [("checkpoint_interval", "20ms")];
    let db = Arc::new(open_with(dir.path(), "bound", &store, &set).await);
    let src = db.source("p").await.unwrap();
    store.hold_puts("checkpoints/");
    src.push(batch(0, 10)).await.unwrap();
    tail_held(&store).await;
    // Keep the pipeline changing, so every tick has something to capture.
    for i in 0..10 {
        src.push(batch(10 + i, 11 + i)).await.unwrap();
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    until("skipped periodic checkpoints", || {
        db.metrics().checkpoints_skipped >= 3
    })
    .await;
    let cp = spawn_checkpoint(&db);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !cp.is_finished(),
        "the manual checkpoint waits for the slot"
    );
    assert_eq!(store.held_puts(), 1, "one tail writes");
    let m = db.metrics();
    assert_eq!((m.checkpoints, m.checkpoint_pauses), (0, 1));
    store.release_puts();
    let report = bounded("checkpoint", cp).await.unwrap().unwrap();
    let ids = committed(&db).await;
    assert_eq!(ids.last(), Some(&report.id), "{ids:?}");
    assert_eq!(
        ids.first(),
        Some(&1),
        "the held tail committed first: {ids:?}"
    );
    bounded("shutdown", db.shutdown()).await.unwrap();
    assert_eq!(out(dir.path()), csv(0, 20));
}
