//! `SHOW CLUSTER`: refused outside a cluster, and a table of what the
//! cluster reports inside one.

use std::sync::Arc;

use async_trait::async_trait;
use sluice::arrow::util::pretty::pretty_format_batches;
use sluice::{ClusterInfo, ClusterMember, Database};

struct Fixed(Vec<ClusterMember>);

#[async_trait]
impl ClusterInfo for Fixed {
    async fn members(&self) -> sluice::Result<Vec<ClusterMember>> {
        Ok(self.0.clone())
    }
}

struct Unreachable;

#[async_trait]
impl ClusterInfo for Unreachable {
    async fn members(&self) -> sluice::Result<Vec<ClusterMember>> {
        Err(sluice::Error::Cluster {
            code: "SLC-CLU-002",
            source: Box::new(std::io::Error::other("etcd connect refused")),
        })
    }
}

#[tokio::test]
async fn show_cluster_outside_a_cluster_says_how_to_start_one() {
    let db = Database::open_in_memory().await.unwrap();
    let e = db.execute("SHOW CLUSTER").await.unwrap_err();
    assert_eq!(e.code(), "SLC-ENG-001");
    assert!(
        e.to_string().starts_with(
            "SHOW CLUSTER: this database does not run in a cluster (start it with \
             `sluice run --cluster etcd="
        ),
        "{e}"
    );
    // And it is one statement: anything after it is a syntax error.
    assert!(db.execute("SHOW CLUSTER NOW").await.is_err());
}

#[tokio::test]
async fn show_cluster_lists_what_the_cluster_reports() {
    let member = |node: &str, role: &str, me: bool, progress: Option<(u64, i64)>| ClusterMember {
        node: node.into(),
        role: role.into(),
        is_self: me,
        vnodes: 128,
        generation: 7,
        rows_in: progress.map(|p| p.0),
        rows_out: progress.map(|p| p.0 / 2),
        watermark_ms: progress.map(|p| p.1),
        checkpoint: progress.map(|_| 3),
        report_age_ms: progress.map(|_| 40),
        // n3 holds process-function input for a commit.
        asks_for_checkpoints: node == "n3",
    };
    let db = Database::builder()
        .cluster_info(Arc::new(Fixed(vec![
            member("n1", "leader", false, Some((1000, 5000))),
            member("n2", "standby", true, None),
            member("n3", "follower", false, Some((900, 3750))),
            // Running, with no watermark yet.
            member("n4", "follower", false, Some((0, i64::MIN))),
        ])))
        .open()
        .await
        .unwrap();
    let table = pretty_format_batches(&db.execute("show cluster").await.unwrap())
        .unwrap()
        .to_string();
    assert_eq!(
        table,
        "\
+------+----------+---------+--------+------------+---------+----------+--------------+------------+---------------+------------------+----------------------+
| node | role     | is_self | vnodes | generation | rows_in | rows_out | watermark_ms | checkpoint | report_age_ms | watermark_lag_ms | asks_for_checkpoints |
+------+----------+---------+--------+------------+---------+----------+--------------+------------+---------------+------------------+----------------------+
| n1   | leader   | false   | 128    | 7          | 1000    | 500      | 5000         | 3          | 40            | 0                | false                |
| n2   | standby  | true    | 128    | 7          |         |          |              |            |               |                  | false                |
| n3   | follower | false   | 128    | 7          | 900     | 450      | 3750         | 3          | 40            | 1250             | true                 |
| n4   | follower | false   | 128    | 7          | 0       | 0        |              | 3          | 40            |                  | false                |
+------+----------+---------+--------+------------+---------+----------+--------------+------------+---------------+------------------+----------------------+"
    );
    // No member with a watermark: no lag for any.
    let db = Database::builder()
        .cluster_info(Arc::new(Fixed(vec![
            member("n1", "leader", true, Some((0, i64::MIN))),
            member("n2", "follower", false, None),
        ])))
        .open()
        .await
        .unwrap();
    let batches = db.execute("SHOW CLUSTER").await.unwrap();
    for column in ["watermark_ms", "watermark_lag_ms"] {
        let values = batches[0].column_by_name(column).unwrap();
        assert_eq!(values.null_count(), 2, "{column}");
    }
    let db = Database::builder()
        .cluster_info(Arc::new(Unreachable))
        .open()
        .await
        .unwrap();
    let e = db.execute("SHOW CLUSTER").await.unwrap_err();
    assert_eq!(e.code(), "SLC-CLU-002");
    assert_eq!(e.to_string(), "etcd connect refused");
}
