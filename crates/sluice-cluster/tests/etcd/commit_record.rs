//! The leader's commit record fences the checkpoint store: a leader
//! deposed between its blob writes and its manifest (paused past its lease,
//! as SIGSTOP does) commits nothing, and the new leader reads only the
//! checkpoints a leader committed in etcd while it led. Every attempt goes
//! through the protocol: admission, the Prepare, the leader's own ack and
//! the commit decision.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_cluster::assignment::Placement;
use sluice_cluster::checkpoint::now_ms;
use sluice_cluster::standby::{self, Turn};
use sluice_cluster::{ClusterKeys, ClusterNode, CommittedCuts, LeaderCommitRecord};
use sluice_storage::{CheckpointStore, CommitAuthority, LocalBackend, Manifest};

use super::{etcd, part, start_placed};

async fn start_node(
    etcd: &sluice_cluster::testing::EtcdServer,
    cluster: &str,
    node: &str,
) -> ClusterNode {
    start_placed(etcd, cluster, node, Placement::Leader).await
}

fn manifest(id: u64, blobs: Vec<sluice_storage::BlobRef>) -> Manifest {
    Manifest {
        id,
        created_ms: 1,
        pipeline: "p".into(),
        watermark: 0,
        sources: BTreeMap::new(),
        sinks: BTreeMap::new(),
        blobs,
        assignment_generation: None,
    }
}

/// `node` leads, with its own assignment table written, and `record`
/// speaks for it.
async fn lead(node: &ClusterNode, record: &LeaderCommitRecord) -> u64 {
    let limit = Duration::from_secs(10);
    let term = match tokio::time::timeout(limit, standby::wait_for_turn(node))
        .await
        .expect("the node gets its turn")
        .expect("turn")
    {
        Turn::Lead { term } => term,
        other => panic!("{}: {other:?}", node.node_id()),
    };
    let own = standby::wait_for_own_assignment(node, term);
    tokio::time::timeout(limit, own)
        .await
        .expect("in time")
        .expect("table");
    record.lead(Arc::clone(node.election()), term);
    record.take_over().await.expect("took over");
    term
}

/// Admit and prepare attempt `id` as `record`'s leader: its generation.
async fn prepare(record: &LeaderCommitRecord, id: u64) -> Option<u64> {
    let generation = record.admit().await.expect("admitted");
    let deadline = now_ms() + 60_000;
    record
        .prepare(id, generation, deadline)
        .await
        .expect("prepared");
    generation
}

async fn record(etcd: &sluice_cluster::testing::EtcdServer, node: &str) -> Arc<LeaderCommitRecord> {
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    Arc::new(LeaderCommitRecord::new(
        client,
        ClusterKeys::new("cr").expect("keys"),
        node,
    ))
}

fn store(dir: &std::path::Path, record: &Arc<LeaderCommitRecord>) -> CheckpointStore {
    CheckpointStore::new(Box::new(LocalBackend::new(dir).expect("store")))
        .with_authority(Arc::clone(record) as Arc<dyn CommitAuthority>)
}

/// Reserve a checkpoint id, admit and prepare it through `record`, and
/// write its one blob (`state`).
async fn write_state(
    store: &CheckpointStore,
    record: &LeaderCommitRecord,
    state: &'static [u8],
) -> (u64, Manifest) {
    let id = store.reserve().await.expect("reserve");
    let generation = prepare(record, id).await;
    let blob = store
        .write_blob(id, "op", Bytes::from_static(state))
        .await
        .expect("blob");
    let mut m = manifest(id, vec![blob]);
    m.assignment_generation = generation;
    (id, m)
}

async fn ids(store: &CheckpointStore) -> Vec<u64> {
    store
        .list()
        .await
        .expect("list")
        .iter()
        .map(|c| c.id)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_deposed_before_its_manifest_commits_nothing() {
    let etcd = etcd().await;
    let dir = tempfile::tempdir().expect("dir");
    let n1 = start_node(&etcd, "cr", "n1").await;
    let n2 = start_node(&etcd, "cr", "n2").await;
    let (r1, r2) = (record(&etcd, "n1").await, record(&etcd, "n2").await);
    let (s1, s2) = (store(dir.path(), &r1), store(dir.path(), &r2));

    // Nothing is recorded by a node that does not lead.
    let e = r2
        .record_commit(9, Some(1), &part(9))
        .await
        .expect_err("n2 does not lead");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
    assert_eq!(r2.committed().await.expect("read"), None);

    let term1 = lead(&n1, &r1).await;
    let (first, m) = write_state(&s1, &r1, b"one").await;
    s1.commit(&m).await.expect("commit");
    assert_eq!(
        r2.committed().await.expect("read"),
        Some(BTreeSet::from([first]))
    );

    // n1 writes the state of its next checkpoint, then stops answering
    // (its lease lapses, as a paused process's does) before its manifest.
    let (second, stale) = write_state(&s1, &r1, b"two").await;
    n1.session().stop_keep_alive();
    // The new leader aborts n1's undecided attempt as it takes over.
    let term2 = lead(&n2, &r2).await;
    assert!(term2 > term1);
    let resumed = s2
        .latest_valid()
        .await
        .expect("read")
        .expect("a checkpoint");
    assert_eq!(
        resumed.manifest.id, first,
        "n2 resumes from n1's last commit"
    );

    // n1 wakes up and completes its write: etcd refuses the record.
    let e = s1
        .commit(&stale)
        .await
        .expect_err("a deposed leader commits nothing");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
    let text = format!(
        "{e}: {}",
        std::error::Error::source(&e)
            .map(|s| s.to_string())
            .unwrap_or_default()
    );
    assert!(
        text.contains(&format!("checkpoint {second} is not committed")),
        "{text}"
    );
    assert!(
        text.contains("n1"),
        "the refusal names the deposed node: {text}"
    );

    // n2 goes on: its checkpoints follow n1's last committed one.
    let (third, m) = write_state(&s2, &r2, b"three").await;
    assert!(third > second);
    s2.commit(&m).await.expect("commit");
    assert_eq!(ids(&s2).await, vec![first, third]);
    let latest = s2
        .latest_valid()
        .await
        .expect("read")
        .expect("a checkpoint");
    assert_eq!(
        (latest.manifest.id, latest.blobs["op"].as_ref()),
        (third, &b"three"[..])
    );

    // Pruning forgets the records of pruned checkpoints.
    s2.prune(1).await.expect("prune");
    assert_eq!(
        r2.committed().await.expect("read"),
        Some(BTreeSet::from([third]))
    );
    assert_eq!(ids(&s2).await, vec![third]);

    // A reader of the decisions sees what the leader has not forgotten;
    // given the cut a change of the split's list recorded, it counts that
    // one too (a dropped member's last checkpoint, for its publish).
    let client = sluice_cluster::status::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new("cr").expect("keys");
    let cuts = CommittedCuts::new(client, keys);
    assert_eq!(
        cuts.committed().await.expect("read"),
        Some(BTreeSet::from([third]))
    );
    let recorded = cuts.clone().with_recorded_cut(Some(first));
    assert_eq!(
        recorded.committed().await.expect("read"),
        Some(BTreeSet::from([first, third]))
    );
    assert_eq!(
        cuts.with_recorded_cut(None)
            .committed()
            .await
            .expect("read"),
        Some(BTreeSet::from([third]))
    );

    // A node that stood down records nothing any more.
    r2.stand_down();
    let e = r2
        .record_commit(third + 1, m.assignment_generation, &part(third + 1))
        .await
        .expect_err("stood down");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
}

/// An etcd that stops answering makes the record's outcome unknown: the
/// leader's commit and a reader's question both fail in time with
/// `SLC-STO-009`, keeping etcd's error as the source, and work again once
/// etcd answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_etcd_makes_the_record_unknown_not_refused() {
    let etcd = etcd().await;
    let n1 = start_node(&etcd, "cr", "n1").await;
    let record = record(&etcd, "n1").await;
    lead(&n1, &record).await;
    let generation = prepare(&record, 1).await;
    record
        .record_commit(1, generation, &part(1))
        .await
        .expect("recorded");
    prepare(&record, 2).await;

    etcd.pause().expect("pause etcd");
    let limit = sluice_cluster::client::CALL_TIMEOUT + Duration::from_secs(3);
    let e = tokio::time::timeout(limit, record.record_commit(2, generation, &part(2)))
        .await
        .expect("the record fails in time")
        .expect_err("a paused etcd records nothing");
    assert_eq!(e.code(), "SLC-STO-009", "{e}");
    let source = std::error::Error::source(&e).map(ToString::to_string);
    assert!(
        source
            .as_deref()
            .is_some_and(|s| s.starts_with("SLC-CLU-002")),
        "{e}: {source:?}"
    );
    let e = tokio::time::timeout(limit, record.committed())
        .await
        .expect("the read fails in time")
        .expect_err("a paused etcd answers nothing");
    assert_eq!(e.code(), "SLC-STO-009", "{e}");
    etcd.resume().expect("resume etcd");
    let recorded = tokio::time::timeout(limit * 2, async {
        loop {
            if let Ok(r) = record.committed().await {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("etcd answers again");
    assert!(recorded.is_some_and(|r| r.contains(&1)));
}
