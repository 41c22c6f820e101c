//! Starting a pipeline: admission under its delivery guarantee, recovery
//! from the newest valid checkpoint, and the order of control messages.

use std::sync::Arc;

use sluice_storage::{CheckpointStore, LoadedCheckpoint};

use super::{Lifecycle, Pipeline};
use crate::catalog::SourceConnector;
use crate::coordinator::{CheckpointConfig, ControlMsg};
use crate::error::{EngineError, Result};
use crate::process::placement::VnodePlacement;
use crate::split::moved::MovedState;

impl Pipeline {
    /// Start reading file sources (push sources are live from creation).
    ///
    /// `store` is where checkpoints go (None: nowhere). With checkpointing
    /// on, this is where the delivery guarantee is admitted and where the
    /// pipeline resumes from its newest valid checkpoint. Starting twice is
    /// a no-op; a closed pipeline cannot start.
    pub async fn start(&mut self, store: Option<CheckpointStore>) -> Result<()> {
        let Some(next) = self.lifecycle.start()? else {
            // Started before: a start that failed (or a pipeline that
            // stopped since) keeps saying why.
            return match self.status().and_then(|s| s.error()) {
                Some(e) => Err(e),
                None => Ok(()),
            };
        };
        let config = self.checkpoint_config(store)?;
        self.certify_split(&self.catalog)?;
        let exchanges = self
            .options
            .shuffle
            .as_ref()
            .is_some_and(|s| !s.0.edges().is_empty());
        self.lone_checkpoints = config.as_ref().is_some_and(|c| {
            !c.store
                .authority()
                .is_some_and(|a| a.one_cut_across_nodes())
        });
        if exchanges && self.lone_checkpoints {
            return Err(lone_checkpoints_refused());
        }
        let recovered = match &config {
            Some(cfg) => latest_matching(cfg).await?,
            None => None,
        };
        self.lifecycle = next;
        self.coordinator()?;
        self.send_start(config, recovered).await
    }

    /// Enable checkpoints, leave unread columns, recover and start: the
    /// same sequence for a first start and for a restart after a fault.
    pub(super) async fn send_start(
        &mut self,
        config: Option<CheckpointConfig>,
        recovered: Option<LoadedCheckpoint>,
    ) -> Result<()> {
        let unread = if self.lifecycle.is_sealed() {
            self.unread_columns()
        } else {
            Vec::new()
        };
        let handover = self
            .options
            .split
            .as_ref()
            .is_some_and(|s| s.handover().is_some());
        if handover
            && self
                .options
                .split
                .as_ref()
                .is_some_and(|s| s.generation() == 0)
        {
            return Err(EngineError::Option(
                "a split node that takes vnodes over (split_handover) needs its assignment \
                 generation (split_generation, from 1): without it a node started again within \
                 an assignment cannot tell its own positions of it from an older assignment's"
                    .into(),
            ));
        }
        // A node left with no vnodes generates nothing (it only publishes).
        let holds_vnodes = self
            .options
            .split
            .as_ref()
            .is_some_and(|s| !s.placement().owned().is_empty());
        if handover && config.is_none() {
            return Err(EngineError::Option(
                "a split node that takes vnodes over (split_handover) needs checkpoints: set \
                 checkpoint_interval or delivery = 'exactly_once' and a checkpoint store, so \
                 that where it starts, and how far it reads, outlive it"
                    .into(),
            ));
        }
        let moved = self.moved_state(config.as_ref(), recovered.as_ref())?;
        // A shuffled split checkpoints only as one cut, when its leader
        // decides; the cut that follows records where this node started. A
        // node dropped from a shuffled split (it gives its keyed state up,
        // holding no vnodes) recovers from the last cut and takes no
        // checkpoint of its own: its ids would be the cuts' ids.
        let gives_state_up = !holds_vnodes
            && self
                .options
                .split
                .as_ref()
                .is_some_and(|s| s.moved_state().is_some());
        let checkpoint_at_start = handover && !self.shuffles_between_nodes() && !gives_state_up;
        let c = self.coordinator()?;
        if let Some(cfg) = config {
            c.handle
                .control(ControlMsg::EnableCheckpoints(Box::new(cfg)))
                .await?;
        }
        for (source, columns) in unread {
            tracing::debug!(%source, ?columns, "columns no statement reads are left unparsed");
            c.handle
                .control(ControlMsg::LeaveUnread { source, columns })
                .await?;
        }
        if let Some(cp) = recovered {
            // A recovery that fails halts the pipeline, and its
            // acknowledgement carries the error.
            c.handle.control(ControlMsg::Recover(Box::new(cp))).await?;
        }
        if let Some((state, placement)) = moved {
            c.handle
                .control(ControlMsg::StageVnodeTransition { state, placement })
                .await?;
        }
        c.handle.control(ControlMsg::Start).await?;
        if checkpoint_at_start {
            // Where this node starts is a checkpoint before `start`
            // returns: until its first checkpoint, its store would still
            // say where it stood before the vnodes moved, and a later
            // handover would start the vnodes it took from there.
            c.handle.checkpoint().await?;
        }
        Ok(())
    }

    /// The keyed state this split node takes over, with its vnodes, when
    /// it has to (see `crate::split::moved`): `None` without a moved state,
    /// and when its own checkpoint (`recovered`) is newer than the cut the
    /// state moves from. Refused without a shuffle (no keyed state moves
    /// then), without checkpoints, and when a previous node's checkpoint
    /// is of another pipeline definition.
    fn moved_state(
        &self,
        config: Option<&CheckpointConfig>,
        recovered: Option<&LoadedCheckpoint>,
    ) -> Result<Option<(Arc<MovedState>, VnodePlacement)>> {
        let Some(split) = &self.options.split else {
            return Ok(None);
        };
        let Some(state) = split.moved_state() else {
            return Ok(None);
        };
        // A node that holds no vnodes keeps no key: it gives its state up.
        if self.options.shuffle.is_none() && !split.placement().owned().is_empty() {
            return Err(EngineError::Option(
                "split_moved_state: keyed state moves between the nodes of a shuffled split \
                 only; this node has no shuffle (DatabaseBuilder::shuffle), so no keyed \
                 operator runs split"
                    .into(),
            ));
        }
        let Some(config) = config else {
            return Err(EngineError::Option(
                "split_moved_state: a node that takes keyed state over needs checkpoints (a \
                 checkpoint store and delivery = 'exactly_once' or checkpoint_interval), or the \
                 state it took would be lost at its first restart"
                    .into(),
            ));
        };
        state.check_fingerprint(&config.fingerprint)?;
        if !state.applies_after(recovered) {
            tracing::info!(
                cut = state.cut(),
                "this node checkpointed since its vnodes moved; its own checkpoint holds their state"
            );
            return Ok(None);
        }
        Ok(Some((Arc::clone(state), split.placement().clone())))
    }

    /// Checkpointing for this pipeline, or None when it is off; refuses a
    /// delivery guarantee that a source, sink or process function cannot
    /// honour, and checkpointing without a store.
    pub fn checkpoint_config(
        &self,
        store: Option<CheckpointStore>,
    ) -> Result<Option<CheckpointConfig>> {
        let Some(delivery) = self.checkpointing() else {
            return Ok(None);
        };
        let Some(store) = store else {
            return Err(EngineError::Option(
                "checkpointing (checkpoint_interval or delivery = 'exactly_once') needs a state directory (--state-dir, Database::open(dir)), a checkpoint_store URL or DatabaseBuilder::checkpoint_object_store".into(),
            ));
        };
        crate::catalog::admission::admit_delivery(&self.catalog, delivery)?;
        let o = &self.options;
        Ok(Some(CheckpointConfig {
            store,
            interval: o.checkpoint_interval,
            alignment_timeout: o.checkpoint_alignment_timeout,
            timeout: o.checkpoint_timeout,
            retain: o.checkpoint_retain,
            tail_share: o.checkpoint_tail_share,
            delivery,
            fingerprint: self.catalog.fingerprint(),
            history_epochs: o.subscription_history,
            history_bytes: o.subscription_history_bytes,
        }))
    }

    /// Per file source, the declared columns nothing reads.
    fn unread_columns(&self) -> Vec<(String, Vec<String>)> {
        let mut out = Vec::new();
        for source in &self.catalog.sources {
            if !matches!(source.connector, SourceConnector::File(_))
                || self.subscribed_sources.contains(&source.name)
            {
                continue;
            }
            let read = self.catalog.columns_read(&source.name);
            let unread: Vec<String> = source
                .schema
                .fields()
                .iter()
                .map(|f| f.name().clone())
                .filter(|name| !read.contains(name))
                .collect();
            if !unread.is_empty() {
                out.push((source.name.clone(), unread));
            }
        }
        out
    }

    /// Whether the pipeline was started (for callers outside this module).
    pub fn is_started(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::Running { .. })
    }
}

/// The newest valid checkpoint of `cfg`'s store, refused when another
/// pipeline definition wrote it.
pub(super) async fn latest_matching(cfg: &CheckpointConfig) -> Result<Option<LoadedCheckpoint>> {
    let Some(cp) = cfg.store.latest_valid().await? else {
        return Ok(None);
    };
    let found = crate::catalog::fingerprint_version(&cp.manifest.pipeline);
    if found != crate::catalog::FINGERPRINT_VERSION {
        return Err(EngineError::Catalog(format!(
            "checkpoint {} in {} has a pipeline fingerprint of version {found}, but this build \
             writes and compares version {}, so it cannot tell whether the checkpoint belongs \
             to this pipeline; recover with the release that wrote it, or use a new state \
             directory",
            cp.manifest.id,
            cfg.store.describe(),
            crate::catalog::FINGERPRINT_VERSION
        )));
    }
    if cp.manifest.pipeline != cfg.fingerprint {
        return Err(EngineError::Catalog(format!(
            "checkpoint {} in {} was written by a different pipeline definition; \
             run the same statements, or use a new state directory",
            cp.manifest.id,
            cfg.store.describe()
        )));
    }
    Ok(Some(cp))
}

impl Pipeline {
    /// Refuse, by name, an object of `catalog` that cannot run on this
    /// split node (see `catalog::split_admission::certify`). A node that
    /// holds no vnodes and whose every source is split by vnode reads no
    /// row, so anything runs on it: a node dropped from a split starts
    /// once like that to publish what its last checkpoint committed.
    pub(super) fn certify_split(&self, catalog: &crate::catalog::Catalog) -> Result<()> {
        let Some(split) = &self.options.split else {
            return Ok(());
        };
        let reads_nothing = split.placement().owned().is_empty()
            && catalog
                .sources
                .iter()
                .all(|s| !matches!(s.connector, SourceConnector::Push));
        if reads_nothing {
            return Ok(());
        }
        crate::catalog::split_admission::certify(catalog, self.options.shuffle.is_some())
    }

    /// Whether this node's keyed rows cross to other nodes: a shuffle
    /// whose owner table has more than this node.
    pub(super) fn shuffles_between_nodes(&self) -> bool {
        self.options
            .shuffle
            .as_ref()
            .is_some_and(|s| s.0.table().nodes().len() > 1)
    }
}

/// Why a stream that exchanges rows with other nodes cannot checkpoint
/// under a commit authority that decides this node's checkpoints alone.
pub(super) fn lone_checkpoints_refused() -> EngineError {
    EngineError::Option(
        "a split pipeline whose keyed operators shuffle rows between nodes checkpoints only as \
         one cut through every node, decided for all at once: give it the cluster's checkpoint \
         record as commit_authority (the leader's LeaderCommitRecord::sharing_vnodes, a \
         FollowerCommitRecord on the others), or run it without checkpoints"
            .into(),
    )
}
