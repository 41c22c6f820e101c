//! Vnode placement of a keyed process function: the hooks of the spec's
//! "private cluster execution".
//!
//! In a cluster, a key belongs to one of a fixed number of vnodes and each
//! vnode to one owner per assignment generation. A processor given a
//! [`VnodePlacement`] handles only the keys of the vnodes it owns (a key of
//! another vnode is refused: routing sent it to the wrong owner), and
//! numbers activations per vnode: an activation id is
//!
//! ```text
//!   63                              16 15            0
//!  ┌──────────────────────────────────┬───────────────┐
//!  │ sequence within the vnode (48 b)  │ vnode index   │
//!  └──────────────────────────────────┴───────────────┘
//! ```
//!
//! The sequence is checkpointed per vnode and moves with the vnode's state,
//! so a key's activation ids depend only on its vnode's own input and
//! watermark cuts, never on which owner runs it or on which other vnodes
//! share that owner: one owner of every vnode and N owners of a share each
//! produce the same ids, and a replay after recovery reproduces them.
//!
//! The vnode of a key is `xxh3_64(key, seed 0) mod count`, over the
//! canonical key encoding (`key.rs`). It is persisted (state is filed by
//! vnode), so **neither the algorithm, the seed nor the reduction may ever
//! change**; `sluice-cluster`'s golden-value test pins it, and the cluster
//! crate calls this function rather than keeping a copy.

use arrow::array::{ArrayRef, BooleanArray};
use twox_hash::XxHash3_64;

/// The largest vnode count: a vnode index fits the id's low 16 bits.
pub const MAX_VNODE_COUNT: u32 = 1 << VNODE_INDEX_BITS;

/// Bits of an activation id that hold the vnode index.
pub const VNODE_INDEX_BITS: u32 = 16;

/// Seed of the key → vnode hash (never change).
const VNODE_SEED: u64 = 0;

/// The vnode of canonical key `key` among `count` vnodes (`count` is 1 to
/// [`MAX_VNODE_COUNT`]; 0 is treated as 1).
pub fn vnode_of(key: &[u8], count: u32) -> u32 {
    let hash = XxHash3_64::oneshot_with_seed(VNODE_SEED, key);
    // The remainder is below `count`, itself a u32.
    u32::try_from(hash % u64::from(count.max(1))).unwrap_or(0)
}

/// The id of the `sequence`-th activation of `vnode`.
pub fn activation_id(sequence: u64, vnode: u32) -> u64 {
    (sequence << VNODE_INDEX_BITS) | u64::from(vnode & (MAX_VNODE_COUNT - 1))
}

/// The (sequence, vnode) an id of a placed processor encodes.
pub fn split_activation_id(id: u64) -> (u64, u32) {
    let vnode = u32::try_from(id & u64::from(MAX_VNODE_COUNT - 1)).unwrap_or(0);
    (id >> VNODE_INDEX_BITS, vnode)
}

/// The vnodes one owner holds, out of a fixed count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VnodePlacement {
    owned: Vec<bool>,
}

impl VnodePlacement {
    /// An owner of `owned` among `count` vnodes; refused when the count is
    /// out of range or a vnode is not below it.
    pub fn new(count: u32, owned: impl IntoIterator<Item = u32>) -> Result<Self, String> {
        if count == 0 || count > MAX_VNODE_COUNT {
            return Err(format!(
                "vnode count {count} is out of range (1 to {MAX_VNODE_COUNT})"
            ));
        }
        let mut flags = vec![false; count as usize];
        for v in owned {
            let slot = flags
                .get_mut(v as usize)
                .ok_or_else(|| format!("vnode {v} is not below the vnode count {count}"))?;
            *slot = true;
        }
        Ok(Self { owned: flags })
    }

    /// The owner of every one of `count` vnodes (a single node).
    pub fn all(count: u32) -> Result<Self, String> {
        Self::new(count, 0..count)
    }

    /// The vnode count.
    pub fn count(&self) -> u32 {
        u32::try_from(self.owned.len()).unwrap_or(MAX_VNODE_COUNT)
    }

    /// Whether this owner holds `vnode`.
    pub fn owns(&self, vnode: u32) -> bool {
        self.owned.get(vnode as usize).copied().unwrap_or(false)
    }

    /// The vnodes held, ascending.
    pub fn owned(&self) -> Vec<u32> {
        (0..self.count()).filter(|v| self.owns(*v)).collect()
    }

    /// The vnode of canonical key `key` under this placement's count.
    pub fn vnode_of(&self, key: &[u8]) -> u32 {
        vnode_of(key, self.count())
    }

    /// Which of `rows` rows have a key of a vnode this owner holds, given
    /// the key's values (`key_columns`, in key order, as the exchange in
    /// front of the operator evaluates them): what a node keeps of another
    /// node's operator state when vnodes move to it.
    pub fn rows_owned(
        &self,
        key_columns: &[ArrayRef],
        rows: usize,
    ) -> Result<BooleanArray, String> {
        let keys = super::key::encode_keys(key_columns, rows)?;
        Ok(keys
            .iter()
            .map(|k| Some(self.owns(self.vnode_of(k))))
            .collect())
    }

    /// Take `vnodes` over (at a vnode transition).
    pub(crate) fn adopt(&mut self, vnodes: &[u32]) {
        for v in vnodes {
            if let Some(slot) = self.owned.get_mut(*v as usize) {
                *slot = true;
            }
        }
    }

    /// Give `vnodes` up (at a vnode transition).
    pub(crate) fn release(&mut self, vnodes: &[u32]) {
        for v in vnodes {
            if let Some(slot) = self.owned.get_mut(*v as usize) {
                *slot = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_keep_the_sequence_and_the_vnode() {
        for (seq, vnode) in [(0, 0), (1, 255), (7, 65_535), ((1 << 48) - 1, 3)] {
            assert_eq!(split_activation_id(activation_id(seq, vnode)), (seq, vnode));
        }
        assert_eq!(activation_id(2, 5), 0x2_0005);
    }

    #[test]
    fn placements_refuse_what_they_cannot_hold() {
        assert_eq!(
            VnodePlacement::new(0, []).unwrap_err(),
            "vnode count 0 is out of range (1 to 65536)"
        );
        assert!(VnodePlacement::new(65_537, []).is_err());
        assert_eq!(
            VnodePlacement::new(4, [4]).unwrap_err(),
            "vnode 4 is not below the vnode count 4"
        );
        let p = VnodePlacement::new(8, [1, 5]).unwrap();
        assert_eq!(p.owned(), vec![1, 5]);
        assert!(p.owns(5) && !p.owns(2) && !p.owns(99));
        assert_eq!(VnodePlacement::all(3).unwrap().owned(), vec![0, 1, 2]);
    }

    #[test]
    fn the_empty_key_is_the_xxh3_test_vector() {
        // XXH3-64 of the empty input, seed 0: 0x2D06800538D394C2.
        assert_eq!(vnode_of(&[], 256), 0xC2);
        assert_eq!(vnode_of(&[], 1), 0);
    }
}
