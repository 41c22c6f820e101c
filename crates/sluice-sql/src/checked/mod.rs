//! Checked integer arithmetic: no silent wrong numbers.
//!
//! DataFusion's integer `SUM` and its `+`, `-`, `*` wrap around on overflow
//! (two rows of `i64::MAX` sum to `-2`). A database must never hand out a
//! wrong number without saying so, so Sluice replaces them:
//!
//! - [`sum::CheckedSum`] is registered as `sum`. For integer inputs it adds
//!   in `i128` (its intermediate state is a `DECIMAL(38, 0)`), so the order
//!   rows arrive in, and retractions, never matter: the result is the exact
//!   sum, or an [`ArithmeticOverflow`] error when that sum does not fit the
//!   result type. `DECIMAL` (`Decimal128`) inputs are added the same way
//!   (unscaled, state `DECIMAL(38, s)`), with checked `i128` additions, and
//!   the result must fit the result's precision. Every other input type is
//!   handled by DataFusion's own `sum`.
//! - [`decimal::DecimalFits`] refuses a decimal `+ - *` result with more
//!   digits than its precision (Arrow only fails when the `i128` overflows).
//! - [`binary::fail_on_overflow`] turns every integer `+`, `-`, `*` and unary
//!   `-` of a physical expression into its checked form; the engine applies
//!   it to every expression it compiles.
//! - [`binary::CheckedArithmetic`] does the same for a one-shot `SELECT`
//!   planned by DataFusion, as an analyzer rule.
//!
//! An overflow surfaces as a DataFusion error; [`overflow_of`] recognises
//! it (from Arrow's checked kernels or from [`ArithmeticOverflow`]) so the
//! engine can name the stream and column it happened in.

pub mod binary;
pub mod decimal;
pub mod sum;

use std::sync::Arc;

use datafusion::arrow::error::ArrowError;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::AggregateUDF;
use datafusion::prelude::SessionContext;

/// A value that does not fit its SQL type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{detail}")]
pub struct ArithmeticOverflow {
    /// The output column it happened in, once known.
    pub column: Option<String>,
    /// What overflowed, with the operands or the exact value.
    pub detail: String,
}

impl ArithmeticOverflow {
    /// An overflow not yet placed in a column.
    pub fn new(detail: impl Into<String>) -> Self {
        Self {
            column: None,
            detail: detail.into(),
        }
    }

    /// Place it in `column` unless it already names one (the innermost
    /// column is the most precise).
    pub fn in_column(mut self, column: &str) -> Self {
        if self.column.is_none() {
            self.column = Some(column.to_string());
        }
        self
    }

    /// The error as DataFusion carries it.
    pub fn into_datafusion(self) -> DataFusionError {
        DataFusionError::External(Box::new(self))
    }
}

/// The checked `sum`, replacing DataFusion's.
pub fn checked_sum_udaf() -> AggregateUDF {
    AggregateUDF::new_from_impl(sum::CheckedSum::default())
}

/// Make a session that plans continuous queries use the checked `sum`
/// (the engine checks `+ - *` when it compiles the plan's expressions).
pub fn register_aggregates(ctx: &SessionContext) {
    ctx.register_udaf(checked_sum_udaf());
}

/// Make a session that plans *and runs* queries (one-shot `SELECT`) use
/// checked integer arithmetic: the checked `sum` and the checked `+ - *` rule.
pub fn register(ctx: &SessionContext) {
    register_aggregates(ctx);
    ctx.add_analyzer_rule(Arc::new(binary::CheckedArithmetic));
}

/// If `e` is (or wraps) an integer overflow, what overflowed.
pub fn overflow_of(e: &DataFusionError) -> Option<ArithmeticOverflow> {
    match e {
        DataFusionError::ArrowError(a, _) => arrow_overflow(a),
        DataFusionError::External(x) => external_overflow(x.as_ref()),
        DataFusionError::Context(_, inner) => overflow_of(inner),
        DataFusionError::Shared(inner) => overflow_of(inner),
        _ => None,
    }
}

fn arrow_overflow(e: &ArrowError) -> Option<ArithmeticOverflow> {
    match e {
        ArrowError::ArithmeticOverflow(m) => Some(ArithmeticOverflow::new(m.clone())),
        ArrowError::ExternalError(x) => external_overflow(x.as_ref()),
        _ => None,
    }
}

fn external_overflow(
    x: &(dyn std::error::Error + Send + Sync + 'static),
) -> Option<ArithmeticOverflow> {
    if let Some(o) = x.downcast_ref::<ArithmeticOverflow>() {
        return Some(o.clone());
    }
    if let Some(d) = x.downcast_ref::<DataFusionError>() {
        return overflow_of(d);
    }
    x.downcast_ref::<ArrowError>().and_then(arrow_overflow)
}

/// The SQL name of an integer or decimal result type, for messages.
pub fn sql_type_name(dt: &datafusion::arrow::datatypes::DataType) -> String {
    use datafusion::arrow::datatypes::DataType as D;
    match dt {
        D::Int8 => "TINYINT".into(),
        D::Int16 => "SMALLINT".into(),
        D::Int32 => "INT".into(),
        D::Int64 => "BIGINT".into(),
        D::UInt8 => "TINYINT UNSIGNED".into(),
        D::UInt16 => "SMALLINT UNSIGNED".into(),
        D::UInt32 => "INT UNSIGNED".into(),
        D::UInt64 => "BIGINT UNSIGNED".into(),
        D::Decimal128(p, s) => format!("DECIMAL({p}, {s})"),
        other => other.to_string(),
    }
}
