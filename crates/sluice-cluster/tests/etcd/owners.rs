//! Checkpoints of a pipeline whose vnodes are split across two nodes, at
//! the level of their commit records: the leader (`sharing_vnodes`) and a
//! follower (`FollowerCommitRecord`). A checkpoint commits only once every
//! owner acked; a follower's decline, the leader's abandon, and a Prepare
//! the leader moved past all end in an abort that every waiter hears.

use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::assignment::Placement;
use sluice_cluster::standby::{self, Turn};
use sluice_cluster::{ClusterKeys, ClusterNode, FollowerCommitRecord, LeaderCommitRecord};
use sluice_storage::{Announcement, CommitAuthority, StorageError};

use super::{etcd, eventually, part, start_placed};

const LIMIT: Duration = Duration::from_secs(10);

/// Two nodes over Members placement, n1 leading with every vnode split
/// between them: (n1, n2, leader record, follower record, generation).
async fn two_owners(
    etcd: &sluice_cluster::testing::EtcdServer,
    cluster: &str,
) -> (
    ClusterNode,
    ClusterNode,
    Arc<LeaderCommitRecord>,
    Arc<FollowerCommitRecord>,
    u64,
) {
    let n1 = start_placed(etcd, cluster, "n1", Placement::Members).await;
    let term = match tokio::time::timeout(LIMIT, standby::wait_for_turn(&n1))
        .await
        .expect("in time")
        .expect("turn")
    {
        Turn::Lead { term } => term,
        other => panic!("n1: {other:?}"),
    };
    let n2 = start_placed(etcd, cluster, "n2", Placement::Members).await;
    eventually("both members placed", LIMIT, || {
        n1.assignment()
            .ok()
            .flatten()
            .is_some_and(|a| a.members().len() == 2 && a.term() == term)
    })
    .await;
    eventually("n2 sees its vnodes", LIMIT, || {
        !n2.owned_vnodes().is_empty()
    })
    .await;
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new(cluster).expect("keys");
    let leader = Arc::new(LeaderCommitRecord::new(client, keys, "n1").sharing_vnodes());
    leader.lead(Arc::clone(n1.election()), term);
    let follower = Arc::new(FollowerCommitRecord::new(Arc::clone(n2.session())));
    let generation = leader.admit().await.expect("admitted").expect("fenced");
    (n1, n2, leader, follower, generation)
}

fn due_in(ms: u64) -> u64 {
    sluice_cluster::checkpoint::now_ms() + ms
}

/// The follower acks attempt `id` in the background.
fn ack(
    follower: &Arc<FollowerCommitRecord>,
    id: u64,
    g: u64,
) -> tokio::task::JoinHandle<Result<(), StorageError>> {
    let follower = Arc::clone(follower);
    tokio::spawn(async move { follower.record_commit(id, Some(g), &part(id)).await })
}

/// The refusal a background ack ended with, in time.
async fn refused(acking: tokio::task::JoinHandle<Result<(), StorageError>>) -> StorageError {
    let done = tokio::time::timeout(LIMIT, acking).await.expect("in time");
    done.expect("joined").expect_err("refused")
}

/// The leader prepares attempt `id` (due in a minute) and the follower is
/// handed it.
async fn prepared(
    leader: &LeaderCommitRecord,
    follower: &FollowerCommitRecord,
    id: u64,
    g: u64,
) -> Announcement {
    leader
        .prepare(id, Some(g), due_in(60_000))
        .await
        .expect("prepared");
    announced(follower).await
}

/// The follower's next announcement, waiting for its wake.
async fn announced(follower: &FollowerCommitRecord) -> Announcement {
    let wake = follower.announcements().expect("a follower has a wake");
    let wait = async {
        loop {
            if let Some(a) = follower.next_announcement().await.expect("read") {
                return a;
            }
            let _ = tokio::time::timeout(Duration::from_millis(200), wake.notified()).await;
        }
    };
    tokio::time::timeout(LIMIT, wait).await.expect("announced")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_commits_once_every_owner_acked() {
    let etcd = etcd().await;
    let (_n1, _n2, leader, follower, g) = two_owners(&etcd, "own1").await;
    assert!(!follower.may_originate());
    assert!(follower.may_fold_input());
    leader
        .prepare(1, Some(g), due_in(10_000))
        .await
        .expect("prepared");
    let want = Announcement::Prepared {
        id: 1,
        generation: g,
        deadline_ms: 0,
    };
    let got = announced(&follower).await;
    assert!(
        matches!(got, Announcement::Prepared { id: 1, generation, .. } if generation == g),
        "{got:?} (want {want:?})"
    );
    // Each Prepare is handed out once.
    assert_eq!(follower.next_announcement().await.expect("read"), None);
    // The leader's part alone does not commit: it waits for n2's ack.
    let committing = {
        let leader = Arc::clone(&leader);
        tokio::spawn(async move { leader.record_commit(1, Some(g), &part(1)).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!committing.is_finished(), "committed without n2's ack");
    assert_eq!(leader.committed().await.expect("read"), None);
    follower
        .record_commit(1, Some(g), &part(1))
        .await
        .expect("n2's part committed");
    committing.await.expect("joined").expect("committed");
    let both = [leader.committed().await, follower.committed().await];
    for c in both {
        assert_eq!(
            c.expect("read")
                .expect("some")
                .into_iter()
                .collect::<Vec<_>>(),
            vec![1]
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_decline_aborts_the_leaders_commit() {
    let etcd = etcd().await;
    let (_n1, _n2, leader, follower, g) = two_owners(&etcd, "own2").await;
    leader
        .prepare(1, Some(g), due_in(10_000))
        .await
        .expect("prepared");
    announced(&follower).await;
    follower
        .decline(1, "alignment timed out waiting for the barrier of bids")
        .await
        .expect("nacked");
    let e = leader
        .record_commit(1, Some(g), &part(1))
        .await
        .expect_err("aborted");
    // Aborted by this leader itself: not a fence (the leader goes on).
    let why = "node 'n2' nacked: alignment timed out waiting for the barrier of bids";
    assert!(
        matches!(&e, StorageError::Aborted { id: 1, reason } if reason == why),
        "{e:?}"
    );
    assert_eq!(leader.committed().await.expect("read"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_abort_reaches_the_follower_waiting_or_not() {
    let etcd = etcd().await;
    let (_n1, _n2, leader, follower, g) = two_owners(&etcd, "own3").await;
    // Acked, then the leader gives the attempt up: the waiting ack ends
    // with the leader's reason at once, not at the deadline.
    prepared(&leader, &follower, 1, g).await;
    let acking = ack(&follower, 1, g);
    tokio::time::sleep(Duration::from_millis(200)).await;
    leader
        .abandon(1, "alignment timed out")
        .await
        .expect("aborted");
    let e = refused(acking).await;
    assert!(
        matches!(&e, StorageError::Aborted { id: 1, reason } if reason == "alignment timed out"),
        "{e:?}"
    );
    assert_eq!(e.code(), "SLC-STO-011");

    // Aborted before the follower looked: announced as an abort.
    leader
        .prepare(2, Some(g), due_in(60_000))
        .await
        .expect("prepared");
    leader
        .abandon(2, "the pipeline stopped")
        .await
        .expect("aborted");
    // The follower mirrors Prepares and decisions through two watches: it
    // is asked once its decisions have caught up with the abort (a
    // Prepare handed out first is found aborted before capture instead).
    let caught_up = async {
        while follower.attempt_aborted(2).await.ok().flatten().is_none() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), caught_up)
        .await
        .expect("the follower sees the abort");
    assert_eq!(
        announced(&follower).await,
        Announcement::Aborted {
            id: 2,
            reason: "the pipeline stopped".into()
        }
    );

    // A leader whose tail never reached its commit (its manifest write
    // failed) aborts that attempt before its next Prepare.
    prepared(&leader, &follower, 3, g).await;
    let acking = ack(&follower, 3, g);
    leader
        .prepare(4, Some(g), due_in(60_000))
        .await
        .expect("prepared");
    let e = refused(acking).await;
    assert!(
        matches!(&e, StorageError::Aborted { id: 3, reason } if reason.contains("moved on to a later attempt")),
        "{e:?}"
    );
    assert!(matches!(
        announced(&follower).await,
        Announcement::Prepared { id: 4, .. }
    ));
    // An abort while the follower aligns is seen before its capture.
    leader
        .prepare(5, Some(g), due_in(60_000))
        .await
        .expect("prepared");
    assert!(matches!(
        announced(&follower).await,
        Announcement::Prepared { id: 5, .. }
    ));
    assert_eq!(follower.attempt_aborted(5).await.expect("read"), None);
    leader
        .abandon(5, "alignment timed out")
        .await
        .expect("aborted");
    // Seen through the follower's watch of the decisions, so within its
    // propagation delay.
    let seen = async {
        loop {
            if let Some(reason) = follower.attempt_aborted(5).await.expect("read") {
                return reason;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let seen = tokio::time::timeout(LIMIT, seen)
        .await
        .expect("seen in time");
    assert_eq!(seen, "alignment timed out");
    // Neither the follower nor a stranger commits what it was not handed.
    let e = follower
        .record_commit(9, Some(g), &part(9))
        .await
        .expect_err("never prepared");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_waiting_on_a_deposed_leader_hears_its_successors_abort() {
    let etcd = etcd().await;
    let (n1, n2, leader, follower, g) = two_owners(&etcd, "own4").await;
    prepared(&leader, &follower, 1, g).await;
    let acking = ack(&follower, 1, g);
    // The leader stops (its lease lapses) before it decides: n2 takes
    // over, and its first act as leader aborts the orphan, which releases
    // the ack it made as a follower long before the Prepare's deadline.
    n1.session().stop_keep_alive();
    let term2 = match tokio::time::timeout(LIMIT, standby::wait_for_turn(&n2))
        .await
        .expect("in time")
        .expect("turn")
    {
        Turn::Lead { term } => term,
        other => panic!("n2: {other:?}"),
    };
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let successor = LeaderCommitRecord::new(client, ClusterKeys::new("own4").expect("keys"), "n2")
        .sharing_vnodes();
    successor.lead(Arc::clone(n2.election()), term2);
    assert_eq!(successor.take_over().await.expect("took over"), vec![1]);
    let e = refused(acking).await;
    assert!(
        matches!(&e, StorageError::Aborted { id: 1, reason } if reason.contains("left undecided by an earlier leader")),
        "{e:?}"
    );
    // The deposed leader's own commit is refused as a fence.
    let e = leader
        .record_commit(1, Some(g), &part(1))
        .await
        .expect_err("deposed");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
    assert_eq!(successor.committed().await.expect("read"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_out_of_the_cluster_cannot_ack_and_stops_folding_input() {
    let etcd = etcd().await;
    let (_n1, n2, leader, follower, g) = two_owners(&etcd, "own5").await;
    prepared(&leader, &follower, 1, g).await;
    // n2 is cut off past its lease: it must not fold input, and it does
    // not ack (a fence naming the lost lease), even before etcd expires
    // the lease.
    n2.session().stop_keep_alive();
    eventually("n2 sees its lease lost", LIMIT, || {
        !follower.may_fold_input()
    })
    .await;
    let e = follower
        .record_commit(1, Some(g), &part(1))
        .await
        .expect_err("out of the cluster");
    assert_eq!(e.code(), "SLC-STO-008", "{e}");
    assert!(e.to_string().contains("lease"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_that_leaves_ends_the_leaders_wait_long_before_the_deadline() {
    let etcd = etcd().await;
    let (_n1, n2, leader, follower, g) = two_owners(&etcd, "own6").await;
    prepared(&leader, &follower, 1, g).await;
    let started = std::time::Instant::now();
    let committing = {
        let leader = Arc::clone(&leader);
        tokio::spawn(async move { leader.record_commit(1, Some(g), &part(1)).await })
    };
    // n2 dies before it acks: its lease lapses, and the wait for its
    // answer ends with that (or with the move of its vnodes that follows).
    n2.session().stop_keep_alive();
    let e = refused(committing).await;
    assert!(
        matches!(&e, StorageError::Aborted { id: 1, reason }
            if reason.contains("node 'n2' left the cluster (its lease lapsed) before it answered")
                || reason.contains("the assignment moved from generation")),
        "{e:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(leader.committed().await.expect("read"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_and_overdue_prepares_are_passed_over() {
    let etcd = etcd().await;
    let (_n1, _n2, leader, follower, g) = two_owners(&etcd, "own7").await;
    // A Prepare in a format this node cannot read (written by hand).
    let mut client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let key = ClusterKeys::new("own7")
        .expect("keys")
        .checkpoint_record("prepare", 1);
    client
        .put(key, "{\"format\": 99}", None)
        .await
        .expect("put");
    // One already due when the follower looks (it was paused past it).
    leader
        .prepare(2, Some(g), due_in(50))
        .await
        .expect("prepared");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(follower.next_announcement().await.expect("read"), None);
    // The next one is handed out.
    assert!(matches!(
        prepared(&leader, &follower, 3, g).await,
        Announcement::Prepared { id: 3, .. }
    ));
}

/// A static split's table does not move when an owner dies (its vnodes
/// wait for it): the leader's wait for a dead owner's answer ends when
/// the owner's lease lapses, not at the Prepare's deadline (a minute
/// here; the checkpoint timeout in a pipeline, ten by default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_owner_of_a_fixed_split_ends_the_leaders_wait_at_its_lease() {
    let etcd = etcd().await;
    let fixed = Placement::Fixed(vec!["n1".into(), "n2".into()]);
    let n1 = start_placed(&etcd, "own8", "n1", fixed.clone()).await;
    let term = match tokio::time::timeout(LIMIT, standby::wait_for_turn(&n1))
        .await
        .expect("in time")
        .expect("turn")
    {
        Turn::Lead { term } => term,
        other => panic!("n1: {other:?}"),
    };
    eventually("the table of n1's term", LIMIT, || {
        n1.assignment()
            .ok()
            .flatten()
            .is_some_and(|a| a.term() == term)
    })
    .await;
    let n2 = start_placed(&etcd, "own8", "n2", fixed).await;
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new("own8").expect("keys");
    let leader = Arc::new(LeaderCommitRecord::new(client, keys, "n1").sharing_vnodes());
    leader.lead(Arc::clone(n1.election()), term);
    let follower = FollowerCommitRecord::new(Arc::clone(n2.session()));
    let g = leader.admit().await.expect("admitted").expect("fenced");
    prepared(&leader, &follower, 1, g).await;
    let started = std::time::Instant::now();
    let committing = {
        let leader = Arc::clone(&leader);
        tokio::spawn(async move { leader.record_commit(1, Some(g), &part(1)).await })
    };
    n2.session().stop_keep_alive();
    let e = refused(committing).await;
    assert!(
        matches!(&e, StorageError::Aborted { id: 1, reason }
            if reason.contains("node 'n2' left the cluster (its lease lapsed) before it answered")),
        "{e:?}"
    );
    assert!(started.elapsed() < LIMIT, "{:?}", started.elapsed());
    // The table stayed: nothing but the lapsed lease ended the wait.
    assert_eq!(n1.generation(), g);
}

/// A follower that acked waits for the decision only while the leader
/// that prepared the attempt holds its term: a leader killed before it
/// decided leaves the outcome unknown at its lease, not at the Prepare's
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_stops_waiting_when_the_preparing_leader_loses_its_term() {
    let etcd = etcd().await;
    let (n1, _n2, leader, follower, g) = two_owners(&etcd, "own9").await;
    prepared(&leader, &follower, 1, g).await;
    let started = std::time::Instant::now();
    let acking = ack(&follower, 1, g);
    n1.session().stop_keep_alive();
    // The lease, then the grace a successor has to abort the attempt.
    let bound = Duration::from_secs(30);
    let done = tokio::time::timeout(bound, acking)
        .await
        .expect("long before the deadline");
    let e = done.expect("joined").expect_err("no decision");
    assert!(e.to_string().contains("SLC-CLU-019"), "{e}");
    assert!(started.elapsed() < bound, "{:?}", started.elapsed());
}

/// A follower's record made after the leader that prepared an attempt
/// lost its term (a follower process rejoining before the successor leads)
/// is not handed that attempt: its successor aborts it, and a barrier for
/// it would meet the successor's in the shuffle channels. A Prepare of a
/// leader that holds its term is handed out as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_passes_over_a_prepare_whose_leader_lost_its_term() {
    let etcd = etcd().await;
    let (n1, n2, leader, _follower, g) = two_owners(&etcd, "own10").await;
    let live = FollowerCommitRecord::new(Arc::clone(n2.session()));
    let handed = prepared(&leader, &live, 1, g).await;
    assert!(
        matches!(handed, Announcement::Prepared { id: 1, .. }),
        "{handed:?}"
    );
    n1.session().stop_keep_alive();
    // n1's key lapses with its lease; n2 may win the next term.
    eventually("n1's term ended", LIMIT, || {
        n2.leader().borrow().leader.as_deref() != Some("n1")
    })
    .await;
    let rejoined = FollowerCommitRecord::new(Arc::clone(n2.session()));
    // Its watch lists the Prepares soon after it is made: ask a while.
    for _ in 0..20 {
        let next = rejoined.next_announcement().await.expect("read");
        assert!(next.is_none(), "{next:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether node `node` of cluster `cluster` has a checkpoint request in
/// etcd now.
async fn request_key(
    etcd: &sluice_cluster::testing::EtcdServer,
    cluster: &str,
    node: &str,
) -> bool {
    let mut client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new(cluster).expect("keys");
    let node = sluice_cluster::NodeId::new(node).expect("node id");
    let got = client
        .get(keys.checkpoint_request(&node), None)
        .await
        .expect("read");
    !got.kvs().is_empty()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_holding_input_asks_the_leader_for_checkpoints_until_it_lets_go_or_leaves() {
    let etcd = etcd().await;
    let (n1, n2, leader, follower, _) = two_owners(&etcd, "own11").await;
    let settle = || tokio::time::sleep(Duration::from_millis(300));
    settle().await;
    assert!(!leader.checkpoints_requested(), "nobody asked");

    follower.request_checkpoints(true);
    eventually("the leader sees n2's request", LIMIT, || {
        leader.checkpoints_requested()
    })
    .await;
    // The cluster's status shows who asks.
    let reader = sluice_cluster::status::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let status = sluice_cluster::status::read(&reader, &ClusterKeys::new("own11").expect("keys"))
        .await
        .expect("status");
    let asking: Vec<(&str, bool)> = status
        .members
        .iter()
        .map(|m| (m.node.as_str(), m.asks_for_checkpoints))
        .collect();
    assert_eq!(asking, [("n1", false), ("n2", true)]);
    // A record that starts to lead lists the requests made before it.
    let client = sluice_cluster::client::connect(&etcd.endpoints())
        .await
        .expect("connect");
    let keys = ClusterKeys::new("own11").expect("keys");
    let again = LeaderCommitRecord::new(client, keys, "n1").sharing_vnodes();
    again.lead(Arc::clone(n1.election()), n1.term().expect("n1 leads"));
    eventually(
        "a new leader's record sees the earlier request",
        LIMIT,
        || again.checkpoints_requested(),
    )
    .await;
    again.stand_down();
    assert!(!again.checkpoints_requested(), "a record that stood down");

    follower.request_checkpoints(false);
    eventually("the request withdrawn", LIMIT, || {
        !leader.checkpoints_requested()
    })
    .await;
    assert!(!request_key(&etcd, "own11", "n2").await);

    // The leader's own node asking does not count.
    let own = FollowerCommitRecord::new(Arc::clone(n1.session()));
    own.request_checkpoints(true);
    let until = std::time::Instant::now() + LIMIT;
    while !request_key(&etcd, "own11", "n1").await {
        assert!(
            std::time::Instant::now() < until,
            "n1's request never written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    settle().await;
    assert!(!leader.checkpoints_requested(), "the leader asked itself");

    // Of quick changes, the last one counts, either way.
    for holding in [true, false, true, false, true] {
        follower.request_checkpoints(holding);
    }
    eventually("the last request seen", LIMIT, || {
        leader.checkpoints_requested()
    })
    .await;
    for holding in [false, true, false] {
        follower.request_checkpoints(holding);
    }
    eventually("the last withdrawal seen", LIMIT, || {
        !leader.checkpoints_requested()
    })
    .await;
    settle().await;
    assert!(
        !leader.checkpoints_requested(),
        "the last state asks nothing"
    );
    assert!(!request_key(&etcd, "own11", "n2").await);

    // A record dropped while asking (its pipeline gone, the node not):
    // the session's next record clears the request with its first write.
    follower.request_checkpoints(true);
    eventually("asking again", LIMIT, || leader.checkpoints_requested()).await;
    drop(follower);
    settle().await;
    assert!(
        leader.checkpoints_requested(),
        "the key outlives its record"
    );
    let next = FollowerCommitRecord::new(Arc::clone(n2.session()));
    eventually("the next record cleared it", LIMIT, || {
        !leader.checkpoints_requested()
    })
    .await;

    // A follower that leaves the cluster stops asking with its lease.
    next.request_checkpoints(true);
    eventually("the next record asks", LIMIT, || {
        leader.checkpoints_requested()
    })
    .await;
    n2.session().stop_keep_alive();
    eventually("the request gone with n2's lease", LIMIT, || {
        !leader.checkpoints_requested()
    })
    .await;
}
