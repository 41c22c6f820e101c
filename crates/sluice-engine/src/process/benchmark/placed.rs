//! [`PlacedOwners`]: one process function run by several owners under a
//! vnode assignment, as the nodes of a cluster run it.
//!
//! Each input batch is routed as a shuffle would route it: every row goes
//! to the owner of its key's vnode, in arrival order; every watermark cut
//! reaches every owner at the same point of the input (the spec: ids are
//! preserved only with "the same watermark cuts relative to input and
//! timer callbacks"). Vnodes move between owners with
//! [`PlacedOwners::move_vnodes`], the process-function half of a vnode
//! transition at a checkpoint boundary.

use arrow::array::UInt32Array;
use arrow::compute::take_record_batch;
use arrow::record_batch::RecordBatch;

use crate::process::keyed::{CallOutput, KeyedProcessor};
use crate::process::placement::VnodePlacement;
use crate::process::types::NativeProcessFunction;
use crate::process::validate::ProcessError;

/// One step of a run: a batch of input rows, or a watermark cut.
#[derive(Debug, Clone)]
pub enum Step {
    /// Rows of the function's input schema.
    Input(RecordBatch),
    /// Advance every owner's watermark to this (ms).
    Watermark(i64),
}

/// The owners of one function's vnodes.
pub struct PlacedOwners<H: NativeProcessFunction> {
    owners: Vec<KeyedProcessor<H>>,
}

impl<H: NativeProcessFunction> PlacedOwners<H> {
    /// Place `processors[i]` on the vnodes `owner_of` gives to `i`
    /// (`owner_of[v]` is the owner of vnode `v`; its length is the vnode
    /// count). Refused when an owner index is out of range or a processor
    /// cannot be placed.
    pub fn new(processors: Vec<KeyedProcessor<H>>, owner_of: &[u32]) -> Result<Self, String> {
        let count = u32::try_from(owner_of.len()).map_err(|_| "too many vnodes".to_string())?;
        if let Some(o) = owner_of.iter().find(|o| **o as usize >= processors.len()) {
            return Err(format!(
                "owner {o} is not one of the {} processors",
                processors.len()
            ));
        }
        let mut owners = Vec::with_capacity(processors.len());
        for (i, mut p) in processors.into_iter().enumerate() {
            let held = (0..count).filter(|v| owner_of[*v as usize] as usize == i);
            p.place(VnodePlacement::new(count, held)?)
                .map_err(|e| e.to_string())?;
            owners.push(p);
        }
        Ok(Self { owners })
    }

    /// The owners, by index.
    pub fn owners(&self) -> &[KeyedProcessor<H>] {
        &self.owners
    }

    /// The owners, by index, for snapshots and restores.
    pub fn owners_mut(&mut self) -> &mut [KeyedProcessor<H>] {
        &mut self.owners
    }

    /// Run `steps`, returning what each owner produced (with its
    /// activation log). A key whose vnode no owner holds is refused.
    pub fn run(&mut self, steps: &[Step]) -> Result<Vec<CallOutput>, ProcessError> {
        let mut outs: Vec<CallOutput> = (0..self.owners.len())
            .map(|_| CallOutput {
                batches: Vec::new(),
                log: Some(Vec::new()),
            })
            .collect();
        for step in steps {
            match step {
                Step::Input(batch) => self.route(batch, &mut outs)?,
                Step::Watermark(w) => {
                    for (owner, out) in self.owners.iter_mut().zip(&mut outs) {
                        owner.advance_watermark(*w, out)?;
                    }
                }
            }
        }
        Ok(outs)
    }

    /// Send each row of `batch` to the owner of its vnode.
    fn route(&mut self, batch: &RecordBatch, outs: &mut [CallOutput]) -> Result<(), ProcessError> {
        let Some(first) = self.owners.first() else {
            return Ok(());
        };
        let keys = first.keys_of(batch)?;
        let mut rows: Vec<Vec<u32>> = vec![Vec::new(); self.owners.len()];
        for (row, key) in keys.iter().enumerate() {
            // A key no owner holds goes to the first owner, which refuses
            // it by name.
            let owner = self
                .owners
                .iter()
                .position(|o| o.placement().is_some_and(|p| p.owns(p.vnode_of(key))))
                .unwrap_or(0);
            rows[owner].push(u32::try_from(row).unwrap_or(u32::MAX));
        }
        for ((owner, out), rows) in self.owners.iter_mut().zip(outs.iter_mut()).zip(rows) {
            if rows.is_empty() {
                continue;
            }
            let part =
                take_record_batch(batch, &UInt32Array::from(rows)).map_err(|e| ProcessError {
                    function: "-".into(),
                    version: 0,
                    key: "-".into(),
                    reason: format!("routing a batch: {e}"),
                })?;
            owner.process_batch(&part, out)?;
        }
        Ok(())
    }

    /// Move `vnodes` from owner `from` to owner `to` with their state,
    /// timers and activation sequences.
    pub fn move_vnodes(&mut self, vnodes: &[u32], from: usize, to: usize) -> Result<(), String> {
        if from >= self.owners.len() || to >= self.owners.len() || from == to {
            return Err(format!(
                "cannot move vnodes from owner {from} to owner {to} of {}",
                self.owners.len()
            ));
        }
        let handover = self.owners[from]
            .release_vnodes(vnodes)
            .map_err(|e| e.to_string())?;
        self.owners[to]
            .adopt_vnodes(handover)
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
#[path = "placed_tests.rs"]
pub(crate) mod tests;
