//! The keyed split the shuffled-split tests run: a window and an updating
//! aggregation and a self-join over generated files, its single-node
//! reference output, and a fresh etcd.

use std::collections::BTreeMap;
use std::path::Path;

use sluice_cluster::testing::EtcdServer;

use super::shuffled::{shuffle_list, sink_rows, WATCHDOG};
use super::{rt, sluice, write_rising_parts, Lcg, Run};

pub const FILES: u64 = 12;
pub const ROWS_PER_FILE: u64 = 4_000;

pub const SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
      WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = '200');
    CREATE STREAM per_window AS
      SELECT k, tumble(ts, INTERVAL '1' SECOND) AS w, count(*) AS n, sum(v) AS total
      FROM s GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
    CREATE STREAM totals AS SELECT k, count(*) AS n, sum(v) AS total FROM s GROUP BY k;
    CREATE STREAM pairs AS SELECT a.id AS a, b.id AS b FROM s a JOIN s b ON a.k = b.k
      WHERE a.v > 995 AND b.v < 3;
    CREATE SINK w FROM per_window WITH (connector = 'file', path = 'out/per_window.csv', format = 'csv');
    CREATE SINK t FROM totals WITH (connector = 'file', path = 'out/totals.csv', format = 'csv');
    CREATE SINK p FROM pairs WITH (connector = 'file', path = 'out/pairs.csv', format = 'csv');";

/// `FILES` files of events about 10 ms apart, each a later stretch of
/// time, disordered by less than the watermark's delay: no row is late on
/// one node or on a split.
pub fn write_input(dir: &Path) {
    write_rising_parts(dir, FILES, ROWS_PER_FILE, 50, 29);
    std::fs::write(dir.join("pipeline.sql"), SCRIPT).unwrap();
}

/// What a run wrote, per sink: the window and pair rows, and the final
/// state of the updating totals. `nodes`: the per-node files of a split.
pub fn split_outputs(out: &Path, nodes: &[&str]) -> BTreeMap<&'static str, Vec<String>> {
    sink_rows(
        out,
        nodes,
        &[("per_window", false), ("pairs", false), ("totals", true)],
    )
}

/// The output of an uninterrupted single-node run.
pub fn reference(base: &Path) -> BTreeMap<&'static str, Vec<String>> {
    let dir = base.join("reference");
    write_input(&dir);
    let (status, stderr) = Run::spawn(sluice(&dir, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let refs = split_outputs(&dir.join("out"), &[]);
    assert!(
        refs["per_window"].len() > 1000,
        "{:?}",
        refs["per_window"].len()
    );
    assert!(!refs["pairs"].is_empty());
    assert_eq!(refs["totals"].len(), 50);
    refs
}

/// What most tests start from: the single-node reference output, a fresh
/// etcd, and the split's directory (`base/split`) with its input.
pub struct Fixture {
    pub _base: tempfile::TempDir,
    pub expected: BTreeMap<&'static str, Vec<String>>,
    pub etcd: EtcdServer,
    pub dir: std::path::PathBuf,
}

impl Fixture {
    /// The `--state` URL every node of the split keeps its checkpoints under.
    pub fn state(&self) -> String {
        format!("file://{}", self.dir.join("state").display())
    }
}

pub fn fixture() -> Fixture {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("split");
    write_input(&dir);
    Fixture {
        _base: base,
        expected,
        etcd,
        dir,
    }
}

/// Every list of one to three of the nodes, for tests that change a
/// split's list at random.
pub const LISTS: [&[&str]; 6] = [
    &["n1", "n2"],
    &["n1", "n3"],
    &["n2", "n3"],
    &["n1", "n2", "n3"],
    &["n2"],
    &["n1"],
];

/// A random list of [`LISTS`] other than `current`.
pub fn other_list(rng: &mut Lcg, current: &[&str]) -> &'static [&'static str] {
    loop {
        let l = LISTS[(rng.next() % LISTS.len() as u64) as usize];
        if l != current {
            return l;
        }
    }
}

/// The generator of a random test, seeded from `SLUICE_TEST_SEED` or
/// else the process id; the seed is printed so a failure can be replayed.
pub fn seeded_rng() -> Lcg {
    let seed = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()));
    eprintln!("seed {seed}");
    Lcg(seed)
}

/// A free loopback address for each node's shuffle ([`shuffle_list`]).
pub struct Addresses(BTreeMap<String, String>);

impl Addresses {
    pub fn new() -> Self {
        Self(
            shuffle_list()
                .split(',')
                .map(|e| (e.split_once('=').unwrap().0.to_string(), e.to_string()))
                .collect(),
        )
    }

    /// The `--shuffle` of the split `list`.
    pub fn of(&self, list: &[&str]) -> String {
        let each: Vec<&str> = list.iter().map(|n| self.0[*n].as_str()).collect();
        each.join(",")
    }
}

/// The nodes of a split whose list changes at random ([`LISTS`]), in the
/// fixture `f`'s directory under cluster `cluster`, each node started with
/// the `--shuffle` of the list it is given.
pub struct RandomLists<'a> {
    f: &'a Fixture,
    cluster: &'a str,
    state: String,
    addresses: Addresses,
    /// The test's generator ([`seeded_rng`]).
    pub rng: Lcg,
}

impl<'a> RandomLists<'a> {
    pub fn new(f: &'a Fixture, cluster: &'a str) -> Self {
        Self {
            f,
            cluster,
            state: f.state(),
            addresses: Addresses::new(),
            rng: seeded_rng(),
        }
    }

    /// The first list, at random.
    pub fn first(&mut self) -> &'static [&'static str] {
        LISTS[(self.rng.next() % LISTS.len() as u64) as usize]
    }

    /// A random list other than `current` ([`other_list`]).
    pub fn other(&mut self, current: &[&str]) -> &'static [&'static str] {
        other_list(&mut self.rng, current)
    }

    /// The `--shuffle` of `list`.
    pub fn shuffle_of(&self, list: &[&str]) -> String {
        self.addresses.of(list)
    }

    /// `node` started as a node of the split `list`.
    pub fn start(&self, node: &str, list: &[&str]) -> Run {
        super::shuffled::node_of_list(
            &self.f.dir,
            &self.f.etcd,
            (self.cluster, node),
            (&list.join(","), &self.addresses.of(list)),
            &self.state,
            &[],
            &[],
        )
    }
}
