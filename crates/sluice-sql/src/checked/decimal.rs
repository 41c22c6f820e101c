//! Decimal `+`, `-`, `*` that refuse a result beyond its declared precision.
//!
//! Arrow's checked decimal kernels only fail when the unscaled `i128`
//! overflows; a result with more digits than its type's precision (say 39
//! digits in a `DECIMAL(38, 0)`) is handed out as it is, and later shown or
//! stored as a wrong number. [`DecimalFits`] wraps a decimal arithmetic
//! expression and turns such a result into an [`ArithmeticOverflow`].

use std::fmt;
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use datafusion::arrow::datatypes::{DataType, Decimal128Type, Schema};
use datafusion::common::ScalarValue;
use datafusion::error::Result;
use datafusion::logical_expr::ColumnarValue;
use datafusion::physical_expr::expressions::BinaryExpr;
use datafusion::physical_expr::PhysicalExpr;

use super::sum::{fits_precision, show_decimal};
use super::{sql_type_name, ArithmeticOverflow};

/// Check that every value of `value` (of type `dt`) has at most the
/// precision of `dt`; `what(row)` names the expression of the first row
/// that does not, for the error.
pub fn check_fits(
    value: &ColumnarValue,
    dt: &DataType,
    what: impl Fn(usize) -> String,
) -> Result<()> {
    let DataType::Decimal128(precision, scale) = dt else {
        return Ok(());
    };
    let bad = match value {
        ColumnarValue::Scalar(ScalarValue::Decimal128(Some(v), _, _)) => {
            (!fits_precision(*v, *precision)).then_some((0, *v))
        }
        ColumnarValue::Scalar(_) => None,
        ColumnarValue::Array(a) => first_too_wide(a, *precision),
    };
    match bad {
        None => Ok(()),
        Some((row, v)) => Err(ArithmeticOverflow::new(format!(
            "{} = {} does not fit in {}",
            what(row),
            show_decimal(v, *scale),
            sql_type_name(dt)
        ))
        .into_datafusion()),
    }
}

/// The first row (and its unscaled value) with more than `precision` digits.
fn first_too_wide(a: &ArrayRef, precision: u8) -> Option<(usize, i128)> {
    if !matches!(a.data_type(), DataType::Decimal128(_, _)) {
        return None;
    }
    a.as_primitive::<Decimal128Type>()
        .iter()
        .enumerate()
        .find_map(|(row, v)| {
            v.filter(|v| !fits_precision(*v, precision))
                .map(|v| (row, v))
        })
}

/// A decimal arithmetic expression whose result must fit its precision.
#[derive(Debug, Eq)]
pub struct DecimalFits {
    inner: Arc<dyn PhysicalExpr>,
}

impl std::hash::Hash for DecimalFits {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.inner.hash(state);
    }
}

impl PartialEq for DecimalFits {
    fn eq(&self, other: &Self) -> bool {
        self.inner.eq(&other.inner)
    }
}

impl DecimalFits {
    /// Wrap `inner` (a decimal `+`, `-` or `*`).
    pub fn new(inner: Arc<dyn PhysicalExpr>) -> Self {
        Self { inner }
    }
}

impl DecimalFits {
    /// The expression with its operands' values at `row` (`a + b`), or as
    /// written when they cannot be shown. Only called on the error path.
    fn operands(&self, batch: &RecordBatch, row: usize) -> String {
        let Some(b) = self.inner.downcast_ref::<BinaryExpr>() else {
            return self.inner.to_string();
        };
        let at = |e: &Arc<dyn PhysicalExpr>| -> Option<String> {
            let v = e.evaluate(batch).ok()?;
            Some(match v {
                ColumnarValue::Scalar(s) => s.to_string(),
                ColumnarValue::Array(a) => ScalarValue::try_from_array(&a, row).ok()?.to_string(),
            })
        };
        match (at(b.left()), at(b.right())) {
            (Some(l), Some(r)) => format!("{l} {} {r}", b.op()),
            _ => self.inner.to_string(),
        }
    }
}

impl fmt::Display for DecimalFits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Shown as the expression it checks, so plans and messages read the same.
        write!(f, "{}", self.inner)
    }
}

impl PhysicalExpr for DecimalFits {
    fn data_type(&self, input_schema: &Schema) -> Result<DataType> {
        self.inner.data_type(input_schema)
    }

    fn nullable(&self, input_schema: &Schema) -> Result<bool> {
        self.inner.nullable(input_schema)
    }

    fn evaluate(&self, batch: &RecordBatch) -> Result<ColumnarValue> {
        let value = self.inner.evaluate(batch)?;
        let dt = self.inner.data_type(batch.schema_ref())?;
        check_fits(&value, &dt, |row| self.operands(batch, row))?;
        Ok(value)
    }

    fn children(&self) -> Vec<&Arc<dyn PhysicalExpr>> {
        vec![&self.inner]
    }

    fn with_new_children(
        self: Arc<Self>,
        children: Vec<Arc<dyn PhysicalExpr>>,
    ) -> Result<Arc<dyn PhysicalExpr>> {
        match <[Arc<dyn PhysicalExpr>; 1]>::try_from(children) {
            Ok([inner]) => Ok(Arc::new(Self { inner })),
            Err(c) => {
                datafusion::common::internal_err!("DecimalFits takes one child, got {}", c.len())
            }
        }
    }

    fn fmt_sql(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt_sql(f)
    }
}
