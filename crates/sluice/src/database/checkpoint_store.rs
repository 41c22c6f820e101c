//! Where a pipeline's checkpoints go: a store the caller built, a
//! `checkpoint_store` URL, or the state directory, in that order; a URL set
//! next to a store of the caller's is refused, since two stores would each
//! hold half of the pipeline's history.
//!
//! The store is built once and kept for the database's life (rebuilt only
//! when `checkpoint_store` is SET to another URL before the start): a
//! `memory://` store *is* its objects, so a store rebuilt per call would
//! always be empty. An object store is written under its lease (see
//! `sluice_storage::StoreLease`), taken when checkpointing starts and
//! released when the database stops; a state directory is guarded by its
//! `LOCK` file instead.

use std::sync::Arc;

use sluice_engine::options::PipelineOptions;
use sluice_storage::object_store::path::Path as ObjectPath;
use sluice_storage::{Backend, CheckpointStore, LocalBackend, ObjectStoreBackend, StoreLease};

use super::Database;
use crate::{Error, Result};

/// The store this database built, and its lease once checkpointing began.
#[derive(Default)]
pub(super) struct StoreSlot {
    built: Option<Built>,
}

struct Built {
    /// The `checkpoint_store` URL it was built for.
    url: Option<String>,
    store: CheckpointStore,
    /// Set for object stores, to take the lease.
    object: Option<ObjectStoreBackend>,
    lease: Option<Arc<StoreLease>>,
}

impl Database {
    /// The checkpoint store, for reading (listing checkpoints); None when
    /// there is nowhere to keep checkpoints.
    pub(super) async fn checkpoint_store(
        &self,
        options: &PipelineOptions,
    ) -> Result<Option<CheckpointStore>> {
        let mut slot = self.inner.checkpoint_slot.lock().await;
        Ok(self.built(&mut slot, options)?.map(|b| b.store.clone()))
    }

    /// The checkpoint store, for writing: an object store's lease is taken
    /// here (refused with `SLC-STO-006` while another pipeline holds it).
    pub(super) async fn leased_checkpoint_store(
        &self,
        options: &PipelineOptions,
    ) -> Result<Option<CheckpointStore>> {
        let mut slot = self.inner.checkpoint_slot.lock().await;
        let Some(built) = self.built(&mut slot, options)? else {
            return Ok(None);
        };
        if let (Some(object), None) = (&built.object, &built.lease) {
            let mut lease = object.acquire_lease(options.checkpoint_store_lease).await?;
            lease.keep_renewed();
            let lease = Arc::new(lease);
            built.store = built.store.clone().with_lease(Arc::clone(&lease));
            built.lease = Some(lease);
        }
        Ok(Some(built.store.clone()))
    }

    /// Give the store's lease back (on close); a failure is logged, since
    /// the lease lapses by itself.
    pub(super) async fn release_checkpoint_lease(&self) {
        let mut slot = self.inner.checkpoint_slot.lock().await;
        let Some(built) = slot.built.as_mut() else {
            return;
        };
        let Some(lease) = built.lease.take() else {
            return;
        };
        // Store clones the stopped coordinator still holds see the lease
        // as released from here on and refuse to write.
        if let Err(e) = lease.release().await {
            tracing::warn!(error = %e, "cannot release the checkpoint store lease");
        }
        if let Some(object) = &built.object {
            built.store = self.store_over(Box::new(object.clone()));
        }
    }

    fn built<'a>(
        &self,
        slot: &'a mut StoreSlot,
        options: &PipelineOptions,
    ) -> Result<Option<&'a mut Built>> {
        let url = &options.checkpoint_store;
        if slot.built.as_ref().is_some_and(|b| &b.url != url) {
            slot.built = None;
        }
        if slot.built.is_none() {
            slot.built = self.build(options)?;
        }
        Ok(slot.built.as_mut())
    }

    /// A store over `backend`, with the commit authority if there is one.
    fn store_over(&self, backend: Box<dyn Backend>) -> CheckpointStore {
        let store = CheckpointStore::new(backend);
        match &self.inner.commit_authority {
            Some(authority) => store.with_authority(Arc::clone(authority)),
            None => store,
        }
    }

    fn build(&self, options: &PipelineOptions) -> Result<Option<Built>> {
        let custom = &self.inner.checkpoint_object_store;
        let object = match (custom, &options.checkpoint_store, &self.inner.state_dir) {
            (Some(store), Some(url), _) => {
                return Err(Error::Option(format!(
                    "checkpoint_store = '{url}' conflicts with the object store {store} given \
                     to DatabaseBuilder::checkpoint_object_store; use one of them"
                )))
            }
            (Some(store), None, _) => {
                ObjectStoreBackend::new(Arc::clone(store), ObjectPath::default(), store.to_string())
            }
            (None, Some(url), _) => ObjectStoreBackend::from_url(url)?,
            (None, None, Some(dir)) => {
                return Ok(Some(Built {
                    url: None,
                    store: self.store_over(Box::new(LocalBackend::new(dir.join("checkpoints"))?)),
                    object: None,
                    lease: None,
                }))
            }
            (None, None, None) => return Ok(None),
        };
        Ok(Some(Built {
            url: options.checkpoint_store.clone(),
            store: self.store_over(Box::new(object.clone())),
            object: Some(object),
            lease: None,
        }))
    }
}
