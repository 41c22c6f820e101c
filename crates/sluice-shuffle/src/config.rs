//! The values both ends of a channel agree on: the credit budget and the
//! vnode → node owner table.

use crate::error::{Result, ShuffleError};

/// The largest encoded frame either end handles (256 MiB): the sender
/// refuses a bigger batch frame (`SLC-SHF-012`) instead of sending it, and
/// the receiver's gRPC decoder refuses bigger messages, so one frame can
/// never make a receiver allocate without bound.
pub const MAX_FRAME_BYTES: usize = 256 << 20;

/// A channel's flow-control budget: how many frames and how many encoded
/// bytes may be in flight (sent, not yet drained by the receiver's
/// consumer) at once. Both bounds hold together; whichever is reached first
/// stops the sender.
///
/// A single frame larger than `bytes` is still sent, but only when nothing
/// else is in flight, and it is charged as exactly `bytes`: so a channel
/// buffers at most `max(bytes, largest frame)` and never deadlocks on a
/// large batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditBudget {
    /// Frames in flight.
    pub frames: u64,
    /// Encoded bytes in flight.
    pub bytes: u64,
}

impl CreditBudget {
    /// A budget; both bounds must be at least 1.
    pub fn new(frames: u64, bytes: u64) -> Result<Self> {
        if frames == 0 || bytes == 0 {
            return Err(ShuffleError::InvalidConfig {
                detail: format!(
                    "credit budget needs at least 1 frame and 1 byte, got {frames} frames and {bytes} bytes"
                ),
            });
        }
        Ok(Self { frames, bytes })
    }

    /// The bytes a frame of `size` encoded bytes is charged.
    pub fn charge(&self, size: u64) -> u64 {
        size.min(self.bytes)
    }
}

impl Default for CreditBudget {
    /// 64 frames and 16 MiB per channel.
    fn default() -> Self {
        Self {
            frames: 64,
            bytes: 16 << 20,
        }
    }
}

/// Who owns each vnode: `owners[vnode]` indexes `nodes`. This is the shape
/// `sluice_cluster::vnodes::place` returns, kept as plain data so this
/// crate stays a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerTable {
    nodes: Vec<String>,
    owners: Vec<u32>,
}

impl OwnerTable {
    /// A table; every owner must index `nodes`, node ids must be distinct.
    pub fn new(nodes: Vec<String>, owners: Vec<u32>) -> Result<Self> {
        if owners.is_empty() {
            return Err(ShuffleError::InvalidConfig {
                detail: "the owner table has no vnodes".to_string(),
            });
        }
        for (i, node) in nodes.iter().enumerate() {
            if nodes[..i].contains(node) {
                return Err(ShuffleError::InvalidConfig {
                    detail: format!("node '{node}' appears twice in the owner table"),
                });
            }
        }
        if let Some((vnode, owner)) = owners
            .iter()
            .enumerate()
            .find(|(_, o)| **o as usize >= nodes.len())
        {
            return Err(ShuffleError::InvalidConfig {
                detail: format!(
                    "vnode {vnode} is owned by node index {owner}, but only {} nodes are listed",
                    nodes.len()
                ),
            });
        }
        Ok(Self { nodes, owners })
    }

    /// The nodes, in owner-index order.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// The vnode count.
    pub fn vnode_count(&self) -> u32 {
        u32::try_from(self.owners.len()).unwrap_or(u32::MAX)
    }

    /// The owner index of `vnode`, if it is in range.
    pub fn owner_index(&self, vnode: u32) -> Option<u32> {
        self.owners.get(vnode as usize).copied()
    }
}
