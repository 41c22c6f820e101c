//! A commit authority speaks for a cluster at checkpoint admission, as a
//! cluster leader's etcd record does: only while it says this node leads
//! does the pipeline start a checkpoint; each attempt is admitted under
//! the assignment generation it names, which comes back with the commit;
//! a refused admission burns the id and stops nothing; a node that does
//! not lead folds no input into state; and a leader checkpoints while
//! another node asks it to, idle or not.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use sluice::{CommitAuthority, Database, StorageError};

/// A scripted authority: who leads, the generation it admits at (0:
/// refuse), and every commit it recorded with its generation.
#[derive(Debug, Default)]
struct Scripted {
    not_leader: AtomicBool,
    generation: AtomicU64,
    recorded: Mutex<Vec<(u64, Option<u64>)>>,
    /// Whether another node asks this one for checkpoints.
    requested: AtomicBool,
}

#[async_trait::async_trait]
impl CommitAuthority for Scripted {
    async fn record_commit(
        &self,
        id: u64,
        generation: Option<u64>,
        _: &sluice::BlobRef,
    ) -> Result<(), StorageError> {
        self.recorded.lock().unwrap().push((id, generation));
        Ok(())
    }

    async fn committed(&self) -> Result<Option<std::collections::BTreeSet<u64>>, StorageError> {
        let r = self.recorded.lock().unwrap();
        let ids: std::collections::BTreeSet<u64> = r.iter().map(|(id, _)| *id).collect();
        Ok((!ids.is_empty()).then_some(ids))
    }

    async fn forget_below(&self, _: u64) -> Result<(), StorageError> {
        Ok(())
    }

    fn may_originate(&self) -> bool {
        !self.not_leader.load(Ordering::SeqCst)
    }

    fn checkpoints_requested(&self) -> bool {
        self.requested.load(Ordering::SeqCst)
    }

    async fn admit(&self) -> Result<Option<u64>, StorageError> {
        match self.generation.load(Ordering::SeqCst) {
            0 => Err(StorageError::Authority {
                what: "admitting a checkpoint".into(),
                source: "the table moved to node n2".into(),
            }),
            g => Ok(Some(g)),
        }
    }
}

async fn checkpoint(db: &Database) -> sluice::Result<Vec<RecordBatch>> {
    tokio::time::timeout(Duration::from_secs(60), db.execute("CHECKPOINT"))
        .await
        .expect("in time")
}

async fn open(authority: &Arc<Scripted>) -> Database {
    open_every(authority, "1h").await
}

async fn open_every(authority: &Arc<Scripted>, interval: &str) -> Database {
    let db = Database::builder()
        .set("checkpoint_store", "memory:///")
        .unwrap()
        .set("checkpoint_interval", interval)
        .unwrap()
        .set("delivery", "at_least_once")
        .unwrap()
        .commit_authority(Arc::clone(authority) as Arc<dyn CommitAuthority>)
        .open()
        .await
        .unwrap();
    db.execute(
        "CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS c FROM s",
    )
    .await
    .unwrap();
    db.start().await.unwrap();
    db
}

/// The view's count, once it equals `want` (or the last one seen after
/// `within`).
async fn count(db: &Database, want: i64, within: Duration) -> i64 {
    let until = std::time::Instant::now() + within;
    loop {
        let got = db.execute("SELECT c FROM n").await.unwrap();
        let c = got
            .iter()
            .filter_map(|b| b.column_by_name("c"))
            .filter_map(|c| c.as_any().downcast_ref::<Int64Array>())
            .flat_map(|c| c.values().to_vec())
            .next()
            .unwrap_or(0);
        if c == want || std::time::Instant::now() > until {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn push(db: &Database, keys: Vec<i64>) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    let ts = TimestampMillisecondArray::from(keys.clone());
    let rows =
        RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(keys)), Arc::new(ts)]).unwrap();
    db.source("s").await.unwrap().push(rows).await.unwrap();
}

#[tokio::test]
async fn only_a_leader_checkpoints_each_under_its_admitted_generation() {
    let authority = Arc::new(Scripted::default());
    authority.generation.store(5, Ordering::SeqCst);
    let db = open(&authority).await;
    checkpoint(&db).await.expect("admitted at 5");

    // Not the leader: refused by name; nothing is reserved or recorded.
    authority.not_leader.store(true, Ordering::SeqCst);
    let e = checkpoint(&db).await.expect_err("not the leader");
    assert_eq!(e.code(), "SLC-ENG-009");
    assert!(
        e.to_string()
            .contains("this node is not the cluster leader: only the leader starts checkpoints"),
        "{e}"
    );

    // Leading, but the admission is refused: the attempt is abandoned.
    authority.not_leader.store(false, Ordering::SeqCst);
    authority.generation.store(0, Ordering::SeqCst);
    let e = checkpoint(&db).await.expect_err("admission refused");
    assert_eq!(e.code(), "SLC-STO-009", "{e}");
    assert!(e.to_string().contains("admitting the checkpoint"), "{e}");

    // Admitted again, at a new generation: the pipeline ran on.
    authority.generation.store(6, Ordering::SeqCst);
    checkpoint(&db).await.expect("admitted at 6");
    let status = db.status().await.unwrap();
    assert!(
        status.halted.is_none() && status.fault.is_none(),
        "{status:?}"
    );
    let recorded = authority.recorded.lock().unwrap().clone();
    // The refused attempt's id was reserved, then burned.
    assert_eq!(recorded, vec![(1, Some(5)), (3, Some(6))]);
    db.abort().await.unwrap();
}

#[tokio::test]
async fn a_node_that_does_not_lead_folds_no_input() {
    let authority = Arc::new(Scripted::default());
    authority.generation.store(1, Ordering::SeqCst);
    let db = open(&authority).await;
    push(&db, vec![1, 2]).await;
    assert_eq!(count(&db, 2, Duration::from_secs(30)).await, 2);
    // Deposed: rows pushed now wait, whatever time passes.
    authority.not_leader.store(true, Ordering::SeqCst);
    push(&db, vec![3, 4, 5]).await;
    assert_eq!(count(&db, 5, Duration::from_millis(500)).await, 2);
    // Leading again (the next idle tick re-checks): they are folded in.
    authority.not_leader.store(false, Ordering::SeqCst);
    assert_eq!(count(&db, 5, Duration::from_secs(30)).await, 5);
    db.abort().await.unwrap();
}

/// The number of checkpoints recorded so far.
fn commits(authority: &Scripted) -> usize {
    authority.recorded.lock().unwrap().len()
}

#[tokio::test]
async fn another_nodes_request_makes_checkpoints_due_on_an_idle_leader() {
    let authority = Arc::new(Scripted::default());
    authority.generation.store(1, Ordering::SeqCst);
    let db = open_every(&authority, "50ms").await;
    push(&db, vec![1, 2]).await;
    assert_eq!(count(&db, 2, Duration::from_secs(30)).await, 2);
    let quiet = |what: &'static str| {
        let authority = Arc::clone(&authority);
        async move {
            // One checkpoint may be under way when this starts.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let before = commits(&authority);
            tokio::time::sleep(Duration::from_millis(600)).await;
            assert_eq!(
                commits(&authority),
                before,
                "{what}: an idle leader checkpointed"
            );
        }
    };
    quiet("before any request").await;

    // Another node asks: checkpoints are due every interval, idle or not.
    authority.requested.store(true, Ordering::SeqCst);
    let from = commits(&authority);
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while commits(&authority) < from + 3 {
        assert!(
            std::time::Instant::now() < until,
            "no checkpoint for the request"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    authority.requested.store(false, Ordering::SeqCst);
    quiet("after the request was withdrawn").await;
    db.abort().await.unwrap();
}
