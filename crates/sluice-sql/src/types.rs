//! SQL column types to Arrow types.

use arrow::datatypes::{DataType, TimeUnit};
use datafusion::sql::sqlparser::ast::{DataType as SqlType, ExactNumberInfo, TimezoneInfo};

use crate::error::{Result, SqlError};

/// Map a declared SQL column type to its Arrow type.
///
/// `TIMESTAMP` is millisecond precision: event time is kept in milliseconds
/// throughout the engine, so no conversion happens on the hot path.
pub fn arrow_type(sql: &SqlType, column: &str) -> Result<DataType> {
    use SqlType as S;
    Ok(match sql {
        S::TinyInt(_) => DataType::Int8,
        S::SmallInt(_) | S::Int2(_) => DataType::Int16,
        S::Int(_) | S::Integer(_) | S::Int4(_) => DataType::Int32,
        S::BigInt(_) | S::Int8(_) | S::Int64 => DataType::Int64,
        S::TinyIntUnsigned(_) => DataType::UInt8,
        S::SmallIntUnsigned(_) => DataType::UInt16,
        S::IntUnsigned(_) | S::IntegerUnsigned(_) => DataType::UInt32,
        S::BigIntUnsigned(_) => DataType::UInt64,
        S::Float(_) | S::Real | S::Float4 | S::Float32 => DataType::Float32,
        S::Double(_) | S::DoublePrecision | S::Float8 | S::Float64 => DataType::Float64,
        S::Boolean | S::Bool => DataType::Boolean,
        S::Varchar(_) | S::Text | S::String(_) | S::Char(_) | S::CharVarying(_) => DataType::Utf8,
        S::Date => DataType::Date32,
        S::Timestamp(_, TimezoneInfo::WithTimeZone | TimezoneInfo::Tz) => {
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))
        }
        S::Timestamp(_, _) | S::Datetime(_) => DataType::Timestamp(TimeUnit::Millisecond, None),
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => {
            let (p, s) = match info {
                ExactNumberInfo::PrecisionAndScale(p, s) => (*p, *s),
                ExactNumberInfo::Precision(p) => (*p, 0),
                ExactNumberInfo::None => (38, 10),
            };
            decimal_type(p, s, sql, column)?
        }
        other => {
            return Err(SqlError::Type(format!(
                "column '{column}': type {other} is not supported (use BIGINT, INT, DOUBLE, VARCHAR, BOOLEAN, DATE, TIMESTAMP or DECIMAL)"
            )))
        }
    })
}

/// The largest DECIMAL precision: what a 128-bit decimal holds.
pub const MAX_DECIMAL_PRECISION: u64 = 38;

/// `DECIMAL(p, s)` as Arrow's 128-bit decimal, refusing at `CREATE` what it
/// cannot hold (otherwise the error would come later and blame the data).
fn decimal_type(p: u64, s: i64, sql: &SqlType, column: &str) -> Result<DataType> {
    let scale_fits = u64::try_from(s).is_ok_and(|s| s <= p);
    if !(1..=MAX_DECIMAL_PRECISION).contains(&p) || !scale_fits {
        return Err(SqlError::Type(format!(
            "column '{column}': {sql} is not supported: the precision must be 1 to {MAX_DECIMAL_PRECISION} and the scale 0 to the precision"
        )));
    }
    // Both fit: p <= 38 and s <= p.
    match (u8::try_from(p), i8::try_from(s)) {
        (Ok(p), Ok(s)) => Ok(DataType::Decimal128(p, s)),
        _ => Err(SqlError::Type(format!(
            "column '{column}': {sql} is out of range"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_sql;
    use crate::Statement;

    fn column_type(ty: &str) -> Result<DataType> {
        let stmts = parse_sql(&format!("CREATE SOURCE s (price {ty})"))?;
        let Some(Statement::CreateSource(src)) = stmts.into_iter().next() else {
            panic!("not a source")
        };
        Ok(src.schema.field(0).data_type().clone())
    }

    #[test]
    fn decimal_precision_and_scale_are_checked_at_create() {
        for (ty, want) in [
            ("DECIMAL(1, 0)", DataType::Decimal128(1, 0)),
            ("DECIMAL(38, 38)", DataType::Decimal128(38, 38)),
            ("DECIMAL(10, 2)", DataType::Decimal128(10, 2)),
            ("NUMERIC(38)", DataType::Decimal128(38, 0)),
            ("DECIMAL", DataType::Decimal128(38, 10)),
        ] {
            assert_eq!(column_type(ty).unwrap(), want, "{ty}");
        }
        for (ty, shown) in [
            ("DECIMAL(50, 2)", "DECIMAL(50,2)"),
            ("DECIMAL(39)", "DECIMAL(39)"),
            ("DECIMAL(0, 0)", "DECIMAL(0,0)"),
            ("DECIMAL(5, 6)", "DECIMAL(5,6)"),
            ("DECIMAL(5, -1)", "DECIMAL(5,-1)"),
            ("NUMERIC(300, 2)", "NUMERIC(300,2)"),
            ("DECIMAL(99999999999999999999, 2)", ""),
        ] {
            let e = column_type(ty).unwrap_err();
            if shown.is_empty() {
                // Too large for the parser itself: still a clean user error.
                assert!(e.code().starts_with("SLC-SQL-"), "{ty}: {e}");
                continue;
            }
            assert_eq!(e.code(), "SLC-SQL-004", "{ty}");
            assert_eq!(
                e.to_string(),
                format!("type error: column 'price': {shown} is not supported: the precision must be 1 to 38 and the scale 0 to the precision"),
                "{ty}"
            );
        }
    }
}
