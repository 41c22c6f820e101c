//! The etcd key layout of one cluster, and the ids that appear in it.
//!
//! Every key of cluster `C` lives under `/sluice/C/`, so clusters share an
//! etcd without seeing each other. Ids are restricted to a safe alphabet so
//! a node id can never contain `/` and escape its directory.

use crate::error::{ClusterError, Result};

/// Longest accepted cluster or node id.
const MAX_ID_LEN: usize = 128;

/// Check an id: 1 to 128 characters of `A-Z a-z 0-9 . _ -`.
fn validate(what: &'static str, id: &str) -> Result<()> {
    let refuse = |reason| ClusterError::InvalidId {
        what,
        id: id.to_string(),
        reason,
    };
    if id.is_empty() {
        return Err(refuse("it is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(refuse("it is longer than 128 characters"));
    }
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return Err(refuse("only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"));
    }
    Ok(())
}

/// The keys of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterKeys {
    cluster: String,
}

impl ClusterKeys {
    /// Keys of cluster `cluster` (validated).
    pub fn new(cluster: &str) -> Result<Self> {
        validate("cluster id", cluster)?;
        Ok(Self {
            cluster: cluster.to_string(),
        })
    }

    /// The cluster id.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// `/sluice/C/nodes/`: the prefix of every live member key.
    pub fn nodes_prefix(&self) -> String {
        format!("/sluice/{}/nodes/", self.cluster)
    }

    /// `/sluice/C/nodes/N`: node `N`'s membership key (lease-attached).
    pub fn node(&self, node: &NodeId) -> String {
        format!("{}{}", self.nodes_prefix(), node.as_str())
    }

    /// `/sluice/C/leader`: the leadership key (lease-attached); its create
    /// revision is the leader's term.
    pub fn leader(&self) -> String {
        format!("/sluice/{}/leader", self.cluster)
    }

    /// `/sluice/C/split`: the member list of a static split, by
    /// generation (permanent; see `split_record`).
    pub fn split(&self) -> String {
        format!("/sluice/{}/split", self.cluster)
    }

    /// `/sluice/C/split-rescale`: a request that the nodes of the split's
    /// current generation start again with another member list
    /// (permanent, like the record; see `split_rescale`).
    pub fn split_rescale(&self) -> String {
        format!("/sluice/{}/split-rescale", self.cluster)
    }

    /// `/sluice/C/split-commits/N/`: the checkpoints of split node `N`
    /// that count (see `split_record::SplitCommitRecord`).
    pub fn split_commits(&self, node: &NodeId) -> String {
        format!("/sluice/{}/split-commits/{}/", self.cluster, node.as_str())
    }

    /// `/sluice/C/split-commits/N/ID`: checkpoint `ID` of split node `N`
    /// counts (the id zero-padded, so keys sort as ids do).
    pub fn split_commit(&self, node: &NodeId, id: u64) -> String {
        format!("{}{id:020}", self.split_commits(node))
    }

    /// `/sluice/C/catalog`: the sealed startup catalog (permanent).
    pub fn catalog(&self) -> String {
        format!("/sluice/{}/catalog", self.cluster)
    }

    /// `/sluice/C/assignment`: the vnode assignment table; its mod revision
    /// is the assignment generation.
    pub fn assignment(&self) -> String {
        format!("/sluice/{}/assignment", self.cluster)
    }

    /// `/sluice/C/finished`: written once by the leader that ran a bounded
    /// pipeline (file sources) to its end and published its sinks
    /// (permanent; followers waiting as standbys exit when they see it).
    pub fn finished(&self) -> String {
        format!("/sluice/{}/finished", self.cluster)
    }

    /// `/sluice/C/finished-members/`: the prefix of the records of split
    /// members that ran their share to its end.
    pub fn finished_members_prefix(&self) -> String {
        format!("/sluice/{}/finished-members/", self.cluster)
    }

    /// `/sluice/C/finished-members/N`: written by node `N` of a split once
    /// it ran its share to its end and published its sinks (permanent).
    pub fn finished_member(&self, node: &NodeId) -> String {
        format!("{}{}", self.finished_members_prefix(), node.as_str())
    }

    /// `/sluice/C/progress/`: the prefix of the progress reports.
    pub fn progress_prefix(&self) -> String {
        format!("/sluice/{}/progress/", self.cluster)
    }

    /// `/sluice/C/progress/N`: node `N`'s last progress report
    /// (lease-attached).
    pub fn progress(&self, node: &NodeId) -> String {
        format!("{}{}", self.progress_prefix(), node.as_str())
    }

    /// `/sluice/C/checkpoint-requests/`: the prefix of the followers'
    /// requests for checkpoints (see `checkpoint_requests`).
    pub fn checkpoint_requests(&self) -> String {
        format!("/sluice/{}/checkpoint-requests/", self.cluster)
    }

    /// `/sluice/C/checkpoint-requests/N`: node `N` holds input only a
    /// committed checkpoint releases (lease-attached).
    pub fn checkpoint_request(&self, node: &NodeId) -> String {
        format!("{}{}", self.checkpoint_requests(), node.as_str())
    }

    /// `/sluice/C/checkpoints/<kind>/`: the directory of one kind of
    /// checkpoint record (`attempts`, `prepare`, `answers`, `decisions`).
    pub fn checkpoint_dir(&self, kind: &str) -> String {
        format!("/sluice/{}/checkpoints/{kind}/", self.cluster)
    }

    /// `/sluice/C/checkpoints/counter`: the last reserved attempt id
    /// (permanent, so a new leader continues after the old one).
    pub fn checkpoint_counter(&self) -> String {
        format!("/sluice/{}/checkpoints/counter", self.cluster)
    }

    /// `/sluice/C/checkpoints/committed`: the newest committed attempt id.
    pub fn checkpoint_committed(&self) -> String {
        format!("/sluice/{}/checkpoints/committed", self.cluster)
    }

    /// `/sluice/C/checkpoints/<kind>/<id>` with the id zero-padded to 20
    /// digits, so keys sort (and range-delete) in id order.
    pub fn checkpoint_record(&self, kind: &str, id: u64) -> String {
        format!("{}{}", self.checkpoint_dir(kind), padded_id(id))
    }

    /// `/sluice/C/checkpoints/answers/<id>/`: every answer to attempt `id`.
    pub fn checkpoint_answers(&self, id: u64) -> String {
        format!("{}/", self.checkpoint_record("answers", id))
    }

    /// `/sluice/C/checkpoints/answers/<id>/<N>`: node `N`'s answer.
    pub fn checkpoint_answer(&self, id: u64, node: &NodeId) -> String {
        format!("{}{}", self.checkpoint_answers(id), node.as_str())
    }
}

/// An attempt id as it appears in keys and in the committed pointer: 20
/// digits, the width of `u64::MAX`, so byte order is numeric order.
pub fn padded_id(id: u64) -> String {
    format!("{id:020}")
}

/// A validated node id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(String);

impl NodeId {
    /// Validate a node id.
    pub fn new(id: &str) -> Result<Self> {
        validate("node id", id)?;
        Ok(Self(id.to_string()))
    }

    /// The id.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for NodeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_validated_by_name() {
        assert_eq!(
            NodeId::new("a/b").expect_err("slash").to_string(),
            "SLC-CLU-001: invalid node id 'a/b': only A-Z, a-z, 0-9, '.', '_' and '-' are allowed"
        );
        assert_eq!(
            ClusterKeys::new("").expect_err("empty").to_string(),
            "SLC-CLU-001: invalid cluster id '': it is empty"
        );
        let keys = ClusterKeys::new("c1").expect("valid");
        let n = NodeId::new("n-1.x_y").expect("valid");
        assert_eq!(keys.node(&n), "/sluice/c1/nodes/n-1.x_y");
        assert_eq!(keys.leader(), "/sluice/c1/leader");
        assert_eq!(keys.catalog(), "/sluice/c1/catalog");
        assert_eq!(keys.assignment(), "/sluice/c1/assignment");
        assert_eq!(
            keys.checkpoint_answer(7, &n),
            "/sluice/c1/checkpoints/answers/00000000000000000007/n-1.x_y"
        );
        assert!(keys.checkpoint_record("prepare", 9) < keys.checkpoint_record("prepare", 10));
    }
}
