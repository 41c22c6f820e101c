//! Two pipelines whose vnodes are split between two nodes checkpoint as
//! one, through real etcd: the leader's checkpoint is taken by the
//! follower too (under the leader's id and assignment generation), each
//! node's exactly-once sink publishes its epoch only once the leader's
//! commit decision holds every owner's ack, a follower never originates a
//! checkpoint, and an owner that does not answer aborts the checkpoint on
//! both nodes.
//!
//! In process: each node is a `Database` over its own state directory,
//! with the commit record of its role as the store's commit authority.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice::arrow::record_batch::RecordBatch;
use sluice::object_store::aws::AmazonS3Builder;
use sluice::object_store::memory::InMemory;
use sluice::object_store::ObjectStore;
use sluice::{CommitAuthority, Database};
use sluice_storage::testing::FaultyStore;

mod support;
use support::moto::Moto;
use support::owners::{eventually, follower_of, ids, two_nodes, LIMIT};

/// Append `keys` to a node's input file (creating it with its header).
fn append_input(dir: &Path, keys: &[i64]) {
    use std::io::Write;
    let path = dir.join("in.csv");
    let fresh = !path.exists();
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    if fresh {
        writeln!(f, "k,ts").unwrap();
    }
    for k in keys {
        writeln!(f, "{k},{k}").unwrap();
    }
}

/// Where a node keeps its checkpoints: under its state directory, or in
/// its own bucket of a real S3-compatible server.
type StoreOf = Option<Arc<dyn ObjectStore>>;

/// Node `node`'s checkpoint store on `moto`, in a bucket of its own.
fn s3_store(moto: &Moto, node: &str) -> Arc<dyn ObjectStore> {
    let bucket = format!("owners-{node}");
    moto.create_bucket(&bucket);
    let store = AmazonS3Builder::new()
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_region("us-east-1")
        .build()
        .unwrap();
    Arc::new(store)
}

/// A node's database over its state directory: its input file as the
/// source, and an exactly-once CSV sink of it; returns once the input is
/// read.
async fn open(dir: &Path, authority: Arc<dyn CommitAuthority>) -> Database {
    open_on(dir, authority, "1h", None).await
}

/// As [`open`], with periodic checkpoints every `interval`.
async fn open_every(dir: &Path, authority: Arc<dyn CommitAuthority>, interval: &str) -> Database {
    open_on(dir, authority, interval, None).await
}

/// As [`open_every`], with checkpoints in `store` when given.
async fn open_on(
    dir: &Path,
    authority: Arc<dyn CommitAuthority>,
    interval: &str,
    store: StoreOf,
) -> Database {
    let mut builder = Database::builder().state_dir(dir);
    if let Some(store) = store {
        builder = builder.checkpoint_object_store(store);
    }
    let db = builder
        .set("checkpoint_interval", interval)
        .unwrap()
        .set("checkpoint_timeout", "3s")
        .unwrap()
        .set("delivery", "exactly_once")
        .unwrap()
        .commit_authority(authority)
        .open()
        .await
        .unwrap();
    db.execute(&format!(
        "CREATE SOURCE s (k BIGINT, ts BIGINT) WITH (connector = 'file', path = '{}', format = 'csv');
         CREATE SINK out FROM s WITH (connector = 'file', path = '{}', format = 'csv')",
        dir.join("in.csv").display(),
        dir.join("out.csv").display()
    ))
    .await
    .unwrap();
    db.start().await.unwrap();
    let read = async {
        while !db.status().await.is_some_and(|s| s.finished) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, read).await.expect("input read");
    db
}

/// The keys in a node's sink file (none while it does not exist).
fn published(dir: &Path) -> Vec<i64> {
    let text = std::fs::read_to_string(dir.join("out.csv")).unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|l| l.split(',').next()?.parse().ok())
        .collect()
}

async fn checkpoint(db: &Database) -> sluice::Result<Vec<RecordBatch>> {
    tokio::time::timeout(LIMIT, db.execute("CHECKPOINT"))
        .await
        .expect("in time")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_checkpoint_as_one_and_publish_only_what_both_acked() {
    checkpoint_as_one(None, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_owners_with_their_checkpoints_on_s3_checkpoint_as_one() {
    let moto = Moto::start();
    checkpoint_as_one(Some(s3_store(&moto, "n1")), Some(s3_store(&moto, "n2"))).await;
}

/// The whole story of two owners over the given checkpoint stores.
async fn checkpoint_as_one(s1: StoreOf, s2: StoreOf) {
    let (_etcd, _n1, n2, leader) = two_nodes().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    append_input(d1.path(), &[10, 11]);
    append_input(d2.path(), &[1, 2, 3]);
    let db1 = open_on(d1.path(), leader, "1h", s1.clone()).await;
    let db2 = open_on(d2.path(), follower_of(&n2), "1h", s2.clone()).await;
    // Read, but nothing is published before a checkpoint commits.
    let nothing: (Vec<i64>, Vec<i64>) = (vec![], vec![]);
    assert_eq!((published(d1.path()), published(d2.path())), nothing);

    // A follower originates nothing, by name.
    let e = checkpoint(&db2).await.expect_err("n2 does not lead");
    assert!(e.to_string().contains("not the cluster leader"), "{e}");

    // The leader's checkpoint is the follower's too: both publish.
    checkpoint(&db1).await.expect("committed with n2's ack");
    eventually("n2 publishes its epoch", || {
        published(d2.path()) == [1, 2, 3]
    })
    .await;
    assert_eq!(published(d1.path()), vec![10, 11]);
    let committed = ids(&db1).await;
    assert_eq!(committed.len(), 1);
    assert_eq!(
        ids(&db2).await,
        committed,
        "one checkpoint, one id on both nodes"
    );

    // The follower stops answering: the leader's next checkpoint aborts
    // at its deadline, and nothing more is committed or published.
    db2.abort().await.ok();
    let e = checkpoint(&db1).await.expect_err("n2 never acks");
    assert!(e.to_string().contains("without an ack from n2"), "{e}");
    // Aborted (SLC-STO-011), neither fenced nor a fault: its outcome is
    // known, and the leader goes on even under exactly-once.
    assert_eq!(e.code(), "SLC-STO-011", "{e:?}");
    let status = db1.status().await.expect("status");
    assert!(
        status.halted.is_none() && status.fault.is_none(),
        "{status:?}"
    );
    assert_eq!(published(d1.path()), vec![10, 11]);
    assert_eq!(published(d2.path()), vec![1, 2, 3]);
    assert_eq!(ids(&db1).await, committed);

    // n2 back: the leader's next checkpoint commits on both again.
    drop(db2);
    let db2 = open_on(d2.path(), follower_of(&n2), "1h", s2.clone()).await;
    checkpoint(&db1).await.expect("committed once n2 is back");
    let now = ids(&db1).await;
    assert_eq!(now.len(), 2, "{now:?}");
    assert_eq!(ids(&db2).await, now);
    assert_eq!(published(d1.path()), vec![10, 11]);
    assert_eq!(published(d2.path()), vec![1, 2, 3]);
    // The checkpoints are where the store says: in the bucket, or under
    // the state directory.
    for (dir, store) in [(&d1, &s1), (&d2, &s2)] {
        let local = dir.path().join("checkpoints").exists();
        assert_eq!(local, store.is_none(), "{}", dir.path().display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_crashed_rejoins_from_the_shared_checkpoint_exactly_once() {
    let (_etcd, _n1, n2, leader) = two_nodes().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    append_input(d1.path(), &[10]);
    append_input(d2.path(), &[1, 2]);
    let db1 = open(d1.path(), leader).await;
    let db2 = open(d2.path(), follower_of(&n2)).await;

    // n2 crashes before any checkpoint: what it staged is never published
    // (the first checkpoint below publishes each row once).
    db2.abort().await.ok();
    drop(db2);
    let nothing: (Vec<i64>, Vec<i64>) = (vec![], vec![]);
    assert_eq!((published(d1.path()), published(d2.path())), nothing);

    // Restarted, n2 reads its input again and the next checkpoint is
    // both nodes': each row is published once.
    let db2 = open(d2.path(), follower_of(&n2)).await;
    checkpoint(&db1).await.expect("first checkpoint");
    eventually("n2 publishes", || published(d2.path()) == [1, 2]).await;
    assert_eq!(published(d1.path()), vec![10]);
    let first = ids(&db1).await;
    assert_eq!(ids(&db2).await, first);

    // Crashed after it, n2 recovers that checkpoint (its input is read to
    // the end there): nothing is published again, and it takes part in
    // the next checkpoint.
    db2.abort().await.ok();
    drop(db2);
    let db2 = open(d2.path(), follower_of(&n2)).await;
    assert_eq!(ids(&db2).await, first, "n2 recovered the shared checkpoint");
    checkpoint(&db1).await.expect("second checkpoint");
    let both = ids(&db1).await;
    assert_eq!(both.len(), 2, "{both:?}");
    assert_eq!(ids(&db2).await, both);
    assert_eq!(published(d2.path()), vec![1, 2]);
    assert_eq!(published(d1.path()), vec![10]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leaders_periodic_checkpoints_are_the_followers_too() {
    let (_etcd, _n1, n2, leader) = two_nodes().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    append_input(d1.path(), &[7]);
    append_input(d2.path(), &[5, 6]);
    // The same interval on both: only the leader's schedule starts one.
    let db1 = open_every(d1.path(), leader, "200ms").await;
    let db2 = open_every(d2.path(), follower_of(&n2), "200ms").await;
    eventually("both publish at a periodic checkpoint", || {
        published(d1.path()) == [7] && published(d2.path()) == [5, 6]
    })
    .await;
    // Both list the same checkpoints (one more may commit in between:
    // compare until they agree).
    let agree = async {
        loop {
            let (a, b) = (ids(&db1).await, ids(&db2).await);
            if !a.is_empty() && a == b {
                return a;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(LIMIT, agree)
        .await
        .expect("the same checkpoints on both nodes");
    let m = db2.metrics();
    assert_eq!(m.checkpoints_failed, 0, "{m:?}");
    // Everything it read is committed: the follower shuts down cleanly
    // without a checkpoint of its own, and its file stays as published.
    db2.shutdown().await.expect("clean follower shutdown");
    assert_eq!(published(d2.path()), vec![5, 6]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_part_cannot_be_written_nacks_at_once() {
    let (_etcd, _n1, n2, leader) = two_nodes().await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    append_input(d1.path(), &[1]);
    append_input(d2.path(), &[2]);
    let faulty = FaultyStore::new(Arc::new(InMemory::new()));
    let db1 = open(d1.path(), leader).await;
    let store: Arc<dyn ObjectStore> = Arc::new(faulty.clone());
    let _db2 = open_on(d2.path(), follower_of(&n2), "1h", Some(store)).await;
    // n2's store is full: its part of the next checkpoint cannot be
    // written, and its tail declines the attempt instead of leaving the
    // leader to wait for its deadline.
    faulty.set_capacity(Some(faulty.used_bytes()));
    let e = checkpoint(&db1).await.expect_err("n2's part failed");
    assert_eq!(e.code(), "SLC-STO-011", "{e:?}");
    assert!(e.to_string().contains("node 'n2' nacked"), "{e}");
    assert!(faulty.failed_puts() > 0);
    assert_eq!(published(d1.path()), Vec::<i64>::new());
}
