//! `sluice run --cluster`: real `sluice` processes on one real etcd, with
//! checkpoints in a shared store: a `file://` directory, or a real
//! S3-compatible server (`moto_server`) on loopback. The leader runs the pipeline,
//! the standbys take over when it dies or is cut off, and the sink files
//! must equal those of an uninterrupted single-node run, byte for byte.
//!
//! `SLUICE_CLUSTER_KILLS` raises the number of leader kills.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_cluster::status;
use sluice_cluster::testing::EtcdServer;
use sluice_cluster::ClusterKeys;
use support::moto::Moto;
use support::*;

/// About one second of work for a debug build.
const ROWS: u64 = 400_000;
/// Longest one node may take before the test fails instead of hanging.
const WATCHDOG: Duration = Duration::from_secs(240);
/// Long enough that a keep-alive stalled by a loaded 2-core machine does
/// not depose a healthy leader.
const LEASE: &str = "3s";

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

fn write_input(dir: &Path, windows: &str) {
    std::fs::create_dir_all(dir).unwrap();
    write_events(dir, ROWS, 42);
    std::fs::write(
        dir.join("pipeline.sql"),
        format!("{EVENTS_SOURCE}\n{windows}"),
    )
    .unwrap();
}

/// The sink files of an uninterrupted single-node run over the same input.
fn reference(base: &Path) -> Vec<(String, String)> {
    let dir = base.join("reference");
    write_input(&dir, WINDOWS);
    let (status, stderr) = Run::spawn(sluice(&dir, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let expected = outputs(&dir, WINDOW_FILES);
    assert!(expected.iter().all(|(_, body)| body.lines().count() > 10));
    expected
}

/// `sluice run --cluster ...` as node `node` on the script in `dir`; its
/// stdout goes to `dir/NODE.out`.
fn node(dir: &Path, etcd: &EtcdServer, cluster: &str, node: &str) -> Run {
    node_on(dir, etcd, cluster, node, LEASE, &Store::file(dir))
}

/// Where the nodes keep checkpoints: a URL and the environment it needs.
struct Store {
    url: String,
    env: Vec<(&'static str, String)>,
}

impl Store {
    fn file(dir: &Path) -> Store {
        Store {
            url: format!("file://{}", dir.join("state").display()),
            env: vec![],
        }
    }

    fn s3(moto: &Moto, bucket: &str) -> Store {
        moto.create_bucket(bucket);
        Store {
            url: format!("s3://{bucket}/pipeline"),
            env: moto.env(),
        }
    }
}

fn node_with_lease(dir: &Path, etcd: &EtcdServer, cluster: &str, node: &str, lease: &str) -> Run {
    node_on(dir, etcd, cluster, node, lease, &Store::file(dir))
}

fn node_on(
    dir: &Path,
    etcd: &EtcdServer,
    cluster: &str,
    node: &str,
    lease: &str,
    store: &Store,
) -> Run {
    node_with_sets(dir, etcd, cluster, node, lease, store, &[])
}

/// [`node_on`] with more `--set` options.
fn node_with_sets(
    dir: &Path,
    etcd: &EtcdServer,
    cluster: &str,
    node: &str,
    lease: &str,
    store: &Store,
    sets: &[&str],
) -> Run {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.current_dir(dir)
        .env_remove("RUST_LOG")
        .arg("run")
        .args(["--cluster", &format!("etcd={}", etcd.endpoint())])
        .args(["--cluster-id", cluster, "--node-id", node])
        .args(["--lease-ttl", lease])
        .args(["--state", &store.url])
        .envs(store.env.iter().map(|(k, v)| (k, v)))
        .args(["--set", "checkpoint_interval=50ms"])
        .args(sets.iter().flat_map(|s| ["--set", s]))
        .arg("pipeline.sql")
        .stdout(std::fs::File::create(dir.join(format!("{node}.out"))).unwrap())
        .stderr(Stdio::piped());
    Run::spawn(c)
}

/// The checkpoint ids the cluster's leaders recorded as committed in etcd.
fn recorded_checkpoints(etcd: &EtcdServer, cluster: &str) -> Vec<u64> {
    use sluice::CommitAuthority;
    use sluice_cluster::LeaderCommitRecord;
    rt().block_on(async {
        let client = status::connect(&etcd.endpoints()).await.unwrap();
        let record = LeaderCommitRecord::new(client, ClusterKeys::new(cluster).unwrap(), "reader");
        record
            .committed()
            .await
            .unwrap()
            .map(|ids| ids.into_iter().collect())
            .unwrap_or_default()
    })
}

/// The ids of the checkpoint manifests in a `file://` store at `state`.
fn manifests(state: &Path) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(state.join("checkpoints"))
        .map(|d| {
            d.flatten()
                .filter(|e| e.path().join("MANIFEST").exists())
                .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// The assignment generation each manifest in a `file://` store at
/// `state` was admitted under, by checkpoint id.
fn manifest_generations(state: &Path) -> BTreeMap<u64, Option<u64>> {
    let dirs = std::fs::read_dir(state.join("checkpoints")).unwrap();
    dirs.flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path().join("MANIFEST")).ok()?;
            // A checksum line, then the JSON body.
            let body = text.split_once('\n').map_or("", |(_, b)| b);
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            Some((json["id"].as_u64()?, json["assignment_generation"].as_u64()))
        })
        .collect()
}

/// Wait until the cluster has a leader that is one of `alive`.
fn leader_among(etcd: &EtcdServer, cluster: &str, alive: &BTreeMap<String, Run>) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = cluster_status(etcd, cluster);
        if let Some((leader, _)) = s.leader {
            if alive.contains_key(&leader) {
                return leader;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader among {:?}",
            alive.keys()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn committed_bytes(dir: &Path) -> u64 {
    WINDOW_FILES
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join("out").join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// Wait for every node; each must succeed. Returns their stdouts.
fn wait_all(dir: &Path, nodes: BTreeMap<String, Run>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (name, run) in nodes {
        let (status, stderr) = run.wait(WATCHDOG);
        assert!(status.success(), "node {name}: {stderr}");
        let stdout = std::fs::read_to_string(dir.join(format!("{name}.out"))).unwrap();
        out.insert(name, stdout);
    }
    out
}

/// Three nodes; the leader is SIGKILLed mid-run several times (each time a
/// new node joins in its place). The survivors finish with exactly the
/// output of one uninterrupted run, and the standbys stand down.
#[test]
fn leader_killed_mid_run_is_replaced_with_exactly_once_output() {
    let base = tempfile::tempdir().unwrap();
    let dir = base.path().join("cluster");
    kill_leaders(base.path(), &Store::file(&dir));
}

/// The same with checkpoints on S3 (a real S3-compatible server): the
/// store lease and attempt ids rest on S3's conditional puts.
#[test]
fn leader_killed_mid_run_with_state_on_s3() {
    let base = tempfile::tempdir().unwrap();
    let moto = Moto::start();
    kill_leaders(base.path(), &Store::s3(&moto, "sluice-kills"));
}

fn kill_leaders(base: &Path, store: &Store) {
    let expected = reference(base);
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.join("cluster");
    write_input(&dir, WINDOWS);
    let kills: usize = std::env::var("SLUICE_CLUSTER_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2);
    let mut alive: BTreeMap<String, Run> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                node_on(&dir, &etcd, "kills", n, LEASE, store),
            )
        })
        .collect();
    let total: u64 = expected.iter().map(|(_, body)| body.len() as u64).sum();
    let mut rng = Lcg(11);
    let mut killed = Vec::new();
    for i in 0..kills {
        let leader = leader_among(&etcd, "kills", &alive);
        // Kill once the committed output passes the next step towards the
        // total (so recovery starts mid-stream, each time further on),
        // after a short random delay.
        let step = total * (i as u64 + 1) / (kills as u64 + 2);
        let deadline = Instant::now() + Duration::from_secs(60);
        while committed_bytes(&dir) < step && Instant::now() < deadline {
            if !alive.get_mut(&leader).is_some_and(Run::running) {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(rng.next() % 20));
        let Some(mut run) = alive.remove(&leader) else {
            continue;
        };
        if !run.running() {
            // It finished before the kill: nothing left to kill.
            alive.insert(leader, run);
            break;
        }
        run.signal(libc::SIGKILL);
        run.kill();
        assert!(
            committed_bytes(&dir) < total,
            "killed {leader} after its output was complete"
        );
        killed.push(leader);
        let joiner = format!("n{}", 4 + i);
        alive.insert(
            joiner.clone(),
            node_on(&dir, &etcd, "kills", &joiner, LEASE, store),
        );
    }
    assert!(!killed.is_empty(), "at least one leader was killed mid-run");
    let stdouts = wait_all(&dir, alive);
    assert_eq!(outputs(&dir, WINDOW_FILES), expected, "exactly-once output");
    let status = cluster_status(&etcd, "kills");
    let finished = status.finished.expect("the run is recorded as finished");
    assert!(
        !killed.contains(&finished.node),
        "{finished:?} after {killed:?}"
    );
    // The last leader resumed from a committed checkpoint in the shared
    // store: it read only what came after it, not the whole input. (None
    // at all when the leader before it was killed after its last
    // checkpoint, the one at the end of the input, became durable but
    // before its sinks published it: the last leader only publishes.)
    assert!(
        finished.rows_in < ROWS,
        "the last leader read {} of {ROWS} rows",
        finished.rows_in
    );
    assert!(
        stdouts[&finished.node].contains("rows in"),
        "{}",
        stdouts[&finished.node]
    );
    for (name, stdout) in &stdouts {
        if *name != finished.node {
            assert!(
                stdout.contains(&format!(
                    "sluice: node {name} stands down: node {} finished the run",
                    finished.node
                )),
                "{name}: {stdout}"
            );
        }
    }
}

/// Write the input to `dir` and start node `n1` of `cluster` with a 60 s
/// lease, stopped (SIGSTOP) once it leads: it stays the leader and a
/// member for the rest of a test.
fn paused_leader(dir: &Path, etcd: &EtcdServer, cluster: &str) -> BTreeMap<String, Run> {
    write_input(dir, WINDOWS);
    let first = node_with_lease(dir, etcd, cluster, "n1", "60s");
    let alive = BTreeMap::from([("n1".to_string(), first)]);
    assert_eq!(leader_among(etcd, cluster, &alive), "n1");
    // Paused once its assignment table is written (the leader writes it
    // just after it is elected; paused before, the cluster shows none).
    let until = Instant::now() + WATCHDOG;
    while cluster_status(etcd, cluster).generation == 0 {
        assert!(Instant::now() < until, "the leader never wrote its table");
        std::thread::sleep(Duration::from_millis(5));
    }
    alive["n1"].signal(libc::SIGSTOP);
    alive
}

/// A node whose script differs from the sealed one is refused by name,
/// before it joins; `SHOW CLUSTER` and `sluice cluster status` show the
/// members, and the cluster's leader.
#[test]
fn a_node_with_another_script_is_refused_naming_the_objects() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("first");
    // Stays the leader and a member while the cluster is inspected.
    let alive = paused_leader(&dir, &etcd, "seal");
    let first = &alive["n1"];
    let other = base.path().join("other");
    write_input(
        &other,
        &WINDOWS.replace("INTERVAL '5' SECOND", "INTERVAL '6' SECOND"),
    );
    // On the first node's store, so that only the statements differ.
    let shared = Store::file(&dir);
    let (status, stderr) =
        node_with_sets(&other, &etcd, "seal", "n2", LEASE, &shared, &[]).wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains(
            "error[SLC-CLU-004]: node 'n2' is refused by cluster 'seal': its catalog differs \
             from the sealed catalog (changed: stream per_key)"
        ),
        "{stderr}"
    );
    // The same statements with another store and delivery: a takeover by
    // it would start over and publish under other rules.
    let same = base.path().join("same");
    write_input(&same, WINDOWS);
    let (status, stderr) = node_with_sets(
        &same,
        &etcd,
        "seal",
        "n3",
        LEASE,
        &Store::file(&same),
        &["delivery=at_least_once"],
    )
    .wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains("changed: option checkpoint_store, option delivery)"),
        "{stderr}"
    );
    let (status, stderr) = Run::spawn({
        let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
        c.args([
            "cluster",
            "status",
            "--cluster",
            &format!("etcd={}", etcd.endpoint()),
            "--cluster-id",
            "seal",
        ])
        .stdout(std::fs::File::create(base.path().join("status.out")).unwrap())
        .stderr(Stdio::piped());
        c
    })
    .wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let shown = std::fs::read_to_string(base.path().join("status.out")).unwrap();
    // The leader runs, and owns, every vnode.
    assert!(
        shown.contains("| n1   | leader | false   | 256    |"),
        "{shown}"
    );
    assert!(!shown.contains("n2"), "a refused node never joins: {shown}");
    assert!(!shown.contains("n3"), "a refused node never joins: {shown}");
    assert!(shown.contains("cluster seal: leader n1 (term "), "{shown}");
    first.signal(libc::SIGKILL);
    for (_, run) in alive {
        run.kill();
    }
}

/// A leader cut off past its lease (SIGSTOP) is deposed: a standby takes
/// over, and when the old leader wakes up it publishes nothing and exits
/// with the fencing error; the output is still exactly one run's.
#[test]
fn a_paused_leader_is_fenced_and_publishes_nothing() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("cluster");
    write_input(&dir, WINDOWS);
    let mut alive: BTreeMap<String, Run> = ["n1", "n2"]
        .iter()
        .map(|n| (n.to_string(), node(&dir, &etcd, "pause", n)))
        .collect();
    let leader = leader_among(&etcd, "pause", &alive);
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed_bytes(&dir) == 0 {
        assert!(Instant::now() < deadline, "no output committed");
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut paused = alive.remove(&leader).unwrap();
    assert!(paused.running(), "the leader finished before the pause");
    paused.signal(libc::SIGSTOP);
    // Past the lease: the standby is elected while the old leader sleeps.
    let standby = leader_among(&etcd, "pause", &alive);
    assert_ne!(standby, leader);
    paused.signal(libc::SIGCONT);
    let (status, stderr) = paused.wait(WATCHDOG);
    assert!(!status.success(), "the deposed leader fails");
    assert!(
        stderr.contains(&format!(
            "error[SLC-CLU-005]: node '{leader}' is not the leader of term"
        )),
        "{stderr}"
    );
    wait_all(&dir, alive);
    assert_eq!(outputs(&dir, WINDOW_FILES), expected, "exactly-once output");
    let finished = cluster_status(&etcd, "pause").finished.unwrap();
    assert_eq!(finished.node, standby);
    // Every checkpoint the store keeps was recorded in etcd by the leader
    // of its term (a deposed leader's manifest is refused and removed).
    let (kept, recorded) = (
        manifests(&dir.join("state")),
        recorded_checkpoints(&etcd, "pause"),
    );
    assert!(!kept.is_empty());
    assert!(
        kept.iter().all(|id| recorded.contains(id)),
        "kept {kept:?}, recorded {recorded:?}"
    );
    // Each was admitted under its leader's own assignment table (every
    // vnode on the leader); the finishing leader's table is the last one.
    let generations = manifest_generations(&dir.join("state"));
    let newest = cluster_status(&etcd, "pause").generation;
    assert!(
        generations.values().all(|g| g.is_some_and(|g| g <= newest)),
        "{generations:?}, newest {newest}"
    );
    assert_eq!(
        generations.values().max(),
        Some(&Some(newest)),
        "{generations:?}"
    );
}

/// Every malformed cluster invocation is refused before anything starts,
/// naming the flag.
#[test]
fn malformed_cluster_arguments_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pipeline.sql"), EVENTS_SOURCE).unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["--cluster", "etcd=http://127.0.0.1:1", "--node-id", "n1"],
            "error[SLC-CLI-001]: --cluster needs --state URL",
        ),
        (
            &[
                "--cluster",
                "etcd=http://127.0.0.1:1",
                "--node-id",
                "n1",
                "--state",
                "memory://",
            ],
            "error[SLC-CLI-001]: --cluster with --state memory://",
        ),
        (
            &[
                "--cluster",
                "etcd=http://127.0.0.1:1",
                "--node-id",
                "n1",
                "--state",
                "file:///tmp/x",
                "--set",
                "checkpoint_store=memory://",
            ],
            "error[SLC-CLI-001]: --cluster with --state memory://",
        ),
        (
            &[
                "--cluster",
                "etcd=http://127.0.0.1:1",
                "--node-id",
                "n1",
                "--state",
                "file:///tmp/x",
                "--state-dir",
                "st",
            ],
            "error[SLC-CLI-001]: --cluster keeps its state in --state URL",
        ),
        (
            &[
                "--cluster",
                "http://127.0.0.1:1",
                "--node-id",
                "n1",
                "--state",
                "file:///tmp/x",
            ],
            "error[SLC-CLI-001]: --cluster 'http://127.0.0.1:1': expected etcd=URL[,URL]",
        ),
        (
            &[
                "--cluster",
                "etcd=",
                "--node-id",
                "n1",
                "--state",
                "file:///tmp/x",
            ],
            "error[SLC-CLI-001]: --cluster 'etcd=': no etcd endpoint given",
        ),
        (
            &[
                "--cluster",
                "etcd=http://127.0.0.1:1",
                "--node-id",
                "n1",
                "--state",
                "file:///tmp/x",
                "--lease-ttl",
                "soon",
            ],
            "error[SLC-CLI-001]: --lease-ttl 'soon'",
        ),
        (
            &[
                "--cluster",
                "etcd=http://127.0.0.1:1",
                "--state",
                "file:///tmp/x",
            ],
            "the following required arguments were not provided",
        ),
        (
            &["--node-id", "n1", "--state", "file:///tmp/x"],
            "the following required arguments were not provided",
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        let (status, stderr) = Run::spawn(sluice(dir.path(), &args)).wait(WATCHDOG);
        assert!(!status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// A standby paused past its lease loses it, joins again when it wakes
/// (instead of exiting), and stands down when the leader finishes.
#[test]
fn a_standby_that_lost_its_lease_rejoins() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("cluster");
    // Leads, unchanged, while the standby is away.
    let alive = paused_leader(&dir, &etcd, "rejoin");
    let first = &alive["n1"];
    let standby = node(&dir, &etcd, "rejoin", "n2");
    let members = |want: usize| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while cluster_status(&etcd, "rejoin").members.len() != want {
            assert!(Instant::now() < deadline, "{want} members");
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    members(2);
    // Past its 3 s lease: etcd drops it from the members.
    standby.signal(libc::SIGSTOP);
    members(1);
    standby.signal(libc::SIGCONT);
    members(2);
    // n1 may have been paused in the middle of an etcd call (its campaign,
    // its read of the finished record, of the committed checkpoints): the
    // call's answer is lost, and n1 must still lead, not fail or wait as a
    // follower of itself while a standby runs the pipeline.
    first.signal(libc::SIGCONT);
    let (status, stderr) = standby.wait(WATCHDOG);
    let leader = alive.into_values().next().unwrap().wait(WATCHDOG);
    let out = std::fs::read_to_string(dir.join("n2.out")).unwrap();
    let first_out = std::fs::read_to_string(dir.join("n1.out")).unwrap();
    let story = format!("n1: {first_out}{}\nn2: {out}{stderr}", leader.1);
    assert!(status.success(), "{story}");
    assert!(leader.0.success(), "{story}");
    assert!(
        out.contains("sluice: node n2 stands down: node n1 finished the run"),
        "{story}"
    );
}

/// SIGTERM on a standby: it leaves at once (status 143) and touches
/// nothing. SIGTERM on the leader: a clean stop with a final checkpoint, a
/// standby takes over from it, and the output is exactly one run's.
#[test]
fn sigterm_hands_the_run_over_cleanly() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("cluster");
    write_input(&dir, WINDOWS);
    let mut alive: BTreeMap<String, Run> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| (n.to_string(), node(&dir, &etcd, "term", n)))
        .collect();
    let leader = leader_among(&etcd, "term", &alive);
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster_status(&etcd, "term").members.len() < 3 {
        assert!(Instant::now() < deadline, "three members");
        std::thread::sleep(Duration::from_millis(10));
    }
    let standby = alive.keys().find(|n| **n != leader).cloned().unwrap();
    let quitter = alive.remove(&standby).unwrap();
    quitter.signal(libc::SIGTERM);
    let (status, stderr) = quitter.wait(WATCHDOG);
    assert_eq!(status.code(), Some(143), "{stderr}");
    // Its member key is visible a moment before its join returns: a
    // signal in that moment stops it before it joined, as cleanly.
    assert!(
        stderr.contains(&format!("SIGTERM: standby node {standby} left the cluster"))
            || stderr.contains(&format!("SIGTERM: node {standby} stopped before it joined")),
        "{stderr}"
    );
    let total: u64 = expected.iter().map(|(_, body)| body.len() as u64).sum();
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed_bytes(&dir) < total / 3 {
        assert!(Instant::now() < deadline, "no output committed");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The store is leased for one node lease (3 s), not the 30 s default:
    // a leader killed on another host would block a takeover that long.
    let lease: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("state/LEASE")).unwrap()).unwrap();
    let left = lease["expires_ms"].as_i64().unwrap() - now_ms();
    assert!(
        (0..=3_000).contains(&left),
        "store lease expires in {left} ms"
    );
    let stopped = alive.remove(&leader).unwrap();
    stopped.signal(libc::SIGTERM);
    let (status, stderr) = stopped.wait(WATCHDOG);
    assert_eq!(status.code(), Some(143), "{stderr}");
    // The stop names who resumes: the next leader, not a --state-dir rerun.
    assert!(
        stderr.contains("(exactly_once); the next leader (a standby, or any node started again with the same --state) resumes"),
        "{stderr}"
    );
    assert!(!stderr.contains("--state-dir"), "{stderr}");
    let stdouts = wait_all(&dir, alive);
    assert_eq!(outputs(&dir, WINDOW_FILES), expected, "exactly-once output");
    let finished = cluster_status(&etcd, "term").finished.unwrap();
    assert_ne!(finished.node, leader);
    assert!(stdouts[&finished.node].contains("rows in"));
}
