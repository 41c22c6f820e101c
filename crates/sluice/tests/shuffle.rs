//! Keyed aggregations across the nodes of a split: every row crosses to
//! the node owning its key's vnode over a real gRPC shuffle on loopback,
//! and the nodes' outputs together equal a single node's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod split_support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use sluice::process::benchmark::{running_count_descriptor, RunningCount};
use sluice::split::{CreditBudget, OwnerTable, ShuffleSetup, VnodePlacement};
use sluice::Database;
use split_support::shuffle::{open_node, run_reference, servers, PIPELINE};
use split_support::{final_state, lines, Rng, LIMIT};

const SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM per_window AS
      SELECT k, tumble(ts, INTERVAL '1' SECOND) AS w, count(*) AS n, sum(v) AS total
      FROM s WHERE v > -400 GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
    CREATE STREAM per_2s AS
      SELECT tumble(ts, INTERVAL '2' SECOND) AS w, count(*) AS n, max(v) AS top
      FROM s GROUP BY tumble(ts, INTERVAL '2' SECOND);
    CREATE STREAM totals AS SELECT k, count(*) AS n, sum(v) AS total FROM s GROUP BY k;
    CREATE STREAM busy AS SELECT k, w, n FROM per_window WHERE n > 2;
    CREATE SOURCE r (k BIGINT, w BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in_r/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM joined AS SELECT s.id, s.k, r.w FROM s JOIN r ON s.k = r.k WHERE s.v > 300;
    CREATE STREAM lefts AS SELECT s.id, r.w FROM s LEFT JOIN r ON s.k = r.k AND r.w > 980 WHERE s.v < -450;
    CREATE SINK a FROM per_window WITH (connector = 'file', path = 'out/per_window.csv', format = 'csv');
    CREATE SINK b FROM per_2s WITH (connector = 'file', path = 'out/per_2s.csv', format = 'csv');
    CREATE SINK c FROM totals WITH (connector = 'file', path = 'out/totals.csv', format = 'csv');
    CREATE SINK d FROM busy WITH (connector = 'file', path = 'out/busy.csv', format = 'csv');
    CREATE SINK e FROM joined WITH (connector = 'file', path = 'out/joined.csv', format = 'csv');
    CREATE SINK f FROM lefts WITH (connector = 'file', path = 'out/lefts.csv', format = 'csv');
";

/// `files` CSV files whose times rise with the file (read in path order,
/// each a 4 s span starting 3 s after the one before): within the
/// watermark's 5 s delay on any node that reads any subset of them in
/// order, so no row is late anywhere, while windows close as the run goes.
fn write_input(dir: &Path, rng: &mut Rng, files: usize) {
    let mut id = 0;
    for f in 0..files {
        let path = dir.join(format!("in/part-{f:02}.csv"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = String::from("id,k,v,ts\n");
        for _ in 0..rng.below(150) {
            id += 1;
            let ts = f as i64 * 3_000 + rng.below(4_000) as i64;
            text.push_str(&format!(
                "{id},{},{},1970-01-01T00:{:02}:{:02}.{:03}\n",
                rng.below(9),
                rng.below(1000) as i64 - 500,
                ts / 60_000,
                ts / 1000 % 60,
                ts % 1000
            ));
        }
        std::fs::write(path, text).unwrap();
        let path = dir.join(format!("in_r/part-{f:02}.csv"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = String::from("k,w,ts\n");
        for _ in 0..rng.below(40) {
            let ts = f as i64 * 3_000 + rng.below(4_000) as i64;
            text.push_str(&format!(
                "{},{},1970-01-01T00:{:02}:{:02}.{:03}\n",
                rng.below(9),
                rng.below(1000),
                ts / 60_000,
                ts / 1000 % 60,
                ts % 1000
            ));
        }
        std::fs::write(path, text).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_aggregations_across_shuffled_nodes_equal_one_node() {
    let mut rng = Rng(0x5eed_5f1e);
    for round in 0..12 {
        let dir = tempfile::tempdir().unwrap();
        let files = 1 + rng.below(10) as usize;
        write_input(dir.path(), &mut rng, files);
        let batch = 1 + rng.below(16);
        let count = [1u32, 7, 64, 256][rng.below(4) as usize];
        let nodes = 1 + rng.below(3) as usize;
        let owner: Vec<u32> = (0..count).map(|_| rng.below(nodes as u64) as u32).collect();
        // Half the rounds with a credit of a few frames and bytes: every
        // frame waits for the receiver, and each node's intake pauses on
        // its outbound queue while it still takes the others' rows.
        let budget = if round % 2 == 0 {
            CreditBudget::new(1 + rng.below(3), 1 + rng.below(4096)).unwrap()
        } else {
            CreditBudget::default()
        };
        let single = Database::builder()
            .base_dir(dir.path())
            .open()
            .await
            .unwrap();
        run_reference(single, SCRIPT, batch).await;
        let (servers, table) = servers(nodes, &owner).await;
        let mut dbs = Vec::new();
        for n in 0..nodes {
            dbs.push(
                open_node(dir.path(), n, &servers, &table, batch, SCRIPT, budget)
                    .await
                    .unwrap(),
            );
        }
        let runs = dbs.iter().map(|db| db.run_to_completion());
        let done = tokio::time::timeout(LIMIT, futures::future::join_all(runs))
            .await
            .unwrap_or_else(|_| panic!("round {round}: {nodes} nodes did not finish in time"));
        for r in done {
            r.unwrap();
        }
        let mut carried: BTreeMap<String, (u64, u64, u64, u64)> = BTreeMap::new();
        for (n, db) in dbs.iter().enumerate() {
            assert_eq!(
                shown_exchanges(db, &format!("n{n}")).await,
                counted_rows(&db.metrics().exchanges),
                "round {round}: SHOW EXCHANGES on n{n}"
            );
            let m = db.shutdown().await.unwrap();
            for (edge, c) in m.exchanges {
                let t = carried.entry(edge).or_default();
                t.0 += c.rows_kept;
                t.1 += c.rows_sent;
                t.2 += c.rows_received;
                t.3 += c.bytes_sent;
            }
        }
        // What one node sent, another received; frames crossed only
        // between nodes.
        for (edge, (kept, sent, received, bytes)) in &carried {
            assert_eq!(sent, received, "round {round}: {edge}: sent and received");
            if nodes == 1 {
                assert_eq!((*sent, *bytes), (0, 0), "round {round}: {edge}: one node");
            } else if *sent > 0 {
                assert!(*bytes > 0, "round {round}: {edge}: {sent} rows in no bytes");
            }
            assert!(
                kept + sent > 0 || files == 0,
                "round {round}: {edge} carried nothing"
            );
        }
        let out = dir.path().join("out");
        for sink in ["per_window", "per_2s", "busy", "joined"] {
            let single = lines(&out.join(format!("{sink}.csv")));
            let mut union = Vec::new();
            for n in 0..nodes {
                union.extend(lines(&out.join(format!("n{n}/{sink}.csv"))));
            }
            union.sort();
            assert_eq!(
                union, single,
                "round {round}: {sink} over {nodes} nodes, {count} vnodes, batch {batch}, {budget:?}"
            );
            if sink == "per_window" {
                assert!(
                    !single.is_empty() || files == 0,
                    "round {round}: no windows"
                );
            }
        }
        for sink in ["totals", "lefts"] {
            let single = final_state(&out.join(format!("{sink}.csv")));
            let mut union = Vec::new();
            for n in 0..nodes {
                union.extend(final_state(&out.join(format!("n{n}/{sink}.csv"))));
            }
            union.sort();
            assert_eq!(union, single, "round {round}: {sink} over {nodes} nodes");
        }
    }
}

/// A one-node shuffle (every vnode on `n0`): admission and start checks
/// need no other node.
async fn lone_node(dir: &Path, script: &str) -> sluice::Result<Database> {
    let (servers, table) = servers(1, &[0; 8]).await;
    open_node(dir, 0, &servers, &table, 4, script, CreditBudget::default()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_a_shuffled_split_cannot_run_is_refused_by_name() {
    const SRC: &str =
        "CREATE SOURCE a (k BIGINT, v BIGINT, f DOUBLE, ts TIMESTAMP, WATERMARK FOR ts AS ts)
        WITH (connector = 'file', path = 'in/*.csv', format = 'csv');
      CREATE SOURCE b (k BIGINT, w BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
        WITH (connector = 'file', path = 'in_b/*.csv', format = 'csv');";
    let stateful = |op: &str| {
        format!(
            "stream 'x' cannot run split across nodes: its {op} keeps state across rows, and a \
             shuffle between nodes carries the rows of GROUP BY aggregations and equi-joins \
             only so far"
        )
    };
    let window_y = "CREATE STREAM y AS SELECT k, tumble(ts, INTERVAL '1' SECOND) AS w, COUNT(*) AS n FROM a GROUP BY k, tumble(ts, INTERVAL '1' SECOND);";
    let cases: Vec<(String, String)> = vec![
        ("CREATE STREAM x AS SELECT DISTINCT k FROM a".into(), stateful("DISTINCT")),
        (
            "CREATE STREAM x AS SELECT * FROM (SELECT k, v, ROW_NUMBER() OVER (PARTITION BY k ORDER BY v DESC) AS rn FROM a) WHERE rn <= 3".into(),
            stateful("top-N"),
        ),
        (
            "CREATE STREAM x AS SELECT k, SUM(v) OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '1' SECOND PRECEDING AND CURRENT ROW) AS s FROM a".into(),
            stateful("OVER aggregation"),
        ),
        (
            format!("{window_y} CREATE STREAM x AS SELECT y.k, b.w FROM y JOIN b ON y.k = b.k"),
            "stream 'x' cannot run split across nodes: its join reads 'y', whose rows come out of a keyed operator on each node".into(),
        ),
        (
            "CREATE STREAM x AS SELECT a.k, b.w FROM a JOIN b ON a.f = CAST(b.w AS DOUBLE)".into(),
            "stream 'x' cannot run split across nodes: its join key a.f is of type Float64, which has no canonical key encoding".into(),
        ),
        (
            "CREATE STREAM x AS SELECT a.k, COUNT(*) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k".into(),
            "stream 'x' cannot run split across nodes: its join feeds its aggregation".into(),
        ),
        (
            format!("{window_y} CREATE STREAM x AS SELECT n, COUNT(*) AS c FROM y GROUP BY n"),
            "stream 'x' cannot run split across nodes: its aggregation reads 'y', whose rows come out of a keyed operator on each node".into(),
        ),
        (
            format!("{window_y} CREATE STREAM z AS SELECT n FROM y WHERE n > 1; CREATE STREAM x AS SELECT n, COUNT(*) AS c FROM z GROUP BY n"),
            "stream 'x' cannot run split across nodes: its aggregation reads 'z', whose rows come out of a keyed operator on each node".into(),
        ),
        (
            "CREATE STREAM x AS SELECT f, COUNT(*) AS n FROM a GROUP BY f".into(),
            "stream 'x' cannot run split across nodes: its GROUP BY key a.f is of type Float64, which has no canonical key encoding".into(),
        ),
        (
            "CREATE MATERIALIZED VIEW x AS SELECT k, COUNT(*) AS n FROM a GROUP BY k".into(),
            "materialized view 'x' cannot run split across nodes: each node would hold only its share of the view".into(),
        ),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (sub, text) in [
        ("in/a.csv", "k,v,f,ts\n1,1,0.5,1970-01-01T00:00:01\n"),
        ("in_b/b.csv", "k,w,ts\n1,1,1970-01-01T00:00:01\n"),
    ] {
        std::fs::create_dir_all(dir.path().join(sub).parent().unwrap()).unwrap();
        std::fs::write(dir.path().join(sub), text).unwrap();
    }
    for (sql, expected) in &cases {
        let db = lone_node(dir.path(), SRC).await.unwrap();
        let err = db.execute(sql).await.expect_err(sql).to_string();
        assert!(
            err.contains(expected.as_str()),
            "{sql}\n got: {err}\n want: {expected}"
        );
        db.start().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        db.abort().await.unwrap();
    }
    // What a shuffle runs is admitted: windows, updating aggregates with
    // HAVING, equi-joins (inner, outer), and row-by-row streams over them.
    let db = lone_node(dir.path(), SRC).await.unwrap();
    db.execute(&format!(
        "{window_y} CREATE STREAM x AS SELECT k, COUNT(*) AS n FROM a GROUP BY k HAVING COUNT(*) > 1;
         CREATE STREAM z AS SELECT k, n FROM y WHERE n > 1;
         CREATE STREAM j AS SELECT a.k, b.w FROM a JOIN b ON a.k = b.k;
         CREATE STREAM lj AS SELECT a.k, b.w FROM a LEFT JOIN b ON a.k = b.k"
    ))
    .await
    .unwrap();
    tokio::time::timeout(LIMIT, db.run_to_completion())
        .await
        .unwrap()
        .unwrap();
    db.shutdown().await.unwrap();
}

/// The one node of a one-node shuffle, exactly-once with checkpoints in
/// `state` and no commit authority (its checkpoints are its own).
async fn exactly_once_lone_node(dir: &Path, state: &Path, setup: ShuffleSetup) -> Database {
    Database::builder()
        .base_dir(dir)
        .state_dir(state)
        .set("delivery", "exactly_once")
        .unwrap()
        .split("n0", VnodePlacement::all(8).unwrap())
        .unwrap()
        .shuffle(setup)
        .unwrap()
        .open()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shuffled_split_refuses_checkpoints_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(3), 2);
    let (servers, table) = servers(1, &[0; 8]).await;
    let setup = ShuffleSetup::new(
        "n0",
        PIPELINE,
        1,
        table,
        HashMap::new(),
        Arc::clone(&servers[0]),
    )
    .unwrap();
    let db = exactly_once_lone_node(dir.path(), state.path(), setup).await;
    db.execute(&SCRIPT.replace("BATCH", "4")).await.unwrap();
    let err = db
        .start()
        .await
        .expect_err("checkpoints refused")
        .to_string();
    assert!(
        err.contains("a split pipeline whose keyed operators shuffle rows between nodes checkpoints only as one cut through every node"),
        "{err}"
    );
    // Started with only row-by-row streams, the same refusal meets a
    // keyed stream made later.
    let table = OwnerTable::new(vec!["n0".into()], vec![0; 8]).unwrap();
    let setup = ShuffleSetup::new(
        "n0",
        PIPELINE,
        1,
        table,
        HashMap::new(),
        Arc::clone(&servers[0]),
    )
    .unwrap();
    let state = tempfile::tempdir().unwrap();
    let db = exactly_once_lone_node(dir.path(), state.path(), setup).await;
    db.execute(
        "CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = 'in/*.csv', format = 'csv');
         CREATE STREAM picked AS SELECT id, k FROM s WHERE v > 0",
    )
    .await
    .unwrap();
    db.start().await.unwrap();
    let err = db
        .execute("CREATE STREAM per_key AS SELECT k, count(*) AS n FROM s GROUP BY k")
        .await
        .expect_err("a keyed stream under lone checkpoints")
        .to_string();
    assert!(
        err.contains("checkpoints only as one cut through every node"),
        "{err}"
    );
    db.abort().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shuffle_whose_table_disagrees_with_the_split_is_refused() {
    let (servers, table) = servers(2, &[0, 1, 0, 1]).await;
    let endpoints: HashMap<String, String> = [("n1".to_string(), servers[1].endpoint())].into();
    let setup = ShuffleSetup::new(
        "n0",
        PIPELINE,
        1,
        table.clone(),
        endpoints.clone(),
        Arc::clone(&servers[0]),
    )
    .unwrap();
    let err = Database::builder()
        .split("n0", VnodePlacement::new(4, [0, 1]).unwrap())
        .unwrap()
        .shuffle(setup)
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("the owner table gives node 'n0' 2 of 4 vnodes, but the split of node 'n0' holds 2 of 4"), "{err}");
    let err = ShuffleSetup::new(
        "n0",
        PIPELINE,
        1,
        table.clone(),
        HashMap::new(),
        Arc::clone(&servers[0]),
    )
    .expect_err("no endpoint")
    .to_string();
    assert!(err.contains("no endpoint for node 'n1'"), "{err}");
    let err = ShuffleSetup::new(
        "n9",
        PIPELINE,
        1,
        table.clone(),
        endpoints.clone(),
        Arc::clone(&servers[0]),
    )
    .expect_err("not in the table")
    .to_string();
    assert!(
        err.contains("shuffle of node 'n9': the node is not in the owner table (nodes: n0, n1)"),
        "{err}"
    );
    let err = ShuffleSetup::new("n0", PIPELINE, 2, table, endpoints, Arc::clone(&servers[0]))
        .expect_err("generation")
        .to_string();
    assert!(
        err.contains("its server admits generation 1, the setup routes by generation 2"),
        "{err}"
    );
}

/// A node that leaves mid-run before it ever sent anything (its pipeline
/// aborted: its receivers cut every channel, and it never opened one of
/// its own) halts the others with the shuffle's error, naming the
/// exchange and the node, instead of letting them publish a result
/// without its rows or wait for it forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_leaves_mid_run_halts_the_others_with_the_shuffle_error() {
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(17), 6);
    let owner: Vec<u32> = (0..64).map(|v| v % 2).collect();
    let (servers, table) = servers(2, &owner).await;
    let n0 = open_node(
        dir.path(),
        0,
        &servers,
        &table,
        4,
        SCRIPT,
        CreditBudget::default(),
    )
    .await
    .unwrap();
    let n1 = open_node(
        dir.path(),
        1,
        &servers,
        &table,
        4,
        SCRIPT,
        CreditBudget::default(),
    )
    .await
    .unwrap();
    n0.start().await.unwrap();
    // n1 never starts: n0 reads its share, sends n1 its rows and waits for
    // n1's. Then n1 goes.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    n1.abort().await.unwrap();
    drop(n1);
    let err = tokio::time::timeout(LIMIT, n0.run_to_completion())
        .await
        .expect("halted in time")
        .expect_err("halted")
        .to_string();
    assert!(
        err.contains("exchange '") && err.contains("SLC-SHF-"),
        "{err}"
    );
    let _ = n0.abort().await;
}

const PROCESS_SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM keyed_in AS SELECT k AS key, v AS amount FROM s;
    CREATE STREAM counts AS PROCESS running_count VERSION 1 FROM keyed_in;
    CREATE SINK c FROM counts WITH (connector = 'file', path = 'out/counts.csv', format = 'csv');
";

async fn with_running_count(db: Database) -> Database {
    db.register_process_function(running_count_descriptor("running_count"), || RunningCount)
        .await
        .unwrap();
    db
}

/// A keyed process function across shuffled nodes: each key runs on its
/// vnode's owner (the processor placed on its vnodes refuses any other
/// key), and the nodes' outputs together equal one node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_function_across_shuffled_nodes_equals_one_node() {
    let mut rng = Rng(0x5eed_9f0c);
    for round in 0..6 {
        let dir = tempfile::tempdir().unwrap();
        let files = 1 + rng.below(8) as usize;
        write_input(dir.path(), &mut rng, files);
        let batch = 1 + rng.below(16);
        let nodes = 1 + rng.below(3) as usize;
        let count = [7u32, 64, 256][rng.below(3) as usize];
        let owner: Vec<u32> = (0..count).map(|_| rng.below(nodes as u64) as u32).collect();
        let single = with_running_count(
            Database::builder()
                .base_dir(dir.path())
                .open()
                .await
                .unwrap(),
        )
        .await;
        run_reference(single, PROCESS_SCRIPT, batch).await;
        let (servers, table) = servers(nodes, &owner).await;
        let mut dbs = Vec::new();
        for n in 0..nodes {
            let db = open_node(
                dir.path(),
                n,
                &servers,
                &table,
                batch,
                "",
                CreditBudget::default(),
            )
            .await
            .unwrap();
            let db = with_running_count(db).await;
            db.execute(&PROCESS_SCRIPT.replace("BATCH", &batch.to_string()))
                .await
                .unwrap();
            dbs.push(db);
        }
        let runs = dbs.iter().map(|db| db.run_to_completion());
        for r in tokio::time::timeout(LIMIT, futures::future::join_all(runs))
            .await
            .expect("in time")
        {
            r.unwrap();
        }
        for db in &dbs {
            db.shutdown().await.unwrap();
        }
        let out = dir.path().join("out");
        let mut union = Vec::new();
        for n in 0..nodes {
            union.extend(lines(&out.join(format!("n{n}/counts.csv"))));
        }
        union.sort();
        let expected = lines(&out.join("counts.csv"));
        assert!(!expected.is_empty(), "round {round}: no rows");
        assert_eq!(
            union, expected,
            "round {round}: {nodes} nodes, {count} vnodes, batch {batch}"
        );
    }
}

/// Rows kept, sent and received per exchange, as `SHOW EXCHANGES` on `db`
/// (node `node`) gives them.
async fn shown_exchanges(db: &Database, node: &str) -> BTreeMap<String, (u64, u64, u64)> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{Float64Type, UInt64Type};
    let batches = db.execute("SHOW EXCHANGES").await.unwrap();
    let mut shown = BTreeMap::new();
    for b in &batches {
        let text = |c: &str| b.column_by_name(c).unwrap().as_string::<i32>().clone();
        let count = |c: &str| {
            b.column_by_name(c)
                .unwrap()
                .as_primitive::<UInt64Type>()
                .clone()
        };
        let (exchange, nodes) = (text("exchange"), text("node"));
        let (kept, sent, received) = (
            count("rows_kept"),
            count("rows_sent"),
            count("rows_received"),
        );
        let bytes = count("bytes_sent");
        let per_row = b
            .column_by_name("bytes_per_row_sent")
            .unwrap()
            .as_primitive::<Float64Type>()
            .clone();
        for i in 0..b.num_rows() {
            assert_eq!(nodes.value(i), node);
            assert_eq!(per_row.is_null(i), sent.value(i) == 0, "bytes per row sent");
            if sent.value(i) > 0 {
                let each = bytes.value(i) as f64 / sent.value(i) as f64;
                assert_eq!(per_row.value(i), each, "bytes per row sent");
            }
            shown.insert(
                exchange.value(i).to_string(),
                (kept.value(i), sent.value(i), received.value(i)),
            );
        }
    }
    shown
}

/// Rows kept, sent and received per exchange, as metrics count them.
fn counted_rows(
    exchanges: &BTreeMap<String, sluice::split::ExchangeCounters>,
) -> BTreeMap<String, (u64, u64, u64)> {
    exchanges
        .iter()
        .map(|(e, c)| (e.clone(), (c.rows_kept, c.rows_sent, c.rows_received)))
        .collect()
}

/// Only the columns an operator and its readers read cross between
/// nodes: a row with a 2,000-byte column no query reads crosses in a few
/// dozen bytes (the key, the time and the vnode), into an aggregation and
/// into both sides of a join, and the results are still one node's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exchanges_send_only_the_columns_that_are_read() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("in")).unwrap();
    let pad = "x".repeat(2000);
    let mut csv = String::from("k,pad,ts\n");
    for i in 0..400 {
        let ts = format!("1970-01-01T00:{:02}:{:02}", i / 60, i % 60);
        csv.push_str(&format!("{},{pad},{ts}\n", i % 40));
    }
    std::fs::write(dir.path().join("in/a.csv"), csv).unwrap();
    let script = "
        CREATE SOURCE s (k BIGINT, pad VARCHAR, ts TIMESTAMP, WATERMARK FOR ts AS ts)
          WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = 'BATCH');
        CREATE STREAM counts AS SELECT k, count(*) AS n, max(ts) AS last FROM s GROUP BY k;
        CREATE SINK c FROM counts WITH (connector = 'file', path = 'out/counts.csv', format = 'csv');
        CREATE STREAM matched AS SELECT a.k, b.ts FROM s a JOIN s b ON a.k = b.k AND a.ts = b.ts;
        CREATE SINK m FROM matched WITH (connector = 'file', path = 'out/matched.csv', format = 'csv');";
    let owner: Vec<u32> = (0..64).map(|v| v % 2).collect();
    let (servers, table) = servers(2, &owner).await;
    let mut dbs = Vec::new();
    for n in 0..2 {
        let budget = CreditBudget::default();
        dbs.push(
            open_node(dir.path(), n, &servers, &table, 100, script, budget)
                .await
                .unwrap(),
        );
    }
    let runs = dbs.iter().map(|db| db.run_to_completion());
    for r in tokio::time::timeout(LIMIT, futures::future::join_all(runs))
        .await
        .expect("in time")
    {
        r.unwrap();
    }
    let (mut sent, mut bytes) = (0, 0);
    for db in &dbs {
        // SHOW EXCHANGES names what crosses: the key and max's argument.
        let shown = db.execute("SHOW EXCHANGES").await.unwrap();
        let text = sluice::arrow::util::pretty::pretty_format_batches(&shown)
            .unwrap()
            .to_string();
        // Each edge (the aggregation's, the join's two sides) carries the
        // key and the time, never the pad.
        assert_eq!(text.matches("| k, ts ").count(), 3, "{text}");
        let m = db.shutdown().await.unwrap();
        for edge in ["counts#0", "matched#0", "matched#1"] {
            let c = m.exchanges[edge];
            sent += c.rows_sent;
            bytes += c.bytes_sent;
        }
    }
    assert!(sent > 20, "{sent} rows sent");
    assert!(bytes < sent * 200, "{bytes} bytes for {sent} rows");
    let mut union = Vec::new();
    for n in 0..2 {
        union.extend(final_state(
            &dir.path().join(format!("out/n{n}/counts.csv")),
        ));
    }
    union.sort();
    assert_eq!(union.len(), 40, "{union:?}");
    assert!(union.iter().all(|r| r.contains(",10,")), "{union:?}");
    // Every row met itself once on the owner of its key.
    let mut matched = Vec::new();
    for n in 0..2 {
        matched.extend(lines(&dir.path().join(format!("out/n{n}/matched.csv"))));
    }
    matched.sort();
    let mut expected: Vec<String> = (0..400)
        .map(|i| format!("{},1970-01-01T00:{:02}:{:02}", i % 40, i / 60, i % 60))
        .collect();
    expected.sort();
    assert_eq!(matched, expected);
}

/// `SHOW EXCHANGES` on a database without a shuffle says it has none.
#[tokio::test]
async fn show_exchanges_without_a_shuffle_is_refused_by_name() {
    let db = Database::builder().open().await.unwrap();
    let err = db.execute("SHOW EXCHANGES").await.expect_err("no shuffle");
    assert!(
        err.to_string()
            .contains("SHOW EXCHANGES: this database exchanges no rows with other nodes"),
        "{err}"
    );
}

/// A commit authority that decides every node's checkpoints at once, as
/// the cluster's leader and follower records do (nothing is recorded:
/// these pipelines are refused before any checkpoint).
#[derive(Debug)]
struct OneCut;

#[async_trait::async_trait]
impl sluice::CommitAuthority for OneCut {
    async fn record_commit(
        &self,
        _: u64,
        _: Option<u64>,
        _: &sluice::BlobRef,
    ) -> Result<(), sluice::StorageError> {
        Ok(())
    }

    fn one_cut_across_nodes(&self) -> bool {
        true
    }

    async fn committed(
        &self,
    ) -> Result<Option<std::collections::BTreeSet<u64>>, sluice::StorageError> {
        Ok(None)
    }

    async fn forget_below(&self, _: u64) -> Result<(), sluice::StorageError> {
        Ok(())
    }
}

/// Node n0 of two, checkpointed under `delivery` with one cut for all.
async fn checkpointed_node_of_two(dir: &Path, state: &Path, delivery: &str) -> Database {
    let (servers, table) = servers(2, &[0, 1, 0, 1]).await;
    let endpoints = ["n0", "n1"]
        .iter()
        .zip(&servers)
        .map(|(n, s)| (n.to_string(), s.endpoint()))
        .collect();
    let setup =
        ShuffleSetup::new("n0", PIPELINE, 1, table, endpoints, Arc::clone(&servers[0])).unwrap();
    let placement = VnodePlacement::new(4, setup.owned_vnodes()).unwrap();
    let db = Database::builder()
        .base_dir(dir)
        .state_dir(state)
        .set("delivery", delivery)
        .unwrap()
        .set("checkpoint_interval", "1h")
        .unwrap()
        .commit_authority(Arc::new(OneCut))
        .split("n0", placement)
        .unwrap()
        .shuffle(setup)
        .unwrap()
        .open()
        .await
        .unwrap();
    with_running_count(db).await
}

/// A process function whose input crosses between the nodes of a
/// checkpointed split runs its input once the checkpoint that cut it
/// committed (`cluster_shuffle::process_functions_*` run it), so it is
/// admitted under the same rules as on one node: at least once, at start
/// and when made later; exactly once is refused by name, both ways.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpointed_split_admits_a_process_function_across_nodes_at_least_once() {
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(5), 2);
    let refused = |e: sluice::Error| {
        let e = e.to_string();
        assert!(e.contains("running_count"), "{e}");
        assert!(
            e.contains("exactly-once delivery of process functions is unsupported"),
            "{e}"
        );
    };
    let source =
        "CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
           WITH (connector = 'file', path = 'in/*.csv', format = 'csv');
         CREATE STREAM keyed_in AS SELECT k AS key, v AS amount FROM s";
    let bind = "CREATE STREAM counts AS PROCESS running_count VERSION 1 FROM keyed_in";
    for delivery in ["at_least_once", "exactly_once"] {
        let state = tempfile::tempdir().unwrap();
        let db = checkpointed_node_of_two(dir.path(), state.path(), delivery).await;
        db.execute(&PROCESS_SCRIPT.replace("BATCH", "4"))
            .await
            .unwrap();
        match (delivery, db.start().await) {
            ("at_least_once", started) => started.unwrap(),
            (_, started) => refused(started.expect_err("refused at start")),
        }
        db.abort().await.ok();
        let state = tempfile::tempdir().unwrap();
        let db = checkpointed_node_of_two(dir.path(), state.path(), delivery).await;
        db.execute(source).await.unwrap();
        db.start().await.unwrap();
        match (delivery, db.execute(bind).await) {
            ("at_least_once", made) => drop(made.unwrap()),
            (_, made) => refused(made.expect_err("refused when made later")),
        }
        db.abort().await.unwrap();
    }
}

/// Keyed state moves only into a checkpointed node of a shuffled split:
/// anything else is refused by name, before a row is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_state_is_refused_without_a_split_a_shuffle_or_checkpoints() {
    use sluice::split::MovedState;
    let none = || MovedState::new(Vec::new()).unwrap();
    let err = Database::builder()
        .split_moved_state(none())
        .err()
        .expect("refused without a split")
        .to_string();
    assert!(
        err.contains("not a node of a split; call split first"),
        "{err}"
    );
    let dir = tempfile::tempdir().unwrap();
    write_input(dir.path(), &mut Rng(3), 2);
    let state = tempfile::tempdir().unwrap();
    let row_by_row = "CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP)
           WITH (connector = 'file', path = 'in/*.csv', format = 'csv');
         CREATE STREAM picked AS SELECT id FROM s WHERE v > 0";
    // No shuffle: no keyed operator runs split, so nothing could move.
    let db = Database::builder()
        .base_dir(dir.path())
        .state_dir(state.path())
        .set("delivery", "exactly_once")
        .unwrap()
        .split("n0", VnodePlacement::all(8).unwrap())
        .unwrap()
        .split_moved_state(none())
        .unwrap();
    refused_at_start(
        db,
        row_by_row,
        "split_moved_state: keyed state moves between the nodes of a shuffled split only",
    )
    .await;
    // A shuffle but no checkpoints: the state taken would be lost.
    let (servers, table) = servers(1, &[0; 8]).await;
    let endpoints = HashMap::from([("n0".to_string(), servers[0].endpoint())]);
    let setup =
        ShuffleSetup::new("n0", PIPELINE, 1, table, endpoints, Arc::clone(&servers[0])).unwrap();
    let db = Database::builder()
        .base_dir(dir.path())
        .split("n0", VnodePlacement::all(8).unwrap())
        .unwrap()
        .shuffle(setup)
        .unwrap()
        .split_moved_state(none())
        .unwrap();
    refused_at_start(
        db,
        row_by_row,
        "split_moved_state: a node that takes keyed state over needs checkpoints",
    )
    .await;
}

/// `builder` opened and given `script` is refused at `start`, saying
/// `says`.
async fn refused_at_start(builder: sluice::DatabaseBuilder, script: &str, says: &str) {
    let db = builder.open().await.unwrap();
    db.execute(script).await.unwrap();
    let err = db.start().await.expect_err("refused").to_string();
    assert!(err.contains(says), "{err}");
    db.abort().await.ok();
}
