//! Split sources: one pipeline run by several nodes at once, each reading
//! its share of every source's natural partitions.
//!
//! A node's share is a set of vnodes ([`VnodePlacement`]). A file source's
//! partitions are its files: a file belongs to the vnode of its partition
//! key (its path below the pattern's literal directory, see
//! `sluice_connectors::FileShare`), encoded as a one-column UTF-8 key in
//! the canonical partition key encoding (`process::key`, format version 1)
//! and hashed by `process::placement::vnode_of` — the same vnode a process
//! function's key of that string would have. So every node that sees the
//! same files and holds the same vnodes reads the same files, and the
//! vnodes of an assignment table (one owner each) read every file once.
//!
//! Each node writes its own output: a file sink's path gains the node's
//! name (`out/x.csv` becomes `out/n1/x.csv`), so nodes sharing a file system
//! never write one file.
//!
//! A Nexmark source's partitions are blocks of its rows
//! (`sluice_connectors::nexmark::partition_key`, for example `bid/17`),
//! placed the same way: each node generates the rows of its blocks, and a
//! block moves with its vnode as a file does ([`handover`]).
//!
//! Certification (`catalog::split_admission::certify`) refuses, by name and with the
//! reason, every object whose result on split input would differ from the
//! single-node result: without a shuffle between the nodes, operators that
//! keep state across rows (their rows would meet on no node), process
//! functions, late-data streams and materialized views; with one
//! (`crate::exchange`), keyed aggregations, joins and process functions
//! run on their key's vnode owner, and the rest is refused as before.
//! Row-by-row queries (filters, projections, `UNION ALL`, lookup joins)
//! and push sources (the program feeds each node) run split.
//!
//! Lateness is judged at each source, per batch, against the watermark of
//! the rows this node read before the batch. A node reads other rows and
//! cuts them into other batches than a single node does, so when the data
//! has rows later than the watermark's delay, the rows a split run drops
//! as late can differ from those a single node drops (either way). The
//! nodes' output equals the single-node output when no row is late on
//! either.

pub mod handover;
pub mod moved;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluice_connectors::FileShare;

use crate::error::{EngineError, Result};
use crate::process::placement::{vnode_of, VnodePlacement};

/// Longest node name a split accepts.
const MAX_NODE_NAME: usize = 64;

/// This node's part of a split pipeline (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceSplit {
    node: String,
    placement: VnodePlacement,
    /// The assignment generation the placement is of (0: not counted).
    generation: u64,
    handover: Option<Arc<handover::SplitHandover>>,
    moved: Option<Arc<moved::MovedState>>,
}

impl SourceSplit {
    /// Node `node` holding the vnodes of `placement`. The name goes into
    /// sink file names, so it is 1 to 64 ASCII letters, digits, `-`, `_`
    /// or `.` (not starting with `.`).
    pub fn new(node: &str, placement: VnodePlacement) -> Result<Self> {
        let valid = !node.is_empty()
            && node.len() <= MAX_NODE_NAME
            && !node.starts_with('.')
            && node
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !valid {
            return Err(EngineError::Option(format!(
                "split node name '{}' is not 1 to {MAX_NODE_NAME} ASCII letters, digits, '-', '_' or '.' (not starting with '.'); it names the node's sink files",
                sluice_connectors::bounded_quote(node)
            )));
        }
        Ok(Self {
            node: node.to_string(),
            placement,
            generation: 0,
            handover: None,
            moved: None,
        })
    }

    /// The same node, holding its vnodes in assignment generation
    /// `generation`: positions checkpointed under this share record it, so
    /// a position of another generation is never taken for this one's,
    /// even where the vnodes are the same (others may have read them in
    /// between).
    #[must_use]
    pub fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }

    /// The assignment generation of this node's vnodes (0: not counted).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The same node, whose vnodes were held before as `handover` says: its
    /// file sources start where the previous holders stopped (see
    /// [`handover`]).
    #[must_use]
    pub fn with_handover(mut self, handover: handover::SplitHandover) -> Self {
        self.handover = Some(Arc::new(handover));
        self
    }

    /// The same node, whose keyed operators start from the state of its
    /// vnodes in the previous holders' checkpoints (see [`moved`]).
    #[must_use]
    pub fn with_moved_state(mut self, state: moved::MovedState) -> Self {
        self.moved = Some(Arc::new(state));
        self
    }

    /// The keyed state that moves to this node with its vnodes.
    pub fn moved_state(&self) -> Option<&Arc<moved::MovedState>> {
        self.moved.as_ref()
    }

    /// Who held this node's vnodes before, when they moved.
    pub fn handover(&self) -> Option<&Arc<handover::SplitHandover>> {
        self.handover.as_ref()
    }

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The vnodes this node holds.
    pub fn placement(&self) -> &VnodePlacement {
        &self.placement
    }

    /// The files of a file source this node reads.
    pub fn file_share(&self) -> FileShare {
        placement_share(&self.node, &self.placement, self.generation)
    }

    /// Where this node writes a file sink declared to write `declared`:
    /// in a directory named after the node, beside where the declared file
    /// would be (`out/x.csv` → `out/n1/x.csv`). No two nodes can write one
    /// file this way, whatever the names: the file's parent is the node's
    /// name, so equal paths mean the same node (a suffix in the file name
    /// would not do: nodes `1` and `eu-1` would both write `out-eu-1.csv`
    /// for sinks `out-eu.csv` and `out.csv`).
    pub fn sink_path(&self, declared: &Path) -> PathBuf {
        let name = declared.file_name().unwrap_or_default();
        match declared.parent() {
            Some(dir) => dir.join(&self.node).join(name),
            None => Path::new(&self.node).join(name),
        }
    }
}

/// The files of a file source that node `node` reads when it holds the
/// vnodes of `placement` in assignment generation `generation`. Its
/// identity (which a checkpointed position records) depends on the vnodes
/// and the generation only, not on the node.
pub(crate) fn placement_share(
    node: &str,
    placement: &VnodePlacement,
    generation: u64,
) -> FileShare {
    let placement = placement.clone();
    let owned = placement.owned();
    let describe = format!(
        "node {node}: {} of {} vnodes",
        owned.len(),
        placement.count()
    );
    // Which vnodes, exactly: the count and a hash of the held ones.
    let bytes: Vec<u8> = owned.iter().flat_map(|v| v.to_be_bytes()).collect();
    let mut identity = format!(
        "vnodes {}/{:016x}",
        placement.count(),
        twox_hash::XxHash3_64::oneshot(&bytes)
    );
    // From generation 2: a generation-1 share is named as a share of an
    // uncounted split is, so positions checkpointed before generations
    // were counted resume under generation 1.
    if generation > 1 {
        identity.push_str(&format!("@g{generation}"));
    }
    FileShare::new(identity, describe, move |key: &str| {
        placement.owns(file_vnode(key, placement.count()))
    })
}

/// The assignment generation a checkpointed file or Nexmark offset was
/// read under (see [`SourceSplit::with_generation`]): `None` for an offset
/// that is not a split source's, or whose share counted no generation.
pub fn offset_generation(offset: &str) -> Option<u64> {
    let share = match sluice_connectors::SourcePosition::from_offset(offset) {
        Ok(position) => position.share,
        Err(_) => sluice_connectors::NexmarkReader::share_of_any_offset(offset),
    }?;
    let (_, generation) = share.rsplit_once("@g")?;
    generation.parse().ok()
}

/// The vnode of a file with partition key `key` among `count` vnodes: the
/// key as a one-column UTF-8 canonical partition key.
pub fn file_vnode(key: &str, count: u32) -> u32 {
    let mut encoded = Vec::with_capacity(5 + key.len());
    encoded.push(1);
    encoded.extend_from_slice(&u32::try_from(key.len()).unwrap_or(u32::MAX).to_be_bytes());
    encoded.extend_from_slice(key.as_bytes());
    vnode_of(&encoded, count)
}

#[cfg(test)]
mod tests;
