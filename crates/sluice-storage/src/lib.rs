//! Checkpoint storage for Sluice.
//!
//! A checkpoint is a set of checksummed state blobs plus a manifest that
//! names them; a checkpoint exists (is committed) exactly when its manifest
//! was written completely. Ids are reserved durably before a checkpoint
//! begins, so an abandoned attempt's id is never reused. Storage is a local
//! directory (every file fsynced, then atomically renamed, then its folder
//! fsynced) or any object store the `object_store` crate supports (S3, GCS,
//! Azure, local files, memory), whose puts are atomic.

mod authority;
mod backend;
mod error;
mod lease;
mod liveness;
mod manifest;
mod store;
#[cfg(any(test, feature = "fault-injection"))]
pub mod testing;

#[cfg(test)]
mod authority_tests;
#[cfg(test)]
mod fault_tests;
#[cfg(test)]
mod lease_tests;
#[cfg(test)]
mod reserve_tests;

pub use authority::{Announcement, CommitAuthority};
pub use backend::{Backend, LocalBackend, ObjectStoreBackend};
pub use error::{BoxedError, Result, StorageError};
pub use lease::{LeaseRecord, StoreLease, LEASE_KEY};
pub use manifest::{BlobRef, Manifest, SinkCheckpoint, SinkEpochRecord, SourceCheckpoint};
/// The `object_store` crate this one is built on, so callers name the same
/// `ObjectStore` trait when they hand in a store of their own.
pub use object_store;
pub use store::{CheckpointInfo, CheckpointStore, LoadedCheckpoint};
