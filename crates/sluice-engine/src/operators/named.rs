//! Accumulators that know the output column they compute.
//!
//! An aggregate function only knows its own expression (`sum(bids.price)`);
//! a user reading an overflow error wants the column they wrote (`total`).
//! These wrappers place any overflow an accumulator reports in its output
//! column, so every aggregation operator (windows, sessions, updating and
//! changelog aggregates) names it the same way without handling errors at
//! each call.

use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray};
use datafusion::common::ScalarValue;
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{Accumulator, EmitTo, GroupsAccumulator};
use sluice_sql::checked::overflow_of;

fn place(column: &str) -> impl Fn(DataFusionError) -> DataFusionError + '_ {
    move |e| match overflow_of(&e) {
        Some(o) => o.in_column(column).into_datafusion(),
        None => e,
    }
}

/// A grouped accumulator computing output column `.1`.
pub struct NamedGroups(pub Box<dyn GroupsAccumulator>, pub Arc<str>);

impl GroupsAccumulator for NamedGroups {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> Result<()> {
        self.0
            .update_batch(values, group_indices, opt_filter, total_num_groups)
            .map_err(place(&self.1))
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> Result<ArrayRef> {
        self.0.evaluate(emit_to).map_err(place(&self.1))
    }

    fn state(&mut self, emit_to: EmitTo) -> Result<Vec<ArrayRef>> {
        self.0.state(emit_to).map_err(place(&self.1))
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> Result<()> {
        self.0
            .merge_batch(values, group_indices, total_num_groups)
            .map_err(place(&self.1))
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> Result<Vec<ArrayRef>> {
        self.0
            .convert_to_state(values, opt_filter)
            .map_err(place(&self.1))
    }

    fn size(&self) -> usize {
        self.0.size()
    }
}

/// A row accumulator computing output column `.1`.
#[derive(Debug)]
pub struct NamedRow(pub Box<dyn Accumulator>, pub Arc<str>);

impl Accumulator for NamedRow {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0.update_batch(values).map_err(place(&self.1))
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        self.0.evaluate().map_err(place(&self.1))
    }

    fn size(&self) -> usize {
        self.0.size()
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        self.0.state().map_err(place(&self.1))
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        self.0.merge_batch(states).map_err(place(&self.1))
    }

    fn retract_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        self.0.retract_batch(values).map_err(place(&self.1))
    }

    fn supports_retract_batch(&self) -> bool {
        self.0.supports_retract_batch()
    }
}
