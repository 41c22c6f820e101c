//! What planning needs to know about the relations a query may read.
//!
//! A leaf module: the planner, the join planning and the event-time bounds
//! all ask the catalog, and none of them should depend on another just to
//! name this trait.

use arrow::datatypes::SchemaRef;

use crate::plan::LookupHandle;

/// What the planner needs to know about existing sources and streams.
pub trait PlanCatalog {
    /// Names of every relation a query may read.
    fn relation_names(&self) -> Vec<String>;
    /// Arrow schema of a relation (ending with [`crate::CHANGE_COLUMN`] for
    /// a changelog) and whether it is a changelog.
    fn relation(&self, name: &str) -> Option<(SchemaRef, bool)>;
    /// Columns of a relation that bound its future rows, with their lag
    /// (see [`crate::bounds`]); none by default.
    fn time_columns(&self, _name: &str) -> Vec<(String, i64)> {
        vec![]
    }
    /// A source's `PRIMARY KEY` columns; empty if none is declared (or it
    /// is not a source).
    fn primary_key(&self, _name: &str) -> Vec<String> {
        vec![]
    }
    /// Lookup tables (read only by a lookup join): their names.
    fn lookup_table_names(&self) -> Vec<String> {
        vec![]
    }
    /// A lookup table: its schema, its key columns (leading key first) and
    /// the engine's handle on it; None when `name` is not one.
    fn lookup_table(&self, _name: &str) -> Option<(SchemaRef, Vec<String>, LookupHandle)> {
        None
    }
}
