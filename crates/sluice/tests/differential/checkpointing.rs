//! Checkpoints through the public API: manual checkpoints, retention,
//! committed-only subscriptions with resume, and delivery admission.

use std::sync::Arc;
use std::time::Duration;

use sluice::arrow::array::{Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::{Database, ResumeFrom};

fn batch(ks: &[i64], ts: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(ks.to_vec())),
            Arc::new(TimestampMillisecondArray::from(ts.to_vec())),
        ],
    )
    .unwrap()
}

/// A database with these options, on `dir` when given.
async fn open_with(dir: Option<&std::path::Path>, options: &[(&str, &str)]) -> Database {
    let mut b = Database::builder();
    if let Some(d) = dir {
        b = b.state_dir(d);
    }
    for (k, v) in options {
        b = b.set(k, v).unwrap();
    }
    b.open().await.unwrap()
}

async fn open(dir: &std::path::Path, history: &str) -> Database {
    let db = open_with(
        Some(dir),
        &[
            ("checkpoint_interval", "1h"),
            ("subscription_history", history),
        ],
    )
    .await;
    db.execute(
        "CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM keys AS SELECT k FROM s WHERE k > 0;",
    )
    .await
    .unwrap();
    db
}

fn keys(b: &sluice::ChangeBatch) -> Vec<i64> {
    b.data
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

async fn next(sub: &mut sluice::Subscription) -> sluice::ChangeBatch {
    tokio::time::timeout(Duration::from_secs(5), sub.next())
        .await
        .expect("a batch arrives")
        .unwrap()
        .unwrap()
}

#[tokio::test]
async fn committed_subscribers_see_only_committed_epochs() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "4").await;
    db.start().await.unwrap();
    let mut live = db.subscribe("keys").await.unwrap();
    let mut committed = db
        .subscribe_committed("keys", ResumeFrom::Next)
        .await
        .unwrap();
    let src = db.source("s").await.unwrap();
    src.push(batch(&[1, 2, -3], &[1, 2, 3])).await.unwrap();
    assert_eq!(keys(&next(&mut live).await), vec![1, 2]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(committed.try_next().is_none(), "nothing is committed yet");
    let report = db.checkpoint().await.unwrap();
    let got = next(&mut committed).await;
    assert_eq!(keys(&got), vec![1, 2]);
    assert_eq!(got.epoch, Some(report.id));
    src.push(batch(&[4], &[4])).await.unwrap();
    assert_eq!(keys(&next(&mut live).await), vec![4]);
    let second = db.checkpoint().await.unwrap();
    assert!(second.id > report.id);
    let got = next(&mut committed).await;
    assert_eq!((keys(&got), got.epoch), (vec![4], Some(second.id)));
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn resume_replays_retained_epochs_and_refuses_dropped_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "2").await;
    db.start().await.unwrap();
    // Committed epochs are retained from the first committed-only subscription on.
    let _first = db
        .subscribe_committed("keys", ResumeFrom::Next)
        .await
        .unwrap();
    let src = db.source("s").await.unwrap();
    let mut ids = Vec::new();
    for k in 1..=3 {
        src.push(batch(&[k], &[k])).await.unwrap();
        // Wait until the row went through a cycle before cutting the epoch.
        let mut live = db.subscribe("keys").await.unwrap();
        src.push(batch(&[-1], &[k])).await.unwrap();
        let _ = tokio::time::timeout(Duration::from_millis(200), live.next()).await;
        ids.push(db.checkpoint().await.unwrap().id);
    }
    let err = db
        .subscribe_committed("keys", ResumeFrom::Epoch(ids[0]))
        .await
        .err()
        .expect("epoch 1 fell out of the 2-epoch history");
    assert!(err.to_string().contains("no longer retained"), "{err}");
    let mut sub = db
        .subscribe_committed("keys", ResumeFrom::Epoch(ids[1]))
        .await
        .unwrap();
    let a = next(&mut sub).await;
    let b = next(&mut sub).await;
    assert_eq!((keys(&a), a.epoch), (vec![2], Some(ids[1])));
    assert_eq!((keys(&b), b.epoch), (vec![3], Some(ids[2])));
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn checkpoint_statement_listing_and_retention() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_with(
        Some(dir.path()),
        &[("checkpoint_interval", "1h"), ("checkpoint_retain", "2")],
    )
    .await;
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    db.start().await.unwrap();
    for _ in 0..3 {
        let rows = db.execute("CHECKPOINT").await.unwrap();
        assert_eq!(rows[0].num_rows(), 1);
    }
    let listed = db.execute("SHOW CHECKPOINTS").await.unwrap();
    assert_eq!(listed[0].num_rows(), 2, "only the newest two are kept");
    let ids: Vec<u64> = db
        .checkpoints()
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(ids, vec![2, 3]);
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn exactly_once_is_refused_for_push_sources_and_parquet_sinks() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_with(Some(dir.path()), &[("delivery", "exactly_once")]).await;
    db.execute("CREATE SOURCE pushed (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    let err = db.start().await.expect_err("refused").to_string();
    assert!(
        err.contains("source 'pushed'") && err.contains("cannot replay"),
        "{err}"
    );

    let data = dir.path().join("in.csv");
    std::fs::write(&data, "k,ts\n1,1\n").unwrap();
    let db2 = open_with(
        Some(&dir.path().join("two")),
        &[("delivery", "exactly_once")],
    )
    .await;
    db2.execute(&format!(
        "CREATE SOURCE f (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) WITH (connector = 'file', path = '{}');
         CREATE SINK p FROM f WITH (connector = 'file', path = '{}');",
        data.display(),
        dir.path().join("out.parquet").display()
    ))
    .await
    .unwrap();
    let err = db2.start().await.expect_err("refused").to_string();
    assert!(err.contains("sink 'p'") && err.contains("parquet"), "{err}");
    let no_dir = open_with(None, &[("checkpoint_interval", "1s")]).await;
    no_dir.execute("CREATE SOURCE s (k BIGINT)").await.unwrap();
    let err = no_dir.start().await.expect_err("refused").to_string();
    assert!(err.contains("needs a state directory"), "{err}");
}

#[tokio::test]
async fn checkpoints_go_to_an_object_store_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/bucket", dir.path().display());
    std::fs::create_dir_all(dir.path().join("bucket")).unwrap();
    let db = open_with(
        None,
        &[("checkpoint_interval", "1h"), ("checkpoint_store", &url)],
    )
    .await;
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    db.start().await.unwrap();
    let report = db.checkpoint().await.unwrap();
    let listed: Vec<u64> = db
        .checkpoints()
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect();
    assert_eq!(listed, vec![report.id]);
    let manifest = dir
        .path()
        .join("bucket/checkpoints")
        .join(format!("{:020}", report.id))
        .join("MANIFEST");
    assert!(manifest.exists(), "{} exists", manifest.display());
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn periodic_checkpoints_follow_new_input() {
    let dir = tempfile::tempdir().unwrap();
    let db = open_with(Some(dir.path()), &[("checkpoint_interval", "100ms")]).await;
    db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
        .await
        .unwrap();
    db.start().await.unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(
        db.metrics().checkpoints,
        0,
        "no input, nothing to checkpoint"
    );
    db.source("s")
        .await
        .unwrap()
        .push(batch(&[1], &[1]))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while db.metrics().checkpoints == 0 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(db.metrics().checkpoints, 1);
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert_eq!(db.metrics().checkpoints, 1, "no new input since");
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn retained_epochs_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path(), "4").await;
    db.start().await.unwrap();
    let _committed = db
        .subscribe_committed("keys", ResumeFrom::Next)
        .await
        .unwrap();
    let mut live = db.subscribe("keys").await.unwrap();
    db.source("s")
        .await
        .unwrap()
        .push(batch(&[7], &[1]))
        .await
        .unwrap();
    assert_eq!(keys(&next(&mut live).await), vec![7]);
    let id = db.checkpoint().await.unwrap().id;
    db.abort().await.unwrap();
    drop(db);
    let again = open(dir.path(), "4").await;
    again.start().await.unwrap();
    let mut sub = again
        .subscribe_committed("keys", ResumeFrom::Epoch(id))
        .await
        .unwrap();
    let got = next(&mut sub).await;
    assert_eq!((keys(&got), got.epoch), (vec![7], Some(id)));
    again.abort().await.unwrap();
}
