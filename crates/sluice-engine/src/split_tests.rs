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
        ("/out/result.csv", "/out/result-n-1.csv"),
        ("/out/result.tar.gz", "/out/result.tar-n-1.gz"),
        ("/out/result", "/out/result-n-1"),
        ("rel/x.json", "rel/x-n-1.json"),
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
