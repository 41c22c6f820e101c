//! A pipeline split across nodes: every node runs the same statements and
//! reads the files of its vnodes; together the nodes produce exactly the
//! single-node output (each row once, on the node that read its file), and
//! every object that cannot run split is refused by name with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sluice::split::VnodePlacement;
use sluice::Database;

const LIMIT: Duration = Duration::from_secs(60);

/// A small deterministic generator (the test needs no crate for it).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One input row: (id, k, v, ts in ms).
type Row = (i64, i64, i64, i64);

/// Write `files` CSV files under `dir/in` (some in a subdirectory) with
/// rows whose times are disordered by less than the watermark's 5 s
/// delay, so no row is late on any node or on one node.
fn write_input(dir: &Path, rng: &mut Rng, files: usize) -> Vec<Row> {
    write_rows(dir, rng, files, 40)
}

/// [`write_input`] with fewer than `per_file` rows in each file.
fn write_rows(dir: &Path, rng: &mut Rng, files: usize, per_file: u64) -> Vec<Row> {
    let mut all = Vec::new();
    let mut id = 0;
    for f in 0..files {
        let name = if f % 3 == 2 {
            format!("in/sub/part-{f}.csv")
        } else {
            format!("in/part-{f}.csv")
        };
        let path = dir.join(&name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = String::from("id,k,v,ts\n");
        for _ in 0..rng.below(per_file) {
            id += 1;
            let row = (
                id,
                rng.below(7) as i64,
                rng.below(1000) as i64 - 500,
                // Times within 4 s of one another: never behind a
                // watermark 5 s below the largest time seen.
                rng.below(4_000) as i64,
            );
            let (secs, ms) = (row.3 / 1000, row.3 % 1000);
            text.push_str(&format!(
                "{},{},{},1970-01-01T00:00:{secs:02}.{ms:03}\n",
                row.0, row.1, row.2
            ));
            all.push(row);
        }
        std::fs::write(path, text).unwrap();
    }
    all
}

const SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in/**/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM picked AS SELECT id, k, v * 2 AS v2 FROM s WHERE v > -100 AND k <> 3;
    CREATE STREAM both_ AS SELECT id, k FROM picked WHERE k = 1 UNION ALL SELECT id, k FROM s WHERE v < -400;
    CREATE SINK out FROM picked WITH (connector = 'file', path = 'out/picked.csv', format = 'csv');
    CREATE SINK out_both FROM both_ WITH (connector = 'file', path = 'out/both.csv', format = 'csv');
";

async fn run_node(dir: &Path, split: Option<(&str, VnodePlacement)>, batch: u64) {
    let mut b = Database::builder().base_dir(dir);
    if let Some((node, placement)) = split {
        b = b.split(node, placement).unwrap();
    }
    let db = b.open().await.unwrap();
    db.execute(&SCRIPT.replace("BATCH", &batch.to_string()))
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, db.run_to_completion())
        .await
        .expect("in time")
        .unwrap();
    db.shutdown().await.unwrap();
}

/// The lines sink `out` (stream `picked`) writes for `rows`, sorted.
fn expected_picked(rows: &[Row]) -> Vec<String> {
    let mut e: Vec<String> = rows
        .iter()
        .filter(|r| r.2 > -100 && r.1 != 3)
        .map(|r| format!("{},{},{}", r.0, r.1, r.2 * 2))
        .collect();
    e.sort();
    e
}

/// The data lines of a sink file, sorted.
fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut l: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    l.sort();
    l
}

/// Random assignments of vnodes to 1 to 4 nodes, over random files, batch
/// sizes and vnode counts: the nodes' outputs together are the single-node
/// output and the rows the queries select, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_nodes_together_produce_exactly_the_single_node_output() {
    let mut rng = Rng(0x5eed_0001);
    for round in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let files = 1 + rng.below(12) as usize;
        let rows = write_input(dir.path(), &mut rng, files);
        let batch = 1 + rng.below(16);
        let count = [1u32, 7, 64, 256][rng.below(4) as usize];
        let nodes = 1 + rng.below(4) as usize;
        // Each vnode has exactly one owner, chosen at random.
        let owner: Vec<usize> = (0..count)
            .map(|_| rng.below(nodes as u64) as usize)
            .collect();
        run_node(dir.path(), None, batch).await;
        for n in 0..nodes {
            let owned = (0..count).filter(|v| owner[*v as usize] == n);
            let placement = VnodePlacement::new(count, owned).unwrap();
            run_node(dir.path(), Some((&format!("n{n}"), placement)), batch).await;
        }
        let expected_picked = expected_picked(&rows);
        let expected_both: Vec<String> = {
            let mut e: Vec<String> = rows
                .iter()
                .filter(|r| (r.2 > -100 && r.1 == 1) || r.2 < -400)
                .map(|r| format!("{},{}", r.0, r.1))
                .collect();
            e.sort();
            e
        };
        let out = dir.path().join("out");
        assert_eq!(
            lines(&out.join("picked.csv")),
            expected_picked,
            "round {round}: one node"
        );
        assert_eq!(
            lines(&out.join("both.csv")),
            expected_both,
            "round {round}: one node"
        );
        for (sink, expected) in [("picked", &expected_picked), ("both", &expected_both)] {
            let mut union = Vec::new();
            let mut per_node = BTreeMap::new();
            for n in 0..nodes {
                let mine = lines(&out.join(format!("n{n}/{sink}.csv")));
                per_node.insert(n, mine.len());
                union.extend(mine);
            }
            union.sort();
            assert_eq!(
                &union, expected,
                "round {round}: {sink} over {nodes} nodes, {count} vnodes ({per_node:?})"
            );
        }
    }
}

/// A node whose vnodes hold none of the files reads nothing, writes an
/// empty sink file of its own, and finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_holding_no_file_finishes_with_empty_output() {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = Rng(7);
    write_input(dir.path(), &mut rng, 1);
    let placement = VnodePlacement::new(256, std::iter::empty()).unwrap();
    run_node(dir.path(), Some(("idle", placement)), 8).await;
    assert!(lines(&dir.path().join("out/idle/picked.csv")).is_empty());
}

/// Every kind of object that cannot run split, refused by the statement
/// that makes it (before a cluster could seal it), naming the object and
/// why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_object_that_cannot_run_split_is_refused_by_name() {
    const SRC: &str = "CREATE SOURCE a (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
        WITH (connector = 'file', path = 'in/*.csv', format = 'csv');
      CREATE SOURCE b (k BIGINT, w BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
        WITH (connector = 'file', path = 'in_b/*.csv', format = 'csv');";
    let stream = |op: &str| {
        format!("stream 'x' cannot run split across nodes: its {op} keeps state across rows")
    };
    let cases: Vec<(&str, String)> = vec![
        (
            "CREATE STREAM x AS SELECT k, tumble(ts, INTERVAL '1' SECOND) AS w, COUNT(*) AS n FROM a GROUP BY k, tumble(ts, INTERVAL '1' SECOND)",
            stream("windowed aggregation"),
        ),
        ("CREATE STREAM x AS SELECT k, COUNT(*) AS n FROM a GROUP BY k", stream("aggregation")),
        ("CREATE STREAM x AS SELECT DISTINCT k FROM a", stream("DISTINCT")),
        (
            "CREATE STREAM x AS SELECT * FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM a) WHERE rn <= 3",
            stream("top-N"),
        ),
        (
            "CREATE STREAM x AS SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS s FROM a",
            stream("OVER aggregation"),
        ),
        ("CREATE STREAM x AS SELECT a.k, b.w FROM a JOIN b ON a.k = b.k", stream("join")),
        ("CREATE STREAM x AS SELECT a.k, b.w FROM a LEFT JOIN b ON a.k = b.k", stream("outer join")),
        (
            "CREATE STREAM x AS SELECT a.k, b.w FROM a ASOF JOIN b MATCH_CONDITION (a.ts >= b.ts) ON a.k = b.k",
            stream("ASOF join"),
        ),
        (
            "CREATE STREAM y AS SELECT k, v FROM a WHERE v > 0; CREATE STREAM x AS SELECT k, COUNT(*) AS n FROM y GROUP BY k",
            stream("aggregation"),
        ),
        (
            "CREATE MATERIALIZED VIEW x AS SELECT k, v FROM a",
            "materialized view 'x' cannot run split across nodes: each node would hold only its share of the view".into(),
        ),
        (
            "CREATE SOURCE late (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) LATE DATA TO late_rows WITH (connector = 'file', path = 'in/*.csv', format = 'csv')",
            "source 'late' cannot run split across nodes: LATE DATA TO".into(),
        ),
        (
            "CREATE SOURCE gen (auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR, date_time TIMESTAMP, extra VARCHAR, WATERMARK FOR date_time AS date_time) WITH (connector = 'nexmark', stream = 'bid', events = '10')",
            "source 'gen' cannot run split across nodes: a nexmark generator has no partitions".into(),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    std::fs::write(
        dir.path().join("in/a.csv"),
        "k,v,ts\n1,1,1970-01-01T00:00:01\n",
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("in_b")).unwrap();
    std::fs::write(
        dir.path().join("in_b/b.csv"),
        "k,w,ts\n1,1,1970-01-01T00:00:01\n",
    )
    .unwrap();
    for (sql, expected) in cases {
        let db = Database::builder()
            .base_dir(dir.path())
            .split("n1", VnodePlacement::all(8).unwrap())
            .unwrap()
            .open()
            .await
            .unwrap();
        db.execute(SRC).await.unwrap();
        let err = db.execute(sql).await.expect_err(sql).to_string();
        assert!(
            err.contains(&expected),
            "{sql}\n got: {err}\n want: {expected}"
        );
        // Refused as it was made: the catalog never held it, and the
        // rest starts.
        let shown = db.execute("SHOW STREAMS").await.unwrap();
        let text = sluice::arrow::util::pretty::pretty_format_batches(&shown)
            .unwrap()
            .to_string();
        assert!(!text.contains("| x "), "{sql}: {text}");
        db.start().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        db.abort().await.unwrap();
        // Without the split, the same statements start.
        let whole = Database::builder()
            .base_dir(dir.path())
            .open()
            .await
            .unwrap();
        whole.execute(SRC).await.unwrap();
        whole.execute(sql).await.unwrap();
        whole
            .start()
            .await
            .unwrap_or_else(|e| panic!("{sql} unsplit: {e}"));
        whole.abort().await.unwrap();
    }
}

/// A running split pipeline refuses a stream that cannot run split and
/// keeps running: a row-by-row stream created after it is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_split_pipeline_refuses_a_stateful_stream_and_keeps_running() {
    let db = Database::builder()
        .split("n1", VnodePlacement::all(4).unwrap())
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute("CREATE SOURCE p (k BIGINT, v BIGINT)")
        .await
        .unwrap();
    db.start().await.unwrap();
    let err = db
        .execute("CREATE STREAM agg AS SELECT k, SUM(v) AS s FROM p GROUP BY k")
        .await
        .expect_err("refused")
        .to_string();
    assert!(
        err.contains("stream 'agg' cannot run split across nodes: its aggregation"),
        "{err}"
    );
    db.execute("CREATE STREAM ok AS SELECT k FROM p WHERE v > 0")
        .await
        .unwrap();
    let shown = db.execute("SHOW STREAMS").await.unwrap();
    let text = sluice::arrow::util::pretty::pretty_format_batches(&shown)
        .unwrap()
        .to_string();
    assert!(text.contains("ok") && !text.contains("agg"), "{text}");
    db.abort().await.unwrap();
}

/// Every node of a split seals the same catalog (its fingerprint encodes
/// each sink's declared path, not the node's own file), while each writes
/// its own file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_of_a_split_has_the_same_catalog_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(3), 2);
    let mut prints = Vec::new();
    let mut outputs = Vec::new();
    for (node, owned) in [("n1", 0..4), ("n2", 4..8)] {
        let db = Database::builder()
            .base_dir(dir.path())
            .split(node, VnodePlacement::new(8, owned).unwrap())
            .unwrap()
            .open()
            .await
            .unwrap();
        db.execute(&SCRIPT.replace("BATCH", "4")).await.unwrap();
        prints.push(db.catalog_fingerprints().await.whole);
        outputs.extend(db.sink_outputs().await.into_iter().map(|o| o.path));
        db.abort().await.unwrap();
    }
    assert_eq!(prints[0], prints[1]);
    let names: Vec<String> = outputs
        .iter()
        .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
        .collect();
    assert_eq!(
        names,
        [
            "out/n1/picked.csv",
            "out/n1/both.csv",
            "out/n2/picked.csv",
            "out/n2/both.csv"
        ]
    );
}

/// A split node under exactly-once delivery resumes from its own
/// checkpoint: run again over the same files, it writes nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_node_resumes_from_its_checkpoint_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let rows = write_input(dir.path(), &mut Rng(11), 6);
    let state = tempfile::tempdir().unwrap();
    let run = || async {
        let db = Database::builder()
            .base_dir(dir.path())
            .state_dir(state.path())
            .set("delivery", "exactly_once")
            .unwrap()
            .split("n1", VnodePlacement::new(16, 0..8).unwrap())
            .unwrap()
            .open()
            .await
            .unwrap();
        db.execute(&SCRIPT.replace("BATCH", "5")).await.unwrap();
        tokio::time::timeout(LIMIT, db.run_to_completion())
            .await
            .expect("in time")
            .unwrap();
        db.shutdown().await.unwrap();
        lines(&dir.path().join("out/n1/picked.csv"))
    };
    let first = run().await;
    assert!(
        !first.is_empty() && first.len() < rows.len(),
        "{} of {}",
        first.len(),
        rows.len()
    );
    let again = run().await;
    assert_eq!(again, first);
    // The same node with other vnodes: its checkpointed position is in
    // another share's files, so recovery refuses it instead of resuming
    // in the wrong place.
    let moved = Database::builder()
        .base_dir(dir.path())
        .state_dir(state.path())
        .set("delivery", "exactly_once")
        .unwrap()
        .split("n1", VnodePlacement::new(16, 4..12).unwrap())
        .unwrap()
        .open()
        .await
        .unwrap();
    moved.execute(&SCRIPT.replace("BATCH", "5")).await.unwrap();
    let err = moved.start().await.expect_err("another share").to_string();
    assert!(
        err.contains("the position was checkpointed reading share 'vnodes 16/"),
        "{err}"
    );
    assert!(err.contains("this node's share changed"), "{err}");
    let _ = moved.abort().await;
}

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
    batch: u64,
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
    db.execute(&SCRIPT.replace("BATCH", &batch.to_string()))
        .await
        .unwrap();
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
    let mut rng = Rng(0x5eed_4a4d);
    // Nodes that stopped with files of their share unread: the handovers
    // the test is about.
    let mut midway = 0;
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let stores = tempfile::tempdir().unwrap();
        // Many rows, so that a node stopping after a few ms stops midway.
        let files = 2 + rng.below(12) as usize;
        let rows = write_rows(dir.path(), &mut rng, files, 600);
        let batch = 1 + rng.below(4);
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
                        batch,
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
                batch,
                None,
            )
            .await;
        }
        let expected = expected_picked(&rows);
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
    let db = Database::builder()
        .base_dir(dir.path())
        .split("n1", VnodePlacement::new(4, 0..4).unwrap())
        .unwrap()
        .split_handover(handover())
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute(&SCRIPT.replace("BATCH", "5")).await.unwrap();
    let e = db.start().await.expect_err("no generation").to_string();
    assert!(e.contains("needs its assignment generation"), "{e}");
    let _ = db.abort().await;
    let db = Database::builder()
        .base_dir(dir.path())
        .split("n1", VnodePlacement::new(4, 0..4).unwrap())
        .unwrap()
        .split_generation(2)
        .unwrap()
        .split_handover(handover())
        .unwrap()
        .open()
        .await
        .unwrap();
    db.execute(&SCRIPT.replace("BATCH", "5")).await.unwrap();
    let e = db.start().await.expect_err("no checkpoints").to_string();
    assert!(e.contains("needs checkpoints"), "{e}");
    let _ = db.abort().await;
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
        1,
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
        1,
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
        1,
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
