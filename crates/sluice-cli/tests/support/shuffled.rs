//! Three `sluice run --cluster ... --split n1,n2,n3 --shuffle LIST`
//! processes on one etcd: starting them, killing them, supervising them
//! to their end, and comparing what they wrote with one node's output.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_cluster::testing::EtcdServer;

use super::{cluster_status, Lcg, Run};

/// Longest one node may take before the test fails instead of hanging.
pub const WATCHDOG: Duration = Duration::from_secs(240);
/// Each node's etcd lease.
pub const LEASE: &str = "1s";
/// The split's members; `n1` leads.
pub const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// Fail naming how many rows of each sink are missing or too many.
pub fn same_rows(got: &BTreeMap<&str, Vec<String>>, expected: &BTreeMap<&str, Vec<String>>) {
    if got == expected {
        return;
    }
    let mut report = Vec::new();
    for (sink, want) in expected {
        let mut count: BTreeMap<&str, i64> = BTreeMap::new();
        for r in got.get(sink).into_iter().flatten() {
            *count.entry(r).or_default() += 1;
        }
        for r in want {
            *count.entry(r).or_default() -= 1;
        }
        let missing: Vec<&&str> = count
            .iter()
            .filter(|(_, n)| **n < 0)
            .map(|(r, _)| r)
            .collect();
        let extra: Vec<&&str> = count
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, _)| r)
            .collect();
        report.push(format!(
            "{sink}: {} missing (first {:?}), {} too many (first {:?})",
            missing.len(),
            missing.first(),
            extra.len(),
            extra.first()
        ));
    }
    panic!("{}", report.join("; "));
}

/// A free loopback port for each node (bound, then released).
pub fn shuffle_list() -> String {
    let each: Vec<String> = NODES
        .iter()
        .map(|n| {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            format!("{n}={}", l.local_addr().unwrap())
        })
        .collect();
    each.join(",")
}

/// `sluice run --cluster ... --split n1,n2,n3 --shuffle LIST` as `node`
/// in `dir`, with every node's state under `dir/state`.
pub fn node(dir: &Path, etcd: &EtcdServer, cluster: &str, node: &str, shuffle: &str) -> Run {
    let state = format!("file://{}", dir.join("state").display());
    node_on(dir, etcd, (cluster, node), shuffle, &state, &[])
}

/// [`node`] with its state at `state`, and `env` set.
pub fn node_on(
    dir: &Path,
    etcd: &EtcdServer,
    (cluster, node): (&str, &str),
    shuffle: &str,
    state: &str,
    env: &[(&'static str, String)],
) -> Run {
    let list = NODES.join(",");
    node_of_list(
        dir,
        etcd,
        (cluster, node),
        (&list, shuffle),
        state,
        env,
        &[],
    )
}

/// [`node_on`] of the split `list` (`--split`), whose `--shuffle` is
/// `shuffle`, with `args` added before the script.
pub fn node_of_list(
    dir: &Path,
    etcd: &EtcdServer,
    (cluster, node): (&str, &str),
    (list, shuffle): (&str, &str),
    state: &str,
    env: &[(&'static str, String)],
    args: &[&str],
) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.current_dir(dir)
        .env(
            "RUST_LOG",
            std::env::var("SLUICE_NODE_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .arg("run")
        .args(["--cluster", &format!("etcd={}", etcd.endpoint())])
        .args(["--cluster-id", cluster, "--node-id", node])
        .args(["--split", list, "--shuffle", shuffle])
        .args(["--lease-ttl", LEASE, "--state", state])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["--set", "checkpoint_interval=50ms"])
        .args(args)
        .arg("pipeline.sql")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Run::spawn(c)
}

pub fn start_all(dir: &Path, etcd: &EtcdServer, cluster: &str, shuffle: &str) -> Vec<Run> {
    NODES
        .iter()
        .map(|n| node(dir, etcd, cluster, n, shuffle))
        .collect()
}

/// What a process supervisor (systemd's `Restart=on-failure`) does: a
/// node that exits with a failure is started again by `start`, until every
/// node exited with success. Returns each node's last stderr and the
/// number of restarts. A node that halts because another went away
/// rejoins in its process; one that cannot (a node whose peer never came
/// back within the channel patience, one that lost its lease) is this
/// supervisor's to restart.
pub fn supervise(nodes: Vec<Run>, start: impl Fn(usize) -> Run) -> (Vec<String>, u32) {
    let mut slots: Vec<Option<Run>> = nodes.into_iter().map(Some).collect();
    let mut ends = vec![String::new(); slots.len()];
    let mut restarts = 0;
    let deadline = Instant::now() + WATCHDOG;
    while slots.iter().any(Option::is_some) {
        assert!(Instant::now() < deadline, "the nodes never all finished");
        for (i, slot) in slots.iter_mut().enumerate() {
            if slot.as_mut().is_none_or(|r| r.running()) {
                continue;
            }
            let (status, stderr) = slot.take().unwrap().wait(WATCHDOG);
            if status.success() {
                ends[i] = stderr;
                continue;
            }
            restarts += 1;
            assert!(restarts <= 20, "restarted too often; n{}: {stderr}", i + 1);
            let last = stderr.lines().last().unwrap_or_default().to_string();
            eprintln!("n{} exited ({status}), started again: {last}", i + 1);
            *slot = Some(start(i));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    (ends, restarts)
}

/// The newest checkpoint the leader committed for every node (etcd's
/// committed pointer; 0 before the first).
pub fn committed(etcd: &EtcdServer, cluster: &str) -> u64 {
    cluster_status(etcd, cluster).committed
}

/// Until the leader committed a checkpoint newer than `after` (or a node
/// of `nodes` ended).
pub fn until_committed(etcd: &EtcdServer, cluster: &str, nodes: &mut [Run], after: u64) {
    let until = Instant::now() + WATCHDOG;
    while committed(etcd, cluster) <= after && nodes.iter_mut().all(Run::running) {
        assert!(
            Instant::now() < until,
            "no checkpoint committed after {after}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every node's process ends with success; a failure shows every
/// node's stderr. Returns the stderr of each.
pub fn wait_all(nodes: Vec<Run>) -> Vec<String> {
    wait_all_of(nodes, &NODES)
}

/// [`wait_all`] for the nodes `names`.
pub fn wait_all_of(nodes: Vec<Run>, names: &[&str]) -> Vec<String> {
    let ends: Vec<_> = nodes.into_iter().map(|run| run.wait(WATCHDOG)).collect();
    if ends.iter().any(|(status, _)| !status.success()) {
        let each: Vec<String> = names
            .iter()
            .zip(&ends)
            .map(|(name, (status, stderr))| format!("node {name} ({status}):\n{stderr}"))
            .collect();
        panic!("not every node succeeded\n{}", each.join("\n"));
    }
    ends.into_iter().map(|(_, stderr)| stderr).collect()
}

/// Start the three nodes of cluster `cluster` in `dir` (its
/// `pipeline.sql`), SIGKILL a random node (the leader too) at a random
/// time after a checkpoint, twice over, starting only that node again,
/// then supervise them to their end; asserts that every kill of a running
/// node was recovered from (another node rejoined, or the killed follower
/// published its share of the final checkpoint alone). Each node runs
/// with `args` added (`--set delivery=at_least_once`, say).
/// `SLUICE_TEST_SEED` replays a printed seed.
pub fn kill_twice_and_supervise(dir: &Path, etcd: &EtcdServer, cluster: &str, args: &[&str]) {
    let shuffle = shuffle_list();
    let state = format!("file://{}", dir.join("state").display());
    let list = NODES.join(",");
    let node = |dir: &Path, etcd: &EtcdServer, cluster: &str, name: &str, shuffle: &str| {
        node_of_list(
            dir,
            etcd,
            (cluster, name),
            (&list, shuffle),
            &state,
            &[],
            args,
        )
    };
    let seed = std::env::var("SLUICE_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()));
    let mut rng = Lcg(seed);
    eprintln!("seed {seed}");
    let mut nodes: Vec<Run> = NODES
        .iter()
        .map(|n| node(dir, etcd, cluster, n, &shuffle))
        .collect();
    let mut killed = 0;
    for round in 0..2 {
        let before = committed(etcd, cluster);
        until_committed(etcd, cluster, &mut nodes, before);
        std::thread::sleep(Duration::from_millis(rng.next() % 300));
        let victim = (rng.next() % 3) as usize;
        if !nodes[victim].running() {
            eprintln!("round {round}: n{} had already ended", victim + 1);
            continue;
        }
        eprintln!("round {round}: n{} killed", victim + 1);
        nodes[victim].signal(libc::SIGKILL);
        killed += 1;
        let replaced = node(dir, etcd, cluster, NODES[victim], &shuffle);
        let _ = std::mem::replace(&mut nodes[victim], replaced).wait(WATCHDOG);
    }
    let (ends, _) = supervise(nodes, |i| node(dir, etcd, cluster, NODES[i], &shuffle));
    let recovered: usize = ends
        .iter()
        .map(|stderr| {
            stderr.matches("rejoining to resume").count()
                + stderr
                    .matches("the split's run ended while this node was away")
                    .count()
        })
        .sum();
    // Every kill of a running node made at least one other node rejoin,
    // or (a follower killed after the final checkpoint) the killed node
    // publish its share alone.
    assert!(
        recovered >= killed,
        "{recovered} recoveries for {killed} kills"
    );
}

/// What a run wrote to each of `sinks` (name, and whether it is an
/// updating aggregate's changelog, read as its final state), sorted.
/// `nodes`: the per-node files of a split (`out/NODE/SINK.csv`); none:
/// one node's `out/SINK.csv`.
pub fn sink_rows(
    out: &Path,
    nodes: &[&str],
    sinks: &[(&'static str, bool)],
) -> BTreeMap<&'static str, Vec<String>> {
    let mut all = BTreeMap::new();
    for (sink, updating) in sinks {
        let name = format!("{sink}.csv");
        let files: Vec<_> = if nodes.is_empty() {
            vec![out.join(&name)]
        } else {
            nodes.iter().map(|n| out.join(n).join(&name)).collect()
        };
        let mut rows: Vec<String> = if *updating {
            super::sinks::final_state_of(&files)
        } else {
            files.iter().flat_map(|p| super::sinks::lines(p)).collect()
        };
        rows.sort();
        all.insert(*sink, rows);
    }
    all
}

/// Each of `names` (whose stderr `ends` holds, in order) said it started
/// again with the new list of a rescale.
pub fn assert_restarted(names: &[&str], ends: &[String]) {
    for (node, stderr) in names.iter().zip(ends) {
        assert!(
            stderr.contains("starting again with the new list"),
            "{node}: {stderr}"
        );
    }
}

/// `node` (its stderr `stderr`) ran as a node dropped from the shuffled
/// split: it published what its last checkpoint committed and ended.
pub fn assert_dropped(node: &str, stderr: &str) {
    assert!(
        stderr.contains("this node was dropped from the shuffled split"),
        "{node}: {stderr}"
    );
}
