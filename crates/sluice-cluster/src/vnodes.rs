//! Vnodes: the fixed partition domain keyed operators are placed by.
//!
//! A key's vnode is `xxh3_64(key, seed 0) mod vnode_count`, where `key` is
//! the canonical partition key encoding (format version 1, documented in
//! `sluice-engine/src/process/key.rs`). The engine owns that function
//! (`sluice_engine::process::placement::vnode_of`, where placed process
//! functions use it); this module calls it. xxh3 (XXH3-64 as specified by
//! the xxHash project, via `twox-hash`) is fast on short keys and its
//! output is fixed by its specification, so it is safe to persist:
//! checkpointed state is filed by vnode, and a different hash would send a
//! key's state to another vnode after an upgrade. **Neither the algorithm,
//! the seed nor the reduction may ever change**; golden values in the tests
//! pin them.
//!
//! Placement is rendezvous (highest-random-weight) hashing: each vnode goes
//! to the live member with the highest `xxh3_64(len(node) ‖ node ‖ vnode,
//! seed 0x736c_7569_6365)` (`len` as 4-byte big-endian, `vnode` as 4-byte
//! big-endian; ties, which need a 64-bit collision, go to the larger node
//! id). A vnode's owner changes only when its owner leaves or a new node
//! out-weighs it, so a membership change moves the minimum: the leaver's
//! vnodes, or the joiner's fair share — nothing else.

use twox_hash::XxHash3_64;

use crate::error::{ClusterError, Result};

/// The default vnode count of a new cluster.
pub const DEFAULT_VNODE_COUNT: u32 = 256;

/// The largest supported vnode count (a vnode index fits the low 16 bits
/// of a placed process function's activation ids).
pub const MAX_VNODE_COUNT: u32 = sluice_engine::process::placement::MAX_VNODE_COUNT;

/// Seed of the rendezvous weight (never change): "sluice" in ASCII.
const RENDEZVOUS_SEED: u64 = 0x736c_7569_6365;

/// A cluster's fixed vnode count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VnodeCount(u32);

impl VnodeCount {
    /// Validate a count (1 to [`MAX_VNODE_COUNT`]).
    pub fn new(count: u32) -> Result<Self> {
        if count == 0 || count > MAX_VNODE_COUNT {
            return Err(ClusterError::InvalidVnodeCount {
                count,
                max: MAX_VNODE_COUNT,
            });
        }
        Ok(Self(count))
    }

    /// The count.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl Default for VnodeCount {
    fn default() -> Self {
        Self(DEFAULT_VNODE_COUNT)
    }
}

/// The vnode of a canonical partition key.
pub fn vnode_of(key: &[u8], count: VnodeCount) -> u32 {
    sluice_engine::process::placement::vnode_of(key, count.0)
}

/// The rendezvous weight of `node` for `vnode`.
fn weight(node: &str, vnode: u32) -> u64 {
    let mut input = Vec::with_capacity(8 + node.len());
    input.extend_from_slice(&u32::try_from(node.len()).unwrap_or(u32::MAX).to_be_bytes());
    input.extend_from_slice(node.as_bytes());
    input.extend_from_slice(&vnode.to_be_bytes());
    XxHash3_64::oneshot_with_seed(RENDEZVOUS_SEED, &input)
}

/// The owner of every vnode (index into `members`) by rendezvous hashing.
/// `members` must be non-empty; the result is empty otherwise.
pub fn place(count: VnodeCount, members: &[String]) -> Vec<u32> {
    (0..count.0)
        .filter_map(|vnode| {
            members
                .iter()
                .enumerate()
                .max_by(|(_, a), (_, b)| {
                    weight(a, vnode)
                        .cmp(&weight(b, vnode))
                        .then_with(|| a.cmp(b))
                })
                .and_then(|(i, _)| u32::try_from(i).ok())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnode_count_is_bounded() {
        assert_eq!(
            VnodeCount::new(0).expect_err("zero").to_string(),
            "SLC-CLU-009: vnode count 0 is out of range (1 to 65536)"
        );
        assert!(VnodeCount::new(65_537).is_err());
        assert_eq!(VnodeCount::default().get(), 256);
    }

    #[test]
    fn placement_is_total_and_deterministic() {
        let members = vec!["b".to_string(), "a".to_string(), "c".to_string()];
        let count = VnodeCount::default();
        let owners = place(count, &members);
        assert_eq!(owners.len(), 256);
        assert!(owners.iter().all(|&o| o < 3));
        assert_eq!(owners, place(count, &members));
        // Every member gets a share (256 vnodes over 3 nodes).
        for i in 0..3 {
            assert!(owners.iter().filter(|&&o| o == i).count() > 40);
        }
        assert!(place(count, &[]).is_empty());
    }
}
