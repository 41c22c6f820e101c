//! Keyed state that moves with its vnodes: a node of a shuffled split
//! whose vnodes changed takes the state of its keys from the nodes that
//! held them.
//!
//! In a shuffled split (`crate::exchange`) each key's rows meet on the
//! owner of its vnode, and its aggregation groups and join rows live
//! there. When the member list changes, vnodes move: the keys of a vnode
//! a node gained are in the last checkpoint of the node that held it. A
//! [`MovedState`] names those checkpoints, one per node of the previous
//! assignment, all from one checkpoint cut (a shuffled split checkpoints
//! as one cut through every node). At the start, every stateful operator
//! of this node restores the keys of its current vnodes out of all of
//! them (`StatefulOperator::restore_moved`), and its own checkpoint, if it
//! has one, still gives its sinks; its file sources start where the
//! previous holders stopped ([`super::handover`]).
//!
//! ```text
//!   previous assignment (cut c)         current assignment
//!   n1: vnodes {0,1,2,3}  ──┐   keys of {2,3}
//!   n2: vnodes {4,5,6,7}  ──┼─────────────────►  n3: vnodes {2,3,6}
//!                           │   keys of {6}
//!                           └─ (n1, n2 keep the rest of theirs)
//! ```
//!
//! The moved state applies once: a node started again after a checkpoint
//! of the current assignment committed recovers from its own checkpoint,
//! which is newer than the cut ([`MovedState::applies_after`]).

use std::sync::Arc;

use sluice_storage::LoadedCheckpoint;

use crate::error::{EngineError, Result};

/// One node of the previous assignment and its checkpoint at the cut.
#[derive(Debug, Clone)]
pub struct PreviousState {
    /// The node's name (for messages).
    pub node: String,
    /// Its checkpoint of the cut the move starts from.
    pub checkpoint: Arc<LoadedCheckpoint>,
}

/// The keyed state of the previous assignment (see the module docs).
#[derive(Debug, Clone)]
pub struct MovedState {
    cut: u64,
    previous: Vec<PreviousState>,
}

/// Two are equal when they name the same nodes at the same checkpoints
/// (a checkpoint's content is fixed by its store and id).
impl PartialEq for MovedState {
    fn eq(&self, other: &Self) -> bool {
        let names = |m: &Self| -> Vec<(String, u64)> {
            m.previous
                .iter()
                .map(|p| (p.node.clone(), p.checkpoint.manifest.id))
                .collect()
        };
        self.cut == other.cut && names(self) == names(other)
    }
}

impl Eq for MovedState {}

impl MovedState {
    /// The checkpoints of every node of the previous assignment at one
    /// cut (the first one's). Refused when two are of different
    /// checkpoints (a cut has one id) or when a node is named twice.
    pub fn new(previous: Vec<PreviousState>) -> Result<Self> {
        let cut = previous.first().map_or(0, |p| p.checkpoint.manifest.id);
        Self::at(cut, previous)
    }

    /// The checkpoints at cut `cut` of the previous nodes that held a
    /// vnode this node holds now (the others' keys are not this node's,
    /// so a node need not read them; one that holds no vnode reads none
    /// and gives its state up). Refused as [`Self::new`] is, and when a
    /// checkpoint is not of `cut`.
    pub fn at(cut: u64, previous: Vec<PreviousState>) -> Result<Self> {
        if let Some(p) = previous.iter().find(|p| p.checkpoint.manifest.id != cut) {
            return Err(EngineError::Option(format!(
                "moved state: node '{}' is at checkpoint {}, not at the cut {cut}",
                p.node, p.checkpoint.manifest.id
            )));
        }
        let mut names: Vec<&str> = previous.iter().map(|p| p.node.as_str()).collect();
        names.sort_unstable();
        if let Some(twice) = names.windows(2).find(|w| w[0] == w[1]) {
            return Err(EngineError::Option(format!(
                "moved state: node '{}' is named twice",
                twice[0]
            )));
        }
        Ok(Self { cut, previous })
    }

    /// The previous nodes and their checkpoints.
    pub fn previous(&self) -> &[PreviousState] {
        &self.previous
    }

    /// The checkpoint id of the cut (0 when no node had checkpointed).
    pub fn cut(&self) -> u64 {
        self.cut
    }

    /// Whether a node that recovered `own` (its own newest checkpoint,
    /// `None` without one) takes the moved state: only while it has no
    /// checkpoint newer than the cut, which would already hold the state
    /// of its current vnodes.
    pub fn applies_after(&self, own: Option<&LoadedCheckpoint>) -> bool {
        own.is_none_or(|cp| cp.manifest.id <= self.cut())
    }

    /// Refuse a previous checkpoint written by another pipeline definition
    /// (`fingerprint` is this one's).
    pub fn check_fingerprint(&self, fingerprint: &str) -> Result<()> {
        match self
            .previous
            .iter()
            .find(|p| p.checkpoint.manifest.pipeline != fingerprint)
        {
            Some(p) => Err(EngineError::Catalog(format!(
                "moved state: checkpoint {} of node '{}' was written by a different pipeline \
                 definition; every node of a split runs the same statements",
                p.checkpoint.manifest.id, p.node
            ))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::collections::{BTreeMap, HashMap};

    use sluice_storage::Manifest;

    use super::*;

    fn checkpoint(id: u64, pipeline: &str) -> Arc<LoadedCheckpoint> {
        Arc::new(LoadedCheckpoint {
            manifest: Manifest {
                id,
                created_ms: 0,
                pipeline: pipeline.into(),
                watermark: 0,
                sources: BTreeMap::new(),
                sinks: BTreeMap::new(),
                blobs: Vec::new(),
                assignment_generation: None,
            },
            blobs: HashMap::new(),
        })
    }

    fn previous(node: &str, id: u64) -> PreviousState {
        PreviousState {
            node: node.into(),
            checkpoint: checkpoint(id, "p"),
        }
    }

    #[test]
    fn one_cut_of_distinct_nodes_is_required() {
        let e = MovedState::new(vec![previous("n1", 4), previous("n1", 4)]).unwrap_err();
        assert!(e.to_string().contains("node 'n1' is named twice"), "{e}");
        let e = MovedState::new(vec![previous("n1", 4), previous("n2", 5)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("node 'n2' is at checkpoint 5, not at the cut 4"),
            "{e}"
        );
        let state = MovedState::new(vec![previous("n1", 4), previous("n2", 4)]).unwrap();
        assert_eq!(state.cut(), 4);
        assert_eq!(MovedState::new(vec![]).unwrap().cut(), 0);
    }

    #[test]
    fn a_state_at_a_cut_holds_only_checkpoints_of_that_cut() {
        let none = MovedState::at(7, Vec::new()).unwrap();
        assert_eq!(none.cut(), 7);
        assert!(!none.applies_after(Some(&checkpoint(8, "p"))));
        assert!(none.applies_after(Some(&checkpoint(7, "p"))));
        let e = MovedState::at(7, vec![previous("n1", 6)]).unwrap_err();
        assert!(
            e.to_string()
                .contains("node 'n1' is at checkpoint 6, not at the cut 7"),
            "{e}"
        );
    }

    #[test]
    fn the_state_applies_until_the_node_checkpointed_past_the_cut() {
        let state = MovedState::new(vec![previous("n1", 4)]).unwrap();
        assert!(state.applies_after(None));
        assert!(state.applies_after(Some(&checkpoint(3, "p"))));
        assert!(state.applies_after(Some(&checkpoint(4, "p"))));
        assert!(!state.applies_after(Some(&checkpoint(5, "p"))));
    }

    #[test]
    fn a_checkpoint_of_another_pipeline_is_refused_naming_its_node() {
        let state = MovedState::new(vec![
            previous("n1", 4),
            PreviousState {
                node: "n2".into(),
                checkpoint: checkpoint(4, "other"),
            },
        ])
        .unwrap();
        let e = state.check_fingerprint("p").unwrap_err().to_string();
        assert!(
            e.contains("checkpoint 4 of node 'n2' was written by a different pipeline"),
            "{e}"
        );
    }
}
