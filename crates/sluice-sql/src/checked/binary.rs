//! Checked `+`, `-`, `*` and unary `-` on integers.
//!
//! DataFusion evaluates integer arithmetic with wrapping kernels unless a
//! physical `BinaryExpr` is built with `fail_on_overflow`; its planner never
//! asks for that, and unary minus has no checked mode at all. The engine
//! compiles every expression itself, so [`fail_on_overflow`] rewrites the
//! physical tree it built. A one-shot `SELECT` is planned by DataFusion, so
//! there [`CheckedArithmetic`] rewrites the logical plan instead: integer
//! arithmetic becomes a call of a checked function, with the expression's
//! original name kept so result columns are named as written.

use std::sync::Arc;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::compute::kernels::numeric;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{exec_err, ScalarValue};
use datafusion::error::Result;
use datafusion::logical_expr::expr::ScalarFunction;
use datafusion::logical_expr::expr_rewriter::NamePreserver;
use datafusion::logical_expr::type_coercion::binary::BinaryTypeCoercer;
use datafusion::logical_expr::utils::merge_schema;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, Operator, ScalarFunctionArgs, ScalarUDF,
    ScalarUDFImpl, Signature, Volatility,
};
use datafusion::optimizer::AnalyzerRule;
use datafusion::physical_expr::expressions::{BinaryExpr, Literal, NegativeExpr};
use datafusion::physical_expr::PhysicalExpr;

use super::decimal::{check_fits, DecimalFits};
use super::sql_type_name;

fn is_checked_op(op: &Operator) -> bool {
    matches!(op, Operator::Plus | Operator::Minus | Operator::Multiply)
}

/// Rewrite a physical expression so every `+`, `-`, `*` fails on overflow
/// instead of wrapping, and unary `-` of a signed integer becomes a checked
/// `0 - x`. `schema` is the expression's input.
pub fn fail_on_overflow(
    expr: Arc<dyn PhysicalExpr>,
    schema: &Schema,
) -> Result<Arc<dyn PhysicalExpr>> {
    expr.transform_up(|e| {
        if let Some(b) = e.downcast_ref::<BinaryExpr>() {
            if is_checked_op(b.op()) {
                let checked: Arc<dyn PhysicalExpr> = Arc::new(
                    BinaryExpr::new(Arc::clone(b.left()), *b.op(), Arc::clone(b.right()))
                        .with_fail_on_overflow(true),
                );
                // A decimal result may also exceed its precision without
                // overflowing the i128 it is kept in.
                if matches!(checked.data_type(schema)?, DataType::Decimal128(_, _)) {
                    return Ok(Transformed::yes(Arc::new(DecimalFits::new(checked))));
                }
                return Ok(Transformed::yes(checked));
            }
        }
        if let Some(n) = e.downcast_ref::<NegativeExpr>() {
            let dt = n.arg().data_type(schema)?;
            if dt.is_signed_integer() {
                let zero = Arc::new(Literal::new(ScalarValue::new_zero(&dt)?));
                let checked = BinaryExpr::new(zero, Operator::Minus, Arc::clone(n.arg()))
                    .with_fail_on_overflow(true);
                return Ok(Transformed::yes(Arc::new(checked) as Arc<dyn PhysicalExpr>));
            }
        }
        Ok(Transformed::no(e))
    })
    .map(|t| t.data)
}

/// The analyzer rule making a one-shot query's integer arithmetic checked.
#[derive(Debug, Default)]
pub struct CheckedArithmetic;

impl AnalyzerRule for CheckedArithmetic {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|plan| {
            if matches!(plan, LogicalPlan::TableScan(_)) {
                return Ok(Transformed::no(plan));
            }
            let schema = merge_schema(&plan.inputs());
            let names = NamePreserver::new(&plan);
            plan.map_expressions(|e| {
                let saved = names.save(&e);
                let rewritten = e.transform_up(|e| checked_expr(e, &schema))?;
                Ok(if rewritten.transformed {
                    rewritten.update_data(|e| saved.restore(e))
                } else {
                    rewritten
                })
            })
        })
        .map(|t| t.data)
    }

    fn name(&self) -> &str {
        "sluice_checked_arithmetic"
    }
}

fn checked_expr(e: Expr, schema: &datafusion::common::DFSchema) -> Result<Transformed<Expr>> {
    let call = |op: Operator, left: Expr, right: Expr| {
        Expr::ScalarFunction(ScalarFunction::new_udf(
            Arc::new(ScalarUDF::new_from_impl(CheckedBinary::new(op))),
            vec![left, right],
        ))
    };
    match e {
        Expr::BinaryExpr(b) if is_checked_op(&b.op) => {
            let (lt, rt) = (b.left.get_type(schema)?, b.right.get_type(schema)?);
            let decimals = matches!(
                (&lt, &rt),
                (DataType::Decimal128(_, _), DataType::Decimal128(_, _))
            );
            if (lt.is_integer() && lt == rt) || decimals {
                return Ok(Transformed::yes(call(b.op, *b.left, *b.right)));
            }
            Ok(Transformed::no(Expr::BinaryExpr(b)))
        }
        Expr::Negative(inner) => {
            let dt = inner.get_type(schema)?;
            if dt.is_signed_integer() {
                let zero = Expr::Literal(ScalarValue::new_zero(&dt)?, None);
                return Ok(Transformed::yes(call(Operator::Minus, zero, *inner)));
            }
            Ok(Transformed::no(Expr::Negative(inner)))
        }
        other => Ok(Transformed::no(other)),
    }
}

/// `checked_add`, `checked_sub`, `checked_mul` on two integers of one type.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct CheckedBinary {
    op: Operator,
    name: &'static str,
    signature: Signature,
}

impl CheckedBinary {
    fn new(op: Operator) -> Self {
        let name = match op {
            Operator::Plus => "checked_add",
            Operator::Minus => "checked_sub",
            _ => "checked_mul",
        };
        Self {
            op,
            name,
            signature: Signature::any(2, Volatility::Immutable),
        }
    }
}

impl ScalarUDFImpl for CheckedBinary {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        match arg_types {
            [l, r] if l == r && l.is_integer() => Ok(l.clone()),
            // The type DataFusion gives the same decimal operation.
            [l @ DataType::Decimal128(_, _), r @ DataType::Decimal128(_, _)] => {
                BinaryTypeCoercer::new(l, &self.op, r).get_result_type()
            }
            _ => exec_err!(
                "{} takes two integers of one type or two decimals, got {arg_types:?}",
                self.name
            ),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [l, r] = args.args.as_slice() else {
            return exec_err!("{} takes two arguments", self.name);
        };
        let kernel = match self.op {
            Operator::Plus => numeric::add,
            Operator::Minus => numeric::sub,
            _ => numeric::mul,
        };
        let value = datafusion::physical_expr_common::datum::apply(
            l,
            r,
            |a, b| -> std::result::Result<ArrayRef, _> { kernel(a, b) },
        )?;
        let out = args.return_field.data_type();
        if !matches!(out, DataType::Decimal128(_, _)) {
            return Ok(value);
        }
        check_fits(&value, out, |row| {
            format!("{} {} {}", show(l, row), self.op, show(r, row))
        })?;
        // Arrow's kernel and DataFusion's coercion agree on the type; cast in
        // case they ever differ (the value fits, so the cast is exact).
        value.cast_to(out, None)
    }
}

/// An operand's value at `row`, for a message.
fn show(v: &ColumnarValue, row: usize) -> String {
    match v {
        ColumnarValue::Scalar(s) => s.to_string(),
        ColumnarValue::Array(a) => ScalarValue::try_from_array(a, row)
            .map(|s| s.to_string())
            .unwrap_or_else(|_| format!("<{}>", sql_type_name(a.data_type()))),
    }
}
