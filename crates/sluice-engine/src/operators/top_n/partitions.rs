//! The top-N's partitions: a hash index over their keys, and the
//! partitions themselves in a slab addressed by a dense id.
//!
//! Why not a `HashMap<Key, Partition>`: a partition is about 150 bytes, and
//! a map stores its values in its buckets. Every time the map doubled, it
//! allocated a new table for all of them (fresh pages the kernel had to
//! fault in and clear) and moved them; q18's 292,586 partitions spent a
//! quarter of the pipeline's time there. The index here holds only a hash
//! and an id (16 bytes a bucket, so a doubling moves little), and the slab
//! grows in fixed chunks that never move. The lists that name a partition
//! (the dirty list, the closing times) hold its id, so visiting one is an
//! index into the slab, not a second hash lookup.
//!
//! ```text
//!   index: HashTable<(hash, id)>        slab: chunks of CHUNK slots
//!   ┌──────────┬────┐                   ┌───────────────────────────┐
//!   │ 0x9f3e.. │ 17 │ ───────────────▶  │ [17] Partition { key, .. } │
//!   └──────────┴────┘                   └───────────────────────────┘
//! ```
//!
//! A removed partition's slot goes on a free list and is reused by the
//! next new partition. Ids are `u32`: more than four billion partitions of
//! one operator would not fit in memory anyway.

use std::hash::{BuildHasher, Hasher};

use hashbrown::HashTable;
use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

/// Slots per chunk of the slab (a power of two).
const CHUNK: usize = 4096;

/// A partition's dense id: its slot in the slab.
pub(super) type PartId = u32;

/// Partitions of type `P`, found by their key bytes.
pub(super) struct Partitions<P> {
    index: HashTable<(u64, PartId)>,
    /// Each chunk is allocated with capacity `CHUNK` and never grows past
    /// it, so a slot never moves.
    chunks: Vec<Vec<Option<Slot<P>>>>,
    free: Vec<PartId>,
    hasher: FxBuildHasher,
}

/// Keys up to this many bytes are kept in their slot (two BIGINT columns
/// in row format take 18): comparing a found key then reads no second
/// allocation, and a new partition makes none for its key.
const INLINE_KEY: usize = 24;

/// One live partition and what finds it again.
struct Slot<P> {
    hash: u64,
    key: SmallVec<[u8; INLINE_KEY]>,
    part: P,
}

impl<P> Default for Partitions<P> {
    fn default() -> Self {
        Self {
            index: HashTable::new(),
            chunks: Vec::new(),
            free: Vec::new(),
            hasher: FxBuildHasher,
        }
    }
}

impl<P> Partitions<P> {
    fn hash(&self, key: &[u8]) -> u64 {
        let mut h = self.hasher.build_hasher();
        h.write(key);
        h.finish()
    }

    fn slot(&self, id: PartId) -> Option<&Slot<P>> {
        let id = id as usize;
        self.chunks.get(id / CHUNK)?.get(id % CHUNK)?.as_ref()
    }

    fn slot_mut(&mut self, id: PartId) -> Option<&mut Option<Slot<P>>> {
        let id = id as usize;
        self.chunks.get_mut(id / CHUNK)?.get_mut(id % CHUNK)
    }

    /// The partition with key `key`, created with `make` if there is none;
    /// with its id and whether it was created. None only if the index and
    /// the slab disagree, which is a bug.
    pub fn find_or_insert(
        &mut self,
        key: &[u8],
        make: impl FnOnce() -> P,
    ) -> Option<(PartId, &mut P, bool)> {
        let hash = self.hash(key);
        let chunks = &self.chunks;
        let found = self.index.find(hash, |(h, id)| {
            *h == hash && {
                let i = *id as usize;
                chunks
                    .get(i / CHUNK)
                    .and_then(|c| c.get(i % CHUNK))
                    .and_then(Option::as_ref)
                    .is_some_and(|s| &*s.key == key)
            }
        });
        let (id, created) = match found {
            Some((_, id)) => (*id, false),
            None => {
                let slot = Slot {
                    hash,
                    key: SmallVec::from_slice(key),
                    part: make(),
                };
                let id = self.place(slot)?;
                self.index.insert_unique(hash, (hash, id), |(h, _)| *h);
                (id, true)
            }
        };
        let slot = self.slot_mut(id)?.as_mut()?;
        Some((id, &mut slot.part, created))
    }

    /// Put a slot in a free place of the slab; its id (None past
    /// `PartId::MAX` partitions).
    fn place(&mut self, slot: Slot<P>) -> Option<PartId> {
        if let Some(id) = self.free.pop() {
            *self.slot_mut(id)? = Some(slot);
            return Some(id);
        }
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let full_chunks = self.chunks.len() - 1;
        let last = self.chunks.last_mut()?;
        let id = PartId::try_from(full_chunks * CHUNK + last.len()).ok()?;
        last.push(Some(slot));
        Some(id)
    }

    /// The partition `id`, if it is live.
    pub fn get(&self, id: PartId) -> Option<&P> {
        self.slot(id).map(|s| &s.part)
    }

    /// The partition `id`, if it is live.
    pub fn get_mut(&mut self, id: PartId) -> Option<&mut P> {
        self.slot_mut(id)?.as_mut().map(|s| &mut s.part)
    }

    /// Remove partition `id`, returning it; its id may be given to a later
    /// partition.
    pub fn remove(&mut self, id: PartId) -> Option<P> {
        let slot = self.slot_mut(id)?.take()?;
        if let Ok(entry) = self.index.find_entry(slot.hash, |(_, i)| *i == id) {
            entry.remove();
        }
        self.free.push(id);
        Some(slot.part)
    }

    /// Every live partition with its id and key.
    pub fn iter(&self) -> impl Iterator<Item = (PartId, &[u8], &P)> {
        self.chunks.iter().enumerate().flat_map(|(c, chunk)| {
            chunk.iter().enumerate().filter_map(move |(i, s)| {
                let s = s.as_ref()?;
                let id = PartId::try_from(c * CHUNK + i).ok()?;
                Some((id, &*s.key, &s.part))
            })
        })
    }

    /// Number of live partitions.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Remove every partition.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Give every partition up to the process's exit instead of freeing
    /// them one allocation at a time (see `StatefulOperator::forget_state`).
    pub fn forget(&mut self) {
        std::mem::forget(std::mem::take(self));
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::{Partitions, CHUNK};

    /// Against a `HashMap` model: finds, creations, removals (whose slots
    /// are reused), across several chunks.
    #[test]
    fn behaves_as_a_map_across_chunks_and_reuse() {
        let mut parts: Partitions<u64> = Partitions::default();
        let mut model = std::collections::HashMap::new();
        let mut ids = std::collections::HashMap::new();
        let n = (CHUNK * 2 + 17) as u64;
        for round in 0..3u64 {
            for k in 0..n {
                let key = k.to_le_bytes();
                let (id, v, created) = parts.find_or_insert(&key, || k * 10 + round).unwrap();
                assert_eq!(created, !model.contains_key(&k), "key {k} round {round}");
                model.entry(k).or_insert(k * 10 + round);
                assert_eq!(*v, model[&k]);
                *v += 1;
                *model.get_mut(&k).unwrap() += 1;
                ids.insert(k, id);
            }
            // Remove every third key; their slots are reused next round.
            for k in (round..n).step_by(3) {
                let id = ids[&k];
                assert_eq!(parts.remove(id), model.remove(&k));
                assert_eq!(parts.get(id), None);
                assert_eq!(parts.remove(id), None);
            }
            assert_eq!(parts.len(), model.len());
            let mut seen: Vec<(u64, u64)> = parts
                .iter()
                .map(|(id, key, v)| {
                    let k = u64::from_le_bytes(key.try_into().unwrap());
                    assert_eq!(ids[&k], id);
                    assert_eq!(parts.get(id), Some(v));
                    (k, *v)
                })
                .collect();
            seen.sort_unstable();
            let mut want: Vec<(u64, u64)> = model.iter().map(|(k, v)| (*k, *v)).collect();
            want.sort_unstable();
            assert_eq!(seen, want);
        }
        // Slots were reused: no more chunks than the most live at once needs.
        assert_eq!(parts.chunks.len(), (n as usize).div_ceil(CHUNK));
        parts.clear();
        assert_eq!(parts.len(), 0);
        assert_eq!(parts.iter().count(), 0);
    }
}
