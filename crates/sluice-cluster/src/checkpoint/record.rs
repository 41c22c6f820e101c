//! The values the checkpoint protocol stores in etcd, and their (JSON)
//! encoding. Every record carries a format number so a later version can
//! refuse, by key, a value it cannot read.

use std::collections::{BTreeMap, BTreeSet};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use twox_hash::XxHash3_64;

use crate::assignment::Assignment;
use crate::error::{ClusterError, Result};

/// Version of every checkpoint record's encoding.
pub(crate) const RECORD_FORMAT: u32 = 1;

/// A durably reserved checkpoint attempt: its never-reused id and the
/// leadership term that reserved it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointAttempt {
    /// The attempt id (1, 2, ...; burned even if the attempt is abandoned).
    pub id: u64,
    /// The term of the leader that reserved it.
    pub term: u64,
}

/// The stored form of `/sluice/C/checkpoints/attempts/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct AttemptRecord {
    pub(crate) format: u32,
    pub(crate) id: u64,
    pub(crate) term: u64,
    pub(crate) node: String,
}

/// The exact assignment a new attempt is admitted under: the table read
/// from etcd (not from a possibly lagging watch), whose generation fences
/// every later write of the attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointAssignmentFence {
    pub(crate) assignment: Assignment,
}

impl CheckpointAssignmentFence {
    /// The fencing generation (the etcd revision that wrote the table).
    pub fn generation(&self) -> u64 {
        self.assignment.generation()
    }

    /// The table itself.
    pub fn assignment(&self) -> &Assignment {
        &self.assignment
    }
}

/// The certified barrier Prepare of one attempt: which table (generation)
/// it runs under and who owns every vnode, so the leader can tell whose
/// acknowledgement a commit needs and recovery knows whose parts to load.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointPrepare {
    pub(crate) format: u32,
    /// The attempt id.
    pub id: u64,
    /// The term of the leader that published it.
    pub term: u64,
    /// The assignment generation the attempt is fenced at.
    pub generation: u64,
    /// The members the vnodes were placed on, sorted.
    pub members: Vec<String>,
    /// Per vnode, the index of its owner in `members`.
    pub owners: Vec<u32>,
    /// xxh3-64 of the owner of every vnode in order (`owners_digest`), so
    /// two Prepares can be compared for placement without their tables.
    pub owners_digest: u64,
    /// Wall-clock deadline (Unix milliseconds) for every answer.
    pub deadline_ms: u64,
}

impl CheckpointPrepare {
    /// The Prepare of attempt `id` over the fenced table.
    pub(crate) fn new(
        attempt: CheckpointAttempt,
        fence: &CheckpointAssignmentFence,
        deadline_ms: u64,
    ) -> Self {
        let a = &fence.assignment;
        let members = a.members().to_vec();
        let owners = (0..a.vnode_count())
            .map(|v| {
                a.owner_of(v)
                    .and_then(|o| members.iter().position(|m| m == o))
                    .and_then(|i| u32::try_from(i).ok())
                    .unwrap_or(u32::MAX)
            })
            .collect::<Vec<_>>();
        let owners_digest = owners_digest(&members, &owners);
        Self {
            format: RECORD_FORMAT,
            id: attempt.id,
            term: attempt.term,
            generation: a.generation(),
            members,
            owners,
            owners_digest,
            deadline_ms,
        }
    }

    /// Every node that owns at least one vnode: the nodes whose ack a
    /// commit requires.
    pub fn owning_nodes(&self) -> BTreeSet<String> {
        self.owners
            .iter()
            .filter_map(|&o| self.members.get(o as usize).cloned())
            .collect()
    }

    /// Check the decoded value is consistent with itself.
    fn validate(&self) -> std::result::Result<(), String> {
        let members = u32::try_from(self.members.len()).unwrap_or(u32::MAX);
        if self.owners.iter().any(|&o| o >= members) {
            return Err("a vnode owner outside the member list".to_string());
        }
        if owners_digest(&self.members, &self.owners) != self.owners_digest {
            return Err("the owners digest does not match the owners".to_string());
        }
        Ok(())
    }
}

/// xxh3-64 over `len(owner) ‖ owner` of every vnode in order.
fn owners_digest(members: &[String], owners: &[u32]) -> u64 {
    let mut bytes = Vec::new();
    for &o in owners {
        let name = members.get(o as usize).map_or("", String::as_str);
        bytes.extend_from_slice(&(name.len() as u64).to_le_bytes());
        bytes.extend_from_slice(name.as_bytes());
    }
    XxHash3_64::oneshot(&bytes)
}

/// Where a follower's part of a checkpoint is; opaque to the control
/// plane (object storage owns the meaning).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartRef {
    /// The object key of the part.
    pub object_key: String,
    /// Its size.
    pub size: String,
    /// Its checksum.
    pub crc: String,
}

/// A follower's answer to a Prepare.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case")]
pub enum Answer {
    /// The follower's part is durable.
    Ack {
        /// Where it is.
        part: PartRef,
    },
    /// The follower cannot take part (the spec's negative barrier
    /// acknowledgement, `cancel_source_barrier_attempt`).
    Nack {
        /// Why.
        reason: String,
    },
}

/// The stored form of `/sluice/C/checkpoints/answers/<id>/<node>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerRecord {
    pub(crate) format: u32,
    /// The attempt.
    pub id: u64,
    /// The answering node.
    pub node: String,
    /// The answer.
    pub answer: Answer,
}

/// The leader's decision on an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Decision {
    /// Every owning node acked; `parts` is their acks by node, copied
    /// into the decision because the answer keys live only as long as
    /// their followers' leases and recovery must outlive those.
    Commit {
        /// Each owning node's part.
        parts: BTreeMap<String, PartRef>,
    },
    /// The attempt is abandoned; its id stays burned.
    Abort {
        /// Why.
        reason: String,
    },
}

/// The stored form of `/sluice/C/checkpoints/decisions/<id>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionRecord {
    pub(crate) format: u32,
    /// The attempt.
    pub id: u64,
    /// The term that decided.
    pub term: u64,
    /// The generation of the attempt's Prepare.
    pub generation: u64,
    /// The decision.
    pub decision: Decision,
}

/// A value read from etcd with the revisions that fence later writes on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored<T> {
    /// The decoded value.
    pub value: T,
    /// The revision that created the key.
    pub create_revision: i64,
    /// The revision of its last write.
    pub mod_revision: i64,
}

/// Encode a record (structs of strings, integers and maps always encode).
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// Records that carry a format number.
pub(crate) trait Formatted {
    fn format(&self) -> u32;
    fn check(&self) -> std::result::Result<(), String> {
        Ok(())
    }
}

macro_rules! formatted {
    ($($t:ty),*) => {$(
        impl Formatted for $t {
            fn format(&self) -> u32 {
                self.format
            }
        }
    )*};
}
formatted!(AttemptRecord, AnswerRecord, DecisionRecord);

impl Formatted for CheckpointPrepare {
    fn format(&self) -> u32 {
        self.format
    }
    fn check(&self) -> std::result::Result<(), String> {
        self.validate()
    }
}

/// Decode the record at `key`, refusing by key a value this version
/// cannot read.
pub(crate) fn decode<T: DeserializeOwned + Formatted>(key: &str, value: &[u8]) -> Result<T> {
    let corrupt = |reason: String| ClusterError::Corrupt {
        key: key.to_string(),
        reason,
    };
    let record: T = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
    if record.format() != RECORD_FORMAT {
        return Err(corrupt(format!(
            "checkpoint record format {} (this version reads {RECORD_FORMAT})",
            record.format()
        )));
    }
    record.check().map_err(corrupt)?;
    Ok(record)
}

/// Decode a key-value from etcd with its revisions.
pub(crate) fn decode_kv<T: DeserializeOwned + Formatted>(
    kv: &etcd_client::KeyValue,
) -> Result<Stored<T>> {
    let key = String::from_utf8_lossy(kv.key());
    Ok(Stored {
        value: decode(&key, kv.value())?,
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    })
}

/// Parse an attempt id as stored in the counter and committed pointer.
pub(crate) fn parse_id(key: &str, value: &[u8]) -> Result<u64> {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| ClusterError::Corrupt {
            key: key.to_string(),
            reason: format!("'{}' is not an attempt id", String::from_utf8_lossy(value)),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::testing::prepare_over;

    #[test]
    fn prepares_round_trip_and_a_bad_digest_or_format_is_refused() {
        let attempt = CheckpointAttempt { id: 4, term: 2 };
        let prepare = prepare_over(attempt, &["n1", "n2"], 77);
        assert_eq!(prepare.generation, 10);
        assert_eq!(prepare.owners.len(), 64);
        let back: CheckpointPrepare = decode("k", &encode(&prepare)).expect("decodes");
        assert_eq!(back, prepare);
        let mut moved = prepare.clone();
        moved.owners[0] = 1 - moved.owners[0];
        assert_eq!(
            decode::<CheckpointPrepare>("k", &encode(&moved))
                .expect_err("digest")
                .to_string(),
            "SLC-CLU-008: etcd key 'k' holds an unreadable value: \
             the owners digest does not match the owners"
        );
        let mut later = prepare;
        later.format = 2;
        assert_eq!(
            decode::<CheckpointPrepare>("k", &encode(&later))
                .expect_err("format")
                .to_string(),
            "SLC-CLU-008: etcd key 'k' holds an unreadable value: \
             checkpoint record format 2 (this version reads 1)"
        );
        assert_eq!(
            parse_id("c", b"x1").expect_err("not an id").to_string(),
            "SLC-CLU-008: etcd key 'c' holds an unreadable value: 'x1' is not an attempt id"
        );
    }
}
