//! Checkpoint rounds driven by `CheckpointLeader` and `CheckpointFollower`
//! on a real etcd: every node (the leader's too) runs a follower over an
//! in-memory pipeline that records what it was told.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use sluice_cluster::assignment::publish;
use sluice_cluster::checkpoint::{
    checkpoint_assignment_for_admission, last_committed_id, read_answers, CheckpointFollower,
    CheckpointLeader, CheckpointPipeline, CheckpointPrepare, PartRef, PipelineError, RoundOutcome,
};
use sluice_cluster::{AssignmentView, ClusterError, Session, VnodeCount};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::checkpoint::{part_of, Cluster};
use super::{etcd, eventually};

/// Every test ends within this, whatever happens.
const TEST_LIMIT: Duration = Duration::from_secs(90);
/// How long a follower waits for a decision after a Prepare's deadline.
const GRACE: Duration = Duration::from_secs(10);
/// How long followers' callbacks may take to show up.
const SEEN: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Captured(u64),
    Committed(u64),
    Aborted(u64),
}

/// An in-memory pipeline: records every call; refuses the captures of
/// `refuse`.
struct Recorder {
    node: String,
    events: Arc<Mutex<Vec<Event>>>,
    refuse: BTreeSet<u64>,
    /// Commits that fail with an I/O error (a sink that cannot commit).
    fail_commit: BTreeSet<u64>,
}

impl CheckpointPipeline for Recorder {
    fn capture(
        &mut self,
        prepare: &CheckpointPrepare,
        vnodes: &[u32],
    ) -> impl Future<Output = Result<PartRef, PipelineError>> + Send {
        let id = prepare.id;
        assert!(!vnodes.is_empty(), "capture is only asked of owners");
        self.events.lock().push(Event::Captured(id));
        let result = if self.refuse.contains(&id) {
            Err("disk full".into())
        } else {
            Ok(part_of(&self.node, id))
        };
        std::future::ready(result)
    }

    fn committed(
        &mut self,
        id: u64,
        parts: &BTreeMap<String, PartRef>,
    ) -> Result<(), PipelineError> {
        assert_eq!(parts.get(&self.node), Some(&part_of(&self.node, id)));
        if self.fail_commit.contains(&id) {
            let e = std::io::Error::new(std::io::ErrorKind::StorageFull, "sink volume full");
            return Err(e.into());
        }
        self.events.lock().push(Event::Committed(id));
        Ok(())
    }

    fn aborted(&mut self, id: u64, _reason: &str) -> Result<(), PipelineError> {
        self.events.lock().push(Event::Aborted(id));
        Ok(())
    }
}

/// A follower running in a task, and what it recorded.
struct Follower {
    events: Arc<Mutex<Vec<Event>>>,
    errors: Arc<Mutex<Vec<String>>>,
    /// Per `SLC-CLU-020` error: the I/O error kind of its source, if the
    /// pipeline's error reached it as one.
    failed_sources: Arc<Mutex<Vec<Option<std::io::ErrorKind>>>>,
    task: JoinHandle<()>,
}

impl Follower {
    fn start(session: &Arc<Session>, refuse: &[u64]) -> Self {
        Self::start_failing(session, refuse, &[])
    }

    /// As `start`, and the commits of `fail_commit` fail.
    fn start_failing(session: &Arc<Session>, refuse: &[u64], fail_commit: &[u64]) -> Self {
        let events = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let failed_sources = Arc::new(Mutex::new(Vec::new()));
        let pipeline = Recorder {
            node: session.node().to_string(),
            events: Arc::clone(&events),
            refuse: refuse.iter().copied().collect(),
            fail_commit: fail_commit.iter().copied().collect(),
        };
        let view = AssignmentView::start(session);
        let mut follower = CheckpointFollower::start(Arc::clone(session), view, pipeline, GRACE);
        let seen_errors = Arc::clone(&errors);
        let seen_sources = Arc::clone(&failed_sources);
        let task = tokio::spawn(async move {
            loop {
                let until = Instant::now() + Duration::from_millis(200);
                match follower.next_attempt(until).await {
                    Ok(_) => {}
                    Err(e) => {
                        let lost = matches!(e, ClusterError::LeaseLost { .. });
                        if matches!(e, ClusterError::PipelineFailed { .. }) {
                            let kind = std::error::Error::source(&e)
                                .and_then(|s| s.downcast_ref::<std::io::Error>())
                                .map(std::io::Error::kind);
                            seen_sources.lock().push(kind);
                        }
                        seen_errors.lock().push(e.to_string());
                        if lost {
                            return;
                        }
                    }
                }
            }
        });
        Self {
            events,
            errors,
            failed_sources,
            task,
        }
    }

    fn committed(&self) -> Vec<u64> {
        self.events
            .lock()
            .iter()
            .filter_map(|e| match e {
                Event::Committed(id) => Some(*id),
                _ => None,
            })
            .collect()
    }

    fn count(&self, event: &Event) -> usize {
        self.events.lock().iter().filter(|e| *e == event).count()
    }

    async fn sees(&self, what: &str, event: Event) {
        eventually(what, SEEN, || self.count(&event) > 0).await;
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn bounded(test: impl Future<Output = ()>) {
    tokio::time::timeout(TEST_LIMIT, test)
        .await
        .expect("the test finished in time");
}

fn due(secs: u64) -> Instant {
    Instant::now() + Duration::from_secs(secs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_rounds_commit_and_every_follower_hears_each_once_in_order() {
    bounded(async {
        let etcd = etcd().await;
        let c = Cluster::start(&etcd, "roles-commit", 3).await;
        let followers: Vec<Follower> = c.sessions.iter().map(|s| Follower::start(s, &[])).collect();
        let (mut leader, orphans) = CheckpointLeader::take_over(Arc::clone(&c.elections[0]), 1)
            .await
            .expect("n1 takes over");
        assert!(orphans.is_empty());
        for round in 1..=3u64 {
            match leader.run_round(due(10)).await.expect("round") {
                RoundOutcome::Committed { id, parts } => {
                    assert_eq!(id, round);
                    assert_eq!(parts.len(), 3, "every node's part is in the commit");
                }
                other => panic!("round {round} did not commit: {other:?}"),
            }
        }
        assert_eq!(
            last_committed_id(&c.sessions[1]).await.expect("read"),
            Some(3)
        );
        for f in &followers {
            eventually("every commit delivered", SEEN, || f.committed().len() == 3).await;
        }
        for (f, name) in followers.iter().zip(c.names()) {
            assert_eq!(f.committed(), [1, 2, 3], "{name}: once each, in order");
            let expected: Vec<Event> = (1..=3)
                .flat_map(|id| [Event::Captured(id), Event::Committed(id)])
                .collect();
            assert_eq!(*f.events.lock(), expected, "{name}");
            assert!(f.errors.lock().is_empty(), "{name}: {:?}", f.errors.lock());
        }
    })
    .await;
}

/// A pipeline that cannot apply a commit (its sink's volume is full) is
/// reported as `SLC-CLU-020` naming the node and attempt, with the
/// pipeline's own error as its typed source (not flattened to text); the
/// decision stands and the next round's commit is delivered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_the_pipeline_cannot_apply_keeps_its_typed_source() {
    bounded(async {
        let etcd = etcd().await;
        let c = Cluster::start(&etcd, "roles-commit-fails", 2).await;
        let ok = Follower::start(&c.sessions[0], &[]);
        let failing = Follower::start_failing(&c.sessions[1], &[], &[1]);
        let (mut leader, _) = CheckpointLeader::take_over(Arc::clone(&c.elections[0]), 1)
            .await
            .expect("n1 takes over");
        for round in 1..=2u64 {
            match leader.run_round(due(10)).await.expect("round") {
                RoundOutcome::Committed { id, .. } => assert_eq!(id, round),
                other => panic!("round {round} did not commit: {other:?}"),
            }
        }
        eventually("both commits reach n1", SEEN, || ok.committed() == [1, 2]).await;
        eventually("commit 2 reaches n2", SEEN, || failing.committed() == [2]).await;
        let errors = failing.errors.lock().clone();
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert_eq!(
            errors[0],
            "SLC-CLU-020: node 'n2' could not apply the commit of checkpoint attempt 1: \
             sink volume full"
        );
        assert_eq!(
            *failing.failed_sources.lock(),
            [Some(std::io::ErrorKind::StorageFull)]
        );
        assert!(ok.errors.lock().is_empty(), "{:?}", ok.errors.lock());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_capture_aborts_the_round_for_everyone_and_the_next_commits() {
    bounded(async {
        let etcd = etcd().await;
        let c = Cluster::start(&etcd, "roles-nack", 3).await;
        let followers: Vec<Follower> = c
            .sessions
            .iter()
            .enumerate()
            .map(|(i, s)| Follower::start(s, if i == 1 { &[1] } else { &[] }))
            .collect();
        let (mut leader, _) = CheckpointLeader::take_over(Arc::clone(&c.elections[0]), 1)
            .await
            .expect("n1 takes over");
        let started = Instant::now();
        match leader.run_round(due(20)).await.expect("round 1") {
            RoundOutcome::Aborted { id: 1, reason } => {
                assert!(reason.contains("'n2' nacked: disk full"), "{reason}");
            }
            other => panic!("round 1 did not abort: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "a nack aborts without waiting for the deadline"
        );
        for f in &followers {
            f.sees("every follower hears the abort", Event::Aborted(1))
                .await;
        }
        let second = leader.run_round(due(10)).await.expect("round 2");
        assert!(
            matches!(second, RoundOutcome::Committed { id: 2, .. }),
            "{second:?}"
        );
        for f in &followers {
            f.sees("the second round's commit", Event::Committed(2))
                .await;
            assert_eq!(f.count(&Event::Aborted(1)), 1);
            assert_eq!(f.committed(), [2]);
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_aborts_the_orphan_of_a_dead_one_and_commits_above_it() {
    bounded(async {
        let etcd = etcd().await;
        let c = Cluster::start(&etcd, "roles-failover", 3).await;
        // n1's own pipeline is slow (runs no follower), so the round is
        // still waiting for its ack when n1 dies.
        let followers: Vec<Follower> = c.sessions[1..]
            .iter()
            .map(|s| Follower::start(s, &[]))
            .collect();
        let (mut old, _) = CheckpointLeader::take_over(Arc::clone(&c.elections[0]), 1)
            .await
            .expect("n1 takes over");
        let round = tokio::spawn(async move { old.run_round(due(30)).await });
        let answered = Instant::now();
        loop {
            let answers = read_answers(&c.sessions[1], 1).await.expect("read");
            if answers.contains_key("n2") && answers.contains_key("n3") {
                break;
            }
            assert!(answered.elapsed() < SEEN, "n2 and n3 answer attempt 1");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // n1 dies: its lease (member key, leader key) goes now.
        c.sessions[0].close().await.expect("revoke");
        let died = Instant::now();
        let stopped = round.await.expect("join");
        assert!(
            died.elapsed() < Duration::from_secs(5),
            "it stops at once, not at its deadline: {:?}",
            died.elapsed()
        );
        assert!(
            matches!(stopped, Err(ClusterError::CheckpointDeposed { .. })),
            "the deposed leader stops with a typed error: {stopped:?}"
        );
        eventually("a new leader", SEEN, || {
            c.elections[1..].iter().any(|e| e.is_leader())
        })
        .await;
        let new = c.elections[1..]
            .iter()
            .find(|e| e.is_leader())
            .expect("leader");
        let (mut leader, orphans) = CheckpointLeader::take_over(Arc::clone(new), 1)
            .await
            .expect("takes over");
        assert_eq!(orphans, [1], "the orphan is aborted");
        for f in &followers {
            f.sees("the orphan's abort", Event::Aborted(1)).await;
        }
        // The new leader places the vnodes on the survivors.
        let generation = checkpoint_assignment_for_admission(new.session())
            .await
            .expect("table")
            .generation();
        let survivors = vec!["n2".to_string(), "n3".to_string()];
        publish(
            new,
            leader.term(),
            generation,
            VnodeCount::default(),
            &survivors,
        )
        .await
        .expect("new table");
        match leader.run_round(due(10)).await.expect("round") {
            RoundOutcome::Committed { id, parts } => {
                assert!(id > 1, "a new id is above the orphan's: {id}");
                assert_eq!(parts.keys().cloned().collect::<Vec<_>>(), survivors);
                for f in &followers {
                    f.sees("the new leader's commit", Event::Committed(id))
                        .await;
                }
            }
            other => panic!("the new leader's round did not commit: {other:?}"),
        }
        for f in &followers {
            assert_eq!(
                f.count(&Event::Committed(1)),
                0,
                "nobody commits the orphan"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_follower_aborts_the_round_at_its_deadline() {
    bounded(async {
        let etcd = etcd().await;
        let c = Cluster::start(&etcd, "roles-silent", 3).await;
        // n3 runs no follower: it never captures nor answers.
        let followers: Vec<Follower> = c.sessions[..2]
            .iter()
            .map(|s| Follower::start(s, &[]))
            .collect();
        let (mut leader, _) = CheckpointLeader::take_over(Arc::clone(&c.elections[0]), 1)
            .await
            .expect("n1 takes over");
        let window = Duration::from_secs(2);
        let started = Instant::now();
        let outcome = leader
            .run_round(started + window)
            .await
            .expect("round ends");
        let took = started.elapsed();
        match outcome {
            RoundOutcome::Aborted { id: 1, reason } => {
                assert!(reason.contains("n3"), "{reason}");
            }
            other => panic!("the round did not abort: {other:?}"),
        }
        assert!(took >= window - Duration::from_millis(50), "{took:?}");
        assert!(took < window + Duration::from_secs(3), "bounded: {took:?}");
        for f in &followers {
            f.sees("the abort", Event::Aborted(1)).await;
            assert!(f.committed().is_empty());
        }
        // n3 comes back: the attempt due before it started is not its to
        // resolve, and the next round commits with it.
        let late = Follower::start(&c.sessions[2], &[]);
        let outcome = leader.run_round(due(10)).await.expect("round 2");
        assert!(
            matches!(outcome, RoundOutcome::Committed { id: 2, .. }),
            "{outcome:?}"
        );
        late.sees("the commit", Event::Committed(2)).await;
        assert_eq!(
            *late.events.lock(),
            [Event::Captured(2), Event::Committed(2)]
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_that_lost_its_lease_is_fenced_and_never_commits() {
    bounded(async {
        let etcd = etcd().await;
        let c = Cluster::start(&etcd, "roles-fenced", 3).await;
        let followers: Vec<Follower> = c.sessions.iter().map(|s| Follower::start(s, &[])).collect();
        // n3 stops renewing (a paused process) until its lease lapses.
        c.sessions[2].stop_keep_alive();
        eventually("n3's lease lapses", SEEN, || !c.sessions[2].lease_valid()).await;
        let (mut leader, _) = CheckpointLeader::take_over(Arc::clone(&c.elections[0]), 1)
            .await
            .expect("n1 takes over");
        let outcome = leader.run_round(due(3)).await.expect("round ends");
        assert!(
            matches!(&outcome, RoundOutcome::Aborted { id: 1, reason } if reason.contains("n3")),
            "{outcome:?}"
        );
        eventually("n3's follower reports the lost lease", SEEN, || {
            followers[2]
                .errors
                .lock()
                .iter()
                .any(|e| e.starts_with("SLC-CLU-007"))
        })
        .await;
        for f in &followers[..2] {
            f.sees("the abort", Event::Aborted(1)).await;
        }
        assert!(followers[2].events.lock().is_empty(), "n3 took no part");
    })
    .await;
}
