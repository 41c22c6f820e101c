//! A pipeline split across nodes: each node's vnodes, what runs split, and
//! moving vnodes between nodes (see `sluice_engine::split` and
//! [`DatabaseBuilder::split`](crate::DatabaseBuilder::split)).

use std::collections::BTreeMap;
use std::sync::Arc;

/// What one exchange carried between this node and the others
/// ([`MetricsSnapshot::exchanges`](crate::MetricsSnapshot), `SHOW EXCHANGES`).
pub use sluice_engine::exchange::ExchangeCounters;
/// The shuffle between the nodes of a split
/// ([`DatabaseBuilder::shuffle`](crate::DatabaseBuilder::shuffle)).
pub use sluice_engine::exchange::ShuffleSetup;
pub use sluice_engine::process::placement::VnodePlacement;
pub use sluice_engine::split::handover::{PreviousNode, SourceProgress, SplitHandover};
pub use sluice_engine::split::moved::{MovedState, PreviousState};
pub use sluice_engine::split::{file_vnode, offset_generation, SourceSplit};
pub use sluice_shuffle::{CreditBudget, OwnerTable, ShuffleServer};
use sluice_storage::{CheckpointStore, CommitAuthority, ObjectStoreBackend};

use crate::Result;

/// What the last committed checkpoint in the store at `url` (a node's
/// `checkpoint_store`) says each source had read, for a
/// [`PreviousNode`]; `None` when the store holds no checkpoint (the node
/// committed nothing, so none of its rows counts as read).
///
/// The store is only read, not leased: the positions are final only if the
/// node that wrote them reads no further (it stopped, or gave up the vnodes
/// at this checkpoint), which is the caller's to ensure before handing its
/// vnodes to another node.
pub async fn checkpointed_progress(url: &str) -> Result<Option<BTreeMap<String, SourceProgress>>> {
    recorded_progress(url, None).await
}

/// The id of the checkpoint a node recovers from: the newest that
/// `authority` recorded in the store at `url` and that verifies (a damaged
/// one is skipped, as recovery skips it); `None` when there is none.
pub async fn newest_recorded(
    url: &str,
    authority: Arc<dyn CommitAuthority>,
) -> Result<Option<u64>> {
    let store = CheckpointStore::new(Box::new(ObjectStoreBackend::from_url(url)?));
    let latest = store.with_authority(authority).latest_valid().await?;
    Ok(latest.map(|cp| cp.manifest.id))
}

/// [`checkpointed_progress`] of a store whose checkpoints count once
/// `authority` recorded them (the node's `commit_authority`): the last
/// recorded one, not a newer manifest the authority refused.
pub async fn recorded_progress(
    url: &str,
    authority: Option<Arc<dyn CommitAuthority>>,
) -> Result<Option<BTreeMap<String, SourceProgress>>> {
    let store = CheckpointStore::new(Box::new(ObjectStoreBackend::from_url(url)?));
    let store = match authority {
        Some(authority) => store.with_authority(authority),
        None => store,
    };
    let Some(latest) = store.latest_valid().await? else {
        return Ok(None);
    };
    Ok(Some(
        latest
            .manifest
            .sources
            .into_iter()
            .map(|(name, sc)| {
                let progress = SourceProgress {
                    offset: sc.offset,
                    finished: sc.finished,
                };
                (name, progress)
            })
            .collect(),
    ))
}

/// Node `node`'s last checkpoint that `authority` recorded (the node's
/// `commit_authority`; all of a store's committed ones without it) in the
/// store at `url`, for a [`MovedState`]; `None` when it holds none (the
/// node committed nothing, so it held no state).
///
/// Like [`recorded_progress`], the store is only read: the state is final
/// only if the node reads no further, the caller's to ensure.
pub async fn recorded_state(
    node: &str,
    url: &str,
    authority: Option<Arc<dyn CommitAuthority>>,
) -> Result<Option<PreviousState>> {
    let store = CheckpointStore::new(Box::new(ObjectStoreBackend::from_url(url)?));
    let store = match authority {
        Some(authority) => store.with_authority(authority),
        None => store,
    };
    Ok(store.latest_valid().await?.map(|cp| PreviousState {
        node: node.to_string(),
        checkpoint: Arc::new(cp),
    }))
}

/// Node `node`'s checkpoint `id` (a cut the caller knows committed) in the
/// store at `url`, for a [`MovedState`]; refused when the store does not
/// hold it whole.
pub async fn checkpoint_state(node: &str, url: &str, id: u64) -> Result<PreviousState> {
    let store = CheckpointStore::new(Box::new(ObjectStoreBackend::from_url(url)?));
    let checkpoint = store.load(id).await.map_err(|e| {
        crate::Error::from(e).context(format!(
            "reading checkpoint {id} of node '{node}', whose keyed state moves"
        ))
    })?;
    Ok(PreviousState {
        node: node.to_string(),
        checkpoint: Arc::new(checkpoint),
    })
}
