//! Grouped `MIN` and `MAX` over strings and binary, with every group's
//! value in one byte buffer.
//!
//! # Why not DataFusion's
//!
//! DataFusion's `MinMaxBytesAccumulator` keeps one heap `Vec<u8>` per group
//! and builds a hash map of the batch's groups on every update. That suits
//! a batch query, which creates each group once. A streaming scope does
//! not: after every checkpoint capture its live layer starts empty (see
//! `scope/layers.rs`) and re-creates each group it touches, so a
//! `MAX(payload)` over 9 million groups allocated 9 million small vectors
//! on the compute thread per checkpoint interval, and the checkpoint tail
//! freed them on another thread. Here a group's value is a span of one
//! buffer per accumulator (a scope keeps an accumulator per segment of
//! 65,536 groups), written in place when the new value fits in the old
//! one's bytes and appended otherwise; the buffer is compacted when less
//! than half of it is still referenced.
//!
//! The results are the same as DataFusion's (byte-wise order, which for
//! UTF-8 is the order of the strings; nulls and filtered-out rows are
//! skipped; a group that saw no value is null), and the state is the value
//! itself, of the input's type, so checkpoints are interchangeable with
//! ones taken with DataFusion's accumulator. The differential tests compare
//! both on random input (`tests` below).

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryViewBuilder, BooleanArray, GenericBinaryBuilder,
    GenericStringArray, OffsetSizeTrait,
};
use arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

/// Whether [`MinMaxBytes`] computes an aggregate over this input type.
pub fn handles(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
    )
}

/// Where a group's value lies in the buffer; `start == usize::MAX` for a
/// group that has seen no value yet.
#[derive(Clone, Copy)]
struct Span {
    start: usize,
    len: usize,
}

impl Span {
    const NONE: Span = Span {
        start: usize::MAX,
        len: 0,
    };

    fn is_none(self) -> bool {
        self.start == usize::MAX
    }
}

/// Below this many bytes a buffer is never compacted.
const MIN_COMPACT_BYTES: usize = 1 << 16;

/// `MIN` or `MAX` of one byte-like column, per group.
pub struct MinMaxBytes {
    /// `MIN` if true, `MAX` otherwise.
    keep_min: bool,
    data_type: DataType,
    spans: Vec<Span>,
    bytes: Vec<u8>,
    /// Bytes of `bytes` that some group's span covers.
    used: usize,
    /// Never compact a buffer of at most this many bytes
    /// ([`MIN_COMPACT_BYTES`]; tests lower it).
    compact_above: usize,
}

impl MinMaxBytes {
    /// An empty accumulator over values of `data_type` (one that
    /// [`handles`] accepts).
    pub fn new(keep_min: bool, data_type: DataType) -> Self {
        Self {
            keep_min,
            data_type,
            spans: Vec::new(),
            bytes: Vec::new(),
            used: 0,
            compact_above: MIN_COMPACT_BYTES,
        }
    }

    /// Whether `new` replaces `old`.
    fn better(&self, new: &[u8], old: &[u8]) -> bool {
        if self.keep_min {
            new < old
        } else {
            new > old
        }
    }

    fn value(&self, span: Span) -> Option<&[u8]> {
        if span.is_none() {
            None
        } else {
            self.bytes.get(span.start..span.start + span.len)
        }
    }

    /// Fold one value into group `g` (in range).
    fn fold(&mut self, g: usize, new: &[u8]) {
        let span = self.spans[g];
        let replace = match self.value(span) {
            None => true,
            Some(old) => self.better(new, old),
        };
        if !replace {
            return;
        }
        let old_len = if span.is_none() { 0 } else { span.len };
        let start = if !span.is_none() && new.len() <= span.len {
            self.bytes[span.start..span.start + new.len()].copy_from_slice(new);
            span.start
        } else {
            let start = self.bytes.len();
            self.bytes.extend_from_slice(new);
            start
        };
        self.used = self.used + new.len() - old_len;
        self.spans[g] = Span {
            start,
            len: new.len(),
        };
    }

    /// Copy the referenced bytes into a fresh buffer, in group order, once
    /// less than half of the buffer is referenced.
    fn compact_if_sparse(&mut self) {
        if self.bytes.len() <= self.compact_above || self.bytes.len() <= 2 * self.used {
            return;
        }
        let mut bytes = Vec::with_capacity(self.used);
        for span in &mut self.spans {
            if !span.is_none() {
                let start = bytes.len();
                bytes.extend_from_slice(&self.bytes[span.start..span.start + span.len]);
                span.start = start;
            }
        }
        self.bytes = bytes;
    }

    fn update(
        &mut self,
        values: &ArrayRef,
        groups: &[usize],
        filter: Option<&BooleanArray>,
        total: usize,
    ) -> DfResult<()> {
        if values.data_type() != &self.data_type {
            return Err(DataFusionError::Internal(format!(
                "{} over {} was given a {} column",
                self.name(),
                self.data_type,
                values.data_type()
            )));
        }
        if values.len() != groups.len() {
            return Err(DataFusionError::Internal(format!(
                "{}: {} values for {} group indices",
                self.name(),
                values.len(),
                groups.len()
            )));
        }
        if let Some(g) = groups.iter().find(|g| **g >= total) {
            return Err(DataFusionError::Internal(format!(
                "{}: group {g} of {total}",
                self.name()
            )));
        }
        if self.spans.len() < total {
            self.spans.resize(total, Span::NONE);
        }
        let keep = |i: usize| filter.is_none_or(|f| f.is_valid(i) && f.value(i));
        match values.data_type() {
            DataType::Utf8 => self.fold_all(values.as_string::<i32>().iter(), groups, keep),
            DataType::LargeUtf8 => self.fold_all(values.as_string::<i64>().iter(), groups, keep),
            DataType::Utf8View => self.fold_all(values.as_string_view().iter(), groups, keep),
            DataType::Binary => self.fold_all(values.as_binary::<i32>().iter(), groups, keep),
            DataType::LargeBinary => self.fold_all(values.as_binary::<i64>().iter(), groups, keep),
            DataType::BinaryView => self.fold_all(values.as_binary_view().iter(), groups, keep),
            other => {
                return Err(DataFusionError::Internal(format!(
                    "{} does not fold {other}",
                    self.name()
                )))
            }
        }
        self.compact_if_sparse();
        Ok(())
    }

    fn fold_all<'a, T: AsRef<[u8]> + ?Sized + 'a>(
        &mut self,
        values: impl Iterator<Item = Option<&'a T>>,
        groups: &[usize],
        keep: impl Fn(usize) -> bool,
    ) {
        for (i, (v, g)) in values.zip(groups).enumerate() {
            if let Some(v) = v {
                if keep(i) {
                    self.fold(*g, v.as_ref());
                }
            }
        }
    }

    /// The one argument column of `MIN`/`MAX`.
    fn argument<'a>(&self, values: &'a [ArrayRef]) -> DfResult<&'a ArrayRef> {
        values.first().ok_or_else(|| {
            DataFusionError::Internal(format!("{} without an argument", self.name()))
        })
    }

    fn name(&self) -> &'static str {
        if self.keep_min {
            "min"
        } else {
            "max"
        }
    }

    /// The values of the groups `emit_to` covers, removing them.
    fn emit(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        let n = match emit_to {
            EmitTo::All => self.spans.len(),
            EmitTo::First(n) => n.min(self.spans.len()),
        };
        let spans = &self.spans[..n];
        let out = match &self.data_type {
            DataType::Utf8 => Arc::new(self.strings::<i32>(spans)?) as ArrayRef,
            DataType::LargeUtf8 => Arc::new(self.strings::<i64>(spans)?),
            DataType::Binary => Arc::new(self.binaries::<i32>(spans).finish()),
            DataType::LargeBinary => Arc::new(self.binaries::<i64>(spans).finish()),
            DataType::Utf8View => Arc::new(self.views(spans).finish().to_string_view()?),
            DataType::BinaryView => Arc::new(self.views(spans).finish()),
            other => {
                return Err(DataFusionError::Internal(format!(
                    "{} does not emit {other}",
                    self.name()
                )))
            }
        };
        if n == self.spans.len() {
            self.spans = Vec::new();
            self.bytes = Vec::new();
            self.used = 0;
        } else {
            let emitted: usize = self.spans[..n]
                .iter()
                .filter(|s| !s.is_none())
                .map(|s| s.len)
                .sum();
            self.spans.drain(..n);
            self.used -= emitted;
            self.compact_if_sparse();
        }
        Ok(out)
    }

    fn binaries<O: OffsetSizeTrait>(&self, spans: &[Span]) -> GenericBinaryBuilder<O> {
        let bytes = spans.iter().map(|s| s.len).sum();
        let mut b = GenericBinaryBuilder::<O>::with_capacity(spans.len(), bytes);
        for s in spans {
            match self.value(*s) {
                Some(v) => b.append_value(v),
                None => b.append_null(),
            }
        }
        b
    }

    fn strings<O: OffsetSizeTrait>(&self, spans: &[Span]) -> DfResult<GenericStringArray<O>> {
        // Every value was copied whole from a UTF-8 column; validating
        // again keeps this free of `unsafe`.
        Ok(GenericStringArray::try_from_binary(
            self.binaries::<O>(spans).finish(),
        )?)
    }

    fn views(&self, spans: &[Span]) -> BinaryViewBuilder {
        let mut b = BinaryViewBuilder::with_capacity(spans.len());
        for s in spans {
            match self.value(*s) {
                Some(v) => b.append_value(v),
                None => b.append_null(),
            }
        }
        b
    }
}

impl GroupsAccumulator for MinMaxBytes {
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        let values = self.argument(values)?;
        self.update(values, group_indices, opt_filter, total_num_groups)
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        self.emit(emit_to)
    }

    /// The state of `MIN`/`MAX` is the value itself.
    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        Ok(vec![self.emit(emit_to)?])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        self.update_batch(values, group_indices, None, total_num_groups)
    }

    /// Each row's state is its value, null where the filter drops it.
    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        let values = self.argument(values)?;
        let Some(filter) = opt_filter else {
            return Ok(vec![Arc::clone(values)]);
        };
        let dropped = arrow::compute::not(&arrow::compute::prep_null_mask_filter(filter))?;
        Ok(vec![arrow::compute::nullif(values, &dropped)?])
    }

    fn size(&self) -> usize {
        self.spans.capacity() * std::mem::size_of::<Span>() + self.bytes.capacity()
    }
}

#[cfg(test)]
#[path = "min_max_bytes_tests.rs"]
mod tests;
