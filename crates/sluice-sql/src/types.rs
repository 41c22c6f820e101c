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
        S::Decimal(info) | S::Numeric(info) | S::Dec(info) => match info {
            ExactNumberInfo::PrecisionAndScale(p, s) => {
                let p = u8::try_from(*p).map_err(|_| {
                    SqlError::Type(format!("column '{column}': DECIMAL precision {p} is too large"))
                })?;
                let s = i8::try_from(*s).map_err(|_| {
                    SqlError::Type(format!("column '{column}': DECIMAL scale {s} is too large"))
                })?;
                DataType::Decimal128(p, s)
            }
            ExactNumberInfo::Precision(p) => {
                let p = u8::try_from(*p).map_err(|_| {
                    SqlError::Type(format!("column '{column}': DECIMAL precision {p} is too large"))
                })?;
                DataType::Decimal128(p, 0)
            }
            ExactNumberInfo::None => DataType::Decimal128(38, 10),
        },
        other => {
            return Err(SqlError::Type(format!(
                "column '{column}': type {other} is not supported (use BIGINT, INT, DOUBLE, VARCHAR, BOOLEAN, DATE, TIMESTAMP or DECIMAL)"
            )))
        }
    })
}
