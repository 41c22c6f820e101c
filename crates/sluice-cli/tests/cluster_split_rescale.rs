//! `sluice cluster rescale`: a running split's member list changes while
//! its nodes run. Real `sluice` processes on one real etcd: the running
//! nodes stop at once and start again in their processes with the new
//! list, the nodes it adds are started with it, and a node it drops
//! publishes what its last checkpoint committed and ends. Together they
//! write exactly the rows of one uninterrupted single-node run; every
//! refusal of the command is by name.

mod support;

use sluice_cluster::testing::EtcdServer;
use support::keyed_split::*;
use support::shuffled::*;
use support::*;

/// `sluice cluster rescale --split LIST --shuffle ...` for cluster
/// `cluster`: succeeds, and says what it asked.
fn rescale(etcd: &EtcdServer, cluster: &str, (list, shuffle): (&str, &str)) {
    let (ok, said) = rescale_with(etcd, cluster, &["--split", list, "--shuffle", shuffle]);
    assert!(
        ok && said.contains(&format!("start again with {list}")),
        "{said}"
    );
}

/// The generation of cluster `cluster`'s split record (0 before the
/// first).
fn generation(etcd: &EtcdServer, cluster: &str) -> u64 {
    let rt = rt();
    let client = rt
        .block_on(sluice_cluster::status::connect(&etcd.endpoints()))
        .unwrap();
    let keys = sluice_cluster::ClusterKeys::new(cluster).unwrap();
    let (record, _) = rt
        .block_on(sluice_cluster::split_record::read(&client, &keys))
        .unwrap();
    record.map_or(0, |r| r.generation)
}

/// Every way `sluice cluster rescale` refuses, each by name, and what a
/// request it takes records: the split's generation, the sorted list, and
/// the shuffle list in its canonical order.
#[test]
fn a_rescale_request_is_refused_by_name_unless_it_changes_a_running_split() {
    use sluice_cluster::split_record::{self, SplitRecord};
    use sluice_cluster::{split_rescale, ClusterKeys};
    let rt = rt();
    let etcd = rt.block_on(EtcdServer::start()).unwrap();
    let client = rt
        .block_on(sluice_cluster::status::connect(&etcd.endpoints()))
        .unwrap();
    let record = |cluster: &str, shuffle: Option<&str>| {
        let keys = ClusterKeys::new(cluster).unwrap();
        let r = SplitRecord {
            generation: 4,
            members: vec!["n1".into(), "n2".into()],
            previous: None,
            shuffle: shuffle.map(str::to_string),
        };
        rt.block_on(split_record::replace(&client, &keys, &r, 0, &[]))
            .unwrap()
            .unwrap();
    };
    record("keyed", Some("n1=127.0.0.1:1,n2=127.0.0.1:2"));
    record("rows", None);
    let shuffle = "n3=127.0.0.1:3,n1=127.0.0.1:1,n2=127.0.0.1:2";
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "none",
            &["--split", "n1,n2,n3"],
            "cluster 'none' runs no split (--split)",
        ),
        (
            "keyed",
            &["--split", "n2,n1", "--shuffle", shuffle],
            "generation 4 of the split already runs with this list",
        ),
        (
            "keyed",
            &["--split", "n1,n2,n3"],
            "runs with --shuffle: give --shuffle with an address for each node",
        ),
        (
            "keyed",
            &["--split", "n1,n2,n3", "--shuffle", "n1=127.0.0.1:1"],
            "--shuffle 'n1=127.0.0.1:1'",
        ),
        (
            "rows",
            &["--split", "n1,n2,n3", "--shuffle", shuffle],
            "runs without one (option shuffle)",
        ),
        ("rows", &["--split", "n1,n1"], "node 'n1' is listed twice"),
        ("rows", &["--split", "n1,n/2"], "n/2"),
        ("rows", &["--split", ","], "no node given"),
    ];
    for (cluster, args, expected) in cases {
        let (ok, said) = rescale_with(&etcd, cluster, args);
        assert!(!ok && said.contains(expected), "{cluster} {args:?}: {said}");
    }
    let keys = ClusterKeys::new("keyed").unwrap();
    assert!(rt
        .block_on(split_rescale::read(&client, &keys, 4))
        .unwrap()
        .is_none());
    let (ok, said) = rescale_with(
        &etcd,
        "keyed",
        &["--split", "n3,n1,n2", "--shuffle", shuffle],
    );
    assert!(
        ok && said.contains("(n1,n2) start again with n1,n2,n3"),
        "{said}"
    );
    let asked = rt.block_on(split_rescale::read(&client, &keys, 4)).unwrap();
    assert_eq!(
        asked,
        Some(split_rescale::RescaleRequest {
            from_generation: 4,
            members: vec!["n1".into(), "n2".into(), "n3".into()],
            shuffle: Some("n1=127.0.0.1:1,n2=127.0.0.1:2,n3=127.0.0.1:3".into()),
        })
    );
    // One request per generation.
    let (ok, said) = rescale_with(
        &etcd,
        "keyed",
        &["--split", "n1", "--shuffle", "n1=127.0.0.1:1"],
    );
    assert!(
        !ok && said.contains("a change of generation 4 (n1,n2) to n1,n2,n3 is already requested"),
        "{said}"
    );
    // `sluice cluster status` shows the split and the pending request.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "status", "--cluster"])
        .arg(format!("etcd={}", etcd.endpoint()))
        .args(["--cluster-id", "keyed"])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && shown
                .contains("split generation 4: n1,n2 (shuffled); rescale to n1,n2,n3 requested"),
        "{shown}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another generation's nodes see no request.
    assert!(rt
        .block_on(split_rescale::read(&client, &keys, 5))
        .unwrap()
        .is_none());
}

/// A running shuffled split asked to grow (`sluice cluster rescale`): n2
/// and n3 of `--split n2,n3` stop as they see the request, without a
/// checkpoint, and start again in their processes with `n1,n2,n3`; n1,
/// started with that list, waits for them. Every node takes its keys
/// over from the two's last cut, and the output is exactly one node's.
#[test]
fn a_running_shuffled_split_asked_to_grow_hands_keys_over_to_the_new_node() {
    let f = fixture();
    let state = f.state();
    let addresses = Addresses::new();
    let (three, two) = (addresses.of(&NODES), addresses.of(&["n2", "n3"]));
    let log = [(
        "RUST_LOG",
        "warn,sluice_engine::coordinator::moved=info".to_string(),
    )];
    let start = |node: &str, list: &str, shuffle: &str| {
        node_of_list(
            &f.dir,
            &f.etcd,
            ("live-grow", node),
            (list, shuffle),
            &state,
            &log,
            &[],
        )
    };
    let mut old: Vec<Run> = ["n2", "n3"]
        .iter()
        .map(|n| start(n, "n2,n3", &two))
        .collect();
    until_committed(&f.etcd, "live-grow", &mut old, 0);
    assert!(old.iter_mut().all(Run::running), "grow the input");
    rescale(&f.etcd, "live-grow", ("n1,n2,n3", &three));
    let mut nodes = vec![start("n1", "n1,n2,n3", &three)];
    nodes.extend(old);
    let ends = wait_all_of(nodes, &["n1", "n2", "n3"]);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
    for (node, stderr) in ["n1", "n2", "n3"].iter().zip(&ends) {
        assert!(
            stderr.contains("took over the keyed state of this node's vnodes"),
            "{node}: {stderr}"
        );
    }
    assert_restarted(&["n2", "n3"], &ends[1..]);
}

/// A running shuffled split of three asked to shrink to n1 and n2: all
/// three stop and start again with the new list; n3, dropped, publishes
/// what its last checkpoint committed and ends, and n1 and n2 take its
/// keys and files over. The output is exactly one node's.
#[test]
fn a_running_shuffled_split_asked_to_shrink_hands_the_dropped_nodes_keys_over() {
    let f = fixture();
    let state = f.state();
    let addresses = Addresses::new();
    let (three, two) = (addresses.of(&NODES), addresses.of(&["n1", "n2"]));
    let list = NODES.join(",");
    let mut nodes: Vec<Run> = NODES
        .iter()
        .map(|n| {
            node_of_list(
                &f.dir,
                &f.etcd,
                ("live-shrink", n),
                (&list, &three),
                &state,
                &[],
                &[],
            )
        })
        .collect();
    until_committed(&f.etcd, "live-shrink", &mut nodes, 0);
    assert!(nodes.iter_mut().all(Run::running), "grow the input");
    rescale(&f.etcd, "live-shrink", ("n1,n2", &two));
    let ends = wait_all(nodes);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
    assert_restarted(&NODES, &ends);
    assert_dropped("n3", &ends[2]);
}

/// Live changes among every list of one to three nodes, chosen at random
/// (`SLUICE_TEST_SEED` replays a printed seed): each is asked for once a
/// checkpoint of the list before committed, the nodes it adds are started
/// (a node dropped earlier included), and the others stop and start again
/// or leave by themselves. Together they write exactly one node's rows.
#[test]
fn a_running_shuffled_split_rescaled_at_random_writes_each_row_once() {
    let f = fixture();
    let mut lists = RandomLists::new(&f, "live-random");
    let mut current: &[&str] = lists.first();
    let mut procs: Vec<(&str, Run)> = current
        .iter()
        .map(|n| (*n, lists.start(n, current)))
        .collect();
    for change in 0..2u64 {
        let next = lists.other(current);
        let deadline = std::time::Instant::now() + WATCHDOG;
        let running = |procs: &mut Vec<(&str, Run)>| procs.iter_mut().any(|(_, r)| r.running());
        // The change before was carried out (the record is of its
        // generation): until then a new request is refused as one more
        // for the old generation, and a checkpoint the old list commits
        // meanwhile must not count.
        while generation(&f.etcd, "live-random") <= change && running(&mut procs) {
            assert!(
                std::time::Instant::now() < deadline,
                "generation {} never recorded",
                change + 1
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let before = committed(&f.etcd, "live-random");
        while committed(&f.etcd, "live-random") <= before && running(&mut procs) {
            assert!(
                std::time::Instant::now() < deadline,
                "no checkpoint after {before}"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if !running(&mut procs) {
            eprintln!("the split ended before change {change}");
            break;
        }
        // A node the last change dropped publishes and ends by itself
        // (before it can be started again for this one).
        for (name, run) in procs.iter_mut() {
            if !current.contains(name) {
                while run.running() {
                    assert!(std::time::Instant::now() < deadline, "{name} never left");
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(lists.rng.next() % 200));
        eprintln!("change {change}: {current:?} to {next:?}");
        let list = next.join(",");
        rescale(&f.etcd, "live-random", (&list, &lists.shuffle_of(next)));
        for n in next {
            if !procs
                .iter_mut()
                .any(|(name, run)| name == n && run.running())
            {
                procs.push((n, lists.start(n, next)));
            }
        }
        current = next;
    }
    let names: Vec<&str> = procs.iter().map(|(n, _)| *n).collect();
    wait_all_of(procs.into_iter().map(|(_, run)| run).collect(), &names);
    same_rows(&split_outputs(&f.dir.join("out"), &NODES), &f.expected);
}
