//! Keyed aggregations and a join across two or three nodes whose rows
//! cross by vnode over a real shuffle, checkpointed as one cut through a
//! real etcd (n1 leads with the leader's record sharing vnodes, the others
//! follow): each checkpoint holds every node's rows before its barriers on
//! every node, and when a node (the leader too) is killed mid-run the
//! others halt (none recovers alone), every node comes back from the last
//! checkpoint committed for all, and what they write together is exactly
//! one node's output.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use sluice::split::{CreditBudget, OwnerTable, ShuffleServer, ShuffleSetup, VnodePlacement};
use sluice::{CommitAuthority, Database};

#[path = "../support/mod.rs"]
mod support;

mod budget;
mod kills;
use sluice_cluster::testing::EtcdServer;
use sluice_cluster::ClusterNode;
use support::owners::{follower_of, fresh_leader, ids, nodes as cluster_of, LIMIT};
use support::sinks::{assert_activation_logs, assert_activations, final_state, lines};

const SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM per_window AS
      SELECT k, tumble(ts, INTERVAL '1' SECOND) AS w, count(*) AS n, sum(v) AS total
      FROM s GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
    CREATE STREAM totals AS SELECT k, count(*) AS n, sum(v) AS total FROM s GROUP BY k;
    CREATE STREAM pairs AS SELECT a.id AS a, b.id AS b FROM s a JOIN s b ON a.k = b.k
      WHERE a.v > 480 AND b.v < -480;
    CREATE SINK w FROM per_window WITH (connector = 'file', path = 'out/per_window.csv', format = 'csv');
    CREATE SINK t FROM totals WITH (connector = 'file', path = 'out/totals.csv', format = 'csv');
    CREATE SINK p FROM pairs WITH (connector = 'file', path = 'out/pairs.csv', format = 'csv');
";

/// A xorshift generator from `seed` (not 0): each call gives a number
/// below its argument.
fn numbers(seed: u64) -> impl FnMut(u64) -> u64 {
    let mut x = seed;
    move |n| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    }
}

/// Files whose times rise with the file (a 4 s span each, 3 s apart, read
/// in path order): no row is late on either node or on one node.
fn write_input(dir: &Path, files: usize) {
    let mut next = numbers(0x5eed_c1a5);
    let mut id = 0;
    for f in 0..files {
        let path = dir.join(format!("in/part-{f:02}.csv"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = String::from("id,k,v,ts\n");
        for _ in 0..200 {
            id += 1;
            let ts = f as u64 * 3_000 + next(4_000);
            text.push_str(&format!(
                "{id},{},{},1970-01-01T00:{:02}:{:02}.{:03}\n",
                next(7),
                next(1000) as i64 - 500,
                ts / 60_000,
                ts / 1000 % 60,
                ts % 1000
            ));
        }
        std::fs::write(path, text).unwrap();
    }
}

/// Two process functions on the shuffled keys, at least once (the only
/// delivery process functions have): a running count per key, and a
/// handler that logs its own activations (id, key, callback, count,
/// watermark), timers included.
const PROCESS_SCRIPT: &str = "
    CREATE SOURCE s (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
                     WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
      WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = 'BATCH');
    CREATE STREAM keyed_in AS SELECT k AS key, v AS amount FROM s;
    CREATE STREAM counts AS PROCESS running_count VERSION 1 FROM keyed_in;
    CREATE STREAM log AS PROCESS activation_log VERSION 1 FROM keyed_in;
    CREATE SINK c FROM counts WITH (connector = 'file', path = 'out/counts.csv', format = 'csv');
    CREATE SINK l FROM log WITH (connector = 'file', path = 'out/log.csv', format = 'csv');
";

/// Every activation the split's `activation_log` handlers returned, as
/// `id,key,callback,count,watermark`, across kills (the nodes run in this
/// process): what a handler's side effects would show, which a kill does
/// not take back (the sink files do: a restarted node rewrites them from
/// its checkpoint).
type Seen = Arc<std::sync::Mutex<Vec<String>>>;

/// The built-in activation log, recording what it returns in `seen`.
struct Recording {
    inner: sluice::process::benchmark::ActivationLog,
    seen: Seen,
}

impl sluice::process::NativeProcessFunction for Recording {
    fn process(
        &mut self,
        activations: &[sluice::process::ProcessActivation],
    ) -> Result<Vec<sluice::process::ProcessActivationResult>, String> {
        use sluice::arrow::array::AsArray;
        use sluice::arrow::datatypes::Int64Type;
        let results = self.inner.process(activations)?;
        let mut seen = self.seen.lock().unwrap();
        for b in results.iter().filter_map(|r| r.output.as_ref()) {
            let int = |i: usize| b.column(i).as_primitive::<Int64Type>().value(0);
            let callback = b.column(2).as_string::<i32>().value(0);
            seen.push(format!(
                "{},{},{callback},{},{}",
                int(0),
                int(1),
                int(3),
                int(4)
            ));
        }
        Ok(results)
    }
}

/// How the split runs: the source's batch size, each channel's credit,
/// and whether it runs the process functions (else the keyed queries).
#[derive(Debug, Clone, Copy)]
struct Knobs {
    batch: u64,
    budget: CreditBudget,
    process: bool,
    /// `process_held_input_bytes`, with a 1 KiB source queue (unset: the
    /// defaults).
    held: Option<Held>,
}

/// A budget for the input process functions hold for commits, and where
/// the input is.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// Spread over every node (`write_input`).
    Spread(u64),
    /// Only on n2, the follower, with keys n2 owns (`write_follower_input`).
    OnFollowerOnly(u64),
    /// Only on n2, with keys n1 owns: n2 sends every row to n1.
    SkewedToLeader(u64),
}

/// 3,200 rows in files whose vnodes n2 owns (its share), with keys of
/// vnodes node `keys_on` owns (0: n1, 1: n2), all at one time: n1, the
/// leader, reads nothing, and n2's watermark moves once.
fn write_follower_input(dir: &Path, owners: &[u32], keys_on: u32) {
    use sluice::arrow::array::{ArrayRef, Int64Array};
    let count = owners.len() as u32;
    let on_n2 = |vnode: u32| owners[vnode as usize] == 1;
    let keyed_on = |vnode: u32| owners[vnode as usize] == keys_on;
    let files = (0..).map(|f| format!("part-{f:03}.csv"));
    let files: Vec<String> = files
        .filter(|f| on_n2(sluice::split::file_vnode(f, count)))
        .take(16)
        .collect();
    let key_vnode = |k: i64| {
        let column: ArrayRef = Arc::new(Int64Array::from(vec![k]));
        let key = sluice::process::encode_key(&[column], 0).unwrap();
        VnodePlacement::new(count, Vec::new())
            .unwrap()
            .vnode_of(&key)
    };
    let keys: Vec<i64> = (0..).filter(|k| keyed_on(key_vnode(*k))).take(5).collect();
    let mut next = numbers(0x5eed_f011);
    let mut id = 0;
    for name in files {
        let path = dir.join("in").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = String::from("id,k,v,ts\n");
        for _ in 0..200 {
            id += 1;
            let k = keys[next(keys.len() as u64) as usize];
            let v = next(1000) as i64 - 500;
            text.push_str(&format!("{id},{k},{v},1970-01-01T00:00:01.000\n"));
        }
        std::fs::write(path, text).unwrap();
    }
}

impl Knobs {
    fn script(&self) -> String {
        let script = if self.process { PROCESS_SCRIPT } else { SCRIPT };
        script.replace("BATCH", &self.batch.to_string())
    }

    fn delivery(&self) -> &'static str {
        if self.process {
            "at_least_once"
        } else {
            "exactly_once"
        }
    }

    /// `db` with the process functions the script binds registered (the
    /// activation log recording into `seen`, if given).
    async fn register(&self, db: Database, seen: Option<&Seen>) -> Database {
        use sluice::process::benchmark::{
            activation_log_descriptor, running_count_descriptor, ActivationLog, RunningCount,
        };
        if self.process {
            db.register_process_function(running_count_descriptor("running_count"), || {
                RunningCount
            })
            .await
            .unwrap();
            let log = || ActivationLog { window_ms: 1_000 };
            let descriptor = activation_log_descriptor("activation_log");
            match seen.cloned() {
                Some(seen) => db
                    .register_process_function(descriptor, move || Recording {
                        inner: log(),
                        seen: Arc::clone(&seen),
                    })
                    .await
                    .unwrap(),
                None => db.register_process_function(descriptor, log).await.unwrap(),
            }
        }
        db
    }
}

/// How long a node waits for the others to open their channels
/// (`ShuffleSetup::with_patience`): a peer killed before it opened one is
/// noticed only then.
const PATIENCE: Duration = Duration::from_secs(20);

/// One node of the split: its shuffle over `servers`, its checkpoints
/// in `state` under `authority`, started `pause` after its statements
/// (its exchanges exist then, and the other nodes' rows may arrive before
/// its `start` recovers and opens its sinks).
#[allow(clippy::too_many_arguments)]
async fn open_node(
    data: &Path,
    state: &Path,
    node: &str,
    table: &OwnerTable,
    servers: &HashMap<String, Arc<ShuffleServer>>,
    authority: Arc<dyn CommitAuthority>,
    pause: Duration,
    (knobs, seen): (Knobs, &Seen),
) -> Database {
    let endpoints = servers
        .iter()
        .map(|(n, s)| (n.clone(), s.endpoint()))
        .collect();
    let setup = ShuffleSetup::new(
        node,
        "owners",
        1,
        table.clone(),
        endpoints,
        Arc::clone(&servers[node]),
    )
    .unwrap()
    .with_patience(PATIENCE)
    .with_budget(knobs.budget);
    let placement = VnodePlacement::new(table.vnode_count(), setup.owned_vnodes()).unwrap();
    let mut builder = Database::builder();
    if let Some(Held::Spread(held) | Held::OnFollowerOnly(held) | Held::SkewedToLeader(held)) =
        knobs.held
    {
        builder = builder
            .set("process_held_input_bytes", &held.to_string())
            .unwrap()
            .set("source_queue_bytes", "1024")
            .unwrap()
            .set("max_batches_per_cycle", "4")
            .unwrap();
    }
    let db = builder
        .base_dir(data)
        .state_dir(state)
        .set("checkpoint_interval", "50ms")
        .unwrap()
        .set("checkpoint_timeout", "3s")
        .unwrap()
        .set("delivery", knobs.delivery())
        .unwrap()
        .commit_authority(authority)
        .split(node, placement)
        .unwrap()
        .shuffle(setup)
        .unwrap()
        .open()
        .await
        .unwrap();
    let db = knobs.register(db, Some(seen)).await;
    db.execute(&knobs.script()).await.unwrap();
    tokio::time::sleep(pause).await;
    db.start().await.unwrap();
    db
}

/// The nodes of the split on a real etcd (n1 leads, the others follow),
/// each with its shuffle server, and the single-node output to match.
struct Split {
    data: tempfile::TempDir,
    states: Vec<tempfile::TempDir>,
    table: OwnerTable,
    servers: HashMap<String, Arc<ShuffleServer>>,
    etcd: EtcdServer,
    nodes: Vec<ClusterNode>,
    knobs: Knobs,
    seen: Seen,
}

impl Split {
    async fn new(count: usize) -> Self {
        let budget = CreditBudget::default();
        let process = false;
        Self::with(
            count,
            Knobs {
                batch: 3,
                budget,
                process,
                held: None,
            },
        )
        .await
    }

    async fn with(count: usize, knobs: Knobs) -> Self {
        let (etcd, nodes, _) = cluster_of(count).await;
        let assignment = nodes[0].assignment().unwrap().unwrap();
        let members = assignment.members().to_vec();
        let owners: Vec<u32> = (0..assignment.vnode_count())
            .map(|v| {
                let owner = assignment.owner_of(v).unwrap();
                members.iter().position(|m| m == owner).unwrap() as u32
            })
            .collect();
        let data = tempfile::tempdir().unwrap();
        match knobs.held {
            Some(Held::OnFollowerOnly(_)) => write_follower_input(data.path(), &owners, 1),
            Some(Held::SkewedToLeader(_)) => write_follower_input(data.path(), &owners, 0),
            _ => write_input(data.path(), 16),
        }
        // One node, no checkpoints: the output to match.
        let single = Database::builder()
            .base_dir(data.path())
            .open()
            .await
            .unwrap();
        let single = knobs.register(single, None).await;
        single.execute(&knobs.script()).await.unwrap();
        tokio::time::timeout(LIMIT, single.run_to_completion())
            .await
            .expect("in time")
            .unwrap();
        single.shutdown().await.unwrap();
        let table = OwnerTable::new(members.clone(), owners).unwrap();
        let mut servers = HashMap::new();
        for m in &members {
            let addr = "127.0.0.1:0".parse().unwrap();
            let server = ShuffleServer::bind(addr, "owners", m, 1).await.unwrap();
            servers.insert(m.clone(), Arc::new(server));
        }
        Split {
            data,
            states: (0..count).map(|_| tempfile::tempdir().unwrap()).collect(),
            table,
            servers,
            etcd,
            nodes,
            knobs,
            seen: Seen::default(),
        }
    }

    /// Node `node` (0: n1, the leader), started at once (n1) or after a
    /// pause in which the others' rows reach it (a follower). Each start
    /// makes its commit record anew, as a restarted process does (the
    /// leader's aborts the attempts its earlier records left undecided).
    async fn open(&self, node: usize) -> Database {
        let (authority, pause): (Arc<dyn CommitAuthority>, _) = match node {
            0 => (
                fresh_leader(&self.etcd, &self.nodes[0]).await,
                Duration::ZERO,
            ),
            _ => (follower_of(&self.nodes[node]), Duration::from_millis(300)),
        };
        open_node(
            self.data.path(),
            self.states[node].path(),
            &format!("n{}", node + 1),
            &self.table,
            &self.servers,
            authority,
            pause,
            (self.knobs, &self.seen),
        )
        .await
    }

    /// Every node, the leader first.
    async fn open_all(&self) -> Vec<Database> {
        let mut dbs = Vec::new();
        for node in 0..self.nodes.len() {
            dbs.push(self.open(node).await);
        }
        dbs
    }

    /// Every node stopped: their outputs together are the single node's.
    fn check_outputs(&self) {
        if self.knobs.process {
            return self.check_process_outputs();
        }
        let out = self.data.path().join("out");
        let names: Vec<String> = (1..=self.nodes.len()).map(|i| format!("n{i}")).collect();
        for sink in ["per_window", "pairs"] {
            let nodes: Vec<Vec<String>> = names
                .iter()
                .map(|n| lines(&out.join(format!("{n}/{sink}.csv"))))
                .collect();
            same_rows(sink, &nodes, lines(&out.join(format!("{sink}.csv"))));
        }
        let nodes: Vec<Vec<String>> = names
            .iter()
            .map(|n| final_state(&out.join(format!("{n}/totals.csv"))))
            .collect();
        same_rows("totals", &nodes, final_state(&out.join("totals.csv")));
    }
}

impl Split {
    /// The process functions' outputs, delivered at least once: without
    /// repeats the running counts are the single node's, and the
    /// activation logs replayed identically (see
    /// [`assert_activation_logs`]), both in the sink files and in what the
    /// handlers returned before and after each kill.
    fn check_process_outputs(&self) {
        let out = self.data.path().join("out");
        let nodes: Vec<_> = (1..=self.nodes.len())
            .map(|i| out.join(format!("n{i}")))
            .collect();
        let unique = |rows: Vec<String>| rows.into_iter().collect::<BTreeSet<String>>();
        let expected = lines(&out.join("counts.csv"));
        assert!(!expected.is_empty(), "the single node counted nothing");
        assert_eq!(unique(expected.clone()).len(), expected.len());
        let counts = unique(
            nodes
                .iter()
                .flat_map(|n| lines(&n.join("counts.csv")))
                .collect(),
        );
        let expected = unique(expected);
        let missing: Vec<&String> = expected.difference(&counts).collect();
        let extra: Vec<&String> = counts.difference(&expected).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "running counts: missing {missing:?}, extra {extra:?}"
        );
        let logs: Vec<_> = nodes.iter().map(|n| n.join("log.csv")).collect();
        assert_activation_logs(&logs, &out.join("log.csv"));
        // What the handlers returned, including what a kill took back.
        let seen = self.seen.lock().unwrap().clone();
        assert_activations(seen.into_iter(), &out.join("log.csv"));
    }
}

/// The rows of `nodes` together are `expected` (sorted); a difference is
/// reported as the rows missing and, per node, the rows too many.
fn same_rows(sink: &str, nodes: &[Vec<String>], expected: Vec<String>) {
    let mut union: Vec<String> = nodes.concat();
    union.sort();
    if union == expected {
        return;
    }
    let mut left: BTreeMap<&String, i64> = BTreeMap::new();
    for row in &expected {
        *left.entry(row).or_default() += 1;
    }
    let mut extra = vec![Vec::new(); nodes.len()];
    for (i, rows) in nodes.iter().enumerate() {
        for row in rows {
            match left.get_mut(row) {
                Some(n) if *n > 0 => *n -= 1,
                _ => extra[i].push(row),
            }
        }
    }
    let missing: Vec<&String> = left
        .iter()
        .flat_map(|(row, n)| std::iter::repeat_n(*row, (*n).max(0) as usize))
        .collect();
    panic!(
        "sink '{sink}' differs from one node's: missing {missing:?}; too many per node {extra:?}"
    );
}

/// Run every node to its end, then stop them, the leader first: its
/// shutdown checkpoint is the followers' last one too.
async fn run_all(dbs: &[Database]) {
    // Each pipeline runs on its own: waiting for them in turn is enough.
    // Every node's end is reported, so a failure names its first cause.
    let runs = async {
        let mut ends = Vec::new();
        for db in dbs {
            ends.push(db.run_to_completion().await.map(|_| ()));
        }
        ends
    };
    let ends = tokio::time::timeout(LIMIT, runs)
        .await
        .expect("every node finishes");
    if ends.iter().any(Result::is_err) {
        let ends: Vec<String> = ends
            .iter()
            .enumerate()
            .map(|(i, e)| format!("n{}: {e:?}", i + 1))
            .collect();
        panic!("not every node finished: {}", ends.join("; "));
    }
    for db in dbs {
        db.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shuffled_owners_checkpoint_mid_run_as_one_cut() {
    let split = Split::new(2).await;
    let dbs = split.open_all().await;
    run_all(&dbs).await;
    let committed = ids(&dbs[0]).await;
    assert!(committed.len() >= 2, "checkpoints mid-run: {committed:?}");
    assert_eq!(
        committed,
        ids(&dbs[1]).await,
        "one checkpoint, one id on both nodes"
    );
    split.check_outputs();
}

/// Process functions whose input crosses between checkpointed owners run
/// it once its checkpoint committed: two nodes together emit one node's
/// activations, each once, and checkpoints are taken mid-run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_functions_across_checkpointed_shuffled_owners_equal_one_node() {
    let budget = CreditBudget::default();
    let split = Split::with(
        2,
        Knobs {
            batch: 3,
            budget,
            process: true,
            held: None,
        },
    )
    .await;
    let dbs = split.open_all().await;
    run_all(&dbs).await;
    let committed = ids(&dbs[0]).await;
    assert!(committed.len() >= 2, "checkpoints mid-run: {committed:?}");
    split.check_process_outputs();
}

/// A random seed (odd, for [`numbers`]), or the one `SLUICE_TEST_SEED`
/// replays.
/// `SLUICE_TEST_LOG` (a `tracing` filter, e.g. `sluice_engine=debug`)
/// prints the nodes' logs with the test's output, to diagnose a failure.
fn log_if_asked() {
    if let Ok(filter) = std::env::var("SLUICE_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
            .with_test_writer()
            .try_init();
    }
}

fn test_seed() -> u64 {
    log_if_asked();
    std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()))
        | 1
}
