//! The vnode hash and rendezvous placement: golden values (the hash is an
//! on-disk contract) and the minimal-movement property.

use proptest::prelude::*;
use sluice_cluster::vnodes::place;
use sluice_cluster::{vnode_of, VnodeCount};

#[test]
fn vnode_of_is_pinned() {
    let count = VnodeCount::default();
    // Canonical encodings (sluice-engine process/key.rs, format 1): a null,
    // BIGINT 42, and the string 'alice'.
    let null = [0x00u8];
    let int42 = [0x01, 0, 0, 0, 0, 0, 0, 0, 42];
    let mut alice = vec![0x01, 0, 0, 0, 5];
    alice.extend_from_slice(b"alice");
    let got = [
        vnode_of(&[], count),
        vnode_of(&null, count),
        vnode_of(&int42, count),
        vnode_of(&alice, count),
        vnode_of(&int42, VnodeCount::new(1024).expect("count")),
    ];
    assert_eq!(got, GOLDEN);
    // XXH3-64 of the empty input with seed 0 is 0x2D06800538D394C2 (the
    // xxHash specification's test vector), so vnode 0xC2 of 256.
    assert_eq!(vnode_of(&[], count), 0xC2);
}

const GOLDEN: [u32; 5] = [194, 219, 228, 68, 996];

fn members(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node-{i}")).collect()
}

proptest! {
    #[test]
    fn removing_a_member_moves_only_its_vnodes(n in 2usize..8, gone in 0usize..8, count in 1u32..600) {
        let gone = gone % n;
        let count = VnodeCount::new(count).expect("count");
        let all = members(n);
        let mut rest = all.clone();
        let leaver = rest.remove(gone);
        let before = place(count, &all);
        let after = place(count, &rest);
        for (v, (&b, &a)) in before.iter().zip(&after).enumerate() {
            let (b, a) = (&all[b as usize], &rest[a as usize]);
            if *b != leaver {
                prop_assert_eq!(a, b, "vnode {} moved though {} stayed", v, b);
            }
        }
    }

    #[test]
    fn adding_a_member_moves_vnodes_only_to_it(n in 1usize..8, count in 1u32..600) {
        let count = VnodeCount::new(count).expect("count");
        let old = members(n);
        let mut new = old.clone();
        new.push("joiner".to_string());
        let before = place(count, &old);
        let after = place(count, &new);
        for (&b, &a) in before.iter().zip(&after) {
            let (b, a) = (&old[b as usize], &new[a as usize]);
            prop_assert!(a == b || a == "joiner");
        }
    }
}
