//! One cluster node: the control-plane pieces started in order and held
//! together.
//!
//! Start order matters: the catalog is checked before the node joins (a
//! refused node never appears as a member), and the node joins before it
//! campaigns (a leader is always a member).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::assignment::{Assignment, AssignmentDriver, AssignmentView, Placement};
use crate::catalog_seal::{self, SealOutcome, SealedCatalog};
use crate::error::Result;
use crate::leader::{Election, LeaderState};
use crate::membership::{self, Membership};
use crate::session::{Session, DEFAULT_LEASE_TTL};

/// How to start a node.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// etcd endpoints (`http://127.0.0.1:2379`).
    pub endpoints: Vec<String>,
    /// The cluster id.
    pub cluster: String,
    /// This node's id, unique among live nodes.
    pub node: String,
    /// Lease TTL: how long a silent node stays a member (and leader).
    pub lease_ttl: Duration,
    /// The node's startup catalog.
    pub catalog: SealedCatalog,
    /// Whom the leader places vnodes on.
    pub placement: Placement,
    /// Whether this node campaigns for leadership (by default it does).
    /// `false`: it follows whoever leads and never leads itself.
    pub campaigns: bool,
}

impl NodeConfig {
    /// A config with the default lease TTL.
    pub fn new(endpoints: Vec<String>, cluster: &str, node: &str, catalog: SealedCatalog) -> Self {
        Self {
            endpoints,
            cluster: cluster.to_string(),
            node: node.to_string(),
            lease_ttl: DEFAULT_LEASE_TTL,
            catalog,
            placement: Placement::default(),
            campaigns: true,
        }
    }
}

/// A running cluster node's control plane.
#[derive(Debug)]
pub struct ClusterNode {
    session: Arc<Session>,
    seal: SealOutcome,
    membership: Option<Membership>,
    members: watch::Receiver<BTreeSet<String>>,
    election: Arc<Election>,
    view: AssignmentView,
    _driver: AssignmentDriver,
}

impl ClusterNode {
    /// Connect, check the catalog, join, campaign and follow the
    /// assignment table.
    pub async fn start(config: NodeConfig) -> Result<Self> {
        let session = Arc::new(
            Session::connect(
                &config.endpoints,
                &config.cluster,
                &config.node,
                config.lease_ttl,
            )
            .await?,
        );
        let seal = catalog_seal::seal_or_verify(
            &session.client(),
            session.keys(),
            session.node(),
            &config.catalog,
        )
        .await?;
        let membership = Membership::join(Arc::clone(&session)).await?;
        let members = membership::live_members(&session);
        let election = Arc::new(if config.campaigns {
            Election::start(Arc::clone(&session))
        } else {
            Election::observe(Arc::clone(&session))
        });
        let view = AssignmentView::start(&session);
        let driver = AssignmentDriver::start(
            Arc::clone(&election),
            members.clone(),
            view.clone(),
            config.catalog.vnode_count,
            config.placement.clone(),
        );
        Ok(Self {
            session,
            seal,
            membership: Some(membership),
            members,
            election,
            view,
            _driver: driver,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        self.session.node().as_str()
    }

    /// Whether this node sealed the catalog or matched an existing seal.
    pub fn seal(&self) -> &SealOutcome {
        &self.seal
    }

    /// Whether this node leads now.
    pub fn is_leader(&self) -> bool {
        self.election.is_leader()
    }

    /// This node's term while it leads (the fencing token).
    pub fn term(&self) -> Option<u64> {
        self.election.term()
    }

    /// Leadership as this node last saw it.
    pub fn leader(&self) -> watch::Receiver<LeaderState> {
        self.election.state()
    }

    /// The election (for leader-guarded writes).
    pub fn election(&self) -> &Arc<Election> {
        &self.election
    }

    /// The live member set.
    pub fn members(&self) -> watch::Receiver<BTreeSet<String>> {
        self.members.clone()
    }

    /// The assignment table as this node sees it.
    pub fn assignment(&self) -> Result<Option<Assignment>> {
        self.view.current()
    }

    /// The vnodes this node owns in the current table.
    pub fn owned_vnodes(&self) -> Vec<u32> {
        self.view.owned_vnodes(self.node_id())
    }

    /// The current assignment generation (0 before the first table).
    pub fn generation(&self) -> u64 {
        self.view.generation()
    }

    /// A handle on the assignment view (to wait for changes).
    pub fn assignment_view(&self) -> AssignmentView {
        self.view.clone()
    }

    /// The session (lease state, etcd client).
    pub fn session(&self) -> &Arc<Session> {
        &self.session
    }

    /// Leave cleanly: resign leadership, delete the member key and revoke
    /// the lease, so the others react now rather than one TTL later.
    pub async fn shutdown(mut self) -> Result<()> {
        self.election.resign().await?;
        if let Some(m) = self.membership.take() {
            m.leave().await?;
        }
        self.session.close().await
    }
}
