//! Which columns of an input a plan reads.
//!
//! A file source whose pipeline will not change (see `Database::seal`) can
//! leave the columns no query reads unparsed, the way a batch engine pushes
//! a projection into its scan. The analysis walks a plan from the root,
//! carrying the columns each operator needs from its input; it errs on the
//! side of reading more (a union, or a scan read whole, needs everything).

use std::collections::{BTreeSet, HashSet};

use datafusion::common::Column;
use datafusion::logical_expr::Expr;

use crate::plan::StreamNode;

/// The columns of one input a plan (or a set of plans) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ColumnsRead {
    /// Every column.
    All,
    /// Only these, by name.
    Some(BTreeSet<String>),
}

impl ColumnsRead {
    /// Nothing read yet.
    pub fn none() -> ColumnsRead {
        ColumnsRead::Some(BTreeSet::new())
    }

    /// Add what `other` reads.
    pub fn merge(&mut self, other: ColumnsRead) {
        match (&mut *self, other) {
            (ColumnsRead::All, _) => {}
            (_, ColumnsRead::All) => *self = ColumnsRead::All,
            (ColumnsRead::Some(mine), ColumnsRead::Some(theirs)) => mine.extend(theirs),
        }
    }

    /// Whether column `name` is read.
    pub fn contains(&self, name: &str) -> bool {
        match self {
            ColumnsRead::All => true,
            ColumnsRead::Some(names) => names.contains(name),
        }
    }
}

/// The columns an operator needs from its output: `None` is all of them.
pub type Needed = Option<HashSet<Column>>;

impl StreamNode {
    /// What this plan reads of `input`, or `None` if it does not read it.
    pub fn columns_read(&self, input: &str) -> Option<ColumnsRead> {
        let mut read = None;
        self.collect_columns_read(input, None, &mut read);
        read
    }

    fn collect_columns_read(&self, target: &str, needed: Needed, read: &mut Option<ColumnsRead>) {
        match self {
            StreamNode::Scan { input, .. } => {
                if input == target {
                    let these = match needed {
                        None => ColumnsRead::All,
                        Some(cols) => ColumnsRead::Some(cols.into_iter().map(|c| c.name).collect()),
                    };
                    read.get_or_insert_with(ColumnsRead::none).merge(these);
                }
            }
            StreamNode::Filter { input, .. } | StreamNode::Project { input, .. } => {
                let needed = self.row_by_row_input_needed(needed).flatten();
                input.collect_columns_read(target, needed, read);
            }
            StreamNode::Union { inputs, .. } => {
                // Union inputs match by position, not name: read them whole.
                for i in inputs {
                    i.collect_columns_read(target, None, read);
                }
            }
            StreamNode::WindowAggregate { input, .. } | StreamNode::Aggregate { input, .. } => {
                input.collect_columns_read(target, self.aggregate_input_columns(), read);
            }
            StreamNode::Distinct { input, keys, .. } => {
                input.collect_columns_read(target, Some(refs(keys)), read);
            }
            // A top-N emits its input rows whole.
            StreamNode::TopN { input, .. } => input.collect_columns_read(target, None, read),
            // It emits its input rows whole, and orders ties by them.
            StreamNode::ChangelogOver { input, .. } => {
                input.collect_columns_read(target, None, read)
            }
            StreamNode::OverAggregate {
                input,
                partition_by,
                time,
                aggregates,
                ..
            } => {
                // Every input column is passed through: keep those the
                // reader needs (all, when unknown), plus what the window reads.
                let mut cols: HashSet<Column> = match needed {
                    None => input.schema().columns().into_iter().collect(),
                    Some(cols) => cols
                        .into_iter()
                        .filter(|c| input.schema().has_column(c))
                        .collect(),
                };
                add_refs(
                    &mut cols,
                    partition_by.iter().chain(aggregates).chain([time]),
                );
                input.collect_columns_read(target, Some(cols), read);
            }
            StreamNode::LookupJoin {
                input,
                keys,
                filter,
                ..
            } => {
                let needed = needed.map(|mut cols| {
                    add_refs(&mut cols, keys.iter().chain(filter.iter()));
                    cols.retain(|c| input.schema().has_column(c));
                    cols
                });
                input.collect_columns_read(target, needed, read);
            }
            StreamNode::AsofJoin { .. }
            | StreamNode::Join { .. }
            | StreamNode::OuterJoin { .. } => {
                for (side, side_needed) in self.join_sides_needed(needed).into_iter().flatten() {
                    side.collect_columns_read(target, side_needed, read);
                }
            }
        }
    }
}

impl StreamNode {
    /// What a join needs of each side, given what its reader needs of its
    /// output (`None`: every column, and then each side whole): the
    /// reader's columns of that side, and its keys, filter and bounds (an
    /// ASOF join's times). `None` for a node that is not a join.
    pub fn join_sides_needed(&self, needed: Needed) -> Option<[(&StreamNode, Needed); 2]> {
        let (left, right, needed) = match self {
            StreamNode::AsofJoin {
                left,
                right,
                on,
                left_time,
                right_time,
                ..
            } => {
                let needed = needed.map(|mut cols| {
                    add_refs(&mut cols, on.iter().flat_map(|(l, r)| [l, r]));
                    add_refs(&mut cols, [left_time, right_time]);
                    cols
                });
                (left, right, needed)
            }
            StreamNode::Join {
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                ..
            }
            | StreamNode::OuterJoin {
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                ..
            } => {
                let needed = needed.map(|mut cols| {
                    add_refs(&mut cols, on.iter().flat_map(|(l, r)| [l, r]));
                    add_refs(&mut cols, filter.iter());
                    add_refs(&mut cols, left_bounds.iter().map(|b| &b.expr));
                    add_refs(&mut cols, right_bounds.iter().map(|b| &b.expr));
                    cols
                });
                (left, right, needed)
            }
            _ => return None,
        };
        let of = |side: &StreamNode| {
            needed.as_ref().map(|cols| {
                cols.iter()
                    .filter(|c| side.schema().has_column(c))
                    .cloned()
                    .collect()
            })
        };
        Some([(left.as_ref(), of(left)), (right.as_ref(), of(right))])
    }

    /// What a filter or a projection needs of its input, given what its
    /// reader needs of its output (`None`: every column). `None` for any
    /// other node.
    pub fn row_by_row_input_needed(&self, needed: Needed) -> Option<Needed> {
        match self {
            StreamNode::Filter { predicate, .. } => Some(needed.map(|mut cols| {
                add_refs(&mut cols, [predicate]);
                cols
            })),
            StreamNode::Project { exprs, .. } => Some(Some(refs(exprs))),
            _ => None,
        }
    }

    /// The columns of its input a keyed aggregation reads, whatever reads
    /// its output (which is only its keys and aggregates): its keys, its
    /// aggregates' arguments and filters, and a window's time column.
    /// `None` for any other node.
    pub fn aggregate_input_columns(&self) -> Option<HashSet<Column>> {
        match self {
            StreamNode::WindowAggregate {
                window,
                keys,
                aggregates,
                ..
            } => {
                let mut cols = refs(keys);
                add_refs(&mut cols, aggregates.iter().chain([&window.time]));
                Some(cols)
            }
            StreamNode::Aggregate {
                keys, aggregates, ..
            } => {
                let mut cols = refs(keys);
                add_refs(&mut cols, aggregates);
                Some(cols)
            }
            _ => None,
        }
    }
}

fn refs(exprs: &[Expr]) -> HashSet<Column> {
    let mut cols = HashSet::new();
    add_refs(&mut cols, exprs);
    cols
}

fn add_refs<'a>(cols: &mut HashSet<Column>, exprs: impl IntoIterator<Item = &'a Expr>) {
    for e in exprs {
        cols.extend(e.column_refs().into_iter().cloned());
    }
}
