//! Keyed aggregations across the nodes of a split: every row crosses to
//! the node owning its key's vnode over a real gRPC shuffle on loopback,
//! and the nodes' outputs together equal a single node's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod split_support;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use sluice::split::{OwnerTable, ShuffleServer, ShuffleSetup, VnodePlacement};
use sluice::Database;
use split_support::{lines, Rng, LIMIT};

const PIPELINE: &str = "shuffled";

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
    CREATE SINK a FROM per_window WITH (connector = 'file', path = 'out/per_window.csv', format = 'csv');
    CREATE SINK b FROM per_2s WITH (connector = 'file', path = 'out/per_2s.csv', format = 'csv');
    CREATE SINK c FROM totals WITH (connector = 'file', path = 'out/totals.csv', format = 'csv');
    CREATE SINK d FROM busy WITH (connector = 'file', path = 'out/busy.csv', format = 'csv');
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
        for _ in 0..rng.below(60) {
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
    }
}

/// The final state of a changelog sink file: each row inserted and not
/// retracted, sorted (the change kind is the last column).
fn final_state(path: &Path) -> Vec<String> {
    let mut state: BTreeMap<String, i64> = BTreeMap::new();
    for line in lines(path) {
        let (row, change) = line.rsplit_once(',').unwrap();
        *state.entry(row.to_string()).or_default() += match change {
            "insert" => 1,
            "retract" => -1,
            other => panic!("change kind {other} in {}", path.display()),
        };
    }
    state
        .into_iter()
        .flat_map(|(row, n)| {
            assert!(n >= 0, "{row} retracted more often than inserted");
            std::iter::repeat_n(row, n as usize)
        })
        .collect()
}

async fn run_single(dir: &Path, batch: u64) {
    let db = Database::builder().base_dir(dir).open().await.unwrap();
    db.execute(&SCRIPT.replace("BATCH", &batch.to_string()))
        .await
        .unwrap();
    tokio::time::timeout(LIMIT, db.run_to_completion())
        .await
        .expect("in time")
        .unwrap();
    db.shutdown().await.unwrap();
}

/// Servers for `nodes` nodes on loopback, and the owner table.
async fn servers(nodes: usize, owner: &[u32]) -> (Vec<Arc<ShuffleServer>>, OwnerTable) {
    let names: Vec<String> = (0..nodes).map(|n| format!("n{n}")).collect();
    let mut servers = Vec::new();
    for name in &names {
        let addr = "127.0.0.1:0".parse().unwrap();
        servers.push(Arc::new(
            ShuffleServer::bind(addr, PIPELINE, name, 1).await.unwrap(),
        ));
    }
    (servers, OwnerTable::new(names, owner.to_vec()).unwrap())
}

/// Open node `n` of the split with its shuffle and the script.
async fn open_node(
    dir: &Path,
    n: usize,
    servers: &[Arc<ShuffleServer>],
    table: &OwnerTable,
    batch: u64,
    script: &str,
) -> sluice::Result<Database> {
    let name = format!("n{n}");
    let endpoints: HashMap<String, String> = servers
        .iter()
        .enumerate()
        .map(|(i, s)| (format!("n{i}"), s.endpoint()))
        .collect();
    let setup = ShuffleSetup::new(
        &name,
        PIPELINE,
        1,
        table.clone(),
        endpoints,
        Arc::clone(&servers[n]),
    )?;
    let placement = VnodePlacement::new(table.vnode_count(), setup.owned_vnodes()).unwrap();
    let db = Database::builder()
        .base_dir(dir)
        .split(&name, placement)?
        .shuffle(setup)?
        .open()
        .await?;
    db.execute(&script.replace("BATCH", &batch.to_string()))
        .await?;
    Ok(db)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_aggregations_across_shuffled_nodes_equal_one_node() {
    let mut rng = Rng(0x5eed_5f1e);
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let files = 1 + rng.below(10) as usize;
        write_input(dir.path(), &mut rng, files);
        let batch = 1 + rng.below(16);
        let count = [1u32, 7, 64, 256][rng.below(4) as usize];
        let nodes = 1 + rng.below(3) as usize;
        let owner: Vec<u32> = (0..count).map(|_| rng.below(nodes as u64) as u32).collect();
        run_single(dir.path(), batch).await;
        let (servers, table) = servers(nodes, &owner).await;
        let mut dbs = Vec::new();
        for n in 0..nodes {
            dbs.push(
                open_node(dir.path(), n, &servers, &table, batch, SCRIPT)
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
        for db in &dbs {
            db.shutdown().await.unwrap();
        }
        let out = dir.path().join("out");
        for sink in ["per_window", "per_2s", "busy"] {
            let single = lines(&out.join(format!("{sink}.csv")));
            let mut union = Vec::new();
            for n in 0..nodes {
                union.extend(lines(&out.join(format!("n{n}/{sink}.csv"))));
            }
            union.sort();
            assert_eq!(
                union, single,
                "round {round}: {sink} over {nodes} nodes, {count} vnodes, batch {batch}"
            );
            if sink == "per_window" {
                assert!(
                    !single.is_empty() || files == 0,
                    "round {round}: no windows"
                );
            }
        }
        let single = final_state(&out.join("totals.csv"));
        let mut union = Vec::new();
        for n in 0..nodes {
            union.extend(final_state(&out.join(format!("n{n}/totals.csv"))));
        }
        union.sort();
        assert_eq!(union, single, "round {round}: totals over {nodes} nodes");
    }
}
