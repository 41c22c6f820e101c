//! A split node whose vnodes moved: it starts each file and Nexmark source where the
//! nodes that held its vnodes before stopped (`split_handover`), through
//! several moves among nodes that stop cleanly or crash, so every row is
//! written once; a handover that cannot be exact is refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod split_support;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sluice::split::VnodePlacement;
use sluice::Database;
use split_support::*;

/// How a node of one assignment stops before its vnodes move.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// A clean shutdown: its final checkpoint covers all it read.
    Clean,
    /// A checkpoint, then a crash: what it read after is not committed.
    CheckpointThenCrash,
    /// A crash: only its periodic checkpoints count.
    Crash,
}

/// A node's checkpoint store, one per node as `sluice run --split` keeps.
fn store_url(stores: &Path, node: &str) -> String {
    format!("file://{}/{node}", stores.display())
}

/// Run node `node` holding `placement` (after `handover`, if given) until
/// it has run for `stop`'s milliseconds and stops as it says, or, without
/// `stop`, to the end of its files.
#[allow(clippy::too_many_arguments)]
async fn run_assigned(
    dir: &Path,
    stores: &Path,
    node: &str,
    (placement, generation): (VnodePlacement, u64),
    handover: Option<sluice::split::SplitHandover>,
    script: &str,
    stop: Option<(Stop, u64)>,
) {
    let mut b = Database::builder()
        .base_dir(dir)
        .set("checkpoint_store", &store_url(stores, node))
        .unwrap()
        .set("checkpoint_interval", "10ms")
        .unwrap()
        .set("delivery", "exactly_once")
        .unwrap()
        .split(node, placement)
        .unwrap()
        .split_generation(generation)
        .unwrap();
    if let Some(h) = handover {
        b = b.split_handover(h).unwrap();
    }
    let db = b.open().await.unwrap();
    db.execute(script).await.unwrap();
    let Some((stop, ms)) = stop else {
        tokio::time::timeout(LIMIT, db.run_to_completion())
            .await
            .expect("in time")
            .unwrap_or_else(|e| panic!("node {node}: {e}"));
        db.shutdown().await.unwrap();
        return;
    };
    db.start()
        .await
        .unwrap_or_else(|e| panic!("node {node}: {e}"));
    tokio::time::sleep(Duration::from_millis(ms)).await;
    match stop {
        Stop::Clean => {
            db.shutdown().await.unwrap();
        }
        Stop::CheckpointThenCrash => {
            // The run may have ended and been published already.
            let _ = db.execute("CHECKPOINT").await;
            db.abort().await.unwrap();
        }
        Stop::Crash => {
            db.abort().await.unwrap();
        }
    }
}

/// The data lines of a node's sink file, sorted; none if it never
/// committed an epoch with rows.
fn lines_or_none(path: &Path) -> Vec<String> {
    if path.exists() {
        lines(path)
    } else {
        Vec::new()
    }
}

/// Vnodes move between nodes several times (nodes join, leave and come
/// back), each node stopping at a random moment, cleanly or by a crash
/// after or without a checkpoint; the last assignment runs to the end.
/// Each node of an assignment starts from its own checkpoint and the last
/// checkpoints of the nodes that held its vnodes before: the committed
/// output of all nodes together is exactly the rows the queries select,
/// each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vnodes_that_move_between_nodes_are_read_on_exactly_once() {
    moves_are_read_on_exactly_once(Input::Files, 8).await;
}

/// As [`vnodes_that_move_between_nodes_are_read_on_exactly_once`], for a
/// Nexmark stream: each node generates the blocks of rows of its vnodes,
/// starting those it took over where their previous holder stopped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_blocks_that_move_between_nodes_are_generated_once() {
    moves_are_read_on_exactly_once(Input::Nexmark, 5).await;
}

/// What the nodes of [`moves_are_read_on_exactly_once`] read.
#[derive(Debug, Clone, Copy)]
enum Input {
    /// CSV files of generated rows (`SCRIPT`).
    Files,
    /// A bounded Nexmark bid stream ([`NEXMARK_SCRIPT`]).
    Nexmark,
}

/// A filter over Nexmark bids, in `BATCH`-row batches.
const NEXMARK_SCRIPT: &str = "
    CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP)
      WITH (connector = 'nexmark', stream = 'bid', events = '150000', batch_size = 'BATCH');
    CREATE STREAM picked AS SELECT auction, bidder, price, date_time FROM bid WHERE price % 3 <> 0;
    CREATE SINK out FROM picked WITH (connector = 'file', path = 'out/picked.csv', format = 'csv');
";

/// The sorted lines `script` writes to `out/picked.csv` on one node.
async fn single_node_lines(script: &str) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    run_script(dir.path(), None, script).await;
    lines(&dir.path().join("out/picked.csv"))
}

/// Vnodes move between nodes `rounds` times over (see
/// [`vnodes_that_move_between_nodes_are_read_on_exactly_once`]), the nodes
/// reading `input`.
async fn moves_are_read_on_exactly_once(input: Input, rounds: u64) {
    let mut rng = Rng(0x5eed_4a4d);
    // Nodes that stopped with files of their share unread: the handovers
    // the test is about.
    let mut midway = 0;
    for round in 0..rounds {
        let dir = tempfile::tempdir().unwrap();
        let stores = tempfile::tempdir().unwrap();
        let (script, expected) = match input {
            Input::Files => {
                // Many rows, so that a node stopping after a few ms stops midway.
                let files = 2 + rng.below(12) as usize;
                let rows = write_rows(dir.path(), &mut rng, files, 600);
                let batch = 1 + rng.below(4);
                let script = SCRIPT.replace("BATCH", &batch.to_string());
                (script, expected_picked(&rows))
            }
            Input::Nexmark => {
                let batch = [7, 100, 1024, 5000][rng.below(4) as usize];
                let script = NEXMARK_SCRIPT.replace("BATCH", &batch.to_string());
                let expected = single_node_lines(&script).await;
                (script, expected)
            }
        };
        let count = [1u32, 7, 64][rng.below(3) as usize];
        let names = ["a", "b", "c", "d"];
        // Assignment generations count from 1.
        let generation_of = |assignment: u64| assignment + 1;
        // Who held which vnodes in the previous assignment.
        let mut before: BTreeMap<&str, VnodePlacement> = BTreeMap::new();
        let rounds = 2 + rng.below(3);
        for assignment in 0..rounds {
            let last = assignment + 1 == rounds;
            let live: Vec<&str> = loop {
                let pick: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|_| rng.below(2) == 0)
                    .collect();
                if !pick.is_empty() {
                    break pick;
                }
            };
            let owner: Vec<usize> = (0..count)
                .map(|_| rng.below(live.len() as u64) as usize)
                .collect();
            let mut now = BTreeMap::new();
            for (i, node) in live.iter().enumerate() {
                let owned = (0..count).filter(|v| owner[*v as usize] == i);
                now.insert(*node, VnodePlacement::new(count, owned).unwrap());
            }
            // What each node of the previous assignment had read when it
            // stopped, read before any node of this one runs (a node
            // running on checkpoints further).
            let mut stopped = BTreeMap::new();
            for (node, placement) in &before {
                let url = store_url(stores.path(), node);
                let progress = sluice::split::checkpointed_progress(&url)
                    .await
                    .unwrap()
                    .unwrap_or_default();
                if !placement.owned().is_empty() && progress.values().any(|p| !p.finished) {
                    midway += 1;
                }
                stopped.insert(
                    *node,
                    sluice::split::PreviousNode {
                        node: node.to_string(),
                        placement: placement.clone(),
                        sources: progress,
                    },
                );
            }
            for node in &live {
                let handover = if assignment == 0 {
                    None
                } else {
                    let others = stopped
                        .iter()
                        .filter(|(other, _)| *other != node)
                        .map(|(_, previous)| previous.clone())
                        .collect();
                    Some(sluice::split::SplitHandover {
                        own_before: before.get(node).cloned(),
                        others,
                        generation: generation_of(assignment - 1),
                    })
                };
                // A node may stop and start again (with the same handover)
                // before the vnodes move on: it resumes from the
                // checkpoints it took in this assignment.
                let runs = 1 + rng.below(2);
                for run in 0..runs {
                    let stop = (!last || run + 1 < runs).then(|| {
                        let how = [Stop::Clean, Stop::CheckpointThenCrash, Stop::Crash]
                            [rng.below(3) as usize];
                        (how, rng.below(25))
                    });
                    run_assigned(
                        dir.path(),
                        stores.path(),
                        node,
                        (now[node].clone(), generation_of(assignment)),
                        handover.clone(),
                        &script,
                        stop,
                    )
                    .await;
                }
            }
            before = now;
        }
        // A node that left has a checkpoint whose sink epoch may be staged
        // but not yet published (it crashed right after the checkpoint):
        // started again with no vnodes, it publishes what its checkpoint
        // committed and reads nothing.
        for node in names {
            let store = stores.path().join(node);
            if before.contains_key(node) || !store.exists() {
                continue;
            }
            let none = VnodePlacement::new(count, []).unwrap();
            let handover = sluice::split::SplitHandover {
                own_before: None,
                others: Vec::new(),
                generation: generation_of(rounds - 1),
            };
            run_assigned(
                dir.path(),
                stores.path(),
                node,
                (none, generation_of(rounds)),
                Some(handover),
                &script,
                None,
            )
            .await;
        }
        let mut union = Vec::new();
        for node in names {
            union.extend(lines_or_none(
                &dir.path().join(format!("out/{node}/picked.csv")),
            ));
        }
        union.sort();
        if union != expected {
            let (mut got, mut want) = (BTreeMap::new(), BTreeMap::new());
            for l in &union {
                *got.entry(l).or_insert(0) += 1;
            }
            for l in &expected {
                *want.entry(l).or_insert(0) += 1;
            }
            let missing = want.keys().filter(|l| !got.contains_key(*l)).count();
            let twice = got.values().filter(|n| **n > 1).count();
            panic!(
                "round {round}: {} rows written, {} expected: {missing} missing, {twice} written twice",
                union.len(),
                expected.len()
            );
        }
    }
    assert!(midway > 0, "no node stopped before the end of its files");
}

/// A handover is refused on a database that is not a node of a split, on
/// one without an assignment generation, and on one without checkpoints
/// (where it starts would not outlive it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handover_needs_a_split_node_with_checkpoints() {
    let handover = || sluice::split::SplitHandover {
        own_before: Some(VnodePlacement::new(4, 0..4).unwrap()),
        others: Vec::new(),
        generation: 0,
    };
    let e = Database::builder()
        .split_handover(handover())
        .err()
        .expect("not split")
        .to_string();
    assert!(e.contains("not a node of a split; call split first"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(5), 2);
    // Without a generation, then with one but without checkpoints.
    for (generation, says) in [
        (0, "needs its assignment generation"),
        (2, "needs checkpoints"),
    ] {
        let db = Database::builder()
            .base_dir(dir.path())
            .split("n1", VnodePlacement::new(4, 0..4).unwrap())
            .unwrap()
            .split_generation(generation)
            .unwrap()
            .split_handover(handover())
            .unwrap()
            .open()
            .await
            .unwrap();
        db.execute(&SCRIPT.replace("BATCH", "5")).await.unwrap();
        let e = db.start().await.expect_err(says).to_string();
        assert!(e.contains(says), "{e}");
        let _ = db.abort().await;
    }
}

/// With generations counted, a node that holds again the vnodes it held
/// two assignments ago starts from where the node in between stopped, not
/// from its own older position of the same vnodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_back_on_its_old_vnodes_reads_on_from_the_node_in_between() {
    let dir = tempfile::tempdir().unwrap();
    let stores = tempfile::tempdir().unwrap();
    // Enough single-row batches that 30 ms read only some of them.
    let rows = write_rows(dir.path(), &mut Rng(23), 12, 5000);
    let all = || VnodePlacement::new(1, [0]).unwrap();
    let progress = |node: &str| {
        let url = store_url(stores.path(), node);
        async move {
            sluice::split::checkpointed_progress(&url)
                .await
                .unwrap()
                .unwrap_or_default()
        }
    };
    // Generation 1: a reads some; 2: b reads on from there; 3: a again.
    run_assigned(
        dir.path(),
        stores.path(),
        "a",
        (all(), 1),
        None,
        &SCRIPT.replace("BATCH", "1"),
        Some((Stop::Clean, 30)),
    )
    .await;
    let a1 = progress("a").await;
    assert!(
        a1.values().all(|p| !p.finished),
        "a read everything: {a1:?}"
    );
    let from_a = sluice::split::SplitHandover {
        own_before: None,
        others: vec![sluice::split::PreviousNode {
            node: "a".into(),
            placement: all(),
            sources: a1,
        }],
        generation: 1,
    };
    run_assigned(
        dir.path(),
        stores.path(),
        "b",
        (all(), 2),
        Some(from_a),
        &SCRIPT.replace("BATCH", "1"),
        Some((Stop::Clean, 30)),
    )
    .await;
    let from_b = sluice::split::SplitHandover {
        own_before: None,
        others: vec![sluice::split::PreviousNode {
            node: "b".into(),
            placement: all(),
            sources: progress("b").await,
        }],
        generation: 2,
    };
    run_assigned(
        dir.path(),
        stores.path(),
        "a",
        (all(), 3),
        Some(from_b),
        &SCRIPT.replace("BATCH", "1"),
        None,
    )
    .await;
    let expected = expected_picked(&rows);
    let mut union = lines_or_none(&dir.path().join("out/a/picked.csv"));
    let from_b = lines_or_none(&dir.path().join("out/b/picked.csv"));
    assert!(!from_b.is_empty(), "b read nothing");
    union.extend(from_b);
    union.sort();
    assert_eq!(union.len(), expected.len());
    assert!(union == expected, "the rows differ");
}
