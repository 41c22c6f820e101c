//! Input, script and helpers shared by the split tests.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod shuffle;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use sluice::split::VnodePlacement;
use sluice::Database;

pub const LIMIT: Duration = Duration::from_secs(60);

/// A small deterministic generator (the test needs no crate for it).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// One input row: (id, k, v, ts in ms).
pub type Row = (i64, i64, i64, i64);

/// Write `files` CSV files under `dir/in` (some in a subdirectory) with
/// rows whose times are disordered by less than the watermark's 5 s
/// delay, so no row is late on any node or on one node.
pub fn write_input(dir: &Path, rng: &mut Rng, files: usize) -> Vec<Row> {
    write_rows(dir, rng, files, 40)
}

/// [`write_input`] with fewer than `per_file` rows in each file.
pub fn write_rows(dir: &Path, rng: &mut Rng, files: usize, per_file: u64) -> Vec<Row> {
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

pub const SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in/**/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM picked AS SELECT id, k, v * 2 AS v2 FROM s WHERE v > -100 AND k <> 3;
    CREATE STREAM both_ AS SELECT id, k FROM picked WHERE k = 1 UNION ALL SELECT id, k FROM s WHERE v < -400;
    CREATE SINK out FROM picked WITH (connector = 'file', path = 'out/picked.csv', format = 'csv');
    CREATE SINK out_both FROM both_ WITH (connector = 'file', path = 'out/both.csv', format = 'csv');
";

pub async fn run_node(dir: &Path, split: Option<(&str, VnodePlacement)>, batch: u64) {
    run_script(dir, split, &SCRIPT.replace("BATCH", &batch.to_string())).await;
}

/// Run `script` to its end in `dir`, as node `split` of a split if given.
pub async fn run_script(dir: &Path, split: Option<(&str, VnodePlacement)>, script: &str) {
    let mut b = Database::builder().base_dir(dir);
    if let Some((node, placement)) = split {
        b = b.split(node, placement).unwrap();
    }
    let db = b.open().await.unwrap();
    db.execute(script).await.unwrap();
    tokio::time::timeout(LIMIT, db.run_to_completion())
        .await
        .expect("in time")
        .unwrap();
    db.shutdown().await.unwrap();
}

/// The lines sink `out` (stream `picked`) writes for `rows`, sorted.
pub fn expected_picked(rows: &[Row]) -> Vec<String> {
    let mut e: Vec<String> = rows
        .iter()
        .filter(|r| r.2 > -100 && r.1 != 3)
        .map(|r| format!("{},{},{}", r.0, r.1, r.2 * 2))
        .collect();
    e.sort();
    e
}

/// The data lines of a sink file, sorted.
pub fn lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut l: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    l.sort();
    l
}

/// The final state of a changelog sink file: each row inserted and not
/// retracted, sorted (the change kind is the last column).
pub fn final_state(path: &Path) -> Vec<String> {
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
