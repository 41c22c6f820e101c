//! A sealed pipeline (`Database::seal`) leaves the source columns no
//! statement reads unparsed: the results must not change, malformed values
//! in those columns go unnoticed, and nothing that could read them can be
//! added afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fmt::Write as _;
use std::path::Path;

use sluice::arrow::util::pretty::pretty_format_batches;
use sluice::Database;

const VIEWS: [&str; 4] = ["w", "f", "a", "j"];

/// Bids with disorder; `junk` holds numbers, or text in every 7th row when
/// `dirty`.
fn write_bids(path: &Path, dirty: bool) {
    let mut text = String::from("id,grp,price,note,ts,junk\n");
    let mut x: u64 = 42;
    for i in 0..400u64 {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        let grp = (x >> 33) % 5;
        let price = (x >> 20) % 1000;
        let ts = i * 100 + (x >> 40) % 900;
        let junk = if dirty && i % 7 == 0 {
            "n/a".to_string()
        } else {
            ((x >> 10) % 77).to_string()
        };
        let note = if i % 4 == 0 {
            "\"quoted, note\"".to_string()
        } else {
            format!("note-{i}")
        };
        writeln!(text, "{i},{grp},{price},{note},{ts},{junk}").unwrap();
    }
    std::fs::write(path, text).unwrap();
}

fn write_labels(path: &Path) {
    let mut text = String::from("k,label,extra\n");
    for k in 0..5 {
        writeln!(text, "{k},label-{k},x{k}").unwrap();
    }
    std::fs::write(path, text).unwrap();
}

async fn pipeline(bids: &Path, labels: &Path) -> Database {
    let db = Database::open_in_memory().await.unwrap();
    db.execute(&format!(
        "CREATE SOURCE s (id BIGINT, grp BIGINT, price BIGINT, note VARCHAR, ts TIMESTAMP, junk BIGINT,
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)
         WITH (connector = 'file', path = '{}', format = 'csv');
         CREATE SOURCE t (k BIGINT, label VARCHAR, extra VARCHAR)
         WITH (connector = 'file', path = '{}', format = 'csv');
         CREATE MATERIALIZED VIEW w AS
             SELECT grp, tumble(ts, INTERVAL '10' SECOND) AS ws, COUNT(*) AS n, MAX(price) AS mx
             FROM s GROUP BY grp, tumble(ts, INTERVAL '10' SECOND);
         CREATE MATERIALIZED VIEW f AS SELECT id, note FROM s WHERE price % 3 = 0;
         CREATE MATERIALIZED VIEW a AS SELECT grp, SUM(price) AS total FROM s GROUP BY grp;
         CREATE MATERIALIZED VIEW j AS SELECT s.id, t.label FROM s JOIN t ON s.grp = t.k;",
        bids.display(),
        labels.display()
    ))
    .await
    .unwrap();
    db
}

/// Every view's rows, sorted, as text.
async fn results(db: &Database) -> Vec<String> {
    let mut out = Vec::new();
    for view in VIEWS {
        let rows = db
            .execute(&format!("SELECT * FROM {view} ORDER BY 1, 2"))
            .await
            .unwrap();
        out.push(pretty_format_batches(&rows).unwrap().to_string());
    }
    out
}

#[tokio::test]
async fn sealed_pipeline_reads_only_used_columns_with_the_same_results() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.csv");
    let dirty = dir.path().join("dirty.csv");
    let labels = dir.path().join("labels.csv");
    write_bids(&clean, false);
    write_bids(&dirty, true);
    write_labels(&labels);

    let db = pipeline(&clean, &labels).await;
    db.run_to_completion().await.unwrap();
    let expected = results(&db).await;
    assert!(expected[3].contains("label-"), "{}", expected[3]);
    db.shutdown().await.unwrap();

    for bids in [&clean, &dirty] {
        let db = pipeline(bids, &labels).await;
        db.seal().await;
        db.run_to_completion().await.unwrap();
        assert_eq!(results(&db).await, expected, "{}", bids.display());
        db.shutdown().await.unwrap();
    }

    // Unsealed, every declared column is parsed: the text in `junk` fails.
    let db = pipeline(&dirty, &labels).await;
    let err = db.run_to_completion().await.unwrap_err().to_string();
    assert!(
        err.contains("column 'junk': cannot parse 'n/a' as Int64"),
        "{err}"
    );
}

#[tokio::test]
async fn sealed_pipeline_refuses_statements_and_source_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let bids = dir.path().join("bids.csv");
    let labels = dir.path().join("labels.csv");
    write_bids(&bids, false);
    write_labels(&labels);

    let db = pipeline(&bids, &labels).await;
    // Subscribed before sealing: `s` is then read whole.
    let mut whole = db.subscribe("s").await.unwrap();
    db.seal().await;
    let err = db
        .execute("CREATE STREAM late AS SELECT junk FROM s")
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SLC-ENG-011");
    assert_eq!(
        err.to_string(),
        "the pipeline is sealed: cannot create 'late' after seal(); declare every source, \
         stream and sink first"
    );
    let Err(err) = db.subscribe("t").await else {
        panic!("subscribing to a source of a sealed pipeline must fail");
    };
    assert_eq!(err.code(), "SLC-ENG-011");
    assert!(err.to_string().contains("source 't'"), "{err}");
    db.subscribe("w").await.unwrap();

    db.run_to_completion().await.unwrap();
    let first = whole.next().await.unwrap().unwrap();
    let junk = first.data.column_by_name("junk").unwrap();
    assert_eq!(junk.null_count(), 0, "a subscribed source is read whole");
    db.shutdown().await.unwrap();
}
