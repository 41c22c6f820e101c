//! Nexmark across the nodes of a shuffled split: each node generates its
//! share of every stream's partitions (blocks of rows), every row crosses
//! to the node owning its key's vnode, and the nodes' outputs together
//! equal one node's, for windowed aggregations (q5's hot auctions, q7's
//! highest bid), an updating aggregation and a join of auctions and bids,
//! on random node counts, vnode placements, batch sizes and disorder.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod split_support;

use std::path::Path;

use sluice::split::CreditBudget;
use sluice::Database;
use split_support::shuffle::{open_node, run_reference, servers};
use split_support::{final_state, lines, Rng, LIMIT};

const SCRIPT: &str = "
    CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
                       WATERMARK FOR date_time AS date_time - INTERVAL 'DELAY' MILLISECOND)
      WITH (connector = 'nexmark', stream = 'bid', events = 'EVENTS', event_time_rate = '1000',
            out_of_order_ms = 'DELAY', seed = 'SEED', batch_size = 'BATCH');
    CREATE SOURCE auction (id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP,
                           WATERMARK FOR date_time AS date_time - INTERVAL 'DELAY' MILLISECOND)
      WITH (connector = 'nexmark', stream = 'auction', events = 'EVENTS', event_time_rate = '1000',
            out_of_order_ms = 'DELAY', seed = 'SEED', batch_size = 'BATCH');
    CREATE STREAM hot AS
      SELECT auction, tumble(date_time, INTERVAL '2' SECOND) AS w, count(*) AS n
      FROM bid GROUP BY auction, tumble(date_time, INTERVAL '2' SECOND);
    CREATE STREAM top AS
      SELECT tumble(date_time, INTERVAL '1' SECOND) AS w, max(price) AS p, count(*) AS n
      FROM bid GROUP BY tumble(date_time, INTERVAL '1' SECOND);
    CREATE STREAM per_category AS
      SELECT category, count(*) AS n FROM auction GROUP BY category;
    CREATE STREAM sold AS
      SELECT a.id, a.seller, b.bidder, b.price FROM auction a JOIN bid b ON a.id = b.auction
      WHERE b.price % 5 = 0;
    CREATE SINK h FROM hot WITH (connector = 'file', path = 'out/hot.csv', format = 'csv');
    CREATE SINK t FROM top WITH (connector = 'file', path = 'out/top.csv', format = 'csv');
    CREATE SINK c FROM per_category WITH (connector = 'file', path = 'out/per_category.csv', format = 'csv');
    CREATE SINK s FROM sold WITH (connector = 'file', path = 'out/sold.csv', format = 'csv');
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nexmark_windows_and_a_join_across_shuffled_nodes_equal_one_node() {
    let mut rng = Rng(0x6e78_6d6b);
    for round in 0..8 {
        let dir = tempfile::tempdir().unwrap();
        let events = 3_000 + rng.below(20_000);
        let delay = [0, 50, 400][rng.below(3) as usize];
        let batch = [7, 100, 1000, 8192][rng.below(4) as usize];
        let script = SCRIPT
            .replace("EVENTS", &events.to_string())
            .replace("DELAY", &delay.to_string())
            .replace("SEED", &rng.below(3).to_string());
        let count = [1u32, 7, 64, 256][rng.below(4) as usize];
        let nodes = 1 + rng.below(3) as usize;
        let owner: Vec<u32> = (0..count).map(|_| rng.below(nodes as u64) as u32).collect();
        let what = format!(
            "round {round}: {events} events, delay {delay} ms, batch {batch}, {nodes} nodes, {count} vnodes"
        );
        eprintln!("{what}");

        let single = Database::builder()
            .base_dir(dir.path())
            .open()
            .await
            .unwrap();
        run_reference(single, &script, batch).await;

        let (servers, table) = servers(nodes, &owner).await;
        let mut dbs = Vec::new();
        for n in 0..nodes {
            let budget = CreditBudget::default();
            let db = open_node(dir.path(), n, &servers, &table, batch, &script, budget);
            dbs.push(db.await.unwrap());
        }
        let runs = dbs.iter().map(|db| db.run_to_completion());
        let done = tokio::time::timeout(LIMIT, futures::future::join_all(runs))
            .await
            .unwrap_or_else(|_| panic!("{what}: the nodes did not finish in time"));
        let mut generated = 0;
        for (db, r) in dbs.iter().zip(done) {
            r.unwrap();
            generated += db.shutdown().await.unwrap().rows_in();
        }
        // Each row was generated once, by one node.
        let bids = events / 50 * 46 + (events % 50).saturating_sub(4).min(46);
        let auctions = events / 50 * 3 + (events % 50).saturating_sub(1).min(3);
        assert_eq!(generated, bids + auctions, "{what}");

        let out = dir.path().join("out");
        let union = |sink: &str, read: fn(&Path) -> Vec<String>| {
            let mut all = Vec::new();
            for n in 0..nodes {
                all.extend(read(&out.join(format!("n{n}/{sink}.csv"))));
            }
            all.sort();
            all
        };
        for sink in ["hot", "top", "sold"] {
            let mut expected = lines(&out.join(format!("{sink}.csv")));
            expected.sort();
            assert!(!expected.is_empty(), "{what}: {sink} is empty");
            assert_eq!(union(sink, lines), expected, "{what}: {sink}");
        }
        let expected = final_state(&out.join("per_category.csv"));
        assert_eq!(union("per_category", final_state), expected, "{what}");
    }
}
