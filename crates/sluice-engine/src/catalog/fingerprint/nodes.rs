//! The canonical encoding of each plan node (see the parent module for the
//! format): one arm per [`StreamNode`] variant, kept apart from the encoder
//! of types and expressions so each reads in one go.

use super::*;

impl Enc {
    /// Encode `n` and its inputs.
    pub(super) fn node(&mut self, n: &StreamNode) {
        self.group(|e| match n {
            StreamNode::Scan {
                input,
                schema,
                changelog,
            } => {
                e.tag("scan");
                e.str(input);
                e.bool(*changelog);
                e.schema(schema);
            }
            StreamNode::Filter { input, predicate } => {
                e.tag("filter");
                e.expr(predicate, input.schema());
                e.node(input);
            }
            StreamNode::Project {
                input,
                exprs,
                schema,
            } => {
                e.tag("project");
                e.exprs(exprs, input.schema());
                e.schema(schema);
                e.node(input);
            }
            StreamNode::Union { inputs, schema } => {
                e.tag("union");
                e.schema(schema);
                e.list(inputs.iter(), |e, i| e.node(i));
            }
            StreamNode::WindowAggregate {
                input,
                window,
                keys,
                slots,
                aggregates,
                emit,
                schema,
            } => {
                e.tag("window_aggregate");
                match window.kind {
                    WindowKind::Tumble { size_ms, offset_ms } => {
                        e.tag("tumble");
                        e.int(size_ms);
                        e.int(offset_ms);
                    }
                    WindowKind::Hop { slide_ms, size_ms } => {
                        e.tag("hop");
                        e.int(slide_ms);
                        e.int(size_ms);
                    }
                    WindowKind::Session { gap_ms } => {
                        e.tag("session");
                        e.int(gap_ms);
                    }
                }
                let on = input.schema();
                e.expr(&window.time, on);
                e.ty(&window.time_type);
                e.exprs(keys, on);
                e.list(slots.iter(), |e, s| match s {
                    GroupSlot::Key(i) => e.group(|e| {
                        e.tag("key");
                        e.int(i);
                    }),
                    GroupSlot::WindowStart => e.tag("window_start"),
                    GroupSlot::WindowEnd => e.tag("window_end"),
                });
                e.exprs(aggregates, on);
                e.tag(match emit {
                    EmitMode::OnWindowClose => "on_window_close",
                    EmitMode::Changes => "changes",
                });
                e.schema(schema);
                e.node(input);
            }
            StreamNode::Join {
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                schema,
            } => {
                e.tag("join");
                e.join(
                    (left, right),
                    on,
                    filter.as_ref(),
                    (left_bounds, right_bounds),
                    schema,
                );
            }
            StreamNode::OuterJoin {
                kind,
                left,
                right,
                on,
                filter,
                left_bounds,
                right_bounds,
                changelog,
                schema,
            } => {
                e.tag("outer_join");
                e.tag(kind.sql());
                e.bool(*changelog);
                e.join(
                    (left, right),
                    on,
                    filter.as_ref(),
                    (left_bounds, right_bounds),
                    schema,
                );
            }
            StreamNode::AsofJoin {
                left,
                right,
                on,
                left_time,
                right_time,
                op,
                tolerance_ms,
                keep_unmatched,
                left_lag_ms,
                right_lag_ms,
                schema,
                // Only how EXPLAIN names the join: the state is an ASOF
                // join's either way.
                versioned: _,
            } => {
                e.tag("asof_join");
                e.list(on.iter(), |e, (l, r)| {
                    e.group(|e| {
                        e.expr(l, left.schema());
                        e.expr(r, right.schema());
                    })
                });
                e.expr(left_time, left.schema());
                e.expr(right_time, right.schema());
                e.tag(op.as_str());
                e.opt(tolerance_ms.as_ref(), |e, t| e.int(*t));
                e.bool(*keep_unmatched);
                e.int(*left_lag_ms);
                e.int(*right_lag_ms);
                e.schema(schema);
                e.node(left);
                e.node(right);
            }
            StreamNode::LookupJoin {
                input,
                table,
                keys,
                key_columns,
                left_outer,
                filter,
                schema,
                ..
            } => {
                // The cache options are not part of the plan's identity:
                // the cache is not state.
                e.tag("lookup_join");
                e.str(table);
                e.exprs(keys, input.schema());
                e.list(key_columns.iter(), |e, c| e.str(c));
                e.bool(*left_outer);
                e.opt(filter.as_ref(), |e, f| e.expr(f, schema));
                e.schema(schema);
                e.node(input);
            }
            StreamNode::Distinct {
                input,
                keys,
                schema,
            } => {
                e.tag("distinct");
                e.exprs(keys, input.schema());
                e.schema(schema);
                e.node(input);
            }
            StreamNode::TopN {
                input,
                partition,
                order,
                limit,
                mode,
                schema,
            } => {
                e.tag("top_n");
                let on = input.schema();
                e.exprs(partition, on);
                e.list(order.iter(), |e, s| {
                    e.group(|e| {
                        e.expr(&s.expr, on);
                        e.bool(s.asc);
                        e.bool(s.nulls_first);
                    })
                });
                e.int(limit);
                match mode {
                    sluice_sql::plan::TopNMode::Windowed { key, lag_ms } => {
                        e.tag("windowed");
                        e.int(key);
                        e.int(lag_ms);
                    }
                    sluice_sql::plan::TopNMode::Completes { column, lag_ms } => {
                        e.tag("completes");
                        e.int(column);
                        e.int(lag_ms);
                    }
                    sluice_sql::plan::TopNMode::FirstByTime { lag_ms } => {
                        e.tag("first_by_time");
                        e.int(lag_ms);
                    }
                    sluice_sql::plan::TopNMode::Changelog => e.tag("changelog"),
                }
                e.schema(schema);
                e.node(input);
            }
            StreamNode::ChangelogOver {
                input,
                partition_by,
                order_by,
                frame,
                aggregates,
                schema,
            } => {
                e.tag("changelog_over");
                let on = input.schema();
                e.exprs(partition_by, on);
                e.list(order_by.iter(), |e, s| {
                    e.group(|e| {
                        e.expr(&s.expr, on);
                        e.bool(s.asc);
                        e.bool(s.nulls_first);
                    })
                });
                over_frame(e, frame);
                e.exprs(aggregates, on);
                e.schema(schema);
                e.node(input);
            }
            StreamNode::OverAggregate {
                input,
                partition_by,
                time,
                time_lag_ms,
                frame,
                aggregates,
                schema,
            } => {
                e.tag("over");
                let on = input.schema();
                e.exprs(partition_by, on);
                e.expr(time, on);
                e.int(time_lag_ms);
                over_frame(e, frame);
                e.exprs(aggregates, on);
                e.schema(schema);
                e.node(input);
            }
            StreamNode::Aggregate {
                input,
                keys,
                aggregates,
                schema,
            } => {
                e.tag("aggregate");
                e.exprs(keys, input.schema());
                e.exprs(aggregates, input.schema());
                e.schema(schema);
                e.node(input);
            }
        })
    }
}
