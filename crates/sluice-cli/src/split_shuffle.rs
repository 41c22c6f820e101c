//! `--shuffle NODE=IP:PORT,...`: keyed work across the nodes of a split.
//!
//! Without it, each node of a split runs row-by-row queries over its own
//! files and checkpoints on its own. With it, every node listens for the
//! other nodes' rows at its address, each key's rows go to the owner of
//! its vnode (`DatabaseBuilder::shuffle`), and the nodes checkpoint as one
//! cut: the leader of the cluster's election originates every checkpoint
//! (`LeaderCommitRecord` sharing vnodes) and the others follow it
//! (`FollowerCommitRecord`).
//!
//! A node's role is known only once it joined, and it joins with its
//! sealed catalog, which exists only once its database opened and ran the
//! script. So the database opens with a [`RoleAuthority`], which answers
//! for the role decided after the join ([`take_role`]) and before `start`.
//!
//! ```text
//!   open (RoleAuthority, undecided) ─► script ─► seal ─► join
//!     ─► take_role: wait for a leader
//!          ├─ this node: leader record in its term, take over (abort the
//!          │  attempts an earlier leader left open), wait for the table
//!          │  placed in its term
//!          └─ another: follower record (acks that node's Prepares)
//!     ─► start ─► run to the end
//!          ├─ leader: shutdown (its checkpoint covers every node's rows)
//!          │          ─► record "finished as leader of term T"
//!          └─ follower: wait for that record ─► shutdown (publishes
//!                       what the leader's last checkpoint covered)
//! ```
//!
//! A node killed mid-run cuts its channels, and the others halt (none
//! recovers alone): whoever runs the nodes starts them all again, and each
//! resumes from the last checkpoint committed for all. The member list of
//! a shuffled split can grow between runs (`split_change`): each node's
//! keyed operators then take the keys of its vnodes out of the old
//! members' last cut (`DatabaseBuilder::split_moved_state`), as its file
//! sources take the files of its vnodes from where they stopped.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use async_trait::async_trait;
use sluice::split::{OwnerTable, ShuffleServer, ShuffleSetup};
use sluice::{Announcement, BlobRef, CommitAuthority, StorageError};
use sluice_cluster::status::{self, Client};
use sluice_cluster::vnodes::{self, VnodeCount};
use sluice_cluster::{
    ClusterError, ClusterKeys, ClusterNode, FollowerCommitRecord, LeaderCommitRecord,
};

use crate::error::CliError;

/// How often, and how many times, a node binds its shuffle address again
/// while a server of its previous run still holds it.
const BIND_RETRY: std::time::Duration = std::time::Duration::from_millis(100);
const BIND_TRIES: u32 = 50;

/// Where every node of a shuffled split listens for the others' rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ShuffleList {
    addrs: BTreeMap<String, SocketAddr>,
}

/// `--shuffle NODE=IP:PORT,...`, which must give an address to exactly the
/// nodes of `--split` (`members`).
pub(crate) fn parse(spec: &str, members: &[String]) -> Result<ShuffleList, CliError> {
    let refuse = |why: String| CliError::usage(format!("--shuffle '{spec}': {why}"));
    let mut addrs = BTreeMap::new();
    for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let Some((node, addr)) = entry.split_once('=') else {
            return Err(refuse(format!(
                "'{entry}' is not NODE=IP:PORT (e.g. n1=127.0.0.1:7101)"
            )));
        };
        let node = node.trim();
        let addr: SocketAddr = addr.trim().parse().map_err(|e| {
            refuse(format!(
                "node '{node}': '{}' is not an IP:PORT address ({e})",
                addr.trim()
            ))
        })?;
        if !members.iter().any(|m| m == node) {
            return Err(refuse(format!(
                "node '{node}' is not in --split ({})",
                members.join(",")
            )));
        }
        if addrs.insert(node.to_string(), addr).is_some() {
            return Err(refuse(format!("node '{node}' is listed twice")));
        }
    }
    if let Some(missing) = members.iter().find(|m| !addrs.contains_key(*m)) {
        return Err(refuse(format!(
            "node '{missing}' of --split has no address; give every node of the split one"
        )));
    }
    let distinct: BTreeSet<&SocketAddr> = addrs.values().collect();
    if distinct.len() != addrs.len() {
        return Err(refuse("two nodes are given the same address".into()));
    }
    Ok(ShuffleList { addrs })
}

impl ShuffleList {
    /// The list in one canonical spelling (sorted by node), which every
    /// node's sealed catalog carries: nodes that disagree on where the
    /// others listen are refused before they exchange a row.
    pub(crate) fn canonical(&self) -> String {
        let each: Vec<String> = self
            .addrs
            .iter()
            .map(|(node, addr)| format!("{node}={addr}"))
            .collect();
        each.join(",")
    }

    /// This node's part in the shuffle of the split `members` (sorted)
    /// under `generation`: its server listening at its address, the owner
    /// of every vnode (the same rendezvous placement as its files), and
    /// the other nodes' endpoints.
    pub(crate) async fn setup(
        &self,
        cluster: &str,
        node: &str,
        generation: u64,
        members: &[String],
        count: VnodeCount,
    ) -> Result<ShuffleSetup, CliError> {
        let Some(addr) = self.addrs.get(node) else {
            return Err(CliError::usage(format!(
                "--shuffle gives node '{node}' no address"
            )));
        };
        // A node that rejoins binds the address its previous run held,
        // whose server may still be closing: ask again for a while.
        let mut tries = 0;
        let server = loop {
            match ShuffleServer::bind(*addr, cluster, node, generation).await {
                Ok(server) => break server,
                Err(e) if tries < BIND_TRIES => {
                    tries += 1;
                    tracing::debug!(error = %e, "the shuffle address is still held; binding again");
                    tokio::time::sleep(BIND_RETRY).await;
                }
                Err(e) => return Err(sluice::Error::from(e).into()),
            }
        };
        let table = OwnerTable::new(members.to_vec(), vnodes::place(count, members))
            .map_err(sluice::Error::from)?;
        let endpoints: HashMap<String, String> = self
            .addrs
            .iter()
            .filter(|(n, _)| n.as_str() != node)
            .map(|(n, a)| (n.clone(), format!("http://{a}")))
            .collect();
        Ok(ShuffleSetup::new(
            node,
            cluster,
            generation,
            table,
            endpoints,
            Arc::new(server),
        )?)
    }
}

/// The commit authority of a node of a shuffled split: the leader's or a
/// follower's record, chosen once the node joined ([`take_role`]). The
/// pipeline consults its authority only from `start` on; until the role
/// is set, it originates nothing, folds nothing, and every question is
/// answered with an error that says the role is undecided.
#[derive(Debug, Default)]
pub(crate) struct RoleAuthority {
    role: OnceLock<Arc<dyn CommitAuthority>>,
}

impl RoleAuthority {
    fn role(&self) -> Result<&Arc<dyn CommitAuthority>, StorageError> {
        self.role.get().ok_or_else(|| StorageError::Authority {
            what: "this node's role in the split".into(),
            source: "it is decided once the node joined the cluster, before it starts".into(),
        })
    }
}

#[async_trait]
impl CommitAuthority for RoleAuthority {
    async fn record_commit(
        &self,
        id: u64,
        generation: Option<u64>,
        manifest: &BlobRef,
    ) -> Result<(), StorageError> {
        self.role()?.record_commit(id, generation, manifest).await
    }

    fn one_cut_across_nodes(&self) -> bool {
        // Either role decides each checkpoint once for every node.
        true
    }

    fn may_originate(&self) -> bool {
        self.role.get().is_some_and(|r| r.may_originate())
    }

    async fn admit(&self) -> Result<Option<u64>, StorageError> {
        self.role()?.admit().await
    }

    async fn prepare(
        &self,
        id: u64,
        generation: Option<u64>,
        deadline_ms: u64,
    ) -> Result<(), StorageError> {
        self.role()?.prepare(id, generation, deadline_ms).await
    }

    fn may_fold_input(&self) -> bool {
        self.role.get().is_some_and(|r| r.may_fold_input())
    }

    async fn abandon(&self, id: u64, reason: &str) -> Result<(), StorageError> {
        self.role()?.abandon(id, reason).await
    }

    fn announcements(&self) -> Option<Arc<tokio::sync::Notify>> {
        self.role.get().and_then(|r| r.announcements())
    }

    async fn next_announcement(&self) -> Result<Option<Announcement>, StorageError> {
        self.role()?.next_announcement().await
    }

    async fn decline(&self, id: u64, reason: &str) -> Result<(), StorageError> {
        self.role()?.decline(id, reason).await
    }

    async fn attempt_aborted(&self, id: u64) -> Result<Option<String>, StorageError> {
        self.role()?.attempt_aborted(id).await
    }

    async fn largest_reserved(&self) -> Result<Option<u64>, StorageError> {
        self.role()?.largest_reserved().await
    }

    fn request_checkpoints(&self, holding: bool) {
        if let Some(r) = self.role.get() {
            r.request_checkpoints(holding);
        }
    }

    fn checkpoints_requested(&self) -> bool {
        self.role.get().is_some_and(|r| r.checkpoints_requested())
    }

    async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
        self.role()?.committed().await
    }

    async fn forget_below(&self, id: u64) -> Result<(), StorageError> {
        self.role()?.forget_below(id).await
    }
}

/// What this node is in the split's checkpoints.
#[derive(Debug, Clone)]
pub(crate) enum Role {
    /// It originates every checkpoint, in this term.
    Leader {
        /// Its leader term.
        term: u64,
    },
    /// It takes part in the checkpoints of `leader`, the split's
    /// designated leader.
    Follower {
        /// The leading node.
        leader: String,
        /// The newest term in which `leader` was seen leading (0: never
        /// yet). A process of it killed earlier may still hold the key
        /// when this node joins, so the term is followed, not fixed.
        seen: Arc<AtomicU64>,
    },
}

/// The member of the split that leads its checkpoints: the first of the
/// sorted list. Only it campaigns (`NodeConfig::campaigns`), so a node
/// running as a follower never becomes the leader halfway through, and
/// after a kill the leader is the designated node's new process, once
/// the old one's lease lapsed.
pub(crate) fn designated_leader(members: &[String]) -> &str {
    members.first().map_or("", String::as_str)
}

/// Decide this joined node's role and give `authority` its record. The
/// designated leader waits until it leads (its previous process's key
/// lapses first), takes over (aborting what an earlier leader left
/// undecided) and waits for the vnode table placed in its term, under
/// which it admits checkpoints. Any other node follows.
pub(crate) async fn take_role(
    node: &ClusterNode,
    (client, keys): (Client, ClusterKeys),
    leader: &str,
    authority: &RoleAuthority,
) -> Result<Role, CliError> {
    let mut state = node.leader();
    let role = if node.node_id() == leader {
        let term = loop {
            if let Some(term) = node.term() {
                break term;
            }
            if state.changed().await.is_err() {
                return Err(ClusterError::LeaseLost {
                    node: node.node_id().to_string(),
                }
                .into());
            }
        };
        Role::Leader { term }
    } else {
        let seen = Arc::new(AtomicU64::new(0));
        let tracked = Arc::clone(&seen);
        let leader = leader.to_string();
        let name = leader.clone();
        // Ends when the node leaves (its leadership watch closes).
        tokio::spawn(async move {
            loop {
                {
                    let now = state.borrow_and_update();
                    if now.leader.as_deref() == Some(name.as_str()) {
                        tracked.fetch_max(now.term, Ordering::SeqCst);
                    }
                }
                if state.changed().await.is_err() {
                    return;
                }
            }
        });
        Role::Follower { leader, seen }
    };
    let record: Arc<dyn CommitAuthority> = match &role {
        Role::Leader { term } => {
            let record = LeaderCommitRecord::new(client, keys, node.node_id()).sharing_vnodes();
            record.lead(Arc::clone(node.election()), *term);
            let aborted = record.take_over().await?;
            if !aborted.is_empty() {
                tracing::info!(attempts = ?aborted, "aborted the attempts an earlier leader left open");
            }
            placed_in_term(node, *term).await?;
            Arc::new(record)
        }
        Role::Follower { .. } => Arc::new(FollowerCommitRecord::new(Arc::clone(node.session()))),
    };
    tracing::info!(
        node = node.node_id(),
        ?role,
        "this node's role in the shuffled split"
    );
    if authority.role.set(record).is_err() {
        return Err(CliError::script(
            "this node's role in the split was set twice",
        ));
    }
    Ok(role)
}

/// Wait until the leader's driver placed the vnode table in `term`.
async fn placed_in_term(node: &ClusterNode, term: u64) -> Result<(), CliError> {
    let mut view = node.assignment_view();
    loop {
        if view.current()?.is_some_and(|a| a.term() == term) {
            return Ok(());
        }
        if !view.changed().await || node.term() != Some(term) {
            return Err(ClusterError::NotLeader {
                node: node.node_id().to_string(),
                term,
            }
            .into());
        }
    }
}

/// A follower whose share ran to its end waits for its leader's shutdown
/// checkpoint, which covers every node's rows: it returns once `leader`
/// recorded that it finished in `term` (the newest term this node saw it
/// lead in), and fails if that leader lost the term without that record
/// (the follower's output after the leader's last checkpoint is then
/// replayed when the split is started again). A finished leader resigns
/// right after its record, and the two watches may deliver that in either
/// order: a resignation seen first is checked against the record read
/// from etcd itself.
pub(crate) async fn leader_finished(
    node: &ClusterNode,
    client: Client,
    keys: &ClusterKeys,
    leader: &str,
    term: u64,
) -> Result<(), CliError> {
    if term == 0 {
        return Err(CliError::script(format!(
            "this node ran to its end without seeing the split's leader '{leader}' lead; \
             start every node of the split again"
        )));
    }
    let mut state = node.leader();
    let finished = status::wait_for_leader_finished(client.clone(), keys, leader, term);
    tokio::pin!(finished);
    loop {
        let moved_on = {
            let now = state.borrow_and_update();
            now.term != term || now.leader.as_deref() != Some(leader)
        };
        if moved_on {
            let record = status::read_member_finished(&client, keys, leader).await?;
            if record.is_some_and(|r| r.leader_term == Some(term)) {
                return Ok(());
            }
            return Err(CliError::leader_gone(format!(
                "the split's leader '{leader}' lost its term {term} before it finished; \
                 this node rejoins to resume from the last checkpoint committed for all"
            )));
        }
        tokio::select! {
            r = &mut finished => return r.map(|_| ()).map_err(CliError::from),
            changed = state.changed() => if changed.is_err() {
                return Err(ClusterError::LeaseLost { node: node.node_id().to_string() }.into());
            },
        }
    }
}

/// Resolves (with the error to rejoin on) once the run this follower
/// takes part in is over without its end: the leader term it first saw
/// `leader` lead in ended, and that leader recorded no finish in it.
/// Every run of a shuffled split is one term of its leader (a leader that
/// loses its term stops; its next process leads a new one), so a
/// follower still running after that term is in a run the others
/// abandoned: a process started again while the others had not yet
/// halted for its predecessor would otherwise follow the dead run's
/// checkpoints and carry their barriers into the next run's channels.
/// Never resolves for a term that ended with the leader's finish (the
/// follower's share is ending too) or while no leader was seen.
pub(crate) async fn run_outlived(
    node: &ClusterNode,
    client: Client,
    keys: &ClusterKeys,
    leader: &str,
) -> CliError {
    let mut state = node.leader();
    let mut followed = None;
    loop {
        let now = state.borrow_and_update().clone();
        let leads = now.leader.as_deref() == Some(leader);
        match followed {
            None if leads => followed = Some(now.term),
            Some(term) if !leads || now.term != term => {
                let record = status::read_member_finished(&client, keys, leader).await;
                if matches!(&record, Ok(Some(r)) if r.leader_term == Some(term)) {
                    return std::future::pending().await;
                }
                return CliError::leader_gone(format!(
                    "the split's leader '{leader}' lost its term {term} while this node ran \
                     (that run is over); rejoining to resume from the last checkpoint \
                     committed for all"
                ));
            }
            _ => {}
        }
        if state.changed().await.is_err() {
            return ClusterError::LeaseLost {
                node: node.node_id().to_string(),
            }
            .into();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::expect_used)]
    use super::*;

    fn members() -> Vec<String> {
        vec!["n1".into(), "n2".into()]
    }

    #[test]
    fn a_list_gives_every_member_one_address() {
        let list = parse(" n2=127.0.0.1:7102 , n1=127.0.0.1:7101", &members()).expect("parsed");
        assert_eq!(list.canonical(), "n1=127.0.0.1:7101,n2=127.0.0.1:7102");
    }

    #[test]
    fn every_malformed_list_is_refused_by_name() {
        for (spec, says) in [
            ("n1=127.0.0.1:7101,n2", "'n2' is not NODE=IP:PORT"),
            (
                "n1=127.0.0.1:7101,n2=localhost",
                "node 'n2': 'localhost' is not an IP:PORT",
            ),
            (
                "n1=127.0.0.1:7101,n2=127.0.0.1:7102,n3=127.0.0.1:7103",
                "node 'n3' is not in --split (n1,n2)",
            ),
            (
                "n1=127.0.0.1:7101,n1=127.0.0.1:7102",
                "node 'n1' is listed twice",
            ),
            ("n1=127.0.0.1:7101", "node 'n2' of --split has no address"),
            ("n1=127.0.0.1:7101,n2=127.0.0.1:7101", "the same address"),
            ("", "node 'n1' of --split has no address"),
        ] {
            let e = parse(spec, &members()).expect_err(spec).to_string();
            assert!(e.contains(says), "{spec}: {e}");
            assert!(e.starts_with(&format!("--shuffle '{spec}'")), "{e}");
        }
    }

    #[tokio::test]
    async fn an_undecided_role_originates_nothing_and_says_why() {
        let role = RoleAuthority::default();
        assert!(!role.may_originate());
        assert!(!role.may_fold_input());
        assert!(role.one_cut_across_nodes());
        assert!(role.announcements().is_none());
        role.request_checkpoints(true);
        assert!(!role.checkpoints_requested());
        let e = role.committed().await.expect_err("undecided").to_string();
        assert!(e.contains("this node's role in the split"), "{e}");
    }

    /// A role's record, recording the checkpoint requests it is told.
    #[derive(Debug, Default)]
    struct Requests(std::sync::Mutex<Vec<bool>>);

    #[async_trait]
    impl CommitAuthority for Requests {
        async fn record_commit(
            &self,
            _: u64,
            _: Option<u64>,
            _: &BlobRef,
        ) -> Result<(), StorageError> {
            Ok(())
        }
        async fn committed(&self) -> Result<Option<BTreeSet<u64>>, StorageError> {
            Ok(None)
        }
        async fn forget_below(&self, _: u64) -> Result<(), StorageError> {
            Ok(())
        }
        fn request_checkpoints(&self, holding: bool) {
            self.0.lock().expect("not poisoned").push(holding);
        }
        fn checkpoints_requested(&self) -> bool {
            self.0.lock().expect("not poisoned").last() == Some(&true)
        }
    }

    #[test]
    fn a_decided_role_passes_checkpoint_requests_on() {
        let role = RoleAuthority::default();
        let record = Arc::new(Requests::default());
        assert!(role
            .role
            .set(Arc::clone(&record) as Arc<dyn CommitAuthority>)
            .is_ok());
        role.request_checkpoints(true);
        assert!(role.checkpoints_requested());
        role.request_checkpoints(false);
        assert!(!role.checkpoints_requested());
        assert_eq!(*record.0.lock().expect("not poisoned"), [true, false]);
    }
}
