//! `sluice run --cluster ... --split n1,n2,n3 --shuffle n1=IP:PORT,...`:
//! real `sluice` processes on one real etcd running keyed queries (window
//! and updating aggregations, a self-join) across three nodes, each key's
//! rows sent to its vnode's owner and every checkpoint one cut under the
//! elected leader. Together the nodes write exactly the rows of one
//! uninterrupted single-node run, also when a random node (the leader
//! too) is SIGKILLed at a random time and every node is started again;
//! a split grown from two nodes to three moves its keyed state with its
//! vnodes; nodes that disagree on the shuffle, or a list that drops a
//! node, are refused by name.

mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluice_cluster::testing::EtcdServer;
use support::keyed_split::*;
use support::shuffled::*;
use support::sinks::lines;
use support::*;

/// n1 and n2 of cluster `cluster`, and n3 with `SLUICE_TEST_CRASH=point`
/// (it aborts at that point of its end).
fn start_with_crashing_n3(f: &Fixture, cluster: &str, shuffle: &str, point: &str) -> Vec<Run> {
    let state = f.state();
    let crash = [("SLUICE_TEST_CRASH", point.to_string())];
    let mut nodes: Vec<Run> = NODES[..2]
        .iter()
        .map(|n| node(&f.dir, &f.etcd, cluster, n, shuffle))
        .collect();
    nodes.push(node_on(
        &f.dir,
        &f.etcd,
        (cluster, "n3"),
        shuffle,
        &state,
        &crash,
    ));
    nodes
}

#[test]
fn three_shuffled_split_nodes_write_exactly_the_single_node_rows() {
    let f = fixture();
    let (expected, etcd, dir) = (&f.expected, &f.etcd, &f.dir);
    wait_all(start_all(dir, etcd, "keyed", &shuffle_list()));
    same_rows(&split_outputs(&dir.join("out"), &NODES), expected);
    // Every node computed a part: each wrote window rows of its own keys.
    for n in NODES {
        assert!(
            !lines(&dir.join(format!("out/{n}/per_window.csv"))).is_empty(),
            "{n}"
        );
    }
    // Each recorded its end; the leader's says in which term it led,
    // which is what the followers waited for before they stopped.
    let status = cluster_status(etcd, "keyed");
    let finished = status.finished_members;
    assert_eq!(finished.len(), 3, "{finished:?}");
    let leaders: Vec<&String> = finished
        .iter()
        .filter(|(_, f)| f.leader_term.is_some())
        .map(|(n, _)| n)
        .collect();
    // The first member of the sorted list leads.
    assert_eq!(leaders, ["n1"], "{finished:?}");
    assert_eq!(
        finished.values().map(|f| f.rows_in).sum::<u64>(),
        FILES * ROWS_PER_FILE
    );
}

/// A random node (the leader too) SIGKILLed at a random time after a
/// checkpoint, twice over, and only that node started again: the others
/// halt on the cut channels (none recovers alone), rejoin by themselves,
/// and resume with it from the last checkpoint committed for all;
/// together they still write exactly the single-node rows.
#[test]
fn a_killed_shuffled_node_restarted_alone_resumes_with_the_rejoined_others_exactly_once() {
    let f = fixture();
    let (expected, etcd, dir) = (&f.expected, &f.etcd, &f.dir);
    kill_twice_and_supervise(dir, etcd, "kills", &[]);
    same_rows(&split_outputs(&dir.join("out"), &NODES), expected);
}

/// A follower killed after the split's final checkpoint committed, before
/// it published (`SLUICE_TEST_CRASH` aborts it there): the others finish
/// without it (its answer is in that checkpoint), and started again alone
/// it publishes its share of that checkpoint and ends, instead of waiting
/// for peers that are gone for good. Together they wrote exactly the
/// single-node rows.
#[test]
fn a_follower_killed_before_it_published_the_end_publishes_alone_when_started_again() {
    let f = fixture();
    let (expected, etcd, dir) = (&f.expected, &f.etcd, &f.dir);
    let shuffle = shuffle_list();
    let mut others = start_with_crashing_n3(&f, "late", &shuffle, "follower-before-shutdown");
    let n3 = others.pop().unwrap();
    let (status, stderr) = n3.wait(WATCHDOG);
    assert!(!status.success(), "n3 did not crash: {stderr}");
    assert!(stderr.contains("SLUICE_TEST_CRASH"), "{stderr}");
    wait_all_of(others, &NODES[..2]);
    // Alone: no peer will ever connect, so it must not wait for one (the
    // channel patience is 60 s).
    let again = node(dir, etcd, "late", "n3", &shuffle);
    let (status, stderr) = again.wait(Duration::from_secs(45));
    assert!(status.success(), "{stderr}");
    assert!(
        stderr.contains("the split's run ended while this node was away"),
        "{stderr}"
    );
    same_rows(&split_outputs(&dir.join("out"), &NODES), expected);
    let finished = cluster_status(etcd, "late").finished_members;
    assert_eq!(finished.len(), 3, "{finished:?}");
}

/// A follower killed as its share ended, around its answer to the
/// leader's shutdown checkpoint: either that checkpoint is aborted (the
/// leader and the other follower rejoin, and all resume from the last
/// checkpoint committed with the follower's new process) or it committed
/// (the others finish, and the new process publishes its share alone).
/// Either way only the killed node is started again, and together they
/// write exactly the single-node rows.
#[test]
fn a_follower_killed_as_its_share_ended_is_the_only_node_started_again() {
    let f = fixture();
    let (expected, etcd, dir) = (&f.expected, &f.etcd, &f.dir);
    let shuffle = shuffle_list();
    let nodes = start_with_crashing_n3(&f, "ended", &shuffle, "follower-share-ended");
    let (_, restarts) = supervise(nodes, |i| node(dir, etcd, "ended", NODES[i], &shuffle));
    assert_eq!(restarts, 1, "only the killed follower is started again");
    same_rows(&split_outputs(&dir.join("out"), &NODES), expected);
}

/// Nodes must agree on the shuffle (a node with other addresses is
/// refused by its sealed catalog), and a shuffled split runs only on the
/// list it was first recorded with.
#[test]
fn a_node_with_another_shuffle_or_list_is_refused_by_name() {
    let base = tempfile::tempdir().unwrap();
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let dir = base.path().join("split");
    write_input(&dir);
    let shuffle = shuffle_list();
    let mut n1 = node(&dir, &etcd, "refuse", "n1", &shuffle);
    // n1 sealed the catalog once it joined.
    let until = Instant::now() + WATCHDOG;
    while cluster_status(&etcd, "refuse").members.is_empty() {
        assert!(Instant::now() < until && n1.running(), "{}", n1.stderr());
        std::thread::sleep(Duration::from_millis(10));
    }
    let other = shuffle_list();
    let (status, stderr) = node(&dir, &etcd, "refuse", "n2", &other).wait(WATCHDOG);
    assert!(!status.success());
    assert!(stderr.contains("option shuffle"), "{stderr}");
    // A list the split was not recorded with.
    let state = format!("file://{}", dir.join("state").display());
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.current_dir(&dir)
        .arg("run")
        .args(["--cluster", &format!("etcd={}", etcd.endpoint())])
        .args(["--cluster-id", "refuse", "--node-id", "n1"])
        .args([
            "--split",
            "n1,n2",
            "--shuffle",
            "n1=127.0.0.1:1,n2=127.0.0.1:2",
        ])
        .args(["--lease-ttl", LEASE, "--state", &state])
        .arg("pipeline.sql")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let (status, stderr) = Run::spawn(c).wait(WATCHDOG);
    assert!(!status.success());
    assert!(
        stderr.contains(
            "error[SLC-CLI-001]: --split n1,n2 would change the split of generation 1 (n1,n2,n3)"
        ) && stderr.contains("still running"),
        "{stderr}"
    );
    n1.kill();
}

/// A shuffled split shrunk from three nodes to two between runs: the
/// three are killed after a checkpoint committed for all, then n1 and n2
/// run with `--split n1,n2`, taking n3's vnodes (its keys, and its files
/// from where it stopped), while n3, started once with the new list,
/// publishes what its last checkpoint committed, gives its keyed state up
/// and leaves. Together the runs write exactly one node's rows.
#[test]
fn a_shuffled_split_shrunk_from_three_nodes_to_two_hands_the_dropped_nodes_keys_over() {
    let f = fixture();
    let state = f.state();
    let addresses = Addresses::new();
    let (three, two) = (addresses.of(&NODES), addresses.of(&["n1", "n2"]));
    let start = |node: &str, list: &str, shuffle: &str| {
        node_of_list(
            &f.dir,
            &f.etcd,
            ("shrink", node),
            (list, shuffle),
            &state,
            &[],
            &[],
        )
    };
    let old: Vec<Run> = NODES
        .iter()
        .map(|n| start(n, &NODES.join(","), &three))
        .collect();
    kill_after_a_cut(&f.etcd, "shrink", old);
    let new: Vec<Run> = NODES.iter().map(|n| start(n, "n1,n2", &two)).collect();
    wait_all(new);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
}

/// SIGKILL every one of `nodes` (of cluster `cluster`) once a checkpoint
/// committed for all of them, while all still run.
fn kill_after_a_cut(etcd: &EtcdServer, cluster: &str, mut nodes: Vec<Run>) {
    until_committed(etcd, cluster, &mut nodes, 0);
    assert!(
        nodes.iter_mut().all(Run::running),
        "the nodes ended before they were killed: grow the input"
    );
    for run in nodes {
        run.signal(libc::SIGKILL);
        let _ = run.wait(WATCHDOG);
    }
}

/// Nodes of cluster `cluster` that say when they take keyed state over
/// (or find their own checkpoint holds it): n2 and n3 of `--split n2,n3`
/// are started, killed after a checkpoint committed for both, and the
/// returned `start(node)` starts a node of `--split n1,n2,n3`. n1, which
/// sorts first, joins only then and leads the grown split from a store
/// with no checkpoint of its own. Also returns the two's last cut.
fn grown_split<'a>(
    f: &'a Fixture,
    cluster: &'a str,
    args: &'a [&'a str],
) -> (impl Fn(usize) -> Run + 'a, u64) {
    let state = f.state();
    let three = shuffle_list();
    let two: Vec<&str> = three.split(',').skip(1).collect();
    let two = two.join(",");
    let log = [(
        "RUST_LOG",
        "warn,sluice_engine::coordinator::moved=info,sluice_engine::pipeline::start=info,\
         sluice::split=info"
            .to_string(),
    )];
    let start = move |node: &str, list: &str, shuffle: &str| {
        node_of_list(
            &f.dir,
            &f.etcd,
            (cluster, node),
            (list, shuffle),
            &state,
            &log,
            args,
        )
    };
    let old: Vec<Run> = ["n2", "n3"]
        .iter()
        .map(|n| start(n, "n2,n3", &two))
        .collect();
    kill_after_a_cut(&f.etcd, cluster, old);
    let cut = committed(&f.etcd, cluster);
    let list = NODES.join(",");
    (move |i: usize| start(NODES[i], &list, &three), cut)
}

/// A shuffled split grown from two nodes to three between runs (see
/// [`grown_split`]). Each key's window, running total and join rows move
/// with its vnode to its new owner (from the old members' last cut), each
/// file is read on from where its old holder stopped, and the three
/// nodes' output with the two's is exactly one node's.
#[test]
fn a_shuffled_split_grown_from_two_nodes_to_three_moves_its_keyed_state_exactly_once() {
    let f = fixture();
    let (start, cut) = grown_split(&f, "grow", &[]);
    let ends = wait_all((0..NODES.len()).map(&start).collect());
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
    // Every node took its keys over from the two's last cut, and n1, new
    // and leading, reserved its checkpoints above the two's ids at once.
    for (node, stderr) in NODES.iter().zip(&ends) {
        assert!(
            !stderr.contains("is already reserved in etcd"),
            "{node}: {stderr}"
        );
        assert!(
            stderr.contains("took over the keyed state of this node's vnodes")
                && stderr.contains(&format!("checkpoint={cut}")),
            "{node}: {stderr}"
        );
    }
}

/// A node of the grown split killed once a checkpoint of the three
/// committed: it and the others (which rejoin) resume from their own
/// checkpoints, which hold the moved state already, instead of taking it
/// from the two's cut again; each row is still written once.
#[test]
fn a_grown_split_killed_after_its_first_cut_resumes_its_own_state() {
    let f = fixture();
    let (start, cut) = grown_split(&f, "regrow", &[]);
    let mut nodes: Vec<Run> = (0..NODES.len()).map(&start).collect();
    until_committed(&f.etcd, "regrow", &mut nodes, cut);
    let victim = (std::process::id() % 3) as usize;
    let killed = nodes[victim].running();
    if killed {
        nodes[victim].signal(libc::SIGKILL);
        let _ = std::mem::replace(&mut nodes[victim], start(victim)).wait(WATCHDOG);
    }
    let (ends, _) = supervise(nodes, &start);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
    if killed {
        resumed_its_own_state(&ends, victim);
    }
}

/// Node `victim` of a grown split, killed after a cut of the three, resumed
/// from its own checkpoint, not from the two's cut.
fn resumed_its_own_state(ends: &[String], victim: usize) {
    assert!(
        ends[victim].contains("its own checkpoint holds their state")
            && !ends[victim].contains("took over the keyed state"),
        "n{}: {}",
        victim + 1,
        ends[victim]
    );
}

/// The grown split's nodes keep one checkpoint each
/// (`checkpoint_retain=1`), so the two's cut the three grew from is
/// deleted from the two's stores once the three committed a cut of their
/// own. A node killed after that resumes from its own checkpoint, which
/// holds its moved keys; it must not need the deleted cut (it used to read
/// that cut before it looked at its own, fail, and never start again,
/// which left the others waiting for it).
#[test]
fn a_grown_split_node_restarted_after_the_cut_it_grew_from_was_pruned_resumes() {
    let f = fixture();
    let (start, cut) = grown_split(&f, "pruned", &["--set", "checkpoint_retain=1"]);
    let mut nodes: Vec<Run> = (0..NODES.len()).map(&start).collect();
    until_committed(&f.etcd, "pruned", &mut nodes, cut);
    let pruned = |n: &str| {
        let manifest = format!("state/nodes/{n}/checkpoints/{cut:020}/MANIFEST");
        !f.dir.join(manifest).exists()
    };
    let until = Instant::now() + WATCHDOG;
    while !(pruned("n2") && pruned("n3")) && nodes.iter_mut().all(Run::running) {
        assert!(Instant::now() < until, "cut {cut} was never pruned");
        std::thread::sleep(Duration::from_millis(5));
    }
    let victim = (std::process::id() % 3) as usize;
    assert!(
        pruned("n2") && pruned("n3") && nodes[victim].running(),
        "the run ended before the cut it grew from was pruned"
    );
    nodes[victim].signal(libc::SIGKILL);
    let _ = std::mem::replace(&mut nodes[victim], start(victim)).wait(WATCHDOG);
    let (ends, _) = supervise(nodes, &start);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
    resumed_its_own_state(&ends, victim);
}

/// Every node's checkpoints on S3 (a real S3-compatible server on
/// loopback): one node killed mid-run and started again (the others
/// rejoin), and the nodes still write each row once.
#[test]
fn shuffled_split_nodes_with_state_on_s3_resume_a_kill_exactly_once() {
    let base = tempfile::tempdir().unwrap();
    let expected = reference(base.path());
    let etcd = rt().block_on(EtcdServer::start()).unwrap();
    let moto = support::moto::Moto::start();
    moto.create_bucket("keyed");
    let dir = base.path().join("split");
    write_input(&dir);
    let shuffle = shuffle_list();
    let one = |i: usize| {
        let env = moto.env();
        node_on(
            &dir,
            &etcd,
            ("s3", NODES[i]),
            &shuffle,
            "s3://keyed/state",
            &env,
        )
    };
    let mut nodes: Vec<Run> = (0..NODES.len()).map(one).collect();
    until_committed(&etcd, "s3", &mut nodes, 0);
    let victim = (std::process::id() % 3) as usize;
    if nodes[victim].running() {
        nodes[victim].signal(libc::SIGKILL);
        let _ = std::mem::replace(&mut nodes[victim], one(victim)).wait(WATCHDOG);
    }
    supervise(nodes, one);
    same_rows(&split_outputs(&dir.join("out"), &NODES), &expected);
}

/// A follower paused (SIGSTOP) past its lease: the leader's checkpoints
/// stop committing once its lease lapsed (its answer will never count),
/// and when it wakes it stops, publishing nothing; the others rejoin, the
/// paused node is started again, and each row is written once.
#[test]
fn a_paused_shuffled_node_is_fenced_and_publishes_nothing() {
    let f = fixture();
    let (expected, etcd, dir) = (&f.expected, &f.etcd, &f.dir);
    let shuffle = shuffle_list();
    let mut nodes = start_all(dir, etcd, "pause", &shuffle);
    until_committed(etcd, "pause", &mut nodes, 0);
    let victim = 1;
    nodes[victim].signal(libc::SIGSTOP);
    // Past its lease (1 s), and the answers it owed were given up.
    std::thread::sleep(Duration::from_secs(3));
    let fenced = committed(etcd, "pause");
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        committed(etcd, "pause"),
        fenced,
        "a checkpoint committed without the paused node"
    );
    nodes[victim].signal(libc::SIGCONT);
    // It wakes without its lease: it stops, publishing nothing.
    let replaced = node(dir, etcd, "pause", NODES[victim], &shuffle);
    let (status, stderr) = std::mem::replace(&mut nodes[victim], replaced).wait(WATCHDOG);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("SLC-CLU"), "{stderr}");
    // The others rejoined and finish with its new process.
    supervise(nodes, |i| node(dir, etcd, "pause", NODES[i], &shuffle));
    same_rows(&split_outputs(&dir.join("out"), &NODES), expected);
}

/// The leader paused (SIGSTOP) past its lease: its term ends without its
/// finish, so each follower stops following that run and rejoins
/// (`run_outlived`), waiting for the designated leader's next term; the
/// paused leader wakes fenced and stops, publishing nothing, and its new
/// process leads the rest of the run. Each row is written once.
#[test]
fn a_paused_leader_ends_its_run_and_the_followers_rejoin_its_next_term() {
    let f = fixture();
    let (expected, etcd, dir) = (&f.expected, &f.etcd, &f.dir);
    let shuffle = shuffle_list();
    let mut nodes = start_all(dir, etcd, "paused-leader", &shuffle);
    until_committed(etcd, "paused-leader", &mut nodes, 0);
    nodes[0].signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(3));
    nodes[0].signal(libc::SIGCONT);
    let replaced = node(dir, etcd, "paused-leader", "n1", &shuffle);
    let (status, stderr) = std::mem::replace(&mut nodes[0], replaced).wait(WATCHDOG);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("SLC-CLU"), "{stderr}");
    let (ends, _) = supervise(nodes, |i| {
        node(dir, etcd, "paused-leader", NODES[i], &shuffle)
    });
    for (n, stderr) in NODES.iter().zip(&ends).skip(1) {
        assert!(stderr.contains("lost its term"), "{n}: {stderr}");
    }
    same_rows(&split_outputs(&dir.join("out"), &NODES), expected);
}

/// A shuffled split whose member list changes at random several times
/// (each change grows or shrinks it, the leader's node among those that
/// come and go), every node of a list killed at a random time once a
/// checkpoint of that list committed, and each dropped node started once
/// with the next list. The last list runs to the end; all the runs
/// together write exactly one node's rows. `SLUICE_TEST_SEED` replays a
/// printed seed.
#[test]
fn a_shuffled_split_rescaled_at_random_writes_each_row_once() {
    let f = fixture();
    let mut lists = RandomLists::new(&f, "random");
    let mut current: &[&str] = lists.first();
    let mut dropped: Vec<&str> = Vec::new();
    for change in 0..3 {
        eprintln!("change {change}: {current:?}, {dropped:?} dropped");
        let mut nodes: Vec<Run> = current.iter().map(|n| lists.start(n, current)).collect();
        let leaving: Vec<Run> = dropped.iter().map(|n| lists.start(n, current)).collect();
        let before = committed(&f.etcd, "random");
        until_committed(&f.etcd, "random", &mut nodes, before);
        std::thread::sleep(Duration::from_millis(lists.rng.next() % 200));
        for run in nodes {
            run.signal(libc::SIGKILL);
            let _ = run.wait(WATCHDOG);
        }
        wait_all_of(leaving, &dropped);
        let next = lists.other(current);
        dropped = current
            .iter()
            .filter(|n| !next.contains(n))
            .copied()
            .collect();
        current = next;
    }
    eprintln!("last: {current:?}, {dropped:?} dropped");
    let mut nodes: Vec<Run> = current.iter().map(|n| lists.start(n, current)).collect();
    nodes.extend(dropped.iter().map(|n| lists.start(n, current)));
    let names: Vec<&str> = current.iter().chain(&dropped).copied().collect();
    wait_all_of(nodes, &names);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
}
