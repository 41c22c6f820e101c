//! Grouped `COUNT(DISTINCT ...)` over one integer column, several counts
//! sharing one table.
//!
//! # Why not DataFusion's
//!
//! Nexmark q16 counts, per channel and day, the distinct bidders overall and
//! in three price ranges (`COUNT(DISTINCT CASE WHEN price < 10000 THEN bidder
//! END)`, ...), and the same for auctions. DataFusion gives each of those
//! eight counts its own hash set of (group, value) pairs, so every bid costs
//! four set insertions, and the sets took 39% of the query's CPU. Here the
//! counts whose argument is the same column (the column itself, or `CASE
//! WHEN p THEN column END`) form a *family* sharing one table: an entry per
//! (group, value) with a bit per member that has seen it. A row costs one
//! lookup for every member whose argument holds the column's value there.
//!
//! # How members share the work
//!
//! ```text
//!   scope calls:  m0.update_batch(rows)  m1.update_batch(rows)  ...  mk.update_batch(rows)
//!                      │ park                 │ park                      │ park, all parked
//!                      ▼                      ▼                           ▼
//!   family:       [ m0's input | m1's input | ... | mk's input ]  ──►  one pass over the rows:
//!                                                                      per row, one lookup of
//!                                                                      (group, value), a bit per
//!                                                                      member that holds it
//! ```
//!
//! Each member is still its own `GroupsAccumulator`, with its own counts and
//! its own state in DataFusion's format (a list of the group's distinct
//! values), so checkpoints, merges and restores treat it as any other
//! aggregate. `update_batch` parks the member's input; once every member
//! has parked input for the same rows, the rows are folded in one pass. Any
//! other call, or input for other rows, first folds what is parked, so the
//! result never depends on how the calls interleave; a member whose value
//! differs from the others' at a row (which a family's plan never gives)
//! is looked up on its own.
//!
//! Scopes only drain whole accumulators (`EmitTo::All`, see
//! `scope/segments.rs`); a member refuses `EmitTo::First` with an internal
//! error instead of shifting its groups under its family.

use std::hash::{BuildHasher, Hash};
use std::sync::{Arc, Mutex, MutexGuard};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Int64Array, ListArray, ListBuilder, PrimitiveArray,
    PrimitiveBuilder,
};
use arrow::buffer::{OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    ArrowPrimitiveType, DataType, Field, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use datafusion::common::{DataFusionError, Result as DfResult};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};
use datafusion::physical_expr::expressions::{CaseExpr, Column, Literal};
use hashbrown::{DefaultHashBuilder, HashTable};

use super::expr::PhysExpr;

/// Most members of one family (a bit each in an entry's mask).
pub const MAX_MEMBERS: usize = 32;

/// Whether a family can count distinct values of this type (the integer
/// types DataFusion counts with its primitive distinct accumulator).
pub fn handles(data_type: &DataType) -> bool {
    matches!(
        data_type,
        DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64
    )
}

/// The input column a `COUNT(DISTINCT arg)` counts: `arg` itself if it is a
/// column, or `x` for `CASE WHEN p THEN x END` (one branch, no `ELSE` or
/// `ELSE NULL`) with `x` a column. Counts of the same column form a family.
pub fn counted_column(arg: &PhysExpr) -> Option<usize> {
    if let Some(c) = arg.downcast_ref::<Column>() {
        return Some(c.index());
    }
    let case = arg.downcast_ref::<CaseExpr>()?;
    let [(_, then)] = case.when_then_expr() else {
        return None;
    };
    let no_else = match case.else_expr() {
        None => true,
        Some(e) => e
            .downcast_ref::<Literal>()
            .is_some_and(|l| l.value().is_null()),
    };
    if case.expr().is_some() || !no_else {
        return None;
    }
    then.downcast_ref::<Column>().map(Column::index)
}

/// `count` members of one new family over values of `data_type`, or None
/// if [`handles`] refuses the type or `count` is not 1 to [`MAX_MEMBERS`].
pub fn members(data_type: &DataType, count: usize) -> Option<Vec<Box<dyn GroupsAccumulator>>> {
    if !(1..=MAX_MEMBERS).contains(&count) {
        return None;
    }
    Some(match data_type {
        DataType::Int8 => family::<Int8Type>(count),
        DataType::Int16 => family::<Int16Type>(count),
        DataType::Int32 => family::<Int32Type>(count),
        DataType::Int64 => family::<Int64Type>(count),
        DataType::UInt8 => family::<UInt8Type>(count),
        DataType::UInt16 => family::<UInt16Type>(count),
        DataType::UInt32 => family::<UInt32Type>(count),
        DataType::UInt64 => family::<UInt64Type>(count),
        _ => return None,
    })
}

fn family<T>(count: usize) -> Vec<Box<dyn GroupsAccumulator>>
where
    T: ArrowPrimitiveType + Send,
    T::Native: Hash + Eq,
{
    let shared = Arc::new(Mutex::new(Family::<T> {
        table: HashTable::new(),
        hasher: DefaultHashBuilder::default(),
        marks: Vec::new(),
        counts: vec![Vec::new(); count],
        parked: (0..count).map(|_| None).collect(),
        parked_groups: Vec::new(),
        parked_total: 0,
        drained: 0,
    }));
    (0..count)
        .map(|bit| {
            let member: Box<dyn GroupsAccumulator> = Box::new(Member {
                family: Arc::clone(&shared),
                bit,
            });
            member
        })
        .collect()
}

/// One (group, value) pair some member has seen; bit `i` of `mask` is set
/// once member `i` has. (16 bytes for a BIGINT: groups are numbered within
/// a scope's segment, far below `u32::MAX`, which [`Family::group`] checks.)
struct Entry<N> {
    group: u32,
    mask: u32,
    value: N,
}

/// A member's input, waiting for the others' over the same rows.
struct Parked {
    values: ArrayRef,
    filter: Option<BooleanArray>,
}

/// What a family's members share.
struct Family<T: ArrowPrimitiveType> {
    table: HashTable<Entry<T::Native>>,
    hasher: DefaultHashBuilder,
    /// Scratch: a folded batch's (group, members, value) marks.
    marks: Vec<Entry<T::Native>>,
    /// Per member, its distinct count per group.
    counts: Vec<Vec<i64>>,
    /// Per member, its parked input (all over the rows of `parked_groups`).
    parked: Vec<Option<Parked>>,
    parked_groups: Vec<usize>,
    parked_total: usize,
    /// Members whose counts were taken while their bits still mark
    /// entries: the bits are cleared lazily, all at once when every member
    /// has been drained (the usual case: a scope drains all its
    /// accumulators together), or before anything is marked again.
    drained: u32,
}

fn internal(what: &str) -> DataFusionError {
    DataFusionError::Internal(format!("COUNT(DISTINCT) family: {what}"))
}

impl<T> Family<T>
where
    T: ArrowPrimitiveType,
    T::Native: Hash + Eq,
{
    fn any_parked(&self) -> bool {
        self.parked.iter().any(Option::is_some)
    }

    /// A group index as an entry holds it.
    fn group(group: usize) -> DfResult<u32> {
        u32::try_from(group).map_err(|_| internal("a group index beyond u32"))
    }

    /// Mark (group, value) seen by the members in `bits`; counts the
    /// members that had not seen it.
    fn mark(&mut self, group: u32, value: T::Native, bits: u32) {
        let hasher = &self.hasher;
        let hash = hasher.hash_one((group, value));
        let entry = self
            .table
            .entry(
                hash,
                |e| e.group == group && e.value == value,
                |e| hasher.hash_one((e.group, e.value)),
            )
            .or_insert(Entry {
                group,
                mask: 0,
                value,
            })
            .into_mut();
        let mut new = bits & !entry.mask;
        entry.mask |= new;
        while new != 0 {
            let bit = new.trailing_zeros() as usize;
            new &= new - 1;
            let count = self.counts.get_mut(bit);
            if let Some(count) = count.and_then(|c| c.get_mut(group as usize)) {
                *count += 1;
            }
        }
    }

    /// Fold every parked input into the table, in one pass over its rows.
    fn fold_parked(&mut self) -> DfResult<()> {
        if !self.any_parked() {
            return Ok(());
        }
        self.purge_drained();
        let parked: Vec<(usize, Parked)> = self
            .parked
            .iter_mut()
            .enumerate()
            .filter_map(|(bit, p)| p.take().map(|p| (bit, p)))
            .collect();
        let groups = std::mem::take(&mut self.parked_groups);
        let total = self.parked_total;
        let mut inputs = Vec::with_capacity(parked.len());
        for (bit, p) in &parked {
            let values = p
                .values
                .as_primitive_opt::<T>()
                .ok_or_else(|| internal("input of an unexpected type"))?;
            if values.len() != groups.len() {
                return Err(internal("input and group indices differ in length"));
            }
            if let Some(c) = self.counts.get_mut(*bit) {
                if c.len() < total {
                    c.resize(total, 0);
                }
            }
            inputs.push((1u32 << bit, values, p.filter.as_ref()));
        }
        // First the marks, row by row (no table access), then the lookups
        // in one tight loop, so the table's cache misses overlap.
        let mut marks = std::mem::take(&mut self.marks);
        marks.clear();
        for (row, &group) in groups.iter().enumerate() {
            // Members with a value at this row, as bits of `inputs`.
            let mut todo: u64 = 0;
            for (j, (_, values, filter)) in inputs.iter().enumerate() {
                let kept = filter.is_none_or(|f| f.is_valid(row) && f.value(row));
                if kept && values.is_valid(row) {
                    todo |= 1 << j;
                }
            }
            if todo == 0 {
                continue;
            }
            let group = Self::group(group)?;
            while todo != 0 {
                let first = todo.trailing_zeros() as usize;
                let Some((_, values, _)) = inputs.get(first) else {
                    break;
                };
                let value = values.value(row);
                let mut mask = 0u32;
                let mut rest = todo;
                while rest != 0 {
                    let j = rest.trailing_zeros() as usize;
                    rest &= rest - 1;
                    if let Some((bit, v, _)) = inputs.get(j) {
                        if v.value(row) == value {
                            mask |= bit;
                            todo &= !(1 << j);
                        }
                    }
                }
                marks.push(Entry { group, mask, value });
            }
        }
        for m in &marks {
            self.mark(m.group, m.value, m.mask);
        }
        self.marks = marks;
        self.parked_groups = groups;
        self.parked_groups.clear();
        Ok(())
    }

    /// Forget member `bit`'s values (its counts were taken).
    fn clear_member(&mut self, bit: usize) {
        self.drained |= 1 << bit;
        let all = u32::MAX >> (32 - self.counts.len().clamp(1, 32));
        if self.drained & all == all {
            self.table.clear();
            self.drained = 0;
        }
    }

    /// Clear the bits of drained members from the table, before new marks.
    fn purge_drained(&mut self) {
        if self.drained == 0 {
            return;
        }
        let keep = !self.drained;
        self.table.retain(|e| {
            e.mask &= keep;
            e.mask != 0
        });
        self.drained = 0;
    }
}

/// One `COUNT(DISTINCT ...)` of a family.
struct Member<T: ArrowPrimitiveType> {
    family: Arc<Mutex<Family<T>>>,
    bit: usize,
}

impl<T> Member<T>
where
    T: ArrowPrimitiveType,
    T::Native: Hash + Eq,
{
    fn lock(&self) -> DfResult<MutexGuard<'_, Family<T>>> {
        self.family
            .lock()
            .map_err(|_| internal("a member panicked while holding the family"))
    }

    /// The family with nothing parked.
    fn folded(&self) -> DfResult<MutexGuard<'_, Family<T>>> {
        let mut f = self.lock()?;
        f.fold_parked()?;
        Ok(f)
    }
}

fn whole(emit_to: EmitTo) -> DfResult<()> {
    match emit_to {
        EmitTo::All => Ok(()),
        EmitTo::First(_) => Err(internal(
            "only whole accumulators are emitted (EmitTo::First is not supported)",
        )),
    }
}

impl<T> GroupsAccumulator for Member<T>
where
    T: ArrowPrimitiveType + Send,
    T::Native: Hash + Eq,
{
    fn update_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        opt_filter: Option<&BooleanArray>,
        total_num_groups: usize,
    ) -> DfResult<()> {
        let [values] = values else {
            return Err(internal("expected one argument"));
        };
        let mut f = self.lock()?;
        let parked_here = f.parked.get(self.bit).is_some_and(Option::is_some);
        if parked_here || (f.any_parked() && f.parked_groups != group_indices) {
            f.fold_parked()?;
        }
        if !f.any_parked() {
            f.parked_groups.clear();
            f.parked_groups.extend_from_slice(group_indices);
            f.parked_total = 0;
        }
        f.parked_total = f.parked_total.max(total_num_groups);
        let slot = f
            .parked
            .get_mut(self.bit)
            .ok_or_else(|| internal("member outside its family"))?;
        *slot = Some(Parked {
            values: Arc::clone(values),
            filter: opt_filter.cloned(),
        });
        if f.parked.iter().all(Option::is_some) {
            f.fold_parked()?;
        }
        Ok(())
    }

    fn evaluate(&mut self, emit_to: EmitTo) -> DfResult<ArrayRef> {
        whole(emit_to)?;
        let mut f = self.folded()?;
        let counts = f.counts.get_mut(self.bit).map(std::mem::take);
        f.clear_member(self.bit);
        Ok(Arc::new(Int64Array::from(counts.unwrap_or_default())))
    }

    fn state(&mut self, emit_to: EmitTo) -> DfResult<Vec<ArrayRef>> {
        whole(emit_to)?;
        let mut f = self.folded()?;
        let counts = f
            .counts
            .get_mut(self.bit)
            .map(std::mem::take)
            .unwrap_or_default();
        let mut offsets = Vec::with_capacity(counts.len() + 1);
        offsets.push(0i32);
        let mut end = 0i32;
        for c in &counts {
            end = i32::try_from(*c)
                .ok()
                .and_then(|c| end.checked_add(c))
                .ok_or_else(|| internal("more distinct values than a list holds"))?;
            offsets.push(end);
        }
        let mut cursors: Vec<usize> = offsets.iter().map(|o| *o as usize).collect();
        let mut values = vec![T::Native::default(); end as usize];
        let bit = 1u32 << self.bit;
        let live = bit & !f.drained;
        for e in f.table.iter().filter(|e| e.mask & live != 0) {
            let at = cursors
                .get_mut(e.group as usize)
                .ok_or_else(|| internal("a value of a group beyond the counts"))?;
            let slot = values
                .get_mut(*at)
                .ok_or_else(|| internal("more values than counted"))?;
            *slot = e.value;
            *at += 1;
        }
        f.clear_member(self.bit);
        let values = PrimitiveArray::<T>::new(ScalarBuffer::from(values), None);
        let list = ListArray::new(
            Arc::new(Field::new_list_field(T::DATA_TYPE, true)),
            OffsetBuffer::new(offsets.into()),
            Arc::new(values),
            None,
        );
        Ok(vec![Arc::new(list)])
    }

    fn merge_batch(
        &mut self,
        values: &[ArrayRef],
        group_indices: &[usize],
        total_num_groups: usize,
    ) -> DfResult<()> {
        let [state] = values else {
            return Err(internal("expected one state column"));
        };
        let lists = state
            .as_list_opt::<i32>()
            .ok_or_else(|| internal("a state that is not a list"))?;
        let inner = lists
            .values()
            .as_primitive_opt::<T>()
            .ok_or_else(|| internal("a state list of an unexpected type"))?;
        let mut f = self.folded()?;
        f.purge_drained();
        if let Some(c) = f.counts.get_mut(self.bit) {
            if c.len() < total_num_groups {
                c.resize(total_num_groups, 0);
            }
        }
        if group_indices.len() > lists.len() {
            return Err(internal("more group indices than states"));
        }
        let offsets = lists.offsets();
        for (row, &group) in group_indices.iter().enumerate() {
            if lists.is_null(row) {
                continue;
            }
            let group = Family::<T>::group(group)?;
            let (start, end) = (offsets[row] as usize, offsets[row + 1] as usize);
            for i in start..end {
                if inner.is_valid(i) {
                    f.mark(group, inner.value(i), 1 << self.bit);
                }
            }
        }
        Ok(())
    }

    fn convert_to_state(
        &self,
        values: &[ArrayRef],
        opt_filter: Option<&BooleanArray>,
    ) -> DfResult<Vec<ArrayRef>> {
        let [values] = values else {
            return Err(internal("expected one argument"));
        };
        let values = values
            .as_primitive_opt::<T>()
            .ok_or_else(|| internal("input of an unexpected type"))?;
        let mut lists = ListBuilder::new(PrimitiveBuilder::<T>::with_capacity(values.len()))
            .with_field(Arc::new(Field::new_list_field(T::DATA_TYPE, true)));
        for row in 0..values.len() {
            let kept = opt_filter.is_none_or(|f| f.is_valid(row) && f.value(row));
            if kept && values.is_valid(row) {
                lists.values().append_value(values.value(row));
            }
            lists.append(true);
        }
        Ok(vec![Arc::new(lists.finish())])
    }

    fn size(&self) -> usize {
        let Ok(f) = self.family.lock() else {
            return 0;
        };
        let members = f.counts.len().max(1);
        let table = f.table.capacity() * std::mem::size_of::<Entry<T::Native>>() / members;
        let counts = f.counts.get(self.bit).map_or(0, |c| c.capacity() * 8);
        table + counts
    }
}

#[cfg(test)]
#[path = "distinct_family_tests.rs"]
mod tests;
