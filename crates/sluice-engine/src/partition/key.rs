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
    let sliced: Vec<ArrayRef> = columns.iter().map(|c| c.slice(row, 1)).collect();
    let mut keys = encode_keys(&sliced, 1)?;
    Ok(keys.pop().unwrap_or_default())
}

/// Encode the keys of every row of the key columns at once: each column is
/// cast once and appended row by row.
pub fn encode_keys(columns: &[ArrayRef], rows: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut out: Vec<Vec<u8>> = (0..rows)
        .map(|_| Vec::with_capacity(9 * columns.len()))
        .collect();
    for c in columns {
        if c.len() != rows {
            return Err(format!(
                "key column has {} rows where {rows} were expected",
                c.len()
            ));
        }
        let present = |r: usize, key: &mut Vec<u8>| {
            let valid = !c.is_null(r);
            key.push(u8::from(valid));
            valid
        };
        match c.data_type() {
            DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::Date32
            | DataType::Timestamp(_, _) => {
                let v = cast(c, &DataType::Int64).map_err(|e| e.to_string())?;
                let v = v.as_primitive::<Int64Type>();
                for (r, key) in out.iter_mut().enumerate() {
                    if present(r, key) {
                        key.extend_from_slice(&v.value(r).to_be_bytes());
                    }
                }
            }
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                let v = cast(c, &DataType::UInt64).map_err(|e| e.to_string())?;
                let v = v.as_primitive::<UInt64Type>();
                for (r, key) in out.iter_mut().enumerate() {
                    if present(r, key) {
                        key.extend_from_slice(&v.value(r).to_be_bytes());
                    }
                }
            }
            DataType::Boolean => {
                let v = c.as_boolean();
                for (r, key) in out.iter_mut().enumerate() {
                    if present(r, key) {
                        key.push(u8::from(v.value(r)));
                    }
                }
            }
            DataType::Utf8 => {
                let v = c.as_string::<i32>();
                for (r, key) in out.iter_mut().enumerate() {
                    if present(r, key) {
                        let s = v.value(r).as_bytes();
                        key.extend_from_slice(&(s.len() as u32).to_be_bytes());
                        key.extend_from_slice(s);
                    }
                }
            }
            other => return Err(format!("key columns of type {other} are not supported")),
        }
    }
    Ok(out)
}

/// A canonical key as error messages show it: its bytes in hex.
pub fn display_key(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The single BIGINT of a key encoded from one non-null integer column, as
/// handlers that key by one integer read it back.
pub fn decode_int64_key(key: &[u8]) -> Option<i64> {
    match key {
        [1, rest @ ..] => rest.try_into().ok().map(i64::from_be_bytes),
        _ => None,
    }
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
        let all = encode_keys(&cols, 2).unwrap();
        assert_eq!(all[0], encode_key(&cols, 0).unwrap());
        assert_eq!(all[1], encode_key(&cols, 1).unwrap());
    }

    #[test]
    fn int64_keys_decode() {
        let cols: Vec<ArrayRef> = vec![Arc::new(arrow::array::Int64Array::from(vec![-7]))];
        assert_eq!(decode_int64_key(&encode_key(&cols, 0).unwrap()), Some(-7));
        assert_eq!(decode_int64_key(&[0]), None);
    }
}
