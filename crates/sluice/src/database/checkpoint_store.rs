//! Where a pipeline's checkpoints go: a store the caller built, a
//! `checkpoint_store` URL, or the state directory, in that order; a URL set
//! next to a store of the caller's is refused, since two stores would each
//! hold half of the pipeline's history.

use std::sync::Arc;

use sluice_engine::options::PipelineOptions;
use sluice_storage::object_store::path::Path as ObjectPath;
use sluice_storage::{CheckpointStore, LocalBackend, ObjectStoreBackend};

use super::Database;
use crate::{Error, Result};

impl Database {
    pub(super) fn checkpoint_store(
        &self,
        options: &PipelineOptions,
    ) -> Result<Option<CheckpointStore>> {
        let custom = &self.inner.checkpoint_object_store;
        let backend: Box<dyn sluice_storage::Backend> =
            match (custom, &options.checkpoint_store, &self.inner.state_dir) {
                (Some(store), Some(url), _) => {
                    return Err(Error::Option(format!(
                        "checkpoint_store = '{url}' conflicts with the object store {store} given \
                         to DatabaseBuilder::checkpoint_object_store; use one of them"
                    )))
                }
                (Some(store), None, _) => Box::new(ObjectStoreBackend::new(
                    Arc::clone(store),
                    ObjectPath::default(),
                    store.to_string(),
                )),
                (None, Some(url), _) => Box::new(ObjectStoreBackend::from_url(url)?),
                (None, None, Some(dir)) => Box::new(LocalBackend::new(dir.join("checkpoints"))?),
                (None, None, None) => return Ok(None),
            };
        Ok(Some(CheckpointStore::new(backend)))
    }
}
