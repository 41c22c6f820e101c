//! Sealing: declaring a pipeline complete, so that its file sources can
//! leave the columns no statement reads unparsed.

use sluice_engine::catalog::SourceConnector;

use super::{Database, State};
use crate::{Error, Result};

impl Database {
    /// Declare the pipeline complete: no source, stream, sink or binding can
    /// be added from now on, nor a subscription to a source. In exchange,
    /// when the pipeline starts, file sources leave the (nullable) columns
    /// no statement reads unparsed, as a batch engine pushes a projection
    /// into its scan; malformed values in those columns then go unnoticed.
    /// `sluice run` seals after executing its script. Seal before
    /// [`start`](Self::start) for the projection to apply.
    pub async fn seal(&self) {
        self.inner.state.lock().await.sealed = true;
    }
}

/// Per file source, the declared columns nothing reads.
pub(super) fn unread_columns(state: &State) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for source in &state.catalog.sources {
        if !matches!(source.connector, SourceConnector::File(_))
            || state.subscribed_sources.contains(&source.name)
        {
            continue;
        }
        let read = state.catalog.columns_read(&source.name);
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

/// Refuse to create `name` in a sealed pipeline.
pub(super) fn check_not_sealed(state: &State, name: &str) -> Result<()> {
    if state.sealed {
        return Err(Error::Sealed(format!(
            "cannot create '{name}' after seal(); declare every source, stream and sink first"
        )));
    }
    Ok(())
}
