//! A random-sequence model test of the checkpoint protocol: reservations,
//! Prepares, acks, nacks, assignment rewrites and decisions in a seeded
//! random order against a real etcd, each outcome checked against a small
//! model of what the protocol must allow.

use sluice_cluster::assignment::publish;
use sluice_cluster::checkpoint::{
    answer_checkpoint, decide, last_committed_id, now_ms, read_prepare, reserve_checkpoint_attempt,
    Answer, CheckpointAttempt, Decision,
};
use sluice_cluster::{ClusterError, VnodeCount};
use std::collections::BTreeMap;

use super::checkpoint::{ack_of, Cluster};
use super::etcd;

/// What the model knows of one attempt.
#[derive(Default)]
struct Attempt {
    /// The generation of its Prepare, once published.
    prepared: Option<u64>,
    /// Each node's answer: true for an ack.
    answers: BTreeMap<usize, bool>,
    /// The decision: true for a commit.
    decided: Option<bool>,
}

/// xorshift64*: a fixed, dependency-free sequence per seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_sequences_match_the_model() {
    let etcd = etcd().await;
    // How often each interesting outcome happened, over every seed.
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for seed in 1..=12u64 {
        let c = Cluster::start(&etcd, &format!("ck-model-{seed}"), 3).await;
        let term = c.term();
        let leader = &c.elections[0];
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut generation =
            sluice_cluster::checkpoint::checkpoint_assignment_for_admission(&c.sessions[0])
                .await
                .expect("fence")
                .generation();
        let mut attempts: BTreeMap<u64, Attempt> = BTreeMap::new();
        let mut committed = 0u64;
        for step in 0..80 {
            let ctx = format!("seed {seed} step {step}");
            let ids: Vec<u64> = attempts.keys().copied().collect();
            // Mostly the newest attempt, so some attempts gather every answer.
            let pick = |rng: &mut Rng| {
                if rng.below(4) > 0 {
                    ids[ids.len() - 1]
                } else {
                    ids[rng.below(ids.len() as u64) as usize]
                }
            };
            match rng.below(20) {
                0 | 1 => {
                    let a = reserve_checkpoint_attempt(leader, term).await.expect(&ctx);
                    assert_eq!(a.id, ids.last().copied().unwrap_or(0) + 1, "{ctx}");
                    attempts.insert(a.id, Attempt::default());
                }
                2..=4 if !ids.is_empty() => {
                    let id = pick(&mut rng);
                    let fence = sluice_cluster::checkpoint::checkpoint_assignment_for_admission(
                        &c.sessions[0],
                    )
                    .await
                    .expect(&ctx);
                    let attempt = CheckpointAttempt { id, term };
                    let got = sluice_cluster::checkpoint::publish_checkpoint_prepare(
                        leader,
                        attempt,
                        &fence,
                        now_ms() + 600_000,
                    )
                    .await;
                    let model = attempts.get_mut(&id).expect("known");
                    if model.prepared.is_some() {
                        assert!(
                            matches!(got, Err(ClusterError::CheckpointRefused { .. })),
                            "{ctx}"
                        );
                    } else {
                        assert_eq!(got.expect(&ctx).value.generation, generation, "{ctx}");
                        model.prepared = Some(generation);
                    }
                }
                5..=13 if !ids.is_empty() => {
                    let id = pick(&mut rng);
                    // Mostly a node that has not answered yet (a second
                    // answer is refused; that case comes up too).
                    let fresh: Vec<usize> = (0..3)
                        .filter(|n| !attempts[&id].answers.contains_key(n))
                        .collect();
                    let node = if !fresh.is_empty() && rng.below(4) > 0 {
                        fresh[rng.below(fresh.len() as u64) as usize]
                    } else {
                        rng.below(3) as usize
                    };
                    let ack = rng.below(12) > 0;
                    let s = &c.sessions[node];
                    let Some(prepare) = read_prepare(s, id).await.expect(&ctx) else {
                        assert!(attempts[&id].prepared.is_none(), "{ctx}");
                        continue;
                    };
                    let answer = if ack {
                        ack_of(s.node().as_str(), id)
                    } else {
                        Answer::Nack {
                            reason: format!("step {step}"),
                        }
                    };
                    let got = answer_checkpoint(s, &prepare, answer).await;
                    let model = attempts.get_mut(&id).expect("known");
                    let fenced = model.prepared != Some(generation);
                    match got {
                        Ok(()) => {
                            assert!(!fenced && !model.answers.contains_key(&node), "{ctx}");
                            model.answers.insert(node, ack);
                        }
                        Err(ClusterError::AssignmentFenceMoved { .. }) => {
                            assert!(fenced, "{ctx}");
                            *seen.entry("fenced answer").or_default() += 1;
                        }
                        Err(ClusterError::AnswerRefused { .. }) => {
                            assert!(!fenced && model.answers.contains_key(&node), "{ctx}")
                        }
                        Err(e) => panic!("{ctx}: {e}"),
                    }
                }
                14 => {
                    let names = c.names();
                    let table = publish(leader, term, generation, VnodeCount::default(), &names)
                        .await
                        .expect(&ctx);
                    generation = table.generation();
                }
                _ if !ids.is_empty() => {
                    let id = pick(&mut rng);
                    let got = decide(leader, term, id, now_ms()).await;
                    let model = attempts.get_mut(&id).expect("known");
                    let nacked = model.answers.values().any(|a| !a);
                    let all_acked = model.answers.len() == 3 && !nacked;
                    match (model.decided, model.prepared, got) {
                        (Some(first), _, Ok(Some(d))) => {
                            assert!(!d.first, "{ctx}");
                            let commit = matches!(d.record.decision, Decision::Commit { .. });
                            assert_eq!(commit, first, "{ctx}");
                        }
                        (None, None, Err(ClusterError::CheckpointMissing { .. })) => {}
                        (None, Some(_), Ok(None)) => assert!(!nacked && !all_acked, "{ctx}"),
                        (None, Some(g), Ok(Some(d))) => {
                            assert!(d.first, "{ctx}");
                            let commit = matches!(d.record.decision, Decision::Commit { .. });
                            assert_eq!(commit, !nacked, "{ctx}");
                            if commit {
                                assert!(all_acked && g == generation && id > committed, "{ctx}");
                                committed = id;
                            }
                            *seen
                                .entry(if commit { "commit" } else { "abort" })
                                .or_default() += 1;
                            model.decided = Some(commit);
                        }
                        (None, Some(g), Err(ClusterError::AssignmentFenceMoved { .. })) => {
                            assert!(all_acked && g != generation, "{ctx}");
                            *seen.entry("fenced commit").or_default() += 1;
                        }
                        (None, Some(_), Err(ClusterError::CheckpointRefused { .. })) => {
                            assert!(all_acked && id <= committed, "{ctx}")
                        }
                        (_, _, other) => panic!("{ctx}: unexpected {other:?}"),
                    }
                }
                _ => {}
            }
            let read = last_committed_id(&c.sessions[1]).await.expect(&ctx);
            assert_eq!(read.unwrap_or(0), committed, "{ctx}");
        }
        assert!(!attempts.is_empty(), "seed {seed}");
    }
    // The seeds reach every interesting outcome (the sequence is fixed, so
    // this only fails if the protocol's answers change).
    eprintln!("outcomes: {seen:?}");
    for outcome in ["commit", "abort", "fenced answer", "fenced commit"] {
        assert!(
            seen.get(outcome).is_some_and(|&n| n > 0),
            "no {outcome}: {seen:?}"
        );
    }
}
