//! `sluice run --cluster ... --split n1,n2,n3`: real `sluice` processes on
//! one real etcd, every node running at once over the files of its vnodes
//! and writing sink files of its own. Together the nodes' files hold
//! exactly the rows of an uninterrupted single-node run, also when nodes
//! are SIGKILLed at random times and started again; a node with a script
//! that cannot run split, or with another member list, is refused by name.
//!
//! `SLUICE_CLUSTER_KILLS` raises the number of kills.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_cluster::testing::EtcdServer;
use sluice_cluster::vnodes::{self, VnodeCount};
use support::moto::Moto;
use support::*;

/// Files of the glob, and rows in each.
const FILES: u64 = 12;
const ROWS_PER_FILE: u64 = 50_000;
/// Longest one node may take before the test fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(240);
const LEASE: &str = "1s";
const NODES: [&str; 3] = ["n1", "n2", "n3"];

const SCRIPT: &str = "
    CREATE SOURCE events (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP,
        WATERMARK FOR ts AS ts - INTERVAL '2' SECOND)
      WITH (connector = 'file', path = 'in/*.csv', format = 'csv', batch_size = '500');
    CREATE STREAM sel AS SELECT id, k, v * 3 AS v3 FROM events WHERE v % 7 = 0 OR k = 5;
    CREATE STREAM hi AS SELECT id, v, ts FROM events WHERE v > 990;
    CREATE SINK sel_out FROM sel WITH (connector = 'file', path = 'out/sel.csv');
    CREATE SINK hi_out FROM hi WITH (connector = 'file', path = 'out/hi.json');";

/// `FILES` files `in/part-NN.csv` of events about 10 ms apart, each file
/// a later stretch of time, disordered by less than the watermark's
/// delay: no row is late on one node or on a split.
fn write_input(dir: &Path, script: &str) {
    write_input_of(dir, script, FILES);
}

/// [`write_input`] with `files` files.
fn write_input_of(dir: &Path, script: &str, files: u64) {
    write_rising_parts(dir, files, ROWS_PER_FILE, 100, 17);
    std::fs::write(dir.join("pipeline.sql"), script).unwrap();
}

/// The rows of an uninterrupted single-node run: per sink, its header and
/// its data lines, sorted.
fn reference(base: &Path) -> BTreeMap<&'static str, (String, Vec<String>)> {
    reference_of(base, FILES)
}

/// [`reference`] over `files` files.
fn reference_of(base: &Path, files: u64) -> BTreeMap<&'static str, (String, Vec<String>)> {
    let dir = base.join("reference");
    write_input_of(&dir, SCRIPT, files);
    let (status, stderr) = Run::spawn(sluice(&dir, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let out = dir.join("out");
    let refs = BTreeMap::from([
        ("sel", split_lines(&read(&out.join("sel.csv")), true)),
        ("hi", split_lines(&read(&out.join("hi.json")), false)),
    ]);
    assert!(refs.values().all(|(_, rows)| rows.len() > 1000));
    refs
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A sink file's header (CSV) and its data lines, sorted.
fn split_lines(text: &str, header: bool) -> (String, Vec<String>) {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let head = if header && !lines.is_empty() {
        lines.remove(0)
    } else {
        String::new()
    };
    lines.sort();
    (head, lines)
}

/// The union of every node's sink files, as [`reference`] shows a sink.
fn union(dir: &Path) -> BTreeMap<&'static str, (String, Vec<String>)> {
    let mut all = BTreeMap::new();
    for (sink, file, header) in [("sel", "sel", true), ("hi", "hi", false)] {
        let mut head = String::new();
        let mut rows = Vec::new();
        for node in NODES {
            let ext = if header { "csv" } else { "json" };
            // A node that committed no rows wrote no file.
            let path = dir.join(format!("out/{node}/{file}.{ext}"));
            if !path.exists() {
                continue;
            }
            let (h, r) = split_lines(&read(&path), header);
            head = h;
            rows.extend(r);
        }
        rows.sort();
        all.insert(sink, (head, rows));
    }
    all
}

/// Fail, saying how many rows of each sink are missing or written more
/// than once, unless `got` holds exactly the rows of `expected`.
fn same_rows(
    got: &BTreeMap<&'static str, (String, Vec<String>)>,
    expected: &BTreeMap<&'static str, (String, Vec<String>)>,
) {
    if got == expected {
        return;
    }
    let mut report = Vec::new();
    for (sink, (_, want)) in expected {
        let rows = got.get(sink).map(|(_, r)| r.clone()).unwrap_or_default();
        let mut count: BTreeMap<&str, i64> = BTreeMap::new();
        for r in &rows {
            *count.entry(r.as_str()).or_default() += 1;
        }
        for r in want {
            *count.entry(r.as_str()).or_default() -= 1;
        }
        let missing: Vec<&str> = count
            .iter()
            .filter(|(_, n)| **n < 0)
            .map(|(r, _)| *r)
            .collect();
        let extra: Vec<&str> = count
            .iter()
            .filter(|(_, n)| **n > 0)
            .map(|(r, _)| *r)
            .collect();
        report.push(format!(
            "{sink}: {} rows, {} expected, {} missing (first {:?}), {} extra (first {:?})",
            rows.len(),
            want.len(),
            missing.len(),
            missing.first(),
            extra.len(),
            extra.first()
        ));
    }
    panic!("{}", report.join("; "));
}

/// `sluice run --cluster ... --split LIST` as `node` in `dir`, with its
/// state under `dir/state`.
fn node(dir: &Path, etcd: &EtcdServer, cluster: &str, node: &str, list: &str) -> Run {
    let state = format!("file://{}", dir.join("state").display());
    node_on(dir, etcd, cluster, node, list, &state, &[])
}

/// [`node`] with its state at `state`, and `env` set.
fn node_on(
    dir: &Path,
    etcd: &EtcdServer,
    cluster: &str,
    node: &str,
    list: &str,
    state: &str,
    env: &[(&'static str, String)],
) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.current_dir(dir)
        .env_remove("RUST_LOG")
        .arg("run")
        .args(["--cluster", &format!("etcd={}", etcd.endpoint())])
        .args(["--cluster-id", cluster, "--node-id", node, "--split", list])
        .args(["--lease-ttl", LEASE])
        .args(["--state", state])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .args(["--set", "checkpoint_interval=50ms"])
        .arg("pipeline.sql")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    Run::spawn(c)
}

/// Whether node `n` committed a checkpoint in its own store.
fn has_checkpoint(dir: &Path, n: &str) -> bool {
    let store = dir.join(format!("state/nodes/{n}/checkpoints"));
    std::fs::read_dir(store)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .any(|e| e.path().join("MANIFEST").exists())
        })
        .unwrap_or(false)
}

fn wait_all(nodes: BTreeMap<&'static str, Run>) {
    for (name, run) in nodes {
        let (status, stderr) = run.wait(WATCHDOG);
        assert!(status.success(), "node {name}: {stderr}");
    }
}

#[test]
fn three_split_nodes_together_write_exactly_the_single_node_rows() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("split");
    write_input(&dir, SCRIPT);
    let list = NODES.join(",");
    let mut nodes: BTreeMap<_, _> = NODES
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "split", n, &list)))
        .collect();
    // While they run, `SHOW CLUSTER`'s table is the fixed split: each live
    // node owns its rendezvous share of the listed members, not of the
    // live ones.
    let members: Vec<String> = NODES.iter().map(|n| n.to_string()).collect();
    let owners = vnodes::place(VnodeCount::default(), &members);
    let share = |n: &str| {
        let i = members.iter().position(|m| m == n).unwrap() as u32;
        owners.iter().filter(|o| **o == i).count() as u32
    };
    let until = Instant::now() + WATCHDOG;
    let shown = loop {
        let s = cluster_status(&etcd, "split");
        if s.generation > 0 && !s.members.is_empty() {
            break s;
        }
        assert!(Instant::now() < until, "no assignment table: {s:?}");
        assert!(
            nodes.values_mut().all(|r| r.running()),
            "a node exited before the table was seen"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    for m in &shown.members {
        assert_eq!(m.vnodes, share(&m.node), "{shown:?}");
    }
    wait_all(nodes);
    assert_eq!(union(&dir), expected);
    // Each member recorded that it ran its share to the end, and together
    // their shares read every row once.
    let finished = cluster_status(&etcd, "split").finished_members;
    assert_eq!(
        finished.keys().map(String::as_str).collect::<Vec<_>>(),
        NODES.to_vec()
    );
    assert_eq!(
        finished.values().map(|f| f.rows_in).sum::<u64>(),
        FILES * ROWS_PER_FILE
    );
    // Every node read a share: each wrote rows of its own.
    for n in NODES {
        let (_, rows) = split_lines(&read(&dir.join(format!("out/{n}/sel.csv"))), true);
        assert!(!rows.is_empty(), "node {n} wrote nothing");
    }
    // Each node checkpointed its share in a store of its own.
    for n in NODES {
        assert!(
            has_checkpoint(&dir, n),
            "node {n}: no checkpoint in its store"
        );
    }
}

/// Nodes SIGKILLed at random times (while running, or after finishing)
/// and started again resume their shares: the union is still exactly the
/// single-node rows, with nothing lost or repeated.
#[test]
fn split_nodes_killed_at_random_times_resume_with_exactly_once_output() {
    let kills: u64 = std::env::var("SLUICE_CLUSTER_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(3);
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("split");
    write_input(&dir, SCRIPT);
    let list = NODES.join(",");
    let mut nodes: BTreeMap<_, _> = NODES
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "kills", n, &list)))
        .collect();
    let mut rng = Lcg(0x6b11);
    let mut killed_running = 0;
    for _ in 0..kills {
        let victim = NODES[(rng.next() % 3) as usize];
        let mut run = nodes.remove(victim).unwrap();
        // Mid-run: once the victim has committed a checkpoint (so what it
        // wrote after it is replayed on restart), a random moment later.
        let until = Instant::now() + WATCHDOG;
        while run.running() && !has_checkpoint(&dir, victim) {
            assert!(
                std::time::Instant::now() < until,
                "{victim} never checkpointed"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(rng.next() % 400));
        if run.running() {
            killed_running += 1;
            run.signal(libc::SIGKILL);
            let _ = run.wait(WATCHDOG);
        } else {
            let (status, stderr) = run.wait(WATCHDOG);
            assert!(status.success(), "node {victim}: {stderr}");
        }
        nodes.insert(victim, node(&dir, &etcd, "kills", victim, &list));
    }
    wait_all(nodes);
    eprintln!("{killed_running} of {kills} kills hit a running node");
    assert_eq!(union(&dir), expected);
}

/// The newest checkpoint of node `n` of cluster `rescale` that etcd
/// recorded (0: none); a manifest counts only once recorded.
fn recorded_checkpoint(etcd: &EtcdServer, n: &str) -> u64 {
    rt().block_on(async {
        let client = sluice_cluster::status::connect(&etcd.endpoints())
            .await
            .unwrap();
        let keys = sluice_cluster::ClusterKeys::new("rescale").unwrap();
        let commits =
            sluice_cluster::split_record::SplitCommitRecord::reader(client, keys, n).unwrap();
        sluice_storage::CommitAuthority::committed(&commits)
            .await
            .unwrap()
            .and_then(|ids| ids.last().copied())
            .unwrap_or(0)
    })
}

/// Start `list`'s nodes, and once each has checkpointed since it started
/// (or finished), stop the running ones with `signal`.
fn run_list_until_checkpointed(dir: &Path, etcd: &EtcdServer, list: &str, signal: i32) {
    let all: Vec<&str> = list.split(',').collect();
    run_until_checkpointed(dir, etcd, list, &all, signal);
}

/// [`run_list_until_checkpointed`] starting only `nodes` of `list`.
fn run_until_checkpointed(dir: &Path, etcd: &EtcdServer, list: &str, nodes: &[&str], signal: i32) {
    let before: BTreeMap<&str, u64> = nodes
        .iter()
        .map(|n| (*n, recorded_checkpoint(etcd, n)))
        .collect();
    let mut runs: BTreeMap<&str, Run> = before
        .keys()
        .map(|n| (*n, node(dir, etcd, "rescale", n, list)))
        .collect();
    let until = Instant::now() + WATCHDOG;
    for (n, run) in runs.iter_mut() {
        while run.running() && recorded_checkpoint(etcd, n) <= before[n] {
            assert!(Instant::now() < until, "{n} never checkpointed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    for (n, mut run) in runs {
        if run.running() {
            eprintln!("{n} stopped while running ({list})");
            run.signal(signal);
            let _ = run.wait(WATCHDOG);
        } else {
            let (status, stderr) = run.wait(WATCHDOG);
            assert!(status.success(), "node {n}: {stderr}");
        }
    }
}

/// A split of two nodes killed midway is started again as three, which
/// are killed midway too, and the split is started as two again, with the
/// dropped node started once to publish what its last checkpoint
/// committed: each change reads on where the old members stopped, and
/// together the nodes write exactly the rows of one uninterrupted
/// single-node run.
#[test]
fn a_split_rescaled_from_two_nodes_to_three_and_back_writes_each_row_once() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("rescale");
    write_input(&dir, SCRIPT);
    run_list_until_checkpointed(&dir, &etcd, "n1,n2", libc::SIGKILL);
    run_list_until_checkpointed(&dir, &etcd, "n1,n2,n3", libc::SIGKILL);
    let nodes: BTreeMap<_, _> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "rescale", n, "n1,n2")))
        .collect();
    wait_all(nodes);
    same_rows(&union(&dir), &expected);
    // Only the last generation's members are listed as finished.
    let status = cluster_status(&etcd, "rescale");
    assert_eq!(
        status.finished_members.keys().collect::<Vec<_>>(),
        ["n1", "n2"]
    );
}

/// A running split asked to change its list (`sluice cluster rescale`),
/// twice: n1 and n2 grow to three (n3 started with the new list), then
/// shrink back to n1 and n2 (n3, dropped unless it finished its share
/// first, publishes what its last checkpoint committed and ends). The
/// running nodes stop at once and start again in their processes each
/// time, every file is read on from where its old holder stopped, and the
/// output is exactly one node's.
#[test]
fn a_running_split_asked_to_grow_and_shrink_writes_each_row_once() {
    // Four times the input: the nodes run long enough to see both
    // requests (a row-by-row node reads its share in about a second).
    const MORE: u64 = 4 * FILES;
    let base = tempfile::tempdir().unwrap();
    let expected = reference_of(base.path(), MORE);
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("rescale");
    write_input_of(&dir, SCRIPT, MORE);
    let checkpointed = |runs: &mut BTreeMap<&str, Run>| {
        let before: BTreeMap<&str, u64> = runs
            .keys()
            .map(|n| (*n, recorded_checkpoint(&etcd, n)))
            .collect();
        let until = Instant::now() + WATCHDOG;
        for (n, run) in runs.iter_mut() {
            while recorded_checkpoint(&etcd, n) <= before[n] {
                assert!(
                    run.running(),
                    "{n} ended before the list changed: grow the input"
                );
                assert!(Instant::now() < until, "{n} never checkpointed");
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    let asked = |list: &str| {
        let (ok, said) = rescale_with(&etcd, "rescale", &["--split", list]);
        assert!(
            ok && said.contains(&format!("start again with {list}")),
            "{said}"
        );
    };
    let mut runs: BTreeMap<&str, Run> = ["n1", "n2"]
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "rescale", n, "n1,n2")))
        .collect();
    checkpointed(&mut runs);
    asked("n1,n2,n3");
    runs.insert("n3", node(&dir, &etcd, "rescale", "n3", "n1,n2,n3"));
    checkpointed(&mut runs);
    asked("n1,n2");
    let mut ends = BTreeMap::new();
    for (name, run) in runs {
        let (status, stderr) = run.wait(WATCHDOG);
        assert!(status.success(), "node {name}: {stderr}");
        ends.insert(name, stderr);
    }
    same_rows(&union(&dir), &expected);
    // n1 and n2 read for a second at least, and saw the first request
    // while they ran (it comes after their first checkpoint). A node may
    // finish its share before it sees a later one: it ends as in any run,
    // and the nodes that start again read on where it stopped.
    for name in ["n1", "n2"] {
        assert!(
            ends[name].contains("starting again with the new list"),
            "{name}: {}",
            ends[name]
        );
    }
    // n1 started again with the list the last rescale changed (as a
    // supervisor would): it runs with the recorded list instead of asking
    // to change it back, and adds nothing.
    let again = node(&dir, &etcd, "rescale", "n1", "n1,n2,n3");
    let (status, stderr) = again.wait(WATCHDOG);
    assert!(
        status.success()
            && stderr.contains("the split's list was changed from this node's --split"),
        "{stderr}"
    );
    same_rows(&union(&dir), &expected);
}

/// A node of the old list cut off past its lease (paused) while the list
/// changes commits nothing when it wakes: etcd refuses to record its next
/// checkpoint, so the new owners of its vnodes read on from its last
/// recorded one, and the output is still every row once.
#[test]
fn an_old_node_that_wakes_after_the_list_changed_commits_nothing() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("rescale");
    write_input(&dir, SCRIPT);
    let mut old: BTreeMap<&str, Run> = ["n1", "n2"]
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "rescale", n, "n1,n2")))
        .collect();
    let until = Instant::now() + WATCHDOG;
    for (n, run) in old.iter_mut() {
        while run.running() && recorded_checkpoint(&etcd, n) == 0 {
            assert!(Instant::now() < until, "{n} never checkpointed");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let mut sleeper = old.remove("n2").unwrap();
    let paused = sleeper.running();
    if paused {
        sleeper.signal(libc::SIGSTOP);
    }
    let mut n1 = old.remove("n1").unwrap();
    if n1.running() {
        n1.signal(libc::SIGKILL);
    }
    let _ = n1.wait(WATCHDOG);
    // The new list waits for n2's lease to lapse, then records where it
    // stopped; n2 wakes while the new nodes run.
    let new: BTreeMap<_, _> = ["n1", "n3"]
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "rescale", n, "n1,n3")))
        .collect();
    let until = Instant::now() + WATCHDOG;
    while cluster_status(&etcd, "rescale")
        .members
        .iter()
        .all(|m| m.node != "n3")
    {
        assert!(Instant::now() < until, "the new list never ran");
        std::thread::sleep(Duration::from_millis(5));
    }
    if paused {
        sleeper.signal(libc::SIGCONT);
        let (status, stderr) = sleeper.wait(WATCHDOG);
        assert!(!status.success(), "the woken node went on: {stderr}");
        eprintln!("the woken node: {}", stderr.trim());
    }
    wait_all(new);
    // n2, dropped, publishes what its last recorded checkpoint committed.
    let (status, stderr) = node(&dir, &etcd, "rescale", "n2", "n1,n3").wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    same_rows(&union(&dir), &expected);
}

/// A list recorded by a node that was then refused (its script cannot run
/// split) leaves a generation no node ran in: the split changes on from
/// the generation before it, and the rows are still written once.
#[test]
fn a_generation_no_node_ran_in_is_skipped() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("rescale");
    write_input(&dir, SCRIPT);
    run_list_until_checkpointed(&dir, &etcd, "n1,n2", libc::SIGKILL);
    let stateful = format!(
        "{SCRIPT}
        CREATE STREAM per_key AS SELECT k, COUNT(*) AS n FROM events GROUP BY k;"
    );
    std::fs::write(dir.join("pipeline.sql"), stateful).unwrap();
    let (status, stderr) = node(&dir, &etcd, "rescale", "n3", "n1,n2,n3").wait(WATCHDOG);
    assert!(!status.success() && stderr.contains("per_key"), "{stderr}");
    std::fs::write(dir.join("pipeline.sql"), SCRIPT).unwrap();
    let nodes: BTreeMap<_, _> = ["n1", "n2"]
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "rescale", n, "n1,n2")))
        .collect();
    wait_all(nodes);
    same_rows(&union(&dir), &expected);
}

/// A list cannot change from a generation one of whose nodes never ran:
/// where its vnodes stood is not known. The refusal names it.
#[test]
fn a_list_change_after_a_node_that_never_ran_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("never");
    write_input(&dir, SCRIPT);
    run_list_until_checkpointed(&dir, &etcd, "n1,n2", libc::SIGKILL);
    // Generation 2 lists n3, which is never started.
    run_until_checkpointed(&dir, &etcd, "n1,n2,n3", &["n1", "n2"], libc::SIGKILL);
    let (status, stderr) = node(&dir, &etcd, "rescale", "n1", "n1,n2").wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains(
            "node n3 of the split's generation 2 (n1,n2,n3) has no checkpoint of that generation"
        ),
        "{stderr}"
    );
}

#[test]
fn a_script_that_cannot_run_split_is_refused_naming_the_stream() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("stateful");
    write_input(
        &dir,
        &format!(
            "{SCRIPT}
            CREATE STREAM per_key AS SELECT k, tumble(ts, INTERVAL '5' SECOND) AS ws, COUNT(*) AS n
              FROM events GROUP BY k, tumble(ts, INTERVAL '5' SECOND);"
        ),
    );
    let (status, stderr) = node(&dir, &etcd, "stateful", "n1", "n1,n2").wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains(
            "stream 'per_key' cannot run split across nodes: its windowed aggregation keeps state across rows"
        ),
        "{stderr}"
    );
    // Refused as the script ran, before the node joined: nothing is
    // sealed, so the fixed script runs on the same cluster id.
    assert_eq!(cluster_status(&etcd, "stateful").vnode_count, 0);
    std::fs::write(dir.join("pipeline.sql"), SCRIPT).unwrap();
    let (status, stderr) = node(&dir, &etcd, "stateful", "n1", "n1").wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    // A script that sets its own store would share it between nodes.
    std::fs::write(
        dir.join("pipeline.sql"),
        format!("SET checkpoint_store = 'file:///tmp/one-for-all';\n{SCRIPT}"),
    )
    .unwrap();
    let (status, stderr) = node(&dir, &etcd, "own-store", "n1", "n1,n2").wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains("the script's SET checkpoint_store = 'file:///tmp/one-for-all' would put every node's in one store"),
        "{stderr}"
    );
}

#[test]
fn a_refused_script_publishes_nothing() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("stateful");
    write_input(
        &dir,
        &format!("{SCRIPT}\nCREATE STREAM d AS SELECT DISTINCT k FROM events;"),
    );
    let (status, stderr) = node(&dir, &etcd, "stateful", "n1", "n1,n2").wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains("stream 'd' cannot run split across nodes: its DISTINCT"),
        "{stderr}"
    );
    // Nothing was published.
    assert!(
        entries(&dir.join("out")).is_empty(),
        "{:?}",
        entries(&dir.join("out"))
    );
}

#[test]
fn a_node_with_another_member_list_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("lists");
    write_input(&dir, SCRIPT);
    // n1 holds a long lease, and is paused once it joined: a member of
    // the split for as long as the test needs, however fast its share.
    let mut first = {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.current_dir(&dir)
            .env_remove("RUST_LOG")
            .arg("run")
            .args(["--cluster", &format!("etcd={}", etcd.endpoint())])
            .args([
                "--cluster-id",
                "lists",
                "--node-id",
                "n1",
                "--split",
                "n1,n2",
            ])
            .args(["--lease-ttl", "30s"])
            .args([
                "--state",
                &format!("file://{}", dir.join("state").display()),
            ])
            .arg("pipeline.sql")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        Run::spawn(c)
    };
    // Once n1 runs as a member of the split.
    let until = Instant::now() + WATCHDOG;
    while !cluster_status(&etcd, "lists")
        .members
        .iter()
        .any(|m| m.node == "n1")
    {
        assert!(Instant::now() < until, "n1 never joined");
        assert!(first.running(), "n1 exited before it joined");
        std::thread::sleep(Duration::from_millis(5));
    }
    first.signal(libc::SIGSTOP);
    let (status, stderr) = node(&dir, &etcd, "lists", "n2", "n1,n2,n3").wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains(
            "--split n1,n2,n3 would change the split of generation 1 (n1,n2), but n1 is still \
             running; stop every node of the split before starting it with another list"
        ),
        "{stderr}"
    );
    first.signal(libc::SIGKILL);
    first.kill();
    // Arguments that cannot make a split, refused before anything runs.
    for (args, says) in [
        (vec!["--split", "n2,n3"], "does not list this node, 'n1'"),
        (vec!["--split", "n1,n1"], "node 'n1' is listed twice"),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.current_dir(&dir)
            .arg("run")
            .args(["--cluster", &format!("etcd={}", etcd.endpoint())])
            .args(["--node-id", "n1", "--state", "file:///tmp/unused"])
            .args(args)
            .arg("pipeline.sql")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let (status, stderr) = Run::spawn(c).wait(WATCHDOG);
        assert!(!status.success());
        assert!(stderr.contains(says), "{stderr}");
    }
}

/// The same split with its checkpoints on a real S3-compatible server.
#[test]
fn split_nodes_with_state_on_s3_write_exactly_the_single_node_rows() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let moto = Moto::start();
    moto.create_bucket("split");
    let dir = base.path().join("split");
    write_input(&dir, SCRIPT);
    let list = NODES.join(",");
    let nodes: BTreeMap<_, _> = NODES
        .iter()
        .map(|n| {
            let run = node_on(&dir, &etcd, "s3", n, &list, "s3://split/clean", &moto.env());
            (*n, run)
        })
        .collect();
    wait_all(nodes);
    assert_eq!(union(&dir), expected);
}

/// A node paused past its lease (SIGSTOP) is replaced by the same node
/// started again, which takes its store once the paused one's lease lapses
/// and finishes the share; when the paused one wakes it stops, publishing
/// nothing, and the union is still exactly the single-node rows.
#[test]
fn a_paused_split_node_is_replaced_by_its_restart_and_publishes_nothing() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("split");
    write_input(&dir, SCRIPT);
    let list = NODES.join(",");
    let mut nodes: BTreeMap<_, _> = NODES
        .iter()
        .map(|n| (*n, node(&dir, &etcd, "pause", n, &list)))
        .collect();
    let victim = "n2";
    let mut paused = nodes.remove(victim).unwrap();
    let until = Instant::now() + WATCHDOG;
    while !has_checkpoint(&dir, victim) {
        assert!(Instant::now() < until, "{victim} never checkpointed");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(paused.running(), "{victim} finished before the pause");
    paused.signal(libc::SIGSTOP);
    nodes.insert(victim, node(&dir, &etcd, "pause", victim, &list));
    wait_all(nodes);
    paused.signal(libc::SIGCONT);
    let (status, stderr) = paused.wait(WATCHDOG);
    assert!(!status.success(), "the paused node fails: {stderr}");
    // It learns it was cut off from etcd (its lease is gone) or from the
    // store (the restart took the store's lease), whichever it hears first.
    assert!(
        stderr.contains(
            "error[SLC-CLU-007]: node 'n2' lost its etcd lease; it must rejoin the cluster"
        ) || stderr.contains("error[SLC-STO-"),
        "{stderr}"
    );
    assert_eq!(union(&dir), expected);
}
