//! A pipeline split across nodes: every node runs the same statements and
//! reads the files of its vnodes; together the nodes produce exactly the
//! single-node output (each row once, on the node that read its file), and
//! every object that cannot run split is refused by name with its reason.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod split_support;

use std::collections::BTreeMap;

use sluice::split::VnodePlacement;
use sluice::Database;
use split_support::*;

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

/// A node that holds no vnodes reads no row from a split source, so any
/// statement runs on it (a node dropped from a split starts once like that
/// to publish its last checkpoint's output); a push source would feed it
/// rows, so with one the usual refusals hold.
#[tokio::test]
async fn a_node_without_vnodes_admits_keyed_streams_unless_a_source_is_pushed() {
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(9), 2);
    let open = || async {
        Database::builder()
            .base_dir(dir.path())
            .split("n0", VnodePlacement::new(8, []).unwrap())
            .unwrap()
            .open()
            .await
            .unwrap()
    };
    let keyed = "CREATE STREAM per_k AS SELECT k, count(*) AS n FROM s GROUP BY k";
    let db = open().await;
    db.execute(
        "CREATE SOURCE s (k BIGINT, v BIGINT)
           WITH (connector = 'file', path = 'in/*.csv', format = 'csv')",
    )
    .await
    .unwrap();
    db.execute(keyed).await.unwrap();
    db.abort().await.ok();
    let db = open().await;
    db.execute("CREATE SOURCE s (k BIGINT, v BIGINT)")
        .await
        .unwrap();
    let err = db.execute(keyed).await.expect_err("pushed rows");
    assert!(err.to_string().contains("per_k"), "{err}");
    db.abort().await.ok();
}
