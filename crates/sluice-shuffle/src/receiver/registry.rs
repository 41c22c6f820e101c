//! The admission state one node's channel tasks share: its pipeline, its
//! current assignment generation (the fence) and the edges it receives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::{Result, ShuffleError};
use crate::proto::Handshake;

use super::edge::EdgeInbox;

/// What every channel task of one server shares.
#[derive(Debug)]
pub(crate) struct Registry {
    pipeline_id: String,
    node_id: String,
    generation: AtomicU64,
    edges: Mutex<HashMap<String, Weak<EdgeInbox>>>,
}

impl Registry {
    pub fn new(pipeline_id: &str, node_id: &str, generation: u64) -> Self {
        Self {
            pipeline_id: pipeline_id.to_string(),
            node_id: node_id.to_string(),
            generation: AtomicU64::new(generation),
            edges: Mutex::new(HashMap::new()),
        }
    }

    /// Move to `generation` and wake every channel task, so channels of
    /// another generation are cut at once rather than at their next frame.
    pub fn set_generation(&self, generation: u64) {
        self.generation.store(generation, Ordering::Release);
        let edges: Vec<Arc<EdgeInbox>> = self
            .edges
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for edge in edges {
            edge.poke_all();
        }
    }

    /// Register a new edge's inbox; refused while a receiver of that edge
    /// is alive.
    pub fn insert(&self, inbox: &Arc<EdgeInbox>) -> Result<()> {
        let mut edges = self.edges.lock();
        if edges.get(&inbox.edge).and_then(Weak::upgrade).is_some() {
            return Err(ShuffleError::InvalidConfig {
                detail: format!("edge '{}' already has a receiver on this node", inbox.edge),
            });
        }
        edges.insert(inbox.edge.clone(), Arc::downgrade(inbox));
        Ok(())
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Check a handshake and attach its channel.
    pub fn admit(&self, handshake: &Handshake) -> Result<(Arc<EdgeInbox>, usize, Arc<Notify>)> {
        if handshake.pipeline_id != self.pipeline_id {
            return Err(ShuffleError::UnknownChannel {
                detail: format!(
                    "node '{}' runs pipeline '{}', the channel names '{}'",
                    self.node_id, self.pipeline_id, handshake.pipeline_id
                ),
            });
        }
        let current = self.generation();
        if handshake.generation != current {
            return Err(ShuffleError::StaleGeneration {
                edge: handshake.edge_id.clone(),
                sender: handshake.sender_node.clone(),
                sent: handshake.generation,
                current,
            });
        }
        let inbox = self
            .edges
            .lock()
            .get(&handshake.edge_id)
            .and_then(Weak::upgrade)
            .ok_or_else(|| ShuffleError::UnknownChannel {
                detail: format!(
                    "node '{}' receives no edge '{}'",
                    self.node_id, handshake.edge_id
                ),
            })?;
        let (index, control) = inbox.attach(&handshake.sender_node)?;
        Ok((inbox, index, control))
    }

    /// Forget `inbox`'s edge (unless a newer receiver took the name).
    pub fn remove(&self, inbox: &Arc<EdgeInbox>) {
        let mut edges = self.edges.lock();
        if edges
            .get(&inbox.edge)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(inbox)))
        {
            edges.remove(&inbox.edge);
        }
    }
}
