//! Taking over the keyed state of vnodes this node gained (see
//! `crate::split::moved`): every stream's stateful operators restore the
//! keys of this node's vnodes out of the previous holders' checkpoints.

use std::collections::VecDeque;

use bytes::Bytes;

use super::checkpointing::stream_blob;
use super::connector::ConnectorPipelineCallback;
use crate::error::{EngineError, Result};
use crate::process::placement::VnodePlacement;
use crate::split::moved::MovedState;

impl ConnectorPipelineCallback {
    /// Replace every keyed operator's state with the keys of `placement`'s
    /// vnodes held in `state`'s checkpoints. Runs after this node's own
    /// recovery, if any, which still gives its sinks and sources.
    pub(super) fn adopt_moved_state(
        &mut self,
        state: &MovedState,
        placement: &VnodePlacement,
    ) -> Result<()> {
        for s in self.streams.iter_mut() {
            let mut parts: Vec<VecDeque<Bytes>> = state
                .previous()
                .iter()
                .map(|p| {
                    (0..)
                        .map_while(|i| p.checkpoint.blobs.get(&stream_blob(&s.name, i)).cloned())
                        .collect()
                })
                .collect();
            s.restore_moved(&mut parts, placement)?;
            if let Some((p, _)) = state
                .previous()
                .iter()
                .zip(&parts)
                .find(|(_, left)| !left.is_empty())
            {
                return Err(EngineError::Internal(format!(
                    "checkpoint {} of node '{}' holds more state for stream '{}' than its plan",
                    p.checkpoint.manifest.id, p.node, s.name
                )));
            }
        }
        tracing::info!(
            checkpoint = state.cut(),
            nodes = state.previous().len(),
            "took over the keyed state of this node's vnodes"
        );
        Ok(())
    }
}
