//! The checkpoint protocol's fences on a real etcd: a deposed leader, a
//! stale assignment generation, a follower whose lease ended.

use std::time::Duration;

use sluice_cluster::assignment::publish;
use sluice_cluster::checkpoint::{
    abort_attempt, answer_checkpoint, checkpoint_assignment_for_admission, commit_attempt, now_ms,
    publish_checkpoint_prepare, read_answers, read_prepare, reserve_checkpoint_attempt,
};
use sluice_cluster::VnodeCount;

use super::checkpoint::{ack_of, Cluster};
use super::{etcd, eventually};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_cannot_reserve_prepare_or_decide() {
    let etcd = etcd().await;
    let c = Cluster::start(&etcd, "ck-deposed", 3).await;
    let old_term = c.term();
    let old = &c.elections[0];
    // Attempt 1 is reserved, prepared and acked by everyone under n1.
    let p1 = c.prepare(Duration::from_secs(30)).await;
    for i in 0..3 {
        c.ack(i, 1).await.expect("ack");
    }
    let answers = read_answers(&c.sessions[0], 1).await.expect("answers");
    let a2 = reserve_checkpoint_attempt(old, old_term)
        .await
        .expect("reserve");
    let fence = checkpoint_assignment_for_admission(&c.sessions[0])
        .await
        .expect("fence");

    // n1 pauses past its lease; n2 or n3 takes over.
    c.sessions[0].stop_keep_alive();
    eventually("a new leader", Duration::from_secs(5), || {
        c.elections[1].is_leader() || c.elections[2].is_leader()
    })
    .await;
    let refused = format!(
        "SLC-CLU-005: node 'n1' is not the leader of term {old_term} any more; its write was refused"
    );
    let err = reserve_checkpoint_attempt(old, old_term)
        .await
        .expect_err("reserve refused");
    assert_eq!(err.to_string(), refused);
    let err = publish_checkpoint_prepare(old, a2, &fence, now_ms() + 10_000)
        .await
        .expect_err("prepare refused");
    assert_eq!(err.to_string(), refused);
    let err = commit_attempt(old, old_term, &p1, &answers)
        .await
        .expect_err("commit refused");
    assert_eq!(err.to_string(), refused);
    let err = abort_attempt(old, old_term, 1, p1.value.generation, "x")
        .await
        .expect_err("abort refused");
    assert_eq!(err.to_string(), refused);

    // The new leader continues after the old counter: ids strictly grow.
    let new = if c.elections[1].is_leader() {
        &c.elections[1]
    } else {
        &c.elections[2]
    };
    let new_term = new.term().expect("leads");
    assert!(new_term > old_term);
    let a3 = reserve_checkpoint_attempt(new, new_term)
        .await
        .expect("reserve");
    assert_eq!(a3.id, a2.id + 1);
    assert_eq!(a3.term, new_term);
    // Its own decision on the old attempt is accepted (abort: nothing of
    // the old term can commit now).
    let d = abort_attempt(new, new_term, 1, p1.value.generation, "leader changed")
        .await
        .expect("abort");
    assert!(d.first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_generation_refuses_prepare_answers_and_commit() {
    let etcd = etcd().await;
    let c = Cluster::start(&etcd, "ck-gen", 3).await;
    let term = c.term();
    let leader = &c.elections[0];
    let rewrite = |expected: u64| {
        let names = c.names();
        async move {
            publish(leader, term, expected, VnodeCount::default(), &names)
                .await
                .expect("rewrite")
                .generation()
        }
    };
    // Attempt 1: everyone acks, then the table is rewritten: no commit.
    let p1 = c.prepare(Duration::from_secs(30)).await;
    let g1 = p1.value.generation;
    for i in 0..3 {
        c.ack(i, 1).await.expect("ack");
    }
    let answers = read_answers(&c.sessions[0], 1).await.expect("answers");
    let g2 = rewrite(g1).await;
    let err = commit_attempt(leader, term, &p1, &answers)
        .await
        .expect_err("commit refused");
    assert_eq!(
        err.to_string(),
        format!(
            "SLC-CLU-014: checkpoint commit for attempt 1 by node 'n1' was refused: the \
             attempt is fenced at assignment generation {g1} but the table is at generation {g2}"
        )
    );
    // Attempt 2: a Prepare under the old fence is refused.
    let a2 = reserve_checkpoint_attempt(leader, term)
        .await
        .expect("reserve");
    let stale = {
        let s = &c.sessions[0];
        let f = checkpoint_assignment_for_admission(s).await.expect("fence");
        assert_eq!(f.generation(), g2);
        f
    };
    let g3 = rewrite(g2).await;
    let err = publish_checkpoint_prepare(leader, a2, &stale, now_ms() + 10_000)
        .await
        .expect_err("prepare refused");
    assert_eq!(
        err.to_string(),
        format!(
            "SLC-CLU-014: checkpoint prepare for attempt 2 by node 'n1' was refused: the \
             attempt is fenced at assignment generation {g2} but the table is at generation {g3}"
        )
    );
    // Attempt 3: prepared on the current table, rewritten before n2 answers.
    let p3 = c.prepare(Duration::from_secs(30)).await;
    assert_eq!(p3.value.generation, g3);
    c.ack(0, 3).await.expect("ack before the rewrite");
    let g4 = rewrite(g3).await;
    let err = c.ack(1, 3).await.expect_err("answer refused");
    assert_eq!(
        err.to_string(),
        format!(
            "SLC-CLU-014: checkpoint answer for attempt 3 by node 'n2' was refused: the \
             attempt is fenced at assignment generation {g3} but the table is at generation {g4}"
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_whose_lease_ended_cannot_answer_and_its_ack_does_not_count() {
    let etcd = etcd().await;
    let c = Cluster::start(&etcd, "ck-lease", 3).await;
    // Attempt 1: read by every node.
    let p1 = c.prepare(Duration::from_secs(30)).await;
    assert_eq!(p1.value.owning_nodes().len(), 3);
    let prepare = read_prepare(&c.sessions[2], 1)
        .await
        .expect("read")
        .expect("published");
    // n2's lease lives but its member key is gone (it left the cluster):
    // it is fenced out too.
    let n2 = &c.sessions[1];
    n2.client()
        .delete(n2.keys().node(n2.node()), None)
        .await
        .expect("delete member key");
    let err = answer_checkpoint(n2, &prepare, ack_of("n2", 1))
        .await
        .expect_err("answer refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-007: node 'n2' lost its etcd lease; it must rejoin the cluster"
    );
    // n3's lease is revoked before it answers.
    let n3 = &c.sessions[2];
    n3.close().await.expect("revoke");
    let err = answer_checkpoint(n3, &prepare, ack_of("n3", 1))
        .await
        .expect_err("answer refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-007: node 'n3' lost its etcd lease; it must rejoin the cluster"
    );

    // Attempt 2: n2 acks, the leader reads every ack, then n2's lease ends
    // (its ack vanishes with it): the commit built on that read fails.
    let c2 = Cluster::start(&etcd, "ck-lease2", 3).await;
    let term2 = c2.term();
    let p2 = c2.prepare(Duration::from_secs(30)).await;
    for i in 0..3 {
        c2.ack(i, 1).await.expect("ack");
    }
    let answers = read_answers(&c2.sessions[0], 1).await.expect("answers");
    c2.sessions[1].close().await.expect("revoke");
    let err = commit_attempt(&c2.elections[0], term2, &p2, &answers)
        .await
        .expect_err("commit refused");
    assert_eq!(
        err.to_string(),
        "SLC-CLU-013: checkpoint commit for attempt 1 by node 'n1' was refused: an ack was \
         withdrawn (its follower's lease ended) or replaced since it was read"
    );
}
