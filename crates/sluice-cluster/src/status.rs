//! What an operator asks of a cluster (`SHOW CLUSTER`, `sluice cluster
//! status`): who leads, who is a member, who owns how many vnodes, each
//! member's last reported progress, and whether the run has finished.
//!
//! Everything is read in **one** etcd transaction, so the answer is the
//! cluster at a single revision: a leader that is listed is a member of
//! the same snapshot, and the vnode counts are those of the assignment
//! generation shown. Reading needs no membership (a node that has not
//! joined, or a tool that never will, can ask).
//!
//! Progress records (`/sluice/C/progress/N`, attached to N's lease) are
//! written by the node running the pipeline about once a second
//! ([`publish_progress`]); they vanish with the node's lease, so a dead
//! node shows no stale progress.

use std::collections::BTreeMap;

pub use etcd_client::Client;
use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};

use crate::assignment::Assignment;
use crate::checkpoint::record::parse_id;
use crate::error::{ClusterError, Result};
use crate::keys::ClusterKeys;
use crate::session::Session;

/// One node's progress as it last reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    /// Rows read from its sources so far.
    pub rows_in: u64,
    /// Rows written to its outputs so far.
    pub rows_out: u64,
    /// Its pipeline watermark (ms since the epoch; `i64::MIN` before any).
    pub watermark_ms: i64,
    /// Its newest committed checkpoint id (0 before the first).
    pub checkpoint: u64,
    /// When it reported (ms since the epoch, its own clock).
    pub at_ms: i64,
}

/// The end of a bounded run, as the leader that finished it recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finished {
    /// The node that ran it to the end.
    pub node: String,
    /// That node's leader term.
    pub term: u64,
    /// Rows in and out of that node's last run.
    pub rows_in: u64,
    /// Rows out.
    pub rows_out: u64,
}

/// The end of one split member's share, as that member recorded it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberFinished {
    /// Rows in of the member's last run.
    pub rows_in: u64,
    /// Rows out.
    pub rows_out: u64,
    /// The leader term under which a shuffled split's leader finished:
    /// its shutdown checkpoint covered every member's rows, so the
    /// followers may stop (see [`wait_for_leader_finished`]). `None` for
    /// the members of a split whose nodes checkpoint on their own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader_term: Option<u64>,
}

/// One member, as the status shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// The node id.
    pub node: String,
    /// Whether it holds the leader key.
    pub leader: bool,
    /// How many vnodes it owns in the shown assignment.
    pub vnodes: u32,
    /// Its last progress report, if it runs the pipeline.
    pub progress: Option<Progress>,
    /// Whether it asks the leader for checkpoints: it holds process
    /// function input that only a commit releases (see
    /// `checkpoint_requests`).
    pub asks_for_checkpoints: bool,
}

/// The cluster at one etcd revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The cluster id.
    pub cluster: String,
    /// The etcd revision the snapshot was read at.
    pub revision: i64,
    /// The leader's node id and term, if one is elected.
    pub leader: Option<(String, u64)>,
    /// Live members, by node id.
    pub members: Vec<MemberStatus>,
    /// The assignment generation shown (0 before the first table).
    pub generation: u64,
    /// The vnode count sealed with the catalog (0 before the seal).
    pub vnode_count: u32,
    /// The newest committed checkpoint id of the cluster protocol (0: none).
    pub committed: u64,
    /// Set once a leader ran the (bounded) pipeline to its end.
    pub finished: Option<Finished>,
    /// The members of a split that ran their share to its end, by node id
    /// (live or not).
    pub finished_members: BTreeMap<String, MemberFinished>,
}

/// A plain etcd client for reading the status (no lease, no membership).
pub async fn connect(endpoints: &[String]) -> Result<Client> {
    crate::client::connect(endpoints).await
}

/// Read the status of the cluster `keys` names.
pub async fn read(client: &Client, keys: &ClusterKeys) -> Result<ClusterStatus> {
    let prefix = || Some(GetOptions::new().with_prefix());
    let txn = Txn::new().and_then([
        TxnOp::get(keys.leader(), None),
        TxnOp::get(keys.nodes_prefix(), prefix()),
        TxnOp::get(keys.assignment(), None),
        TxnOp::get(keys.checkpoint_committed(), None),
        TxnOp::get(keys.finished(), None),
        TxnOp::get(keys.progress_prefix(), prefix()),
        TxnOp::get(keys.finished_members_prefix(), prefix()),
        TxnOp::get(keys.checkpoint_requests(), prefix()),
    ]);
    let response = client
        .clone()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd("read of the cluster status", e))?;
    let revision = response.header().map_or(0, |h| h.revision());
    let kvs = |i: usize| match response.op_responses().get(i) {
        Some(TxnOpResponse::Get(get)) => get.kvs().to_vec(),
        _ => Vec::new(),
    };
    let text = |key: &[u8]| String::from_utf8_lossy(key).into_owned();
    let leader = kvs(0).first().map(|kv| {
        (
            String::from_utf8_lossy(kv.value()).into_owned(),
            u64::try_from(kv.create_revision()).unwrap_or(0),
        )
    });
    let assignment = match kvs(2).first() {
        Some(kv) => Some(Assignment::decode(
            &text(kv.key()),
            kv.value(),
            u64::try_from(kv.mod_revision()).unwrap_or(0),
        )?),
        None => None,
    };
    let committed = match kvs(3).first() {
        Some(kv) => parse_id(&text(kv.key()), kv.value())?,
        None => 0,
    };
    let finished = match kvs(4).first() {
        Some(kv) => Some(decode(&text(kv.key()), kv.value())?),
        None => None,
    };
    let progress_prefix = keys.progress_prefix();
    let mut progress: BTreeMap<String, Progress> = BTreeMap::new();
    for kv in kvs(5) {
        let key = text(kv.key());
        let node = key.trim_start_matches(&progress_prefix).to_string();
        progress.insert(node, decode(&key, kv.value())?);
    }
    let finished_prefix = keys.finished_members_prefix();
    let mut finished_members = BTreeMap::new();
    for kv in kvs(6) {
        let key = text(kv.key());
        let node = key.trim_start_matches(&finished_prefix).to_string();
        finished_members.insert(node, decode(&key, kv.value())?);
    }
    let requests_prefix = keys.checkpoint_requests();
    let asking: std::collections::BTreeSet<String> = kvs(7)
        .iter()
        .map(|kv| {
            text(kv.key())
                .trim_start_matches(&requests_prefix)
                .to_string()
        })
        .collect();
    let members = kvs(1)
        .iter()
        .map(|kv| {
            let node = String::from_utf8_lossy(kv.value()).into_owned();
            MemberStatus {
                leader: leader.as_ref().is_some_and(|(l, _)| *l == node),
                vnodes: assignment
                    .as_ref()
                    .map_or(0, |a| a.owned_vnodes(&node).len() as u32),
                progress: progress.remove(&node),
                asks_for_checkpoints: asking.contains(&node),
                node,
            }
        })
        .collect();
    Ok(ClusterStatus {
        cluster: keys.cluster().to_string(),
        revision,
        leader,
        members,
        generation: assignment.as_ref().map_or(0, Assignment::generation),
        vnode_count: assignment.as_ref().map_or(0, Assignment::vnode_count),
        committed,
        finished,
        finished_members,
    })
}

/// Record that this node, a member of a split, ran its share to its end
/// and published its sinks. Written only while the node is a member under
/// its own lease (a node cut off from etcd records nothing); the record
/// itself outlives the lease. Recording again (a finished node started
/// again) replaces it.
pub async fn record_member_finished(session: &Session, finished: &MemberFinished) -> Result<()> {
    let keys = session.keys();
    let key = keys.finished_member(session.node());
    let value = encode(&key, finished)?;
    let txn = Txn::new()
        .when([Compare::lease(
            keys.node(session.node()),
            CompareOp::Equal,
            session.lease_id(),
        )])
        .and_then([TxnOp::put(key, value, None)]);
    let response = session
        .client()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd("record of a finished split member", e))?;
    if response.succeeded() {
        Ok(())
    } else {
        Err(ClusterError::LeaseLost {
            node: session.node().to_string(),
        })
    }
}

/// Wait until `leader` recorded that it finished as the leader of `term`
/// ([`MemberFinished::leader_term`]): a record of an earlier run or term
/// does not count. Ends with an error only if etcd's answer cannot be
/// read; the caller stops waiting when that leader loses its term.
pub async fn wait_for_leader_finished(
    client: Client,
    keys: &ClusterKeys,
    leader: &str,
    term: u64,
) -> Result<MemberFinished> {
    let key = keys.finished_member(&crate::keys::NodeId::new(leader)?);
    let mut records = crate::watch::spawn(client, key.clone(), false);
    loop {
        let value = records
            .borrow_and_update()
            .entries
            .get(&key)
            .map(|e| e.value.clone());
        if let Some(value) = value {
            let finished: MemberFinished = decode(&key, &value)?;
            if finished.leader_term == Some(term) {
                return Ok(finished);
            }
        }
        if records.changed().await.is_err() {
            return Err(ClusterError::Corrupt {
                key,
                reason: "the watch of the leader's finish ended".into(),
            });
        }
    }
}

/// Node `node`'s record of a finished share, read from etcd now (not from
/// a watch): a reader that saw a leader resign reads what that leader
/// wrote before it.
pub async fn read_member_finished(
    client: &Client,
    keys: &ClusterKeys,
    node: &str,
) -> Result<Option<MemberFinished>> {
    let key = keys.finished_member(&crate::keys::NodeId::new(node)?);
    let got = client
        .clone()
        .get(key.clone(), None)
        .await
        .map_err(|e| ClusterError::etcd("read of a finished member's record", e))?;
    match got.kvs().first() {
        Some(kv) => Ok(Some(decode(&key, kv.value())?)),
        None => Ok(None),
    }
}

/// The end of a shuffled split's run that `node` missed: `leader`
/// recorded that it finished the run as leader (its shutdown checkpoint
/// covered every member's rows, `node`'s too), and since then `node`
/// recorded no finish of its own, no node leads, and no checkpoint was
/// committed. Returns that record of the leader, or `None` when the
/// newest run is not one `node` missed.
///
/// That is a follower killed after it answered the final checkpoint and
/// before it published: started again, its peers are gone for good, so
/// it publishes its share of that checkpoint instead of waiting for them.
/// A split started again for a new run has a leader, or commits, or this
/// node's own finish is the newer record: each makes this `None`. Read in
/// one transaction, so the answer is one revision of the cluster.
pub async fn missed_run_end(
    client: &Client,
    keys: &ClusterKeys,
    node: &str,
    leader: &str,
) -> Result<Option<MemberFinished>> {
    let leader_key = keys.finished_member(&crate::keys::NodeId::new(leader)?);
    let own_key = keys.finished_member(&crate::keys::NodeId::new(node)?);
    let txn = Txn::new().and_then([
        TxnOp::get(leader_key.clone(), None),
        TxnOp::get(own_key, None),
        TxnOp::get(keys.leader(), None),
        TxnOp::get(keys.checkpoint_committed(), None),
    ]);
    let response = client
        .clone()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd("read of the split's end", e))?;
    let first = |i: usize| match response.op_responses().get(i) {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
        _ => None,
    };
    let Some(ended) = first(0) else {
        return Ok(None);
    };
    let record: MemberFinished = decode(&leader_key, ended.value())?;
    let at = ended.mod_revision();
    let own_older = first(1).is_none_or(|own| own.mod_revision() < at);
    let nobody_leads = first(2).is_none();
    let nothing_committed_since = first(3).is_some_and(|c| c.mod_revision() < at);
    let missed =
        record.leader_term.is_some() && own_older && nobody_leads && nothing_committed_since;
    Ok(missed.then_some(record))
}

/// The finished record, read from etcd now (not from a watch).
pub async fn read_finished(client: &Client, keys: &ClusterKeys) -> Result<Option<Finished>> {
    let key = keys.finished();
    let got = client
        .clone()
        .get(key.clone(), None)
        .await
        .map_err(|e| ClusterError::etcd("read of the finished record", e))?;
    match got.kvs().first() {
        Some(kv) => Ok(Some(decode(&key, kv.value())?)),
        None => Ok(None),
    }
}

/// Report this node's progress (attached to its lease, so it disappears
/// with the node).
pub async fn publish_progress(session: &Session, progress: &Progress) -> Result<()> {
    let key = session.keys().progress(session.node());
    let value = encode(&key, progress)?;
    session
        .client()
        .put(
            key,
            value,
            Some(PutOptions::new().with_lease(session.lease_id())),
        )
        .await
        .map_err(|e| {
            ClusterError::etcd(format!("progress report of node '{}'", session.node()), e)
        })?;
    Ok(())
}

/// The JSON value of `value`, for key `key`.
pub(crate) fn encode<T: Serialize>(key: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| ClusterError::Corrupt {
        key: key.to_string(),
        reason: format!("cannot encode: {e}"),
    })
}

/// The JSON value at `key` and the etcd revision it was last written at
/// (`(None, 0)`: absent); `what` names the read in an error.
pub(crate) async fn read_json<T: for<'de> Deserialize<'de>>(
    client: &Client,
    key: String,
    what: &'static str,
) -> Result<(Option<T>, i64)> {
    let got = client
        .clone()
        .get(key.clone(), None)
        .await
        .map_err(|e| ClusterError::etcd(what, e))?;
    match got.kvs().first() {
        Some(kv) => Ok((Some(decode(&key, kv.value())?), kv.mod_revision())),
        None => Ok((None, 0)),
    }
}

pub(crate) fn decode<T: for<'de> Deserialize<'de>>(key: &str, value: &[u8]) -> Result<T> {
    serde_json::from_slice(value).map_err(|e| ClusterError::Corrupt {
        key: key.to_string(),
        reason: e.to_string(),
    })
}
