use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, StringArray};

use super::*;

fn split(node: &str, owned: &[u32], count: u32) -> SourceSplit {
    SourceSplit::new(
        node,
        VnodePlacement::new(count, owned.iter().copied()).unwrap(),
    )
    .unwrap()
}

/// A file's vnode is the vnode a process function's one-column string key
/// of the same text has: one encoding, one hash.
#[test]
fn a_files_vnode_is_its_key_as_a_canonical_string_key() {
    for key in ["", "a.csv", "2024/01/x.csv", "ünïcode.json"] {
        let column: ArrayRef = Arc::new(StringArray::from(vec![key]));
        let encoded = crate::process::key::encode_key(&[column], 0).unwrap();
        for count in [1, 7, 256, 65_536] {
            assert_eq!(
                file_vnode(key, count),
                vnode_of(&encoded, count),
                "{key} {count}"
            );
        }
    }
}

#[test]
fn shares_of_a_placement_partition_the_keys() {
    let count = 16;
    let halves = [
        split("n1", &(0..8).collect::<Vec<_>>(), count),
        split("n2", &(8..16).collect::<Vec<_>>(), count),
    ];
    let shares: Vec<_> = halves.iter().map(SourceSplit::file_share).collect();
    for i in 0..200 {
        let key = format!("part-{i}.csv");
        let holders = shares.iter().filter(|s| s.holds(&key)).count();
        assert_eq!(holders, 1, "{key}");
    }
    assert_eq!(shares[0].describe(), "node n1: 8 of 16 vnodes");
}

#[test]
fn each_node_writes_its_own_sink_file() {
    let s = split("n-1", &[0], 1);
    for (declared, mine) in [
        ("/out/result.csv", "/out/n-1/result.csv"),
        ("/out/result.tar.gz", "/out/n-1/result.tar.gz"),
        ("/out/result", "/out/n-1/result"),
        ("rel/x.json", "rel/n-1/x.json"),
        ("x.json", "n-1/x.json"),
    ] {
        assert_eq!(
            s.sink_path(Path::new(declared)),
            Path::new(mine),
            "{declared}"
        );
    }
}

#[test]
fn node_names_are_checked() {
    let p = || VnodePlacement::all(4).unwrap();
    for ok in ["n1", "node_2", "a.b-c", &"x".repeat(64)] {
        assert!(SourceSplit::new(ok, p()).is_ok(), "{ok}");
    }
    for bad in ["", ".hidden", "a/b", "a b", "ü", &"x".repeat(65)] {
        let e = SourceSplit::new(bad, p()).expect_err(bad).to_string();
        assert!(e.contains("split node name"), "{bad}: {e}");
    }
}

/// Renamed sink paths of different nodes never meet, whatever the node
/// names and declared paths (suffixes did: `1` and `eu-1`).
#[test]
fn two_nodes_never_write_one_sink_file() {
    let nodes = ["1", "eu-1", "eu", "n.1", "a_b"];
    let declared = [
        "out.csv",
        "out-eu.csv",
        "out-1.csv",
        "eu/out.csv",
        "1/out.csv",
        "out.eu.csv",
    ];
    let mut seen = std::collections::HashMap::new();
    for n in nodes {
        let s = split(n, &[0], 1);
        for d in declared {
            let path = s.sink_path(Path::new("/x").join(d).as_path());
            if let Some(other) = seen.insert(path.clone(), n) {
                assert_eq!(other, n, "{} written by {other} and {n}", path.display());
            }
        }
    }
}

/// A share's identity names its generation from generation 2 (generation
/// 0 and 1 keep the identity of a split that counts none), and an offset
/// checkpointed under it tells which.
#[test]
fn share_identities_name_their_generation_from_two_on() {
    let at = |generation: u64| {
        split("n1", &[0, 3], 8)
            .with_generation(generation)
            .file_share()
            .identity()
            .to_string()
    };
    assert_eq!(at(0), at(1));
    assert_ne!(at(1), at(2));
    assert!(at(7).ends_with("@g7"), "{}", at(7));
    let offset = |identity: String| {
        serde_json::json!({"file_index": 0, "file": "in/a.csv", "rows_consumed": 3, "share": identity})
            .to_string()
    };
    assert_eq!(offset_generation(&offset(at(7))), Some(7));
    assert_eq!(offset_generation(&offset(at(1))), None);
    assert_eq!(offset_generation("not an offset"), None);
    // A Nexmark source's offsets name their share's generation too (a
    // split that read Nexmark counted as never having run after its first
    // list change).
    let nexmark = |generation: u64| {
        use sluice_connectors::{BatchReader, NexmarkConfig, NexmarkReader, NexmarkStream};
        let stream = NexmarkStream::Bid;
        let mut cfg = NexmarkConfig::new(stream, stream.schema()).unwrap();
        cfg.events = Some(1000);
        cfg.share = Some(
            split("n1", &[0, 3], 8)
                .with_generation(generation)
                .file_share(),
        );
        let mut reader = NexmarkReader::open(cfg).unwrap();
        while reader
            .next_batch()
            .unwrap()
            .is_some_and(|b| b.num_rows() == 0)
        {}
        reader.offset().unwrap()
    };
    assert_eq!(offset_generation(&nexmark(4)), Some(4));
    assert_eq!(offset_generation(&nexmark(1)), None);
}
