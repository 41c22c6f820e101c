//! Registering lookup tables (see [`crate::lookup`]).

use std::sync::Arc;

use crate::error::{EngineError, Result};
use crate::lookup::{LookupBinding, LookupStats};
use sluice_sql::PlanCatalog;

use super::Pipeline;

impl Pipeline {
    /// Register `binding` under its name; a lookup join can then read it.
    /// Returns its counters. The name must not be taken by a source,
    /// stream, sink or other lookup table.
    pub fn register_lookup_table(
        &mut self,
        binding: Arc<LookupBinding>,
    ) -> Result<Arc<LookupStats>> {
        let name = &binding.name;
        if self.catalog.kind_of(name).is_some() || self.catalog.lookup_table(name).is_some() {
            return Err(EngineError::Catalog(format!(
                "cannot register lookup table '{name}': the name is taken"
            )));
        }
        let stats = Arc::clone(&binding.stats);
        self.catalog.lookups.push(binding);
        Ok(stats)
    }
}
