//! Nexmark on three `sluice` processes of a shuffled split, on a real
//! etcd: each node generates its share of the bid and auction streams'
//! partitions, paced in wall-clock time, and runs windowed aggregations
//! (q5's hot auctions, q7's highest bid), an updating aggregation and a
//! join of auctions and bids, each key's rows on its vnode's owner. A
//! random node (the leader too) is SIGKILLed at random times, twice, and
//! only it is started again; together the nodes write exactly the rows of
//! one uninterrupted single-node run.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use sluice_cluster::testing::EtcdServer;
use support::keyed_split::{seeded_rng, Addresses};
use support::shuffled::*;
use support::sinks::{assert_activation_logs, lines};
use support::*;

/// 40,000 events at 8,000 a second: about 5 s of running, long enough
/// for checkpoints (every 50 ms) and kills between them.
const SCRIPT: &str = "
    CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
                       WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND)
      WITH (connector = 'nexmark', stream = 'bid', events = '40000', rate = '8000',
            event_time_rate = '1000', out_of_order_ms = '200', batch_size = '500');
    CREATE SOURCE auction (id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP,
                           WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND)
      WITH (connector = 'nexmark', stream = 'auction', events = '40000', rate = '8000',
            event_time_rate = '1000', out_of_order_ms = '200', batch_size = '500');
    CREATE STREAM hot AS
      SELECT auction, tumble(date_time, INTERVAL '2' SECOND) AS w, count(*) AS n
      FROM bid GROUP BY auction, tumble(date_time, INTERVAL '2' SECOND);
    CREATE STREAM top AS
      SELECT tumble(date_time, INTERVAL '1' SECOND) AS w, max(price) AS p, count(*) AS n
      FROM bid GROUP BY tumble(date_time, INTERVAL '1' SECOND);
    CREATE STREAM per_seller AS
      SELECT seller, count(*) AS n FROM auction GROUP BY seller;
    CREATE STREAM sold AS
      SELECT a.id, a.seller, b.bidder, b.price FROM auction a JOIN bid b ON a.id = b.auction
      WHERE b.price % 5 = 0;
    CREATE SINK h FROM hot WITH (connector = 'file', path = 'out/hot.csv', format = 'csv');
    CREATE SINK t FROM top WITH (connector = 'file', path = 'out/top.csv', format = 'csv');
    CREATE SINK c FROM per_seller WITH (connector = 'file', path = 'out/per_seller.csv', format = 'csv');
    CREATE SINK s FROM sold WITH (connector = 'file', path = 'out/sold.csv', format = 'csv');";

/// What a run wrote, per sink (the updating aggregate's final state).
/// `nodes`: the per-node files of a split.
fn outputs(out: &Path, nodes: &[&str]) -> BTreeMap<&'static str, Vec<String>> {
    sink_rows(
        out,
        nodes,
        &[
            ("hot", false),
            ("top", false),
            ("sold", false),
            ("per_seller", true),
        ],
    )
}

/// The single-node reference output, a fresh etcd and the split's
/// directory (`base/split`, with the script).
fn reference_and_split(
    base: &Path,
) -> (
    BTreeMap<&'static str, Vec<String>>,
    EtcdServer,
    std::path::PathBuf,
) {
    reference_and_split_of(base, SCRIPT)
}

/// [`reference_and_split`] of `script`.
fn reference_and_split_of(
    base: &Path,
    script: &str,
) -> (
    BTreeMap<&'static str, Vec<String>>,
    EtcdServer,
    std::path::PathBuf,
) {
    let reference = base.join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    std::fs::write(reference.join("pipeline.sql"), script).unwrap();
    let (status, stderr) = Run::spawn(sluice(&reference, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    let expected = outputs(&reference.join("out"), &[]);
    for (sink, rows) in &expected {
        assert!(rows.len() > 10, "{sink}: {} rows", rows.len());
    }
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.join("split");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pipeline.sql"), script).unwrap();
    (expected, etcd, dir)
}

/// A running Nexmark split of three asked to shrink to n1 and n2 (`sluice
/// cluster rescale`): all three stop and start again with the new list;
/// n3, dropped, publishes what its last checkpoint committed and ends, and
/// n1 and n2 take its keys over and generate the rest of its blocks of
/// rows from where it stopped. The output is exactly one node's.
#[test]
fn a_nexmark_split_asked_to_shrink_hands_the_dropped_nodes_blocks_over() {
    let base = tempfile::tempdir().unwrap();
    let (expected, etcd, dir) = reference_and_split(base.path());
    let shuffle = shuffle_list();
    let mut nodes = start_all(&dir, &etcd, "nexmark-rescale", &shuffle);
    until_committed(&etcd, "nexmark-rescale", &mut nodes, 0);
    assert!(nodes.iter_mut().all(Run::running), "lengthen the stream");
    let two: Vec<&str> = shuffle.split(',').take(2).collect();
    let (ok, said) = rescale_with(
        &etcd,
        "nexmark-rescale",
        &["--split", "n1,n2", "--shuffle", &two.join(",")],
    );
    assert!(ok, "{said}");
    let ends = wait_all(nodes);
    same_rows(&outputs(&dir.join("out"), &NODES), &expected);
    assert_restarted(&NODES, &ends);
    assert_dropped("n3", &ends[2]);
}

/// A running Nexmark split of n2 and n3 asked to grow to three: the two
/// stop and start again with the new list, n1 (started with it) waits for
/// them, and each generates the blocks of its new vnodes from where their
/// previous owner's last cut stopped. The output is exactly one node's.
#[test]
fn a_nexmark_split_asked_to_grow_hands_blocks_over_to_the_new_node() {
    let base = tempfile::tempdir().unwrap();
    let (expected, etcd, dir) = reference_and_split(base.path());
    grow_from_two(&dir, &etcd, "nexmark-grow", &[]);
    same_rows(&outputs(&dir.join("out"), &NODES), &expected);
}

/// Run the split in `dir` on n2 and n3 (each with `args`), ask it to grow
/// to three once it committed a checkpoint, start n1 with the new list,
/// and wait for all three: n2 and n3 started again with the new list, and
/// n1 wrote rows of its own keys.
fn grow_from_two(dir: &Path, etcd: &EtcdServer, cluster: &str, args: &[&str]) {
    let state = format!("file://{}", dir.join("state").display());
    let addresses = Addresses::new();
    let (three, two) = (addresses.of(&NODES), addresses.of(&["n2", "n3"]));
    let start = |node: &str, list: &str, shuffle: &str| {
        node_of_list(
            dir,
            etcd,
            (cluster, node),
            (list, shuffle),
            &state,
            &[],
            args,
        )
    };
    let mut old: Vec<Run> = ["n2", "n3"]
        .iter()
        .map(|n| start(n, "n2,n3", &two))
        .collect();
    until_committed(etcd, cluster, &mut old, 0);
    assert!(old.iter_mut().all(Run::running), "lengthen the stream");
    let (ok, said) = rescale_with(etcd, cluster, &["--split", "n1,n2,n3", "--shuffle", &three]);
    assert!(ok, "{said}");
    let mut nodes = vec![start("n1", "n1,n2,n3", &three)];
    nodes.extend(old);
    let ends = wait_all_of(nodes, &NODES);
    assert_restarted(&["n2", "n3"], &ends[1..]);
    assert!(
        !lines(&dir.join("out/n1/hot.csv")).is_empty(),
        "n1 wrote nothing"
    );
}

/// Three nodes of a shuffled split on a real etcd, each run with
/// `--failover-after`, and the single-node output they must write
/// together.
struct FailoverSplit {
    _base: tempfile::TempDir,
    expected: BTreeMap<&'static str, Vec<String>>,
    etcd: EtcdServer,
    dir: std::path::PathBuf,
    state: String,
    shuffle: String,
    cluster: &'static str,
    after: &'static str,
}

impl FailoverSplit {
    /// Cluster `cluster` running `script`, failing over after `after`.
    fn new(cluster: &'static str, script: &str, after: &'static str) -> Self {
        let base = tempfile::tempdir().unwrap();
        let (expected, etcd, dir) = reference_and_split_of(base.path(), script);
        FailoverSplit {
            state: format!("file://{}", dir.join("state").display()),
            shuffle: shuffle_list(),
            _base: base,
            expected,
            etcd,
            dir,
            cluster,
            after,
        }
    }

    /// Start `node` with the list of all three, `env` added.
    fn start(&self, node: &str, env: &[(&'static str, String)]) -> Run {
        node_of_list(
            &self.dir,
            &self.etcd,
            (self.cluster, node),
            (&NODES.join(","), &self.shuffle),
            &self.state,
            env,
            &["--failover-after", self.after],
        )
    }

    /// Wait for the first committed checkpoint, then a random moment
    /// after it (`SLUICE_TEST_SEED` replays a printed seed), between
    /// checkpoints or during one; every node of `nodes` still runs.
    fn wait_into_the_run(&self, nodes: &mut [Run], rng: &mut Lcg) {
        until_committed(&self.etcd, self.cluster, nodes, 0);
        std::thread::sleep(std::time::Duration::from_millis(rng.next() % 1500));
        assert!(nodes.iter_mut().all(Run::running), "lengthen the stream");
    }

    /// The nodes' files together hold exactly the single-node rows.
    fn assert_exact_output(&self) {
        same_rows(&outputs(&self.dir.join("out"), &NODES), &self.expected);
    }
}

/// With `--failover-after`, a node SIGKILLed for good is dropped from the
/// list by the others once it has been away that long: they stop, start
/// again with the two of them, and generate its blocks and hold its keys
/// from its last committed cut. Started again once with its old list, the
/// killed node runs as a dropped node (it publishes what its last
/// checkpoint committed) and ends. Together they write exactly one node's
/// rows; `victim` is the node killed (`n1` leads the split). The stream
/// runs 7.5 s, not 5: under CI's load the first commit came so late that
/// the stream had ended before the kill (session 48).
fn a_node_killed_for_good_fails_over(cluster: &'static str, victim: &str) {
    let script = SCRIPT.replace("events = '40000'", "events = '60000'");
    let split = FailoverSplit::new(cluster, &script, "1500ms");
    let mut nodes: Vec<Run> = NODES.iter().map(|n| split.start(n, &[])).collect();
    split.wait_into_the_run(&mut nodes, &mut seeded_rng());
    let at = NODES.iter().position(|n| *n == victim).unwrap();
    nodes.remove(at).kill();
    let survivors: Vec<&str> = NODES.iter().copied().filter(|n| *n != victim).collect();
    let ends = wait_all_of(nodes, &survivors);
    assert!(
        ends.iter()
            .any(|e| e.contains("members of the split are away: asked to go on without them")),
        "{ends:?}"
    );
    assert_restarted(&survivors, &ends);
    for (node, stderr) in survivors.iter().zip(&ends) {
        // A checkpoint waiting for the killed node's barrier as the node
        // stops for the change gives up at once, not at the alignment
        // timeout (10 s, past the failover).
        assert!(
            !stderr.contains("alignment timed out"),
            "{node} waited out an alignment: {stderr}"
        );
    }
    let (status, stderr) = split.start(victim, &[]).wait(WATCHDOG);
    assert!(status.success(), "{victim}: {stderr}");
    assert_dropped(victim, &stderr);
    split.assert_exact_output();
}

/// A second failure right after a failover: n3 is SIGKILLed for good,
/// and n1 (the leader of the list n1,n2 too) dies as it joins that list's
/// generation, before its first checkpoint (`SLUICE_TEST_CRASH`). n2,
/// which can commit no checkpoint of that generation without n1, stops
/// for the change that drops n1 all the same and goes on alone from the
/// cut before both failures. Started again with the old list, n1 and n3
/// run as dropped nodes. The output is exactly one node's.
#[test]
fn a_second_node_killed_right_after_a_failover_fails_over_too() {
    let split = FailoverSplit::new("failover-twice", SCRIPT, "1500ms");
    let crash = [("SLUICE_TEST_CRASH", "later-generation-joined".to_string())];
    let mut nodes = vec![
        split.start("n1", &crash),
        split.start("n2", &[]),
        split.start("n3", &[]),
    ];
    split.wait_into_the_run(&mut nodes, &mut seeded_rng());
    nodes.pop().unwrap().kill();
    let n2 = nodes.pop().unwrap();
    let (status, n1_end) = nodes.pop().unwrap().wait(WATCHDOG);
    assert!(!status.success(), "n1 did not crash: {n1_end}");
    assert!(n1_end.contains("SLUICE_TEST_CRASH"), "{n1_end}");
    let n2_end = wait_all_of(vec![n2], &["n2"]).remove(0);
    // It changed its list twice: without n3, then without n1 as well.
    assert_eq!(
        n2_end.matches("starting again with the new list").count(),
        2,
        "{n2_end}"
    );
    assert!(!n2_end.contains("alignment timed out"), "{n2_end}");
    for victim in ["n1", "n3"] {
        let (status, stderr) = split.start(victim, &[]).wait(WATCHDOG);
        assert!(status.success(), "{victim}: {stderr}");
        assert_dropped(victim, &stderr);
    }
    split.assert_exact_output();
}

/// A node SIGKILLed and started again at once, well within
/// `--failover-after`, is waited for, not failed over: the others rejoin
/// it from the last committed cut, nobody asks to change the list, and
/// the output is exactly one node's. (The stream runs twice as long as
/// the other tests', past the duration after the kill, so a node back
/// in time that still counted as away would be failed over.)
#[test]
fn a_node_back_before_the_failover_duration_keeps_its_place() {
    let script = SCRIPT.replace("events = '40000'", "events = '80000'");
    let split = FailoverSplit::new("failover-back-in-time", &script, "4s");
    let mut nodes: Vec<Run> = NODES.iter().map(|n| split.start(n, &[])).collect();
    let mut rng = seeded_rng();
    split.wait_into_the_run(&mut nodes, &mut rng);
    let victim = (rng.next() % 3) as usize;
    nodes[victim].signal(libc::SIGKILL);
    let again = split.start(NODES[victim], &[]);
    let _ = std::mem::replace(&mut nodes[victim], again).wait(WATCHDOG);
    let (ends, _) = supervise(nodes, |i| split.start(NODES[i], &[]));
    for (node, stderr) in NODES.iter().zip(&ends) {
        for said in [
            "asked to go on without them",
            "starting again with the new list",
        ] {
            assert!(!stderr.contains(said), "{node} said '{said}': {stderr}");
        }
    }
    assert_eq!(list_changes(&split.etcd, split.cluster), (1, false));
    split.assert_exact_output();
}

/// The split's recorded generation, and whether a change of its list was
/// ever asked for.
fn list_changes(etcd: &EtcdServer, cluster: &str) -> (u64, bool) {
    rt().block_on(async {
        let client = sluice_cluster::status::connect(&etcd.endpoints())
            .await
            .unwrap();
        let keys = sluice_cluster::ClusterKeys::new(cluster).unwrap();
        let (record, _) = sluice_cluster::split_record::read(&client, &keys)
            .await
            .unwrap();
        let (asked, _) = sluice_cluster::split_rescale::read_any(&client, &keys)
            .await
            .unwrap();
        (record.map_or(0, |r| r.generation), asked.is_some())
    })
}

#[test]
fn a_follower_killed_for_good_fails_over_to_the_others() {
    a_node_killed_for_good_fails_over("failover-follower", "n3");
}

#[test]
fn the_leader_killed_for_good_fails_over_to_the_others() {
    a_node_killed_for_good_fails_over("failover-leader", "n1");
}

#[test]
fn nexmark_on_three_shuffled_nodes_survives_random_kills_exactly_once() {
    let base = tempfile::tempdir().unwrap();
    let (expected, etcd, dir) = reference_and_split(base.path());
    kill_twice_and_supervise(&dir, &etcd, "nexmark", &[]);
    same_rows(&outputs(&dir.join("out"), &NODES), &expected);
    // Every node generated a share: each wrote rows of its own keys.
    for n in NODES {
        assert!(
            !lines(&dir.join(format!("out/{n}/hot.csv"))).is_empty(),
            "{n}"
        );
    }
}

/// One bid stream at least once (the delivery process functions have; a
/// function reads one source): q5's hot auctions in windows, a join of
/// bids with bids, and the built-in `activation_log` process function
/// keyed by bidder, which writes its own activations.
const PROCESS_SCRIPT: &str = "
    CREATE SOURCE bid (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
                       WATERMARK FOR date_time AS date_time - INTERVAL '200' MILLISECOND)
      WITH (connector = 'nexmark', stream = 'bid', events = '40000', rate = '8000',
            event_time_rate = '1000', out_of_order_ms = '200', batch_size = '500');
    CREATE STREAM hot AS
      SELECT auction, tumble(date_time, INTERVAL '2' SECOND) AS w, count(*) AS n
      FROM bid GROUP BY auction, tumble(date_time, INTERVAL '2' SECOND);
    CREATE STREAM outbid AS
      SELECT a.auction, a.bidder AS first, b.bidder AS second, b.price
      FROM bid a JOIN bid b ON a.auction = b.auction
      WHERE a.price % 61 = 0 AND b.price % 67 = 0;
    CREATE STREAM keyed AS SELECT bidder AS key, price AS amount FROM bid;
    CREATE STREAM log AS PROCESS activation_log FROM keyed;
    CREATE SINK h FROM hot WITH (connector = 'file', path = 'out/hot.csv', format = 'csv');
    CREATE SINK o FROM outbid WITH (connector = 'file', path = 'out/outbid.csv', format = 'csv');
    CREATE SINK l FROM log WITH (connector = 'file', path = 'out/log.csv', format = 'csv');";

/// The windows' and the join's sinks of [`PROCESS_SCRIPT`], without
/// repeats (at least once).
const PROCESS_SINKS: [(&str, bool); 2] = [("hot", false), ("outbid", false)];

/// A run's rows of [`PROCESS_SINKS`] as sets. `nodes`: a split's.
fn unique_rows(out: &Path, nodes: &[&str]) -> BTreeMap<&'static str, BTreeSet<String>> {
    sink_rows(out, nodes, &PROCESS_SINKS)
        .into_iter()
        .map(|(sink, rows)| (sink, rows.into_iter().collect()))
        .collect()
}

/// [`PROCESS_SCRIPT`] run on one node (in `base/reference`), a fresh
/// etcd, and the split's directory (`base/split`).
fn process_reference(base: &Path) -> (std::path::PathBuf, EtcdServer, std::path::PathBuf) {
    let reference = base.join("reference");
    std::fs::create_dir_all(&reference).unwrap();
    std::fs::write(reference.join("pipeline.sql"), PROCESS_SCRIPT).unwrap();
    let (status, stderr) = Run::spawn(sluice(&reference, &[])).wait(WATCHDOG);
    assert!(status.success(), "{stderr}");
    for (sink, rows) in unique_rows(&reference.join("out"), &[]) {
        assert!(rows.len() > 10, "{sink}: {} rows", rows.len());
    }
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.join("split");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("pipeline.sql"), PROCESS_SCRIPT).unwrap();
    (reference, etcd, dir)
}

/// The split's output (`dir/out`) against the single node's
/// (`reference/out`): the same rows without repeats, and the activation
/// logs as `assert_activation_logs` checks them.
fn assert_process_output(dir: &Path, reference: &Path) {
    let out = dir.join("out");
    assert_eq!(
        unique_rows(&out, &NODES),
        unique_rows(&reference.join("out"), &[])
    );
    let logs: Vec<_> = NODES.iter().map(|n| out.join(n).join("log.csv")).collect();
    assert_activation_logs(&logs, &reference.join("out/log.csv"));
}

/// The kill harness with a process function: three `sluice`
/// processes of a shuffled split at least once, a random node (the leader
/// too) SIGKILLed at random times, twice, and started again. Without
/// repeats the windows and the join wrote exactly the single node's rows,
/// and the function's log holds each key's inputs once, any activation
/// written twice as the same row (see `assert_activation_logs`; what the
/// handlers saw before a kill, which the sink files no longer show, is
/// checked in process by
/// `cluster_shuffle::kills::process_functions_on_killed_shuffled_owners_*`).
#[test]
fn nexmark_with_a_process_function_on_three_shuffled_nodes_survives_random_kills() {
    let base = tempfile::tempdir().unwrap();
    let (reference, etcd, dir) = process_reference(base.path());
    kill_twice_and_supervise(&dir, &etcd, "nexmark-process", &AT_LEAST_ONCE);
    assert_process_output(&dir, &reference);
}

/// Each node's delivery for [`PROCESS_SCRIPT`].
const AT_LEAST_ONCE: [&str; 2] = ["--set", "delivery=at_least_once"];

/// The split with a process function asked to shrink to n1 and n2: the
/// function's state and the input it held for a commit move with their
/// vnodes (each previous holder's held input runs again on the new owner
/// as it ran there), and the output is one node's.
#[test]
fn a_nexmark_split_with_a_process_function_shrinks_with_its_keys() {
    let base = tempfile::tempdir().unwrap();
    let (reference, etcd, dir) = process_reference(base.path());
    let cluster = "nexmark-process-shrink";
    let state = format!("file://{}", dir.join("state").display());
    let shuffle = shuffle_list();
    let list = NODES.join(",");
    let mut nodes: Vec<Run> = NODES
        .iter()
        .map(|n| {
            node_of_list(
                &dir,
                &etcd,
                (cluster, n),
                (&list, &shuffle),
                &state,
                &[],
                &AT_LEAST_ONCE,
            )
        })
        .collect();
    until_committed(&etcd, cluster, &mut nodes, 0);
    assert!(nodes.iter_mut().all(Run::running), "lengthen the stream");
    let two: Vec<&str> = shuffle.split(',').take(2).collect();
    let (ok, said) = rescale_with(
        &etcd,
        cluster,
        &["--split", "n1,n2", "--shuffle", &two.join(",")],
    );
    assert!(ok, "{said}");
    let ends = wait_all(nodes);
    assert_restarted(&NODES, &ends);
    assert_dropped("n3", &ends[2]);
    assert_process_output(&dir, &reference);
}

/// The split with a process function asked to grow from n2 and n3 to
/// three: n1 takes keys from both, with their state and the input each
/// held for a commit, and the output is one node's.
#[test]
fn a_nexmark_split_with_a_process_function_grows_with_its_keys() {
    let base = tempfile::tempdir().unwrap();
    let (reference, etcd, dir) = process_reference(base.path());
    grow_from_two(&dir, &etcd, "nexmark-process-grow", &AT_LEAST_ONCE);
    assert_process_output(&dir, &reference);
}
