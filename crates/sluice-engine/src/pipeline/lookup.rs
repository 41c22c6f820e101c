//! Registering lookup tables (see [`crate::lookup`]).

use std::sync::Arc;

use crate::error::Result;
use crate::lookup::{LookupBinding, LookupStats};

use super::Pipeline;

impl Pipeline {
    /// Register `binding` under its name; a lookup join can then read it.
    /// Returns its counters. The name must not be taken by a source,
    /// stream, sink or other lookup table.
    pub fn register_lookup_table(
        &mut self,
        binding: Arc<LookupBinding>,
    ) -> Result<Arc<LookupStats>> {
        self.catalog.check_free(&binding.name)?;
        let stats = Arc::clone(&binding.stats);
        self.catalog.lookups.push(binding);
        Ok(stats)
    }
}
