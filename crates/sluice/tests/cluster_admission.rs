//! A commit authority speaks for a cluster at checkpoint admission, as a
//! cluster leader's etcd record does: only while it says this node leads
//! does the pipeline start a checkpoint; each attempt is admitted under
//! the assignment generation it names, which comes back with the commit;
//! a refused admission burns the id and stops nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sluice::{CommitAuthority, Database, StorageError};

/// A scripted authority: who leads, the generation it admits at (0:
/// refuse), and every commit it recorded with its generation.
#[derive(Debug, Default)]
struct Scripted {
    not_leader: AtomicBool,
    generation: AtomicU64,
    recorded: Mutex<Vec<(u64, Option<u64>)>>,
}

#[async_trait::async_trait]
impl CommitAuthority for Scripted {
    async fn record_commit(&self, id: u64, generation: Option<u64>) -> Result<(), StorageError> {
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

async fn checkpoint(db: &Database) -> sluice::Result<Vec<arrow::record_batch::RecordBatch>> {
    tokio::time::timeout(Duration::from_secs(60), db.execute("CHECKPOINT"))
        .await
        .expect("in time")
}

#[tokio::test]
async fn only_a_leader_checkpoints_each_under_its_admitted_generation() {
    let authority = Arc::new(Scripted::default());
    authority.generation.store(5, Ordering::SeqCst);
    let db = Database::builder()
        .set("checkpoint_store", "memory:///")
        .unwrap()
        .set("checkpoint_interval", "1h")
        .unwrap()
        .set("delivery", "at_least_once")
        .unwrap()
        .commit_authority(Arc::clone(&authority) as Arc<dyn CommitAuthority>)
        .open()
        .await
        .unwrap();
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    db.start().await.unwrap();
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
