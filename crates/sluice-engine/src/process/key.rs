//! The canonical partition key encoding (format version 1).
//!
//! A process function's key is the concatenation, over the key columns in
//! declared order, of one field each:
//!
//! | column value | bytes |
//! |---|---|
//! | null | `0x00` |
//! | signed integer, date, timestamp (any width) | `0x01` + the value as 8-byte big-endian two's complement |
//! | unsigned integer (any width) | `0x01` + the value as 8-byte big-endian |
//! | boolean | `0x01` + `0x00` or `0x01` |
//! | UTF-8 string | `0x01` + byte length as 4-byte big-endian + the bytes |
//!
//! The format is stable: checkpoints and remote handlers depend on it, and
//! handlers must never rehash it. Other column types are refused.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::compute::kernels::cast::cast;
use arrow::datatypes::{DataType, Int64Type, UInt64Type};

/// Encode the key of `row` from the key columns.
pub fn encode_key(columns: &[ArrayRef], row: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(9 * columns.len());
    for c in columns {
        if c.is_null(row) {
            out.push(0);
            continue;
        }
        out.push(1);
        match c.data_type() {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Timestamp(_, _) => {
                let v = cast(&c.slice(row, 1), &DataType::Int64).map_err(|e| e.to_string())?;
                out.extend_from_slice(&v.as_primitive::<Int64Type>().value(0).to_be_bytes());
            }
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                let v = cast(&c.slice(row, 1), &DataType::UInt64).map_err(|e| e.to_string())?;
                out.extend_from_slice(&v.as_primitive::<UInt64Type>().value(0).to_be_bytes());
            }
            DataType::Boolean => out.push(u8::from(c.as_boolean().value(row))),
            DataType::Utf8 => {
                let s = c.as_string::<i32>().value(row).as_bytes();
                out.extend_from_slice(&(s.len() as u32).to_be_bytes());
                out.extend_from_slice(s);
            }
            other => return Err(format!("key columns of type {other} are not supported")),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int32Array, StringArray};

    use super::*;

    #[test]
    fn encoding_is_the_documented_byte_format() {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int32Array::from(vec![Some(-2), None])),
            Arc::new(StringArray::from(vec![Some("ab"), Some("")])),
        ];
        assert_eq!(
            encode_key(&cols, 0).unwrap(),
            vec![1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe, 1, 0, 0, 0, 2, b'a', b'b']
        );
        assert_eq!(encode_key(&cols, 1).unwrap(), vec![0, 1, 0, 0, 0, 0]);
    }
}
