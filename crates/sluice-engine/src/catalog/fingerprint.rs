//! The checkpoint fingerprint: which pipeline definition a checkpoint's
//! state belongs to. A checkpoint is restored only into a pipeline with the
//! same fingerprint, so the fingerprint must change exactly when the
//! meaning of the state changes, and must not change when a dependency is
//! bumped or a message is reworded. It is therefore a canonical encoding
//! of our own catalog types, never the `Debug` or EXPLAIN text of Arrow or
//! DataFusion values.
//!
//! # Architecture
//!
//! ```text
//!   Catalog ──encode──▶ canonical text (version 1, below) ──SHA-256──▶ "v1:" + 64 hex digits
//!                       one line per object, in catalog order
//! ```
//!
//! # Encoding, version 1
//!
//! Tokens are separated by one space. A string is `<byte length>:<bytes>`
//! (so no name can be confused with the tokens after it); integers are
//! decimal; booleans are `t` / `f`; an absent optional value is `-`; a
//! list is `[` its items `]`; a nested value is `(` its tokens `)`.
//!
//! Lines, in catalog order (creation order, which is dependency order):
//!
//! - `source <name> <connector> <columns> <watermark> <late data to>`:
//!   the connector is `push`, `file <path> <format>` or `nexmark <stream>
//!   <events|-> <out_of_order_ms> <seed>`; columns are `(<name> <type>
//!   <nullable>)`; the watermark is `(<column> <delay_ms>)` or `-`.
//! - `stream <name> <materialized> <changelog> <producer>`: the producer
//!   is `query <plan>`, `late <source>` or `process <function> <input>`
//!   (a process function's version is checked when its state is restored,
//!   so a changed version gets that more specific error).
//! - `sink <name> <from> <path> <format> <filter plan|->`.
//!
//! Types use our own names: `bool`, `i8`..`i64`, `u8`..`u64`, `f16`,
//! `f32`, `f64`, `utf8`, `date32`, `timestamp <unit> <zone|->`,
//! `decimal128 <precision> <scale>`, `list <field>`, `struct [<field>]`
//! and so on for every Arrow type (the match is exhaustive, so a new
//! Arrow type fails to compile here instead of changing fingerprints).
//!
//! A stream's plan is its name, changelog and materialized flags, its time
//! columns, its output columns (name, type, nullability) and its root
//! node. A plan node is `(<kind> <attributes> <inputs>)` with the type and
//! nullability of each output column (not the names of inner columns,
//! which DataFusion makes from expression text): `scan`,
//! `filter`, `project`, `union`, `window_aggregate` (window kind and sizes
//! in ms, time expression and type, keys, group slots, aggregates, emit
//! mode), `join` (key pairs, residual filter, state bounds) and
//! `aggregate`. An expression is `(<kind> <attributes> <operands>)`:
//! columns by their position in the operator's input, aliases without
//! their name (output names are in the plan's columns), literals by our
//! type name and value,
//! operators by our own names, functions and aggregates by their SQL name
//! with `distinct`, filter and ordering. Expression kinds the streaming
//! planner does not produce are encoded as DataFusion's variant name and
//! their operands; literals of nested types (lists, structs) carry the
//! value's string form.
//!
//! **Reordering.** Objects are encoded in catalog order, so declaring two
//! independent sources (or streams, or sinks) in the other order gives
//! another fingerprint: a checkpoint is restored only into a pipeline
//! declared in the same order. This is deliberate: operator state and
//! blob names follow declaration order, so a reordered pipeline is
//! refused with a clear error rather than risking a mismatched restore.
//!
//! A change to this encoding must bump [`FINGERPRINT_VERSION`]; recovery
//! from a checkpoint of another version is refused naming both versions.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use arrow::datatypes::{DataType, Field, IntervalUnit, TimeUnit, UnionMode};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{DFSchema, DFSchemaRef, ScalarValue};
use datafusion::logical_expr::{Expr, Operator};
use sha2::{Digest, Sha256};
use sluice_sql::ast::EmitMode;
use sluice_sql::plan::{GroupSlot, JoinStateBound, OverFrame, WindowKind};
use sluice_sql::{StreamNode, StreamPlan, WatermarkSpec};

use super::{Catalog, SinkConnector, SourceConnector, StreamKind};

mod nodes;

/// The version of the encoding, the fingerprint's prefix (`v1:`).
pub const FINGERPRINT_VERSION: &str = "v1";

/// The version a stored fingerprint was written with: its prefix before
/// `:`, or `v0` for the unversioned fingerprints of earlier releases.
pub fn fingerprint_version(fingerprint: &str) -> &str {
    match fingerprint.split_once(':') {
        Some((v, _)) if v.starts_with('v') => v,
        _ => "v0",
    }
}

/// `v1:` and the SHA-256 (hex) of the catalog's canonical encoding.
pub fn fingerprint(catalog: &Catalog) -> String {
    let text = canonical(catalog);
    let digest = Sha256::digest(text.as_bytes());
    let mut out = String::with_capacity(FINGERPRINT_VERSION.len() + 1 + 64);
    out.push_str(FINGERPRINT_VERSION);
    out.push(':');
    out.push_str(&hex(&digest));
    out
}

/// Each object's fingerprint, keyed `kind name` (`source bids`, `stream
/// per_auction`, `sink out`): the SHA-256 (hex) of the object's line of
/// the canonical encoding and, for a process stream, of its function's
/// binding hash too, so a node that binds the same name to other code
/// differs. A cluster seals these and compares them object by object, so a
/// refused node is told which objects differ.
pub fn object_fingerprints(catalog: &Catalog) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for line in canonical(catalog).lines() {
        let Some((kind, rest)) = line.split_once(' ') else {
            continue;
        };
        let Some(name) = rest
            .split_once(':')
            .and_then(|(len, tail)| tail.get(..len.parse::<usize>().ok()?))
        else {
            continue;
        };
        let mut hasher = Sha256::new();
        hasher.update(line.as_bytes());
        if kind == "stream" {
            if let Some(StreamKind::Process(info)) = catalog
                .streams
                .iter()
                .find(|s| s.name == name)
                .map(|s| &s.kind)
            {
                hasher.update(b"\nbinding ");
                hasher.update(info.descriptor.binding_hash().as_bytes());
            }
        }
        out.insert(format!("{kind} {name}"), hex(&hasher.finalize()));
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// The canonical text of version 1 (see the module docs).
pub fn canonical(catalog: &Catalog) -> String {
    let mut e = Enc::default();
    for s in &catalog.sources {
        e.tag("source");
        e.str(&s.name);
        match &s.connector {
            SourceConnector::Push => e.tag("push"),
            SourceConnector::File(f) => {
                e.tag("file");
                e.str(&f.path);
                e.str(f.format.name());
            }
            SourceConnector::Nexmark(n) => {
                e.tag("nexmark");
                e.str(&n.stream.to_string());
                e.opt(n.events, |e, v| e.int(v));
                e.int(n.out_of_order_ms);
                e.int(n.seed);
            }
        }
        e.list(s.schema.fields().iter(), |e, f| e.field(f));
        e.opt(s.watermark.as_ref(), |e, w: &WatermarkSpec| {
            e.group(|e| {
                e.str(&w.column);
                e.int(w.delay_ms);
            })
        });
        e.opt(s.late_data_to.as_deref(), |e, t| e.str(t));
        e.line();
    }
    for s in &catalog.streams {
        e.tag("stream");
        e.str(&s.name);
        e.bool(s.materialized);
        e.bool(s.changelog);
        match &s.kind {
            StreamKind::Query(p) => {
                e.tag("query");
                e.plan(p);
            }
            StreamKind::LateData { source } => {
                e.tag("late");
                e.str(source);
            }
            StreamKind::Process(info) => {
                e.tag("process");
                e.str(&info.descriptor.name);
                e.str(&info.input);
            }
        }
        e.line();
    }
    for s in &catalog.sinks {
        e.tag("sink");
        e.str(&s.name);
        e.str(&s.from);
        let SinkConnector::File {
            declared, format, ..
        } = &s.connector;
        e.str(&declared.to_string_lossy());
        e.str(format.name());
        e.opt(s.filter.as_ref(), |e, n| e.node(n));
        e.line();
    }
    e.out
}

/// Writes tokens of the encoding.
#[derive(Default)]
struct Enc {
    out: String,
}

impl Enc {
    fn sep(&mut self) {
        if !(self.out.is_empty() || self.out.ends_with(['\n', '(', '['])) {
            self.out.push(' ');
        }
    }

    fn tag(&mut self, t: &str) {
        self.sep();
        self.out.push_str(t);
    }

    fn str(&mut self, s: &str) {
        self.sep();
        let _ = write!(self.out, "{}:{s}", s.len());
    }

    fn int(&mut self, v: impl std::fmt::Display) {
        self.sep();
        let _ = write!(self.out, "{v}");
    }

    fn bool(&mut self, b: bool) {
        self.tag(if b { "t" } else { "f" });
    }

    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Self, T)) {
        match v {
            Some(v) => f(self, v),
            None => self.tag("-"),
        }
    }

    fn group(&mut self, f: impl FnOnce(&mut Self)) {
        self.sep();
        self.out.push('(');
        f(self);
        self.out.push(')');
    }

    fn list<T>(&mut self, items: impl Iterator<Item = T>, mut f: impl FnMut(&mut Self, T)) {
        self.sep();
        self.out.push('[');
        for i in items {
            f(self, i);
        }
        self.out.push(']');
    }

    fn line(&mut self) {
        self.out.push('\n');
    }

    fn field(&mut self, f: &Field) {
        self.group(|e| {
            e.str(f.name());
            e.ty(f.data_type());
            e.bool(f.is_nullable());
        })
    }

    fn unit(&mut self, u: &TimeUnit) {
        self.tag(match u {
            TimeUnit::Second => "s",
            TimeUnit::Millisecond => "ms",
            TimeUnit::Microsecond => "us",
            TimeUnit::Nanosecond => "ns",
        })
    }

    /// Our names for Arrow types; exhaustive on purpose (see module docs).
    fn ty(&mut self, t: &DataType) {
        self.group(|e| match t {
            DataType::Null => e.tag("null"),
            DataType::Boolean => e.tag("bool"),
            DataType::Int8 => e.tag("i8"),
            DataType::Int16 => e.tag("i16"),
            DataType::Int32 => e.tag("i32"),
            DataType::Int64 => e.tag("i64"),
            DataType::UInt8 => e.tag("u8"),
            DataType::UInt16 => e.tag("u16"),
            DataType::UInt32 => e.tag("u32"),
            DataType::UInt64 => e.tag("u64"),
            DataType::Float16 => e.tag("f16"),
            DataType::Float32 => e.tag("f32"),
            DataType::Float64 => e.tag("f64"),
            DataType::Timestamp(u, tz) => {
                e.tag("timestamp");
                e.unit(u);
                e.opt(tz.as_deref(), |e, z| e.str(z));
            }
            DataType::Date32 => e.tag("date32"),
            DataType::Date64 => e.tag("date64"),
            DataType::Time32(u) => {
                e.tag("time32");
                e.unit(u);
            }
            DataType::Time64(u) => {
                e.tag("time64");
                e.unit(u);
            }
            DataType::Duration(u) => {
                e.tag("duration");
                e.unit(u);
            }
            DataType::Interval(u) => {
                e.tag("interval");
                e.tag(match u {
                    IntervalUnit::YearMonth => "year_month",
                    IntervalUnit::DayTime => "day_time",
                    IntervalUnit::MonthDayNano => "month_day_nano",
                });
            }
            DataType::Binary => e.tag("binary"),
            DataType::FixedSizeBinary(n) => {
                e.tag("fixed_binary");
                e.int(n);
            }
            DataType::LargeBinary => e.tag("large_binary"),
            DataType::BinaryView => e.tag("binary_view"),
            DataType::Utf8 => e.tag("utf8"),
            DataType::LargeUtf8 => e.tag("large_utf8"),
            DataType::Utf8View => e.tag("utf8_view"),
            DataType::List(f) => {
                e.tag("list");
                e.field(f);
            }
            DataType::ListView(f) => {
                e.tag("list_view");
                e.field(f);
            }
            DataType::FixedSizeList(f, n) => {
                e.tag("fixed_list");
                e.int(n);
                e.field(f);
            }
            DataType::LargeList(f) => {
                e.tag("large_list");
                e.field(f);
            }
            DataType::LargeListView(f) => {
                e.tag("large_list_view");
                e.field(f);
            }
            DataType::Struct(fields) => {
                e.tag("struct");
                e.list(fields.iter(), |e, f| e.field(f));
            }
            DataType::Union(fields, mode) => {
                e.tag("union");
                e.tag(match mode {
                    UnionMode::Sparse => "sparse",
                    UnionMode::Dense => "dense",
                });
                e.list(fields.iter(), |e, (id, f)| {
                    e.group(|e| {
                        e.int(id);
                        e.field(f);
                    })
                });
            }
            DataType::Dictionary(k, v) => {
                e.tag("dictionary");
                e.ty(k);
                e.ty(v);
            }
            DataType::Decimal32(p, s) => decimal(e, "decimal32", *p, *s),
            DataType::Decimal64(p, s) => decimal(e, "decimal64", *p, *s),
            DataType::Decimal128(p, s) => decimal(e, "decimal128", *p, *s),
            DataType::Decimal256(p, s) => decimal(e, "decimal256", *p, *s),
            DataType::Map(f, sorted) => {
                e.tag("map");
                e.bool(*sorted);
                e.field(f);
            }
            DataType::RunEndEncoded(r, v) => {
                e.tag("run_end");
                e.field(r);
                e.field(v);
            }
        })
    }

    /// An operator's output columns: type and nullability only (their
    /// names are internal, often made by DataFusion from expression text).
    fn schema(&mut self, s: &DFSchemaRef) {
        self.list(s.fields().iter(), |e, f| {
            e.group(|e| {
                e.ty(f.data_type());
                e.bool(f.is_nullable());
            })
        })
    }

    fn plan(&mut self, p: &StreamPlan) {
        self.group(|e| {
            e.str(&p.name);
            e.bool(p.changelog);
            e.bool(p.materialized);
            e.list(p.time_columns.iter(), |e, (c, lag)| {
                e.group(|e| {
                    e.str(c);
                    e.int(lag);
                })
            });
            e.list(p.schema.fields().iter(), |e, f| e.field(f));
            e.node(&p.root);
        })
    }

    /// A join's keys, filter, bounds, schema and inputs (inner and outer alike).
    fn join(
        &mut self,
        (left, right): (&StreamNode, &StreamNode),
        on: &[(Expr, Expr)],
        filter: Option<&Expr>,
        (left_bounds, right_bounds): (&[JoinStateBound], &[JoinStateBound]),
        schema: &DFSchemaRef,
    ) {
        self.list(on.iter(), |e, (l, r)| {
            e.group(|e| {
                e.expr(l, left.schema());
                e.expr(r, right.schema());
            })
        });
        self.opt(filter, |e, f| e.expr(f, schema));
        for (bounds, side) in [(left_bounds, left), (right_bounds, right)] {
            self.list(bounds.iter(), |e, b| {
                e.group(|e| {
                    e.expr(&b.expr, side.schema());
                    e.int(b.other_lag_ms);
                    e.bool(b.strict);
                })
            });
        }
        self.schema(schema);
        self.node(left);
        self.node(right);
    }

    fn exprs(&mut self, es: &[Expr], on: &DFSchema) {
        self.list(es.iter(), |e, x| e.expr(x, on));
    }

    fn expr(&mut self, x: &Expr, on: &DFSchema) {
        self.group(|e| match x {
            // Names are not encoded inside expressions: many are made by
            // DataFusion from expression text (`count(*)`). Output names
            // are the plan's output schema; columns are their position.
            Expr::Alias(a) => {
                e.tag("alias");
                e.expr(&a.expr, on);
            }
            Expr::Column(c) => match on.index_of_column(c) {
                Ok(i) => {
                    e.tag("column");
                    e.int(i);
                }
                Err(_) => {
                    e.tag("named_column");
                    e.opt(c.relation.as_ref(), |e, r| e.str(&r.to_string()));
                    e.str(&c.name);
                }
            },
            Expr::Literal(v, _) => {
                e.tag("literal");
                e.scalar(v);
            }
            Expr::BinaryExpr(b) => {
                e.tag("binary");
                e.tag(operator(&b.op));
                e.expr(&b.left, on);
                e.expr(&b.right, on);
            }
            Expr::Like(l) | Expr::SimilarTo(l) => {
                e.tag(if matches!(x, Expr::Like(_)) {
                    "like"
                } else {
                    "similar_to"
                });
                e.bool(l.negated);
                e.bool(l.case_insensitive);
                e.opt(l.escape_char, |e, c| e.str(c.encode_utf8(&mut [0; 4])));
                e.expr(&l.expr, on);
                e.expr(&l.pattern, on);
            }
            Expr::Between(b) => {
                e.tag("between");
                e.bool(b.negated);
                e.expr(&b.expr, on);
                e.expr(&b.low, on);
                e.expr(&b.high, on);
            }
            Expr::Case(c) => {
                e.tag("case");
                e.opt(c.expr.as_deref(), |e, x| e.expr(x, on));
                e.list(c.when_then_expr.iter(), |e, (w, t)| {
                    e.group(|e| {
                        e.expr(w, on);
                        e.expr(t, on);
                    })
                });
                e.opt(c.else_expr.as_deref(), |e, x| e.expr(x, on));
            }
            Expr::Cast(c) => {
                e.tag("cast");
                e.ty(c.field.data_type());
                e.expr(&c.expr, on);
            }
            Expr::TryCast(c) => {
                e.tag("try_cast");
                e.ty(c.field.data_type());
                e.expr(&c.expr, on);
            }
            Expr::ScalarFunction(f) => {
                e.tag("function");
                e.str(f.func.name());
                e.exprs(&f.args, on);
            }
            Expr::AggregateFunction(a) => {
                e.tag("aggregate");
                e.str(a.func.name());
                e.bool(a.params.distinct);
                e.opt(a.params.filter.as_deref(), |e, f| e.expr(f, on));
                e.list(a.params.order_by.iter(), |e, s| {
                    e.group(|e| {
                        e.bool(s.asc);
                        e.bool(s.nulls_first);
                        e.expr(&s.expr, on);
                    })
                });
                e.opt(a.params.null_treatment.as_ref(), |e, n| {
                    e.str(&n.to_string())
                });
                e.exprs(&a.params.args, on);
            }
            Expr::InList(l) => {
                e.tag("in_list");
                e.bool(l.negated);
                e.expr(&l.expr, on);
                e.exprs(&l.list, on);
            }
            // One operand, named by the kind.
            Expr::Not(_)
            | Expr::IsNotNull(_)
            | Expr::IsNull(_)
            | Expr::IsTrue(_)
            | Expr::IsFalse(_)
            | Expr::IsUnknown(_)
            | Expr::IsNotTrue(_)
            | Expr::IsNotFalse(_)
            | Expr::IsNotUnknown(_)
            | Expr::Negative(_) => e.generic(x, on),
            // Not produced by the streaming planner: kind and operands.
            _ => e.generic(x, on),
        })
    }

    /// `<variant name> <operands>`, for expression kinds without attributes
    /// of their own (or not produced by the streaming planner).
    fn generic(&mut self, x: &Expr, on: &DFSchema) {
        self.tag(x.variant_name());
        let _ = x.apply_children(|c| {
            self.expr(c, on);
            Ok(TreeNodeRecursion::Continue)
        });
    }

    fn scalar(&mut self, v: &ScalarValue) {
        self.ty(&v.data_type());
        if v.is_null() {
            self.tag("null");
            return;
        }
        match v {
            ScalarValue::Boolean(Some(b)) => self.bool(*b),
            ScalarValue::Int8(Some(n)) => self.int(n),
            ScalarValue::Int16(Some(n)) => self.int(n),
            ScalarValue::Int32(Some(n)) => self.int(n),
            ScalarValue::Int64(Some(n)) => self.int(n),
            ScalarValue::UInt8(Some(n)) => self.int(n),
            ScalarValue::UInt16(Some(n)) => self.int(n),
            ScalarValue::UInt32(Some(n)) => self.int(n),
            ScalarValue::UInt64(Some(n)) => self.int(n),
            // Exact bits: a float's decimal form depends on the formatter.
            ScalarValue::Float32(Some(f)) => self.int(f.to_bits()),
            ScalarValue::Float64(Some(f)) => self.int(f.to_bits()),
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => self.str(s),
            ScalarValue::Decimal128(Some(n), _, _) => self.int(n),
            ScalarValue::Date32(Some(n)) => self.int(n),
            ScalarValue::Date64(Some(n))
            | ScalarValue::TimestampSecond(Some(n), _)
            | ScalarValue::TimestampMillisecond(Some(n), _)
            | ScalarValue::TimestampMicrosecond(Some(n), _)
            | ScalarValue::TimestampNanosecond(Some(n), _)
            | ScalarValue::DurationSecond(Some(n))
            | ScalarValue::DurationMillisecond(Some(n))
            | ScalarValue::DurationMicrosecond(Some(n))
            | ScalarValue::DurationNanosecond(Some(n)) => self.int(n),
            ScalarValue::IntervalYearMonth(Some(n)) => self.int(n),
            ScalarValue::IntervalDayTime(Some(d)) => {
                self.int(d.days);
                self.int(d.milliseconds);
            }
            ScalarValue::IntervalMonthDayNano(Some(d)) => {
                self.int(d.months);
                self.int(d.days);
                self.int(d.nanoseconds);
            }
            // Nested and rare types: the value's string form (see docs).
            other => self.str(&other.to_string()),
        }
    }
}

/// An `OVER` frame: its units and how far back it reaches.
fn over_frame(e: &mut Enc, frame: &OverFrame) {
    match frame {
        OverFrame::Rows { preceding } => {
            e.tag("rows");
            e.opt(preceding.as_ref(), |e, n| e.int(n));
        }
        OverFrame::Range { preceding } => {
            e.tag("range");
            e.opt(preceding.as_ref(), |e, n| e.int(n));
        }
    }
}

fn decimal(e: &mut Enc, name: &str, precision: u8, scale: i8) {
    e.tag(name);
    e.int(precision);
    e.int(scale);
}

/// Our names for DataFusion's operators; exhaustive on purpose.
fn operator(op: &Operator) -> &'static str {
    match op {
        Operator::Eq => "eq",
        Operator::NotEq => "not_eq",
        Operator::Lt => "lt",
        Operator::LtEq => "lt_eq",
        Operator::Gt => "gt",
        Operator::GtEq => "gt_eq",
        Operator::Plus => "plus",
        Operator::Minus => "minus",
        Operator::Multiply => "multiply",
        Operator::Divide => "divide",
        Operator::Modulo => "modulo",
        Operator::And => "and",
        Operator::Or => "or",
        Operator::IsDistinctFrom => "is_distinct_from",
        Operator::IsNotDistinctFrom => "is_not_distinct_from",
        Operator::RegexMatch => "regex_match",
        Operator::RegexIMatch => "regex_imatch",
        Operator::RegexNotMatch => "regex_not_match",
        Operator::RegexNotIMatch => "regex_not_imatch",
        Operator::LikeMatch => "like",
        Operator::ILikeMatch => "ilike",
        Operator::NotLikeMatch => "not_like",
        Operator::NotILikeMatch => "not_ilike",
        Operator::BitwiseAnd => "bit_and",
        Operator::BitwiseOr => "bit_or",
        Operator::BitwiseXor => "bit_xor",
        Operator::BitwiseShiftRight => "shift_right",
        Operator::BitwiseShiftLeft => "shift_left",
        Operator::StringConcat => "concat",
        Operator::AtArrow => "at_arrow",
        Operator::ArrowAt => "arrow_at",
        Operator::Arrow => "arrow",
        Operator::LongArrow => "long_arrow",
        Operator::HashArrow => "hash_arrow",
        Operator::HashLongArrow => "hash_long_arrow",
        Operator::AtAt => "at_at",
        Operator::IntegerDivide => "integer_divide",
        Operator::HashMinus => "hash_minus",
        Operator::AtQuestion => "at_question",
        Operator::Question => "question",
        Operator::QuestionAnd => "question_and",
        Operator::QuestionPipe => "question_pipe",
        Operator::Colon => "colon",
    }
}

#[cfg(test)]
#[path = "fingerprint_tests.rs"]
mod tests;
