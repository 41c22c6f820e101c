//! The window functions `tumble`, `hop`, `session`, `tumble_end`, `hop_end`,
//! `session_end`.
//!
//! In a continuous query they may only appear in `GROUP BY`, where the planner
//! turns them into a [`crate::WindowSpec`]. They are registered as DataFusion
//! scalar functions so name resolution and typing work as for any function;
//! `tumble` and `tumble_end` are also evaluable row by row (each row has exactly
//! one tumbling window), which lets a batch query over the same rows act as an
//! oracle in tests. `hop` and `session` assign a row to several windows or to a
//! window that depends on other rows, so evaluating them per row is an error.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::cast::cast;
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::common::{exec_err, plan_err, DFSchema, ScalarValue};
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    TypeSignature, Volatility,
};

use crate::error::{Result, SqlError};
use crate::plan::{WindowKind, WindowSpec};

/// Refuse window functions that cannot be evaluated row by row outside a
/// GROUP BY (every one but `tumble` and `tumble_end`).
pub(crate) fn check_scalar_expr(e: &Expr) -> Result<()> {
    let mut bad = None;
    e.apply(|e| {
        if let Expr::ScalarFunction(f) = e {
            if let Some(w) = WindowFunction::from_name(f.func.name()) {
                if !matches!(w, WindowFunction::Tumble | WindowFunction::TumbleEnd) {
                    bad = Some(w);
                }
            }
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    match bad {
        Some(w) => Err(SqlError::Unsupported(format!(
            "{}() outside GROUP BY: it assigns rows to windows and is only valid as a GROUP BY entry",
            w.name()
        ))),
        None => Ok(()),
    }
}

/// Which window function a call names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WindowFunction {
    /// `tumble(ts, size [, offset])`: window start.
    Tumble,
    /// `tumble_end(ts, size [, offset])`: window end.
    TumbleEnd,
    /// `hop(ts, slide, size)`: window start.
    Hop,
    /// `hop_end(ts, slide, size)`: window end.
    HopEnd,
    /// `session(ts, gap)`: session start.
    Session,
    /// `session_end(ts, gap)`: session end (the last event plus the gap).
    SessionEnd,
}

impl WindowFunction {
    /// Recognise a function by its registered name.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "tumble" => Self::Tumble,
            "tumble_end" => Self::TumbleEnd,
            "hop" => Self::Hop,
            "hop_end" => Self::HopEnd,
            "session" => Self::Session,
            "session_end" => Self::SessionEnd,
            _ => return None,
        })
    }

    /// The SQL name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tumble => "tumble",
            Self::TumbleEnd => "tumble_end",
            Self::Hop => "hop",
            Self::HopEnd => "hop_end",
            Self::Session => "session",
            Self::SessionEnd => "session_end",
        }
    }

    /// Whether the function returns the window's end rather than its start.
    pub fn is_end(self) -> bool {
        matches!(self, Self::TumbleEnd | Self::HopEnd | Self::SessionEnd)
    }
}

/// The DataFusion UDF for one window function.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct WindowUdf {
    func: WindowFunction,
    signature: Signature,
}

impl WindowUdf {
    fn new(func: WindowFunction) -> Self {
        let arities = match func {
            WindowFunction::Tumble | WindowFunction::TumbleEnd => vec![2, 3],
            WindowFunction::Hop | WindowFunction::HopEnd => vec![3],
            WindowFunction::Session | WindowFunction::SessionEnd => vec![2],
        };
        let signature = Signature::one_of(
            arities.into_iter().map(TypeSignature::Any).collect(),
            Volatility::Immutable,
        );
        Self { func, signature }
    }
}

/// All window functions as UDFs, for registration in a session.
pub fn window_udfs() -> Vec<ScalarUDF> {
    [
        WindowFunction::Tumble,
        WindowFunction::TumbleEnd,
        WindowFunction::Hop,
        WindowFunction::HopEnd,
        WindowFunction::Session,
        WindowFunction::SessionEnd,
    ]
    .into_iter()
    .map(|f| ScalarUDF::new_from_impl(WindowUdf::new(f)))
    .collect()
}

/// Milliseconds of an interval literal as DataFusion plans it.
pub fn interval_scalar_ms(v: &ScalarValue) -> Option<i64> {
    match v {
        ScalarValue::IntervalMonthDayNano(Some(iv)) if iv.months == 0 => {
            Some(iv.days as i64 * 86_400_000 + iv.nanoseconds / 1_000_000)
        }
        ScalarValue::IntervalDayTime(Some(iv)) => {
            Some(iv.days as i64 * 86_400_000 + iv.milliseconds as i64)
        }
        ScalarValue::Int64(Some(v)) => Some(*v),
        _ => None,
    }
}

/// Milliseconds per unit of a timestamp type (event time is kept in ms).
pub fn timestamp_scale(dt: &DataType) -> Option<(i64, i64)> {
    // (multiply-to-ms numerator, divide-to-ms denominator)
    match dt {
        DataType::Timestamp(TimeUnit::Second, _) => Some((1000, 1)),
        DataType::Timestamp(TimeUnit::Millisecond, _) | DataType::Int64 => Some((1, 1)),
        DataType::Timestamp(TimeUnit::Microsecond, _) => Some((1, 1000)),
        DataType::Timestamp(TimeUnit::Nanosecond, _) => Some((1, 1_000_000)),
        _ => None,
    }
}

/// Start of the tumbling window of `size` ms shifted by `offset` ms
/// containing `t`, or None when that start is not a BIGINT (an event time
/// near `i64::MIN`). Computed in `i128`, so no step can wrap.
pub fn tumble_start(t: i64, size: i64, offset: i64) -> Option<i64> {
    if size <= 0 {
        return None;
    }
    // Per row on the window path: i64 steps when none of them overflows
    // (an `i128` division is several times slower); an overflowing step
    // need not mean the start is out of range, so those rows are redone
    // exactly in `i128`.
    let fast = t
        .checked_sub(offset)
        .and_then(|d| d.div_euclid(size).checked_mul(size))
        .and_then(|s| s.checked_add(offset));
    fast.or_else(|| {
        let (t, size, offset) = (i128::from(t), i128::from(size), i128::from(offset));
        i64::try_from((t - offset).div_euclid(size) * size + offset).ok()
    })
}

/// Event time in ms from a value in units of `(mul, div)` (see
/// [`timestamp_scale`]), or None when it does not fit.
pub fn to_ms(v: i64, (mul, div): (i64, i64)) -> Option<i64> {
    v.checked_mul(mul).map(|v| v / div)
}

/// Milliseconds back to units of `(mul, div)`, or None when they do not fit.
pub fn from_ms(ms: i64, (mul, div): (i64, i64)) -> Option<i64> {
    ms.checked_mul(div).map(|v| v / mul)
}

impl ScalarUDFImpl for WindowUdf {
    fn name(&self) -> &str {
        self.func.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, arg_types: &[DataType]) -> DfResult<DataType> {
        match arg_types.first() {
            Some(t) if timestamp_scale(t).is_some() => Ok(t.clone()),
            Some(t) => plan_err!(
                "{}(): the first argument must be a TIMESTAMP (or BIGINT milliseconds) column, found {t}",
                self.func.name()
            ),
            None => plan_err!("{}() needs arguments", self.func.name()),
        }
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> DfResult<ColumnarValue> {
        if !matches!(
            self.func,
            WindowFunction::Tumble | WindowFunction::TumbleEnd
        ) {
            return exec_err!(
                "{}() assigns rows to windows and is only valid in the GROUP BY of a streaming aggregation",
                self.func.name()
            );
        }
        let scalar_ms = |i: usize| -> DfResult<i64> {
            match args.args.get(i) {
                None => Ok(0),
                Some(ColumnarValue::Scalar(s)) => match interval_scalar_ms(s) {
                    Some(ms) => Ok(ms),
                    None => exec_err!(
                        "{}(): argument {} must be a fixed interval",
                        self.func.name(),
                        i + 1
                    ),
                },
                Some(_) => exec_err!(
                    "{}(): argument {} must be a constant",
                    self.func.name(),
                    i + 1
                ),
            }
        };
        let size = scalar_ms(1)?;
        let offset = scalar_ms(2)?;
        if size <= 0 {
            return exec_err!("{}(): the window size must be positive", self.func.name());
        }
        let end_shift = if self.func.is_end() { size } else { 0 };
        let out_type = args.return_type().clone();
        let Some(scale) = timestamp_scale(&out_type) else {
            return exec_err!("{}(): unsupported time type {out_type}", self.func.name());
        };
        let input = match &args.args[0] {
            ColumnarValue::Array(a) => Arc::clone(a),
            ColumnarValue::Scalar(s) => s.to_array()?,
        };
        let raw: ArrayRef = cast(&input, &DataType::Int64)?;
        let raw = raw.as_primitive::<Int64Type>();
        let bound = |v: i64| -> DfResult<i64> {
            to_ms(v, scale)
                .and_then(|ms| tumble_start(ms, size, offset))
                .and_then(|start| start.checked_add(end_shift))
                .and_then(|ms| from_ms(ms, scale))
                .ok_or_else(|| {
                    crate::checked::ArithmeticOverflow::new(format!(
                        "{}(): the window of event time {v} ({out_type}) with size {size} ms and offset {offset} ms is outside the representable time range",
                        self.func.name()
                    ))
                    .into_datafusion()
                })
        };
        let starts = raw
            .iter()
            .map(|v| v.map(bound).transpose())
            .collect::<DfResult<arrow::array::Int64Array>>()?;
        let out = cast(&(Arc::new(starts) as ArrayRef), &out_type)?;
        if out.len() == 1 && matches!(args.args[0], ColumnarValue::Scalar(_)) {
            return Ok(ColumnarValue::Scalar(ScalarValue::try_from_array(&out, 0)?));
        }
        Ok(ColumnarValue::Array(out))
    }
}

/// The most hopping windows one row may fall in (`size / slide`, rounded
/// up). Each row is copied into every window it belongs to, so an unbounded
/// ratio (a 1 ms slide over a 1 day size is 86,400,000 copies) exhausts
/// memory on one row.
pub const MAX_HOP_WINDOWS_PER_ROW: i64 = 1000;

/// If `e` is a window function call, its window.
pub(crate) fn window_call(
    e: &Expr,
    input: &DFSchema,
) -> Result<Option<(WindowFunction, WindowSpec)>> {
    let Expr::ScalarFunction(f) = e else {
        return Ok(None);
    };
    let Some(func) = WindowFunction::from_name(f.func.name()) else {
        return Ok(None);
    };
    let time = f.args[0].clone();
    let time_type = time.get_type(input)?;
    let arg_ms = |i: usize| -> Result<i64> {
        match f.args.get(i) {
            Some(Expr::Literal(v, _)) => interval_scalar_ms(v).ok_or_else(|| {
                SqlError::Type(format!(
                    "{}(): argument {} must be a fixed-length INTERVAL (no months or years), found {v}",
                    func.name(),
                    i + 1
                ))
            }),
            Some(other) => Err(SqlError::Type(format!(
                "{}(): argument {} must be an INTERVAL literal, found {other}",
                func.name(),
                i + 1
            ))),
            None => Ok(0),
        }
    };
    let positive = |what: &str, v: i64| -> Result<i64> {
        if v > 0 {
            Ok(v)
        } else {
            Err(SqlError::Type(format!(
                "{}(): the {what} must be positive, found {v} ms",
                func.name()
            )))
        }
    };
    let kind = match func {
        WindowFunction::Tumble | WindowFunction::TumbleEnd => WindowKind::Tumble {
            size_ms: positive("size", arg_ms(1)?)?,
            offset_ms: arg_ms(2)?,
        },
        WindowFunction::Hop | WindowFunction::HopEnd => {
            let slide_ms = positive("slide", arg_ms(1)?)?;
            let size_ms = positive("size", arg_ms(2)?)?;
            // Windows start at every multiple of the slide; a size that is
            // not a multiple puts some rows in one window fewer than others.
            let most = size_ms / slide_ms + i64::from(size_ms % slide_ms != 0);
            if most > MAX_HOP_WINDOWS_PER_ROW {
                return Err(SqlError::Unsupported(format!(
                    "{}(): a size of {size_ms} ms with a slide of {slide_ms} ms puts a row in up to {most} windows; at most {MAX_HOP_WINDOWS_PER_ROW} windows per row are allowed (use a slide of at least size / {MAX_HOP_WINDOWS_PER_ROW})",
                    func.name(),
                )));
            }
            WindowKind::Hop { slide_ms, size_ms }
        }
        WindowFunction::Session | WindowFunction::SessionEnd => WindowKind::Session {
            gap_ms: positive("gap", arg_ms(1)?)?,
        },
    };
    Ok(Some((
        func,
        WindowSpec {
            kind,
            time,
            time_type,
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tumble_start_handles_offsets_and_negatives() {
        assert_eq!(tumble_start(0, 10, 0), Some(0));
        assert_eq!(tumble_start(9, 10, 0), Some(0));
        assert_eq!(tumble_start(10, 10, 0), Some(10));
        assert_eq!(tumble_start(-1, 10, 0), Some(-10));
        assert_eq!(tumble_start(12, 10, 3), Some(3));
        assert_eq!(tumble_start(13, 10, 3), Some(13));
        assert_eq!(tumble_start(2, 10, 3), Some(-7));
    }

    /// The i64 fast path of [`tumble_start`] agrees with the exact `i128`
    /// formula everywhere, the ends of the range included.
    #[test]
    fn tumble_start_fast_path_matches_the_exact_formula() {
        let exact = |t: i64, size: i64, offset: i64| {
            let (t, size, offset) = (i128::from(t), i128::from(size), i128::from(offset));
            i64::try_from((t - offset).div_euclid(size) * size + offset).ok()
        };
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as i64
        };
        let edges = [i64::MIN, i64::MIN + 1, -1, 0, 1, i64::MAX - 1, i64::MAX];
        let mut times: Vec<i64> = edges.to_vec();
        let mut sizes: Vec<i64> = vec![1, 7, 1000, 10_000, i64::MAX];
        let mut offsets: Vec<i64> = vec![0, -3, 5, i64::MIN, i64::MAX];
        for _ in 0..200 {
            times.push(next());
            sizes.push((next() & i64::MAX).max(1) >> (next() & 63));
            offsets.push(next() >> (next() & 63));
        }
        for &t in &times {
            for &size in sizes.iter().filter(|s| **s > 0) {
                for &offset in &offsets {
                    assert_eq!(
                        tumble_start(t, size, offset),
                        exact(t, size, offset),
                        "{t} {size} {offset}"
                    );
                }
            }
        }
    }

    #[test]
    fn tumble_start_never_wraps_at_the_ends_of_the_range() {
        // i64::MIN = -9223372036854775808: its 10 ms window would start at
        // ...810, below the range; the old formula wrapped to near i64::MAX.
        assert_eq!(tumble_start(i64::MIN, 10, 0), None);
        assert_eq!(tumble_start(i64::MIN + 8, 10, 0), Some(i64::MIN + 8));
        assert_eq!(tumble_start(i64::MIN, 10, 5), None);
        assert_eq!(tumble_start(i64::MAX, 10, 0), Some(i64::MAX - 7));
        assert_eq!(tumble_start(i64::MAX, 10, -3), Some(i64::MAX));
        assert_eq!(tumble_start(0, 0, 0), None, "a zero size has no window");
        assert_eq!(to_ms(i64::MAX, (1000, 1)), None);
        assert_eq!(to_ms(i64::MIN, (1, 1000)), Some(i64::MIN / 1000));
        assert_eq!(from_ms(i64::MAX / 10, (1, 1000)), None);
    }
}
