//! The crate's one error type. Every variant a user or the network can cause
//! carries a stable code (`SLC-CLU-NNN`) and names what is wrong.

/// An error of the cluster control plane.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// A cluster or node id that cannot be used in an etcd key.
    #[error("SLC-CLU-001: invalid {what} '{id}': {reason}")]
    InvalidId {
        /// `cluster id` or `node id`.
        what: &'static str,
        /// The id as given.
        id: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An etcd request failed (unreachable, timed out, refused).
    #[error("SLC-CLU-002: etcd {context} failed: {source}")]
    Etcd {
        /// What was being done.
        context: String,
        /// The client's error.
        #[source]
        source: etcd_client::Error,
    },
    /// Another live process already holds this node id.
    #[error(
        "SLC-CLU-003: node id '{node}' is already live in cluster '{cluster}'; \
         stop the other node or choose another --node-id"
    )]
    DuplicateNode {
        /// The cluster.
        cluster: String,
        /// The refused node id.
        node: String,
    },
    /// A node's catalog differs from the catalog sealed by the first node.
    #[error(
        "SLC-CLU-004: node '{node}' is refused by cluster '{cluster}': its catalog differs \
         from the sealed catalog ({differences})"
    )]
    CatalogMismatch {
        /// The cluster.
        cluster: String,
        /// The refused node.
        node: String,
        /// Every difference, `; `-separated (`missing: a, b; extra: c; changed: d`).
        differences: String,
    },
    /// A leader-only write was refused because the node no longer holds the
    /// leadership term it wrote under (the term is the fencing token).
    #[error(
        "SLC-CLU-005: node '{node}' is not the leader of term {term} any more; \
         its write was refused"
    )]
    NotLeader {
        /// The node that attempted the write.
        node: String,
        /// The term it wrote under (0: it never led).
        term: u64,
    },
    /// An assignment write based on an outdated generation.
    #[error(
        "SLC-CLU-006: assignment write by node '{node}' expected generation {expected} \
         but the table is at generation {current}"
    )]
    StaleGeneration {
        /// The writer.
        node: String,
        /// The generation the writer based its table on (0: none).
        expected: u64,
        /// The generation in etcd (0: none).
        current: u64,
    },
    /// The node's lease expired: it is out of the cluster and must rejoin
    /// with a new session.
    #[error("SLC-CLU-007: node '{node}' lost its etcd lease; it must rejoin the cluster")]
    LeaseLost {
        /// The node.
        node: String,
    },
    /// A value in etcd that this version cannot decode.
    #[error("SLC-CLU-008: etcd key '{key}' holds an unreadable value: {reason}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A vnode count outside the supported range.
    #[error("SLC-CLU-009: vnode count {count} is out of range (1 to {max})")]
    InvalidVnodeCount {
        /// The count given.
        count: u32,
        /// The largest supported count.
        max: u32,
    },
    /// An assignment was requested for an empty member set.
    #[error("SLC-CLU-010: cluster '{cluster}' has no live member to own its vnodes")]
    NoMembers {
        /// The cluster.
        cluster: String,
    },
    /// The test harness could not start etcd.
    #[error("SLC-CLU-011: cannot start etcd for tests: {0}")]
    Harness(String),
    /// Two reservations raced for the same checkpoint attempt id under one
    /// leadership term; the loser may reserve again.
    #[error(
        "SLC-CLU-012: checkpoint attempt reservation by node '{node}' was refused: the \
         attempt counter moved from {expected} to {current} while it reserved"
    )]
    AttemptCounterMoved {
        /// The reserving leader.
        node: String,
        /// The counter value the reservation was based on (0: none).
        expected: u64,
        /// The counter value in etcd.
        current: u64,
    },
    /// A leader-only checkpoint write about attempt `id` was refused
    /// because the records it builds on are not what it requires.
    #[error(
        "SLC-CLU-013: checkpoint {action} for attempt {id} by node '{node}' was refused: {reason}"
    )]
    CheckpointRefused {
        /// What was refused (`prepare`, `commit`, `abort`, `prune`).
        action: &'static str,
        /// The attempt.
        id: u64,
        /// The writer.
        node: String,
        /// Why.
        reason: String,
    },
    /// A checkpoint write was fenced by the assignment generation: the
    /// vnode table changed since the attempt's Prepare captured it.
    #[error(
        "SLC-CLU-014: checkpoint {action} for attempt {id} by node '{node}' was refused: \
         the attempt is fenced at assignment generation {expected} but the table is at \
         generation {current}"
    )]
    AssignmentFenceMoved {
        /// What was refused (`prepare`, `answer`, `commit`).
        action: &'static str,
        /// The attempt.
        id: u64,
        /// The writer.
        node: String,
        /// The generation the attempt is fenced at.
        expected: u64,
        /// The generation in etcd (0: none).
        current: u64,
    },
    /// A follower's answer to attempt `id` was refused.
    #[error(
        "SLC-CLU-015: answer of node '{node}' to checkpoint attempt {id} was refused: {reason}"
    )]
    AnswerRefused {
        /// The attempt.
        id: u64,
        /// The follower.
        node: String,
        /// Why.
        reason: String,
    },
    /// A checkpoint record that must exist is absent.
    #[error("SLC-CLU-016: checkpoint attempt {id} has no {what} in etcd")]
    CheckpointMissing {
        /// The attempt.
        id: u64,
        /// The missing record (`prepare`, `decision`).
        what: &'static str,
    },
    /// etcd did not answer a checkpoint read in time; the wait gave up
    /// rather than hang.
    #[error("SLC-CLU-017: etcd did not answer the {what} within {after_ms} ms")]
    Timeout {
        /// What was being read.
        what: String,
        /// How long the read was given.
        after_ms: u64,
    },
    /// The checkpoint leader lost its term while it drove a round; it
    /// stops, and the next leader aborts the attempt it left undecided.
    #[error(
        "SLC-CLU-018: node '{node}' was deposed as checkpoint leader of term {term} \
         during a round; the next leader aborts the attempt it left undecided"
    )]
    CheckpointDeposed {
        /// The deposed leader.
        node: String,
        /// The term it drove the round under.
        term: u64,
    },
    /// A follower answered attempt `id` but no decision arrived in time;
    /// the attempt stays pending and is resolved by a later call, once
    /// the (possibly new) leader decides it.
    #[error(
        "SLC-CLU-019: node '{node}' answered checkpoint attempt {id} but no decision \
         arrived within {waited_ms} ms"
    )]
    DecisionOverdue {
        /// The follower.
        node: String,
        /// The attempt.
        id: u64,
        /// How long it waited for the decision (to the Prepare's deadline
        /// and a grace, or until the leader lost its term).
        waited_ms: u64,
    },
    /// The node's pipeline could not apply a checkpoint decision (a sink
    /// failed to commit or roll back its epoch).
    #[error(
        "SLC-CLU-020: node '{node}' could not apply the {decision} of checkpoint \
         attempt {id}: {source}"
    )]
    PipelineFailed {
        /// The node.
        node: String,
        /// The attempt.
        id: u64,
        /// `commit` or `abort`.
        decision: &'static str,
        /// What the pipeline reported, with its own source and code.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// A leader tried to record the end of a run that was already recorded.
    #[error(
        "SLC-CLU-021: node '{node}' cannot record the run of cluster '{cluster}' as finished: \
         it was already recorded"
    )]
    AlreadyFinished {
        /// The cluster.
        cluster: String,
        /// The node that tried.
        node: String,
    },
    /// A checkpoint cannot be admitted: the node does not own every vnode
    /// it would capture at the current assignment generation.
    #[error(
        "SLC-CLU-022: node '{node}' cannot admit a checkpoint at assignment generation \
         {generation}: {reason}"
    )]
    AdmissionRefused {
        /// The node that asked.
        node: String,
        /// The generation it read.
        generation: u64,
        /// What the table says instead.
        reason: String,
    },
}

impl ClusterError {
    /// The stable code (`SLC-CLU-NNN`), also the start of the message.
    pub fn code(&self) -> &'static str {
        match self {
            Self::InvalidId { .. } => "SLC-CLU-001",
            Self::Etcd { .. } => "SLC-CLU-002",
            Self::DuplicateNode { .. } => "SLC-CLU-003",
            Self::CatalogMismatch { .. } => "SLC-CLU-004",
            Self::NotLeader { .. } => "SLC-CLU-005",
            Self::StaleGeneration { .. } => "SLC-CLU-006",
            Self::LeaseLost { .. } => "SLC-CLU-007",
            Self::Corrupt { .. } => "SLC-CLU-008",
            Self::InvalidVnodeCount { .. } => "SLC-CLU-009",
            Self::NoMembers { .. } => "SLC-CLU-010",
            Self::Harness(_) => "SLC-CLU-011",
            Self::AttemptCounterMoved { .. } => "SLC-CLU-012",
            Self::CheckpointRefused { .. } => "SLC-CLU-013",
            Self::AssignmentFenceMoved { .. } => "SLC-CLU-014",
            Self::AnswerRefused { .. } => "SLC-CLU-015",
            Self::CheckpointMissing { .. } => "SLC-CLU-016",
            Self::Timeout { .. } => "SLC-CLU-017",
            Self::CheckpointDeposed { .. } => "SLC-CLU-018",
            Self::DecisionOverdue { .. } => "SLC-CLU-019",
            Self::PipelineFailed { .. } => "SLC-CLU-020",
            Self::AlreadyFinished { .. } => "SLC-CLU-021",
            Self::AdmissionRefused { .. } => "SLC-CLU-022",
        }
    }

    /// Wrap an etcd client error with what was being done.
    pub(crate) fn etcd(context: impl Into<String>, source: etcd_client::Error) -> Self {
        Self::Etcd {
            context: context.into(),
            source,
        }
    }
}

/// Result alias of this crate.
pub type Result<T> = std::result::Result<T, ClusterError>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variant's `code()` is the code its message starts with.
    #[test]
    fn code_is_the_message_prefix() {
        let all = [
            ClusterError::InvalidId {
                what: "node id",
                id: "x".into(),
                reason: "r",
            },
            ClusterError::LeaseLost { node: "n".into() },
            ClusterError::Harness("h".into()),
            ClusterError::AlreadyFinished {
                cluster: "c".into(),
                node: "n".into(),
            },
        ];
        for e in all {
            assert!(e.to_string().starts_with(e.code()), "{e}");
        }
    }
}
