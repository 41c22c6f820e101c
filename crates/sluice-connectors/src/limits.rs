//! Limits on input records, shared by the sources that enforce them and
//! the errors that name them (a leaf: it depends on nothing in the crate).

/// Default of [`FileSourceConfig::max_record_bytes`]: 16 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 << 20;
/// Smallest accepted `max_record_bytes`: 1 KiB.
pub const MIN_MAX_RECORD_BYTES: usize = 1 << 10;
/// Largest accepted `max_record_bytes`: 1 GiB.
pub const MAX_MAX_RECORD_BYTES: usize = 1 << 30;
