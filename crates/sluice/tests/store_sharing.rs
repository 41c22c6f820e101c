//! One checkpoint store, one pipeline: the store lease refuses a second
//! database on a store in use (SLC-STO-006), a closed or stale holder
//! gives way; `memory://` stores keep their checkpoints for the
//! database's life; `CHECKPOINT` reports when its manifest was made.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arrow::array::{Int64Array, UInt64Array};
use arrow::record_batch::RecordBatch;
use sluice::object_store::memory::InMemory;
use sluice::object_store::path::Path as ObjectPath;
use sluice::object_store::{ObjectStore, ObjectStoreExt};
use sluice::{CommitAuthority, Database, DatabaseBuilder, StorageError};

async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// A database with manual checkpoints only and one push source.
async fn open(builder: DatabaseBuilder) -> Database {
    let db = builder
        .set("checkpoint_interval", "1h")
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    db
}

fn on_memory(mem: &Arc<InMemory>) -> DatabaseBuilder {
    Database::builder().checkpoint_object_store(Arc::clone(mem) as Arc<dyn ObjectStore>)
}

fn on_url(url: &str) -> DatabaseBuilder {
    Database::builder().set("checkpoint_store", url).unwrap()
}

fn u64s(batches: &[RecordBatch], column: &str) -> Vec<u64> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(column).unwrap();
            let c = c.as_any().downcast_ref::<UInt64Array>().unwrap();
            c.values().to_vec()
        })
        .collect()
}

fn i64s(batches: &[RecordBatch], column: &str) -> Vec<i64> {
    batches
        .iter()
        .flat_map(|b| {
            let c = b.column_by_name(column).unwrap();
            let c = c.as_any().downcast_ref::<Int64Array>().unwrap();
            c.values().to_vec()
        })
        .collect()
}

#[tokio::test]
async fn show_checkpoints_on_a_memory_store_lists_every_checkpoint() {
    let db = open(on_url("memory:///")).await;
    bounded("start", db.start()).await.unwrap();
    let first = bounded("checkpoint", db.execute("CHECKPOINT"))
        .await
        .unwrap();
    let second = bounded("checkpoint", db.execute("CHECKPOINT"))
        .await
        .unwrap();
    let ids = [u64s(&first, "id"), u64s(&second, "id")].concat();
    assert_eq!(ids.len(), 2);
    let listed = bounded("show", db.execute("SHOW CHECKPOINTS"))
        .await
        .unwrap();
    assert_eq!(u64s(&listed, "id"), ids);
    bounded("shutdown", db.shutdown()).await.unwrap();
}

#[tokio::test]
async fn checkpoint_reports_when_its_manifest_was_made() {
    let db = open(on_url("memory:///")).await;
    bounded("start", db.start()).await.unwrap();
    let before = now_ms();
    let report = bounded("checkpoint", db.execute("CHECKPOINT"))
        .await
        .unwrap();
    let after = now_ms();
    let created = i64s(&report, "created_ms");
    assert_eq!(created.len(), 1);
    assert!(
        (before..=after).contains(&created[0]),
        "{before} <= {} <= {after}",
        created[0]
    );
    // The same time as the manifest's, listed by SHOW CHECKPOINTS.
    let listed = bounded("show", db.execute("SHOW CHECKPOINTS"))
        .await
        .unwrap();
    assert_eq!(i64s(&listed, "created_ms"), created);
    bounded("shutdown", db.shutdown()).await.unwrap();
}

/// The second database's start is refused with SLC-STO-006 naming the
/// store and this process as the holder; once the first closes, it starts.
async fn second_is_refused_until_the_first_closes(
    first: Database,
    second: Database,
    store_name: &str,
) {
    bounded("first start", first.start()).await.unwrap();
    let err = bounded("second start", second.start()).await.unwrap_err();
    assert_eq!(err.code(), "SLC-STO-006", "{err}");
    let text = err.to_string();
    let want = format!("checkpoint store {store_name} is in use by another pipeline (owner ");
    assert!(text.contains(&want), "{text}");
    assert!(
        text.contains(&format!(", pid {}, lease expires in ", std::process::id())),
        "{text}"
    );
    bounded("first shutdown", first.shutdown()).await.unwrap();
    bounded("second start", second.start()).await.unwrap();
    bounded("checkpoint", second.checkpoint()).await.unwrap();
    bounded("second shutdown", second.shutdown()).await.unwrap();
}

#[tokio::test]
async fn a_second_database_on_a_shared_memory_store_waits_for_the_first() {
    let mem = Arc::new(InMemory::new());
    let first = open(on_memory(&mem)).await;
    let second = open(on_memory(&mem)).await;
    second_is_refused_until_the_first_closes(first, second, "InMemory").await;
}

#[tokio::test]
async fn a_second_database_on_the_same_file_url_waits_for_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().display());
    let first = open(on_url(&url)).await;
    let second = open(on_url(&url)).await;
    second_is_refused_until_the_first_closes(first, second, &url).await;
}

#[tokio::test]
async fn an_expired_lease_is_taken_over() {
    let mem = Arc::new(InMemory::new());
    // A holder that stopped renewing (as a killed process on another host).
    let stale = sluice_storage::StoreLease::acquire(
        Arc::clone(&mem) as Arc<dyn ObjectStore>,
        &ObjectPath::default(),
        "InMemory",
        Duration::from_millis(1),
    )
    .await
    .unwrap();
    std::mem::forget(stale);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let db = open(on_memory(&mem)).await;
    bounded("start", db.start()).await.unwrap();
    bounded("checkpoint", db.checkpoint()).await.unwrap();
    bounded("shutdown", db.shutdown()).await.unwrap();
}

/// The `LEASE` object's expiry, in milliseconds from now.
async fn lease_expires_in_ms(mem: &Arc<InMemory>) -> i64 {
    let body = mem
        .get(&ObjectPath::from(sluice_storage::LEASE_KEY))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let record: sluice_storage::LeaseRecord = serde_json::from_slice(&body).unwrap();
    record.expires_ms - now_ms()
}

/// `checkpoint_store_lease` is the lease's life: 30 s by default, what it
/// is SET to otherwise; a value out of its range is refused by name.
#[tokio::test]
async fn the_store_lease_lasts_checkpoint_store_lease() {
    for (set, want_ms) in [(None, 30_000), (Some("2s"), 2_000), (Some("1h"), 3_600_000)] {
        let mem = Arc::new(InMemory::new());
        let mut builder = on_memory(&mem);
        if let Some(v) = set {
            builder = builder.set("checkpoint_store_lease", v).unwrap();
        }
        let db = open(builder).await;
        bounded("start", db.start()).await.unwrap();
        let left = lease_expires_in_ms(&mem).await;
        assert!(
            left > want_ms - 5_000 && left <= want_ms,
            "{set:?}: the lease expires in {left} ms, want about {want_ms}"
        );
        bounded("shutdown", db.shutdown()).await.unwrap();
    }
    let Err(err) = on_memory(&Arc::new(InMemory::new())).set("checkpoint_store_lease", "500ms")
    else {
        panic!("a 500ms lease must be refused");
    };
    assert_eq!(err.code(), "SLC-ENG-003", "{err}");
    assert!(err.to_string().contains("checkpoint_store_lease"), "{err}");
}

/// A checkpoint whose fingerprint has another encoding version (here the
/// unversioned one of earlier releases) is refused, naming both versions.
#[tokio::test]
async fn a_checkpoint_of_another_fingerprint_version_is_refused() {
    use std::collections::BTreeMap;

    use sluice_storage::{CheckpointStore, Manifest, ObjectStoreBackend};

    let mem = Arc::new(InMemory::new());
    let store = CheckpointStore::new(Box::new(ObjectStoreBackend::new(
        Arc::clone(&mem) as Arc<dyn ObjectStore>,
        ObjectPath::default(),
        "InMemory",
    )));
    let id = store.reserve().await.unwrap();
    store
        .commit(&Manifest {
            id,
            created_ms: now_ms(),
            pipeline: "1a2b3c4d-120".into(),
            watermark: 0,
            sources: BTreeMap::new(),
            sinks: BTreeMap::new(),
            blobs: vec![],
            assignment_generation: None,
        })
        .await
        .unwrap();
    let db = open(on_memory(&mem)).await;
    let err = bounded("start", db.start()).await.unwrap_err();
    assert_eq!(err.code(), "SLC-ENG-001", "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "checkpoint {id} in InMemory has a pipeline fingerprint of version \
             v0, but this build writes and compares version v1, so it cannot tell whether the \
             checkpoint belongs to this pipeline; recover with the release that wrote it, or \
             use a new state directory"
        )
    );
}

/// A commit authority that records every commit until told to refuse, as
/// etcd refuses a cluster leader that was deposed while it wrote.
#[derive(Debug, Default)]
struct Deposable {
    deposed: std::sync::atomic::AtomicBool,
    recorded: std::sync::Mutex<std::collections::BTreeSet<u64>>,
}

#[async_trait::async_trait]
impl CommitAuthority for Deposable {
    async fn record_commit(
        &self,
        id: u64,
        _: Option<u64>,
        _: &sluice::BlobRef,
    ) -> Result<(), StorageError> {
        if self.deposed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(StorageError::Fenced {
                id,
                source: "node n1 no longer leads".into(),
            });
        }
        self.recorded.lock().unwrap().insert(id);
        Ok(())
    }

    async fn committed(&self) -> Result<Option<std::collections::BTreeSet<u64>>, StorageError> {
        let r = self.recorded.lock().unwrap().clone();
        Ok((!r.is_empty()).then_some(r))
    }

    async fn forget_below(&self, id: u64) -> Result<(), StorageError> {
        self.recorded.lock().unwrap().retain(|x| *x >= id);
        Ok(())
    }
}

/// A checkpoint the commit authority refuses halts the pipeline, where an
/// ordinary failed checkpoint under at-least-once is retried at the next
/// interval (and under exactly-once recovered from, which would restore
/// the new owner's checkpoint and rewrite the sink files it publishes; the
/// disposition table in `sluice-engine`'s `seam_tests` covers every mode;
/// exactly-once needs replayable sources, which this push source is not).
#[tokio::test]
async fn a_checkpoint_the_commit_authority_refuses_halts_the_pipeline() {
    for delivery in ["at_least_once"] {
        let authority = Arc::new(Deposable::default());
        let builder = on_url("memory:///")
            .set("delivery", delivery)
            .unwrap()
            .commit_authority(Arc::clone(&authority) as Arc<dyn CommitAuthority>);
        let db = open(builder).await;
        bounded("start", db.start()).await.unwrap();
        bounded("checkpoint", db.execute("CHECKPOINT"))
            .await
            .unwrap();
        assert_eq!(authority.recorded.lock().unwrap().len(), 1, "{delivery}");
        authority
            .deposed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let e = bounded("checkpoint", db.execute("CHECKPOINT"))
            .await
            .expect_err("a refused commit fails the checkpoint");
        assert_eq!(e.code(), "SLC-STO-008", "{delivery}: {e}");
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            let s = db.status().await.unwrap();
            if s.halted.is_some() || s.fault.is_some() || std::time::Instant::now() > deadline {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let halted = status.halted.as_ref().map(|e| e.code());
        assert_eq!(halted, Some("SLC-STO-008"), "{delivery}: {status:?}");
        assert!(status.fault.is_none(), "{delivery}: {status:?}");
        assert_eq!(authority.recorded.lock().unwrap().len(), 1, "{delivery}");
        let _ = db.abort().await;
    }
}

/// A store that stops answering while a checkpoint reserves its id: the
/// `CHECKPOINT` is refused once `checkpoint_alignment_timeout` has passed
/// (SLC-STO-010, naming the store and the operation), instead of holding
/// the coordinator for as long as the store hangs, and the pipeline runs
/// on: rows pushed after it come out, and once the store answers again
/// the next checkpoint commits.
#[tokio::test]
async fn a_reservation_on_a_hung_store_gives_up_at_the_alignment_timeout() {
    use sluice::object_store::throttle::{ThrottleConfig, ThrottledStore};
    let store = Arc::new(ThrottledStore::new(
        InMemory::new(),
        ThrottleConfig::default(),
    ));
    let db = Database::builder()
        .checkpoint_object_store(Arc::clone(&store) as Arc<dyn ObjectStore>)
        .set("checkpoint_interval", "1h")
        .unwrap()
        .set("checkpoint_alignment_timeout", "1s")
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute(
        "CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE MATERIALIZED VIEW n AS SELECT COUNT(*) AS c FROM s",
    )
    .await
    .unwrap();
    bounded("start", db.start()).await.unwrap();
    // Reserving lists the store first: listing now hangs for a minute.
    store.config_mut(|c| c.wait_list_per_call = Duration::from_secs(60));
    let asked = std::time::Instant::now();
    let e = bounded("checkpoint", db.execute("CHECKPOINT"))
        .await
        .expect_err("a checkpoint on a hung store");
    let took = asked.elapsed();
    assert_eq!(e.code(), "SLC-STO-010", "{e}");
    assert!(
        e.to_string()
            .contains("reserving a checkpoint id did not finish within"),
        "{e}"
    );
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(10),
        "refused after {took:?}"
    );
    let rows = RecordBatch::try_new(
        Arc::new(arrow::datatypes::Schema::new(vec![
            arrow::datatypes::Field::new("k", arrow::datatypes::DataType::Int64, true),
            arrow::datatypes::Field::new(
                "ts",
                arrow::datatypes::DataType::Timestamp(
                    arrow::datatypes::TimeUnit::Millisecond,
                    None,
                ),
                true,
            ),
        ])),
        vec![
            Arc::new(Int64Array::from(vec![1, 2, 3])),
            Arc::new(arrow::array::TimestampMillisecondArray::from(vec![1, 2, 3])),
        ],
    )
    .unwrap();
    let s = db.source("s").await.unwrap();
    s.push(rows).await.unwrap();
    let counted = bounded("rows after the refusal", async {
        loop {
            let got = db.execute("SELECT c FROM n").await.unwrap();
            if i64s(&got, "c") == [3] {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    counted.await;
    store.config_mut(|c| c.wait_list_per_call = Duration::ZERO);
    let ok = bounded("checkpoint", db.execute("CHECKPOINT"))
        .await
        .unwrap();
    assert_eq!(u64s(&ok, "id").len(), 1);
    bounded("shutdown", db.shutdown()).await.unwrap();
}

/// A state directory takes one open database at a time, whether the other
/// is in this process or another: the second open is refused by name and
/// code, and once the first is shut down and dropped the directory opens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_in_use_is_refused_until_its_database_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let first = bounded("open", Database::open(&state)).await.unwrap();
    let refused = bounded("second open", Database::open(&state))
        .await
        .err()
        .expect("a second open of the same state directory is refused");
    assert_eq!(
        refused.to_string(),
        format!(
            "invalid option: state directory {} is in use by another open database (in this \
             process or another); shut that one down and drop it first",
            state.display()
        )
    );
    assert_eq!(refused.code(), "SLC-ENG-003");
    bounded("shutdown", first.shutdown()).await.unwrap();
    drop(first);
    bounded("reopen", Database::open(&state)).await.unwrap();
}

/// A child process started by another thread holds a copy of every open
/// descriptor from its fork until its exec closes them, the state
/// directory's lock included: a database reopened right after it was
/// dropped still opens while other threads start processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_database_reopens_while_other_threads_start_processes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let stop = Arc::new(AtomicBool::new(false));
    let spawners: Vec<_> = (0..2)
        .map(|_| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::process::Command::new("true").status();
                }
            })
        })
        .collect();
    let mut refused = Vec::new();
    for round in 0..300 {
        match bounded("open", Database::open(&state)).await {
            Ok(db) => drop(db),
            Err(e) => refused.push((round, e.to_string())),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for s in spawners {
        s.join().unwrap();
    }
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        refused.first()
    );
}
