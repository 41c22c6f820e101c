//! The manifest: what a committed checkpoint contains.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// One state blob, by key, with its length and CRC-32.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// Logical name (e.g. `stream/avg_price/op-0`).
    pub name: String,
    /// Storage key.
    pub key: String,
    /// Bytes.
    pub len: u64,
    /// CRC-32 (IEEE) of the bytes.
    pub crc32: u32,
}

/// A source's progress at the checkpoint cut.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SourceCheckpoint {
    /// Replay offset after the last batch in the cut (None: cannot replay).
    pub offset: Option<String>,
    /// The source's watermark.
    pub watermark: i64,
    /// Whether the source had finished.
    pub finished: bool,
}

/// A sink epoch pre-committed at this checkpoint; committing the checkpoint
/// commits it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SinkEpochRecord {
    /// Epoch number.
    pub epoch: u64,
    /// Staged file holding the epoch's rows (absent when it had none).
    pub staged: Option<String>,
    /// Bytes in the staged file.
    pub staged_len: u64,
    /// Length of the final file before this epoch is appended.
    pub final_len_before: u64,
}

/// A sink's transactional state at the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SinkCheckpoint {
    /// Final file length before the first sealed epoch below.
    pub committed_len: u64,
    /// The epoch that receives rows after the checkpoint.
    pub next_epoch: u64,
    /// Sealed epochs that committing this checkpoint commits, in order.
    pub epochs: Vec<SinkEpochRecord>,
}

/// The commit record of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Checkpoint id.
    pub id: u64,
    /// Wall-clock creation time (ms since the epoch).
    pub created_ms: i64,
    /// Fingerprint of the pipeline definition the state belongs to.
    pub pipeline: String,
    /// The pipeline watermark.
    pub watermark: i64,
    /// Source progress by name.
    pub sources: BTreeMap<String, SourceCheckpoint>,
    /// Sink epochs by sink name.
    pub sinks: BTreeMap<String, SinkCheckpoint>,
    /// State blobs.
    pub blobs: Vec<BlobRef>,
    /// The cluster assignment generation the checkpoint was admitted under
    /// (see [`crate::CommitAuthority::admit`]); `None` outside a cluster.
    /// Its commit is recorded only while that generation still holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub assignment_generation: Option<u64>,
}

impl Manifest {
    /// Total bytes of state.
    pub fn state_bytes(&self) -> u64 {
        self.blobs.iter().map(|b| b.len).sum()
    }
}
