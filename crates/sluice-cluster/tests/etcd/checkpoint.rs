//! The checkpoint protocol end to end on a real etcd: a full round, nack
//! and deadline aborts, create-once decisions, the counter fence and
//! pruning. The fencing cases are in `checkpoint_fence.rs`.
//!
//! These tests drive the protocol by hand on a cluster without an
//! assignment driver, so the assignment only changes when a test says so.

use std::sync::Arc;
use std::time::Duration;

use sluice_cluster::assignment::publish;
use sluice_cluster::checkpoint::{
    abort_attempt, answer_checkpoint, checkpoint_assignment_for_admission, commit_attempt, decide,
    last_committed, last_committed_id, now_ms, prune_checkpoints, publish_checkpoint_prepare,
    read_answers, read_attempt_counter, read_decision, read_prepare, reserve_after,
    reserve_checkpoint_attempt, wait_for_answers, wait_for_decision, Answer, CheckpointPrepare,
    Decision, PartRef, Stored,
};
use sluice_cluster::membership::Membership;
use sluice_cluster::{Election, Session, VnodeCount};
use tokio::time::Instant;

use super::{etcd, eventually, TTL};

/// Three (or more) sessions that joined cluster `name`, each campaigning;
/// the first leads, and it published one assignment over all of them.
pub struct Cluster {
    pub sessions: Vec<Arc<Session>>,
    pub elections: Vec<Arc<Election>>,
    _members: Vec<Membership>,
}

impl Cluster {
    pub async fn start(etcd: &sluice_cluster::testing::EtcdServer, name: &str, n: usize) -> Self {
        let mut sessions = Vec::new();
        let mut members = Vec::new();
        for i in 1..=n {
            let s = Arc::new(
                Session::connect(&etcd.endpoints(), name, &format!("n{i}"), TTL)
                    .await
                    .expect("session"),
            );
            members.push(Membership::join(Arc::clone(&s)).await.expect("join"));
            sessions.push(s);
        }
        let first = Election::start(Arc::clone(&sessions[0]));
        eventually("n1 leads", Duration::from_secs(3), || first.is_leader()).await;
        let mut elections = vec![Arc::new(first)];
        for s in &sessions[1..] {
            elections.push(Arc::new(Election::start(Arc::clone(s))));
        }
        let cluster = Self {
            sessions,
            elections,
            _members: members,
        };
        let names = cluster.names();
        let term = cluster.term();
        publish(
            &cluster.elections[0],
            term,
            0,
            VnodeCount::default(),
            &names,
        )
        .await
        .expect("first table");
        cluster
    }

    pub fn names(&self) -> Vec<String> {
        self.sessions.iter().map(|s| s.node().to_string()).collect()
    }

    /// The term of n1 (the leader).
    pub fn term(&self) -> u64 {
        self.elections[0].term().expect("n1 leads")
    }

    /// Reserve an attempt and publish its Prepare as n1, answers due in `due`.
    pub async fn prepare(&self, due: Duration) -> Stored<CheckpointPrepare> {
        let leader = &self.elections[0];
        let attempt = reserve_checkpoint_attempt(leader, self.term())
            .await
            .expect("reserve");
        let fence = checkpoint_assignment_for_admission(&self.sessions[0])
            .await
            .expect("fence");
        let deadline = now_ms() + u64::try_from(due.as_millis()).expect("ms");
        publish_checkpoint_prepare(leader, attempt, &fence, deadline)
            .await
            .expect("prepare")
    }

    /// Node `i` (0-based) reads the Prepare of `id` and acks it.
    pub async fn ack(&self, i: usize, id: u64) -> sluice_cluster::Result<()> {
        let s = &self.sessions[i];
        let prepare = read_prepare(s, id).await?.expect("prepare published");
        answer_checkpoint(s, &prepare, ack_of(s.node().as_str(), id)).await
    }
}

pub fn ack_of(node: &str, id: u64) -> Answer {
    Answer::Ack {
        part: part_of(node, id),
    }
}

pub fn part_of(node: &str, id: u64) -> PartRef {
    PartRef {
        object_key: format!("ckpt/{id}/{node}"),
        size: "123".to_string(),
        crc: format!("crc-{node}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_round_commits_and_the_pointer_reads_back() {
    let etcd = etcd().await;
    let c = Cluster::start(&etcd, "ck-round", 3).await;
    let term = c.term();
    assert_eq!(last_committed(&c.sessions[1]).await.expect("read"), None);
    for round in 1..=2u64 {
        let prepare = c.prepare(Duration::from_secs(10)).await;
        assert_eq!(prepare.value.id, round, "ids start at 1 and grow by one");
        assert_eq!(prepare.value.term, term);
        assert_eq!(
            prepare.value.owning_nodes().len(),
            3,
            "every node owns vnodes"
        );
        // Nothing to decide yet: the verdict is pending.
        assert_eq!(
            decide(&c.elections[0], term, round, now_ms())
                .await
                .expect("decide"),
            None
        );
        for i in 0..3 {
            c.ack(i, round).await.expect("ack");
        }
        let answers = wait_for_answers(
            &c.sessions[0],
            &prepare.value,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .expect("answers");
        assert_eq!(answers.len(), 3);
        let decided = decide(&c.elections[0], term, round, now_ms())
            .await
            .expect("decide")
            .expect("decided");
        assert!(decided.first);
        // A follower waiting for the decision sees the commit.
        let seen = wait_for_decision(
            &c.sessions[2],
            round,
            Instant::now() + Duration::from_secs(5),
        )
        .await
        .expect("decision")
        .expect("decided");
        assert_eq!(seen.value, decided.record);
        let committed = last_committed(&c.sessions[1])
            .await
            .expect("read")
            .expect("a committed checkpoint");
        assert_eq!(committed.id, round);
        assert_eq!(committed.prepare.value, prepare.value);
        let Decision::Commit { parts } = &committed.decision.value.decision else {
            panic!("not a commit: {:?}", committed.decision.value);
        };
        let want: Vec<_> = c
            .names()
            .iter()
            .map(|n| (n.clone(), part_of(n, round)))
            .collect();
        assert_eq!(parts.clone().into_iter().collect::<Vec<_>>(), want);
    }
    // Pruning with K = 0 removes attempt 1, keeps the committed attempt 2.
    let p1 = read_prepare(&c.sessions[2], 1)
        .await
        .expect("read")
        .expect("not yet pruned");
    let floor = prune_checkpoints(&c.elections[0], term, 0)
        .await
        .expect("prune");
    assert_eq!(floor, 2);
    let s = &c.sessions[0];
    assert_eq!(read_prepare(s, 1).await.expect("read"), None);
    assert_eq!(read_decision(s, 1).await.expect("read"), None);
    assert!(read_answers(s, 1).await.expect("read").is_empty());
    assert!(read_prepare(s, 2).await.expect("read").is_some());
    assert_eq!(read_answers(s, 2).await.expect("read").len(), 3);
    assert_eq!(last_committed_id(s).await.expect("read"), Some(2));
    // A late answer to a pruned Prepare is refused.
    let err = answer_checkpoint(&c.sessions[2], &p1, ack_of("n3", 1))
        .await
        .expect_err("pruned");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-015: answer of node 'n3' to checkpoint attempt 1 was refused: \
         the Prepare does not exist (pruned or never published)"
    );
    // The counter is not pruned: the next id is still 3.
    assert_eq!(read_attempt_counter(s).await.expect("read").last, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nack_and_deadline_abort_and_decisions_are_created_once() {
    let etcd = etcd().await;
    let c = Cluster::start(&etcd, "ck-abort", 3).await;
    let term = c.term();
    let leader = &c.elections[0];

    // A nack aborts, naming the node and its reason.
    let p1 = c.prepare(Duration::from_secs(10)).await;
    c.ack(0, 1).await.expect("ack");
    let n2 = &c.sessions[1];
    answer_checkpoint(
        n2,
        &p1,
        Answer::Nack {
            reason: "source barrier cancelled".to_string(),
        },
    )
    .await
    .expect("nack");
    // A node answers once.
    let again = c.ack(1, 1).await.expect_err("second answer refused");
    assert_eq!(
        again.to_string(),
        "SLC-CLU-015: answer of node 'n2' to checkpoint attempt 1 was refused: \
         the node already answered this attempt"
    );
    let answers = wait_for_answers(
        &c.sessions[0],
        &p1.value,
        Instant::now() + Duration::from_secs(5),
    )
    .await
    .expect("answers");
    assert_eq!(answers.len(), 2, "a nack ends the wait");
    let decided = decide(leader, term, 1, now_ms())
        .await
        .expect("decide")
        .expect("decided");
    assert!(decided.first);
    assert_eq!(
        decided.record.decision,
        Decision::Abort {
            reason: "node 'n2' nacked: source barrier cancelled".to_string()
        }
    );

    // A missing ack past the deadline aborts; the wait ends at the deadline.
    let p2 = c.prepare(Duration::from_millis(600)).await;
    c.ack(0, 2).await.expect("ack");
    c.ack(1, 2).await.expect("ack");
    let started = Instant::now();
    let answers = wait_for_answers(
        &c.sessions[0],
        &p2.value,
        Instant::now() + Duration::from_secs(60),
    )
    .await
    .expect("answers");
    let waited = started.elapsed();
    assert_eq!(answers.len(), 2);
    assert!(
        waited < Duration::from_secs(5),
        "the wait ended at the deadline: {waited:?}"
    );
    eventually("the deadline passed", Duration::from_secs(3), || {
        now_ms() >= p2.value.deadline_ms
    })
    .await;
    let decided = decide(leader, term, 2, now_ms())
        .await
        .expect("decide")
        .expect("decided");
    assert_eq!(
        decided.record.decision,
        Decision::Abort {
            reason: "the deadline passed without an ack from n3".to_string()
        }
    );
    // A wait for a decision that never comes ends too.
    let started = Instant::now();
    let none = wait_for_decision(
        &c.sessions[2],
        99,
        Instant::now() + Duration::from_millis(300),
    )
    .await
    .expect("read");
    assert_eq!(none, None);
    assert!(started.elapsed() < Duration::from_secs(5));

    // Attempt 3 commits; a later abort of it returns the commit, unchanged.
    c.prepare(Duration::from_secs(10)).await;
    for i in 0..3 {
        c.ack(i, 3).await.expect("ack");
    }
    let commit = decide(leader, term, 3, now_ms())
        .await
        .expect("decide")
        .expect("decided");
    assert!(matches!(commit.record.decision, Decision::Commit { .. }));
    let second = abort_attempt(leader, term, 3, p2.value.generation, "late abort")
        .await
        .expect("returns the first decision");
    assert!(!second.first);
    assert_eq!(second.record, commit.record);
    let second = decide(leader, term, 3, now_ms())
        .await
        .expect("decide")
        .expect("decided");
    assert!(!second.first);
    assert_eq!(second.record, commit.record);
    assert_eq!(
        last_committed_id(&c.sessions[1]).await.expect("read"),
        Some(3)
    );
    // Attempt 4 is fully acked but the leader abandoned it first: a commit
    // returns the abort, and the committed pointer stays at 3.
    let p4 = c.prepare(Duration::from_secs(10)).await;
    for i in 0..3 {
        c.ack(i, 4).await.expect("ack");
    }
    let abandoned = abort_attempt(leader, term, 4, p4.value.generation, "abandoned")
        .await
        .expect("abort");
    assert!(abandoned.first);
    let answers = read_answers(&c.sessions[0], 4).await.expect("answers");
    let late = commit_attempt(leader, term, &p4, &answers)
        .await
        .expect("returns the first decision");
    assert!(!late.first);
    assert_eq!(late.record, abandoned.record);
    // And the aborted attempts never moved the committed pointer.
    assert_eq!(
        read_decision(&c.sessions[1], 1)
            .await
            .expect("read")
            .map(|d| d.value.id),
        Some(1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reservation_on_a_moved_counter_is_refused_and_ids_are_not_reused() {
    let etcd = etcd().await;
    let c = Cluster::start(&etcd, "ck-counter", 1).await;
    let term = c.term();
    let leader = &c.elections[0];
    let before = read_attempt_counter(&c.sessions[0]).await.expect("read");
    let a1 = reserve_after(leader, term, before).await.expect("reserve");
    assert_eq!(a1.id, 1);
    // A reservation based on the counter as it was before is refused.
    let err = reserve_after(leader, term, before)
        .await
        .expect_err("counter moved");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-012: checkpoint attempt reservation by node 'n1' was refused: the attempt \
         counter moved from 0 to 1 while it reserved"
    );
    // Abandoned ids are burned: the next reservation is 2.
    let a2 = reserve_checkpoint_attempt(leader, term)
        .await
        .expect("reserve");
    assert_eq!(a2.id, 2);
    // A Prepare needs a reservation of this term, and is published once.
    let fence = checkpoint_assignment_for_admission(&c.sessions[0])
        .await
        .expect("fence");
    let unreserved = sluice_cluster::checkpoint::CheckpointAttempt { id: 7, term };
    let err = publish_checkpoint_prepare(leader, unreserved, &fence, now_ms() + 1000)
        .await
        .expect_err("not reserved");
    assert_eq!(
        err.to_string(),
        format!(
            "SLC-CLU-013: checkpoint prepare for attempt 7 by node 'n1' was refused: the \
             attempt was not reserved in term {term} (reserve it first)"
        )
    );
    publish_checkpoint_prepare(leader, a2, &fence, now_ms() + 1000)
        .await
        .expect("prepare");
    let err = publish_checkpoint_prepare(leader, a2, &fence, now_ms() + 1000)
        .await
        .expect_err("twice");
    assert!(
        err.to_string()
            .ends_with("a Prepare for this attempt already exists"),
        "{err}"
    );
}
