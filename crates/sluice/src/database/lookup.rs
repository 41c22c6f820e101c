//! Registering lookup tables: external tables a lookup join reads by key
//! (`FROM s JOIN dim ON s.k = dim.id`), with a bounded cache per join.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use sluice_engine::lookup::{LookupBinding, LookupOptions, LookupStats};

use super::Database;
use crate::{LookupTable, Result};

impl Database {
    /// Register `table` as the lookup table `name` with `schema`, keyed by
    /// `key_columns` (leading first). A query reads it only as the right
    /// input of an inner or `LEFT` join whose `ON` equates a leading part
    /// of the key with expressions over the stream. `options` are the
    /// cache's (`lookup.cache.max_rows`, `lookup.cache.ttl`,
    /// `lookup.cache.missing`; see [`LookupOptions::from_pairs`]).
    ///
    /// Returns the counters of the lookup joins over it (keys, cache hits,
    /// table calls). Register before the statements that read it.
    pub async fn register_lookup_table(
        &self,
        name: &str,
        schema: SchemaRef,
        key_columns: &[&str],
        table: Arc<dyn LookupTable>,
        options: LookupOptions,
    ) -> Result<Arc<LookupStats>> {
        let binding = LookupBinding::new(name, schema, key_columns, table, options)?;
        self.inner
            .pipeline
            .lock()
            .await
            .register_lookup_table(binding)
    }
}
