//! One assignment table and its encoding in etcd.

use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::vnodes::{self, VnodeCount};

/// Version of the stored encoding.
const TABLE_FORMAT: u32 = 1;

/// A vnode assignment at one generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Assignment {
    generation: u64,
    table: Table,
}

/// The stored (JSON) form: members sorted, one owner index per vnode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Table {
    format: u32,
    /// The leader term that wrote it.
    term: u64,
    vnode_count: u32,
    members: Vec<String>,
    owners: Vec<u32>,
}

impl Table {
    /// Place `count` vnodes over `members` (sorted and deduplicated here).
    pub(crate) fn place(
        cluster: &str,
        term: u64,
        count: VnodeCount,
        members: &[String],
    ) -> Result<Self> {
        let mut members = members.to_vec();
        members.sort();
        members.dedup();
        if members.is_empty() {
            return Err(ClusterError::NoMembers {
                cluster: cluster.to_string(),
            });
        }
        let owners = vnodes::place(count, &members);
        Ok(Self {
            format: TABLE_FORMAT,
            term,
            vnode_count: count.get(),
            members,
            owners,
        })
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        // A struct of strings and integers always serializes.
        serde_json::to_vec(self).unwrap_or_default()
    }

    pub(crate) fn members(&self) -> &[String] {
        &self.members
    }
}

impl Assignment {
    /// Decode the value of the assignment key at `generation`.
    pub(crate) fn decode(key: &str, value: &[u8], generation: u64) -> Result<Self> {
        let corrupt = |reason: String| ClusterError::Corrupt {
            key: key.to_string(),
            reason,
        };
        let table: Table = serde_json::from_slice(value).map_err(|e| corrupt(e.to_string()))?;
        if table.format != TABLE_FORMAT {
            return Err(corrupt(format!(
                "assignment format {} (this version reads {TABLE_FORMAT})",
                table.format
            )));
        }
        let members = u32::try_from(table.members.len()).unwrap_or(u32::MAX);
        if table.owners.len() != table.vnode_count as usize
            || table.owners.iter().any(|&o| o >= members)
        {
            return Err(corrupt(format!(
                "{} owners for {} vnodes over {} members",
                table.owners.len(),
                table.vnode_count,
                table.members.len()
            )));
        }
        Ok(Self { generation, table })
    }

    pub(crate) fn new(generation: u64, table: Table) -> Self {
        Self { generation, table }
    }

    /// The fencing generation: the etcd revision that wrote this table.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The leader term that wrote it.
    pub fn term(&self) -> u64 {
        self.table.term
    }

    /// The vnode count.
    pub fn vnode_count(&self) -> u32 {
        self.table.vnode_count
    }

    /// The members the vnodes were placed on, sorted.
    pub fn members(&self) -> &[String] {
        &self.table.members
    }

    /// The owner of `vnode`.
    pub fn owner_of(&self, vnode: u32) -> Option<&str> {
        let owner = *self.table.owners.get(vnode as usize)?;
        self.table.members.get(owner as usize).map(String::as_str)
    }

    /// Why this table is not `node`'s active–standby placement for the
    /// leader `term` (written in that term, every vnode on `node`), if it
    /// is not. Both the leader's wait for its own table and its checkpoint
    /// admission ask this one question.
    pub fn not_whole_for(&self, node: &str, term: u64) -> Option<String> {
        let owned = self.owned_vnodes(node).len();
        if self.term() != term {
            Some(format!(
                "the table was placed in term {}, not this leader's term {term} \
                 (its own table is not written yet)",
                self.term()
            ))
        } else if u32::try_from(owned).ok() != Some(self.vnode_count()) {
            Some(format!(
                "it owns {owned} of {} vnodes; this leader runs every vnode",
                self.vnode_count()
            ))
        } else {
            None
        }
    }

    /// The vnodes `node` owns, ascending.
    pub fn owned_vnodes(&self, node: &str) -> Vec<u32> {
        let Some(index) = self.table.members.iter().position(|m| m == node) else {
            return Vec::new();
        };
        (0..self.table.vnode_count)
            .zip(&self.table.owners)
            .filter(|(_, &o)| o as usize == index)
            .map(|(v, _)| v)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_round_trip_and_corruption() {
        let members = vec!["n2".to_string(), "n1".to_string()];
        let table =
            Table::place("c", 7, VnodeCount::new(8).expect("count"), &members).expect("members");
        let a = Assignment::decode("k", &table.encode(), 42).expect("decodes");
        assert_eq!(a.generation(), 42);
        assert_eq!(a.term(), 7);
        assert_eq!(a.members(), ["n1", "n2"]);
        let mut all = a.owned_vnodes("n1");
        all.extend(a.owned_vnodes("n2"));
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<_>>());
        assert!(a.owned_vnodes("n3").is_empty());
        assert_eq!(
            Assignment::decode("k", b"{", 1)
                .expect_err("bad json")
                .to_string(),
            "SLC-CLU-008: etcd key 'k' holds an unreadable value: \
             EOF while parsing an object at line 1 column 1"
        );
        assert_eq!(
            Table::place("c", 1, VnodeCount::default(), &[])
                .expect_err("empty")
                .to_string(),
            "SLC-CLU-010: cluster 'c' has no live member to own its vnodes"
        );
    }
}
