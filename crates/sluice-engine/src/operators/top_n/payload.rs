//! The bytes a top-N keeps for each row: a compact, canonical row codec.
//!
//! A kept row is stored as bytes so that a partition's rows fit one
//! allocation each and compare cheaply. Arrow's row format was used for
//! that before, but it is made for ordering: it splits every string into
//! blocks with a continuation byte each, so encoding every input row cost
//! a tenth of q19's time and decoding the emitted rows a fifth. The whole row needs no order (the `ORDER
//! BY` key keeps Arrow's row format); it needs to be *canonical*, so that
//! equal rows have equal bytes: the changelog compares a partition's rows
//! with the ones it showed. Ties in the `ORDER BY` key are broken by the
//! whole row, column by column ascending with NULLs first (as Arrow's row
//! format orders them): [`PayloadCodec::compare`] reads that order from
//! the bytes, typed, so the numbering is deterministic and documented.
//!
//! Each column in turn, one field:
//!
//! ```text
//!   NULL                      0x00
//!   fixed width (ints, ...)   0x01 the value's little-endian bytes (its width)
//!   boolean                   0x01 0x00|0x01
//!   string, binary            0x01 length (u32 LE) bytes
//!   anything else             0x01 length (u32 LE) the value in Arrow's row format
//! ```
//!
//! Encoding is per row, so only rows that enter a partition's top N are
//! encoded. Decoding reads each row once, appending its fields to one
//! builder per column, because the rows are scattered over the heap.
//! Decoding checks what it reads (lengths, UTF-8), so the bytes of a
//! damaged snapshot give an error, not a wrong value.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::NullBufferBuilder;
use arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, BinaryArray, BinaryViewArray, BooleanArray,
    BooleanBuilder, LargeBinaryArray, LargeStringArray, NullArray, StringArray, StringViewArray,
};
use arrow::buffer::{Buffer, MutableBuffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, IntervalUnit, SchemaRef};
use arrow::row::{RowConverter, Rows, SortField};

use crate::error::{EngineError, Result};

const NULL: u8 = 0;
const VALID: u8 = 1;

/// How one column is encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A primitive type: its values' bytes, `width` each, ordered as `Order` says.
    Fixed(usize, Order),
    Boolean,
    /// Strings or binary, in any layout (the type says which).
    Bytes,
    /// The `Null` type: every value is NULL.
    Null,
    /// Anything else (nested, dictionaries): the value in Arrow's row format.
    Other,
}

/// How the little-endian values of a fixed-width column are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Order {
    /// Two's complement integers (and dates, times, decimals up to 128 bits).
    Signed,
    Unsigned,
    /// IEEE floats in their total order (`f64::total_cmp`).
    Float,
    /// A signed 256-bit decimal.
    Signed256,
    /// Two `i32`s: days, then milliseconds.
    DayTime,
    /// `i32` months, `i32` days, then `i64` nanoseconds.
    MonthDayNano,
}

fn order(t: &DataType) -> Order {
    match t {
        DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => Order::Unsigned,
        DataType::Float16 | DataType::Float32 | DataType::Float64 => Order::Float,
        DataType::Decimal256(..) => Order::Signed256,
        DataType::Interval(IntervalUnit::DayTime) => Order::DayTime,
        DataType::Interval(IntervalUnit::MonthDayNano) => Order::MonthDayNano,
        _ => Order::Signed,
    }
}

/// A little-endian two's complement integer of up to 16 bytes.
fn signed(b: &[u8]) -> i128 {
    let mut wide = if b.last().is_some_and(|x| x & 0x80 != 0) {
        [0xFF; 16]
    } else {
        [0; 16]
    };
    if let Some(low) = wide.get_mut(..b.len()) {
        low.copy_from_slice(b);
    }
    i128::from_le_bytes(wide)
}

fn unsigned(b: &[u8]) -> u128 {
    let mut wide = [0; 16];
    if let Some(low) = wide.get_mut(..b.len()) {
        low.copy_from_slice(b);
    }
    u128::from_le_bytes(wide)
}

/// `x` split after `at` bytes (or whole, if shorter).
fn split(x: &[u8], at: usize) -> (&[u8], &[u8]) {
    x.split_at(at.min(x.len()))
}

/// Two fixed-width values of the same column, in `order`.
fn compare_fixed(order: Order, a: &[u8], b: &[u8]) -> Ordering {
    match order {
        Order::Signed => signed(a).cmp(&signed(b)),
        Order::Unsigned => unsigned(a).cmp(&unsigned(b)),
        Order::Float => {
            // `total_cmp`'s key: flip the magnitude bits of negative values.
            let key = |x: &[u8]| {
                let v = signed(x);
                let bits = x.len() as u32 * 8;
                let magnitude = (1i128 << (bits - 1)) - 1;
                if v < 0 {
                    v ^ magnitude
                } else {
                    v
                }
            };
            key(a).cmp(&key(b))
        }
        Order::Signed256 => {
            let ((al, ah), (bl, bh)) = (split(a, 16), split(b, 16));
            signed(ah)
                .cmp(&signed(bh))
                .then(unsigned(al).cmp(&unsigned(bl)))
        }
        Order::DayTime | Order::MonthDayNano => {
            let parts: &[usize] = if order == Order::DayTime {
                &[4, 4]
            } else {
                &[4, 4, 8]
            };
            let (mut a, mut b) = (a, b);
            for &w in parts {
                let ((ah, at), (bh, bt)) = (split(a, w), split(b, w));
                let c = signed(ah).cmp(&signed(bh));
                if c != Ordering::Equal {
                    return c;
                }
                (a, b) = (at, bt);
            }
            Ordering::Equal
        }
    }
}

fn kind(t: &DataType) -> Kind {
    match t {
        DataType::Null => Kind::Null,
        DataType::Boolean => Kind::Boolean,
        DataType::Utf8
        | DataType::LargeUtf8
        | DataType::Utf8View
        | DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView => Kind::Bytes,
        t if t.is_primitive() => t
            .primitive_width()
            .map_or(Kind::Other, |w| Kind::Fixed(w, order(t))),
        _ => Kind::Other,
    }
}

fn damaged(what: &str) -> EngineError {
    EngineError::Internal(format!("damaged top-n row: {what}"))
}

/// Encodes rows of one schema to bytes and decodes them back to columns.
pub(super) struct PayloadCodec {
    schema: SchemaRef,
    kinds: Vec<Kind>,
    /// A converter for each `Other` column (by column index), for its values.
    others: Vec<Option<RowConverter>>,
}

/// One batch's columns, resolved once so that encoding a row is a `match`
/// and a copy per field.
pub(super) struct Encoder<'a> {
    columns: Vec<Column<'a>>,
}

enum Column<'a> {
    Fixed {
        values: Buffer,
        width: usize,
        nulls: Option<&'a NullBuffer>,
    },
    Boolean(&'a BooleanArray),
    Bytes(Strings<'a>),
    Null,
    Other(Rows),
}

/// A string or binary column of any layout.
enum Strings<'a> {
    Utf8(&'a StringArray),
    LargeUtf8(&'a LargeStringArray),
    Utf8View(&'a StringViewArray),
    Binary(&'a BinaryArray),
    LargeBinary(&'a LargeBinaryArray),
    BinaryView(&'a BinaryViewArray),
}

impl<'a> Strings<'a> {
    fn new(array: &'a dyn Array) -> Option<Self> {
        Some(match array.data_type() {
            DataType::Utf8 => Self::Utf8(array.as_string_opt()?),
            DataType::LargeUtf8 => Self::LargeUtf8(array.as_string_opt()?),
            DataType::Utf8View => Self::Utf8View(array.as_string_view_opt()?),
            DataType::Binary => Self::Binary(array.as_binary_opt()?),
            DataType::LargeBinary => Self::LargeBinary(array.as_binary_opt()?),
            DataType::BinaryView => Self::BinaryView(array.as_binary_view_opt()?),
            _ => return None,
        })
    }

    /// Value `i`, or None if it is NULL.
    fn get(&self, i: usize) -> Option<&'a [u8]> {
        fn at<'b, A: Array + ?Sized>(
            a: &'b A,
            i: usize,
            v: impl Fn(usize) -> &'b [u8],
        ) -> Option<&'b [u8]> {
            a.is_valid(i).then(|| v(i))
        }
        match self {
            Self::Utf8(a) => at(*a, i, |i| a.value(i).as_bytes()),
            Self::LargeUtf8(a) => at(*a, i, |i| a.value(i).as_bytes()),
            Self::Utf8View(a) => at(*a, i, |i| a.value(i).as_bytes()),
            Self::Binary(a) => at(*a, i, |i| a.value(i)),
            Self::LargeBinary(a) => at(*a, i, |i| a.value(i)),
            Self::BinaryView(a) => at(*a, i, |i| a.value(i)),
        }
    }
}

impl Encoder<'_> {
    /// Append row `i`'s bytes to `out`.
    pub fn encode(&self, i: usize, out: &mut Vec<u8>) -> Result<()> {
        for column in &self.columns {
            match column {
                Column::Fixed {
                    values,
                    width,
                    nulls,
                } => {
                    if nulls.is_some_and(|n| n.is_null(i)) {
                        out.push(NULL);
                    } else {
                        let bytes = values
                            .as_slice()
                            .get(i * width..(i + 1) * width)
                            .ok_or_else(|| damaged("row past its column"))?;
                        out.push(VALID);
                        out.extend_from_slice(bytes);
                    }
                }
                Column::Boolean(a) => {
                    if a.is_null(i) {
                        out.push(NULL);
                    } else {
                        out.extend_from_slice(&[VALID, u8::from(a.value(i))]);
                    }
                }
                Column::Bytes(s) => match s.get(i) {
                    None => out.push(NULL),
                    Some(b) => put_bytes(out, b)?,
                },
                Column::Null => out.push(NULL),
                Column::Other(rows) => put_bytes(out, rows.row(i).data())?,
            }
        }
        Ok(())
    }
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) -> Result<()> {
    let len = u32::try_from(b.len()).map_err(|_| {
        EngineError::Internal(format!(
            "a top-n value of {} bytes is over the 4 GiB a kept value may have",
            b.len()
        ))
    })?;
    out.push(VALID);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(b);
    Ok(())
}

/// Reads a row's fields in turn.
struct Cursor<'a> {
    bytes: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(damaged("a field runs past the row's end"));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    /// The flag of the next field: whether it is valid.
    fn valid(&mut self) -> Result<bool> {
        match self.take(1)? {
            [NULL] => Ok(false),
            [VALID] => Ok(true),
            _ => Err(damaged("a field's flag is neither NULL nor valid")),
        }
    }

    fn sized(&mut self) -> Result<&'a [u8]> {
        let len = self.take(4)?;
        let len: [u8; 4] = len.try_into().map_err(|_| damaged("length"))?;
        self.take(u32::from_le_bytes(len) as usize)
    }
}

/// Where one column's decoded values gather.
enum Builder<'a> {
    Fixed {
        /// Aligned for the type's values, as a `Vec<u8>` would not be.
        values: MutableBuffer,
        width: usize,
        nulls: NullBufferBuilder,
    },
    Boolean(BooleanBuilder),
    Bytes {
        offsets: Vec<i64>,
        values: Vec<u8>,
        nulls: NullBufferBuilder,
    },
    Null,
    Other(Vec<&'a [u8]>),
}

impl PayloadCodec {
    /// A codec for rows of `schema`.
    pub fn new(schema: SchemaRef) -> Result<Self> {
        let kinds: Vec<Kind> = schema
            .fields()
            .iter()
            .map(|f| kind(f.data_type()))
            .collect();
        let others = schema
            .fields()
            .iter()
            .zip(&kinds)
            .map(|(f, k)| {
                (*k == Kind::Other)
                    .then(|| RowConverter::new(vec![SortField::new(f.data_type().clone())]))
                    .transpose()
            })
            .collect::<std::result::Result<_, _>>()?;
        Ok(Self {
            schema,
            kinds,
            others,
        })
    }

    fn converter(&self, column: usize) -> Result<&RowConverter> {
        self.others
            .get(column)
            .and_then(Option::as_ref)
            .ok_or_else(|| EngineError::Internal(format!("top-n column {column} has no converter")))
    }

    /// Resolve a batch's columns, which must have this codec's types.
    pub fn encoder<'a>(&self, columns: &'a [ArrayRef]) -> Result<Encoder<'a>> {
        if columns.len() != self.kinds.len() {
            return Err(EngineError::Internal(format!(
                "top-n rows have {} columns, the operator {}",
                columns.len(),
                self.kinds.len()
            )));
        }
        let mut resolved = Vec::with_capacity(columns.len());
        for (i, (array, kind)) in columns.iter().zip(&self.kinds).enumerate() {
            let field = self.schema.field(i);
            if array.data_type() != field.data_type() {
                return Err(EngineError::Internal(format!(
                    "top-n column {} is {}, the operator expects {}",
                    field.name(),
                    array.data_type(),
                    field.data_type()
                )));
            }
            resolved.push(match *kind {
                Kind::Fixed(width, _) => {
                    let data = array.to_data();
                    let values = data
                        .buffers()
                        .first()
                        .ok_or_else(|| damaged("a primitive column without values"))?
                        .slice_with_length(data.offset() * width, data.len() * width);
                    Column::Fixed {
                        values,
                        width,
                        nulls: array.nulls(),
                    }
                }
                Kind::Boolean => Column::Boolean(array.as_boolean()),
                Kind::Bytes => Column::Bytes(
                    Strings::new(array.as_ref()).ok_or_else(|| damaged("a string column"))?,
                ),
                Kind::Null => Column::Null,
                Kind::Other => Column::Other(
                    self.converter(i)?
                        .convert_columns(std::slice::from_ref(array))?,
                ),
            });
        }
        Ok(Encoder { columns: resolved })
    }

    /// Two rows encoded by this codec, in the order of their columns'
    /// values, first to last, each ascending with NULLs first.
    pub fn compare(&self, a: &[u8], b: &[u8]) -> Result<Ordering> {
        let (mut a, mut b) = (Cursor { bytes: a }, Cursor { bytes: b });
        for kind in &self.kinds {
            let (va, vb) = (a.valid()?, b.valid()?);
            if !(va && vb) {
                if va != vb {
                    return Ok(va.cmp(&vb));
                }
                continue;
            }
            let c = match *kind {
                Kind::Fixed(width, order) => compare_fixed(order, a.take(width)?, b.take(width)?),
                Kind::Boolean => a.take(1)?.cmp(b.take(1)?),
                // Bytes, and Arrow's row format, compare as bytes.
                Kind::Bytes | Kind::Other => a.sized()?.cmp(b.sized()?),
                Kind::Null => return Err(damaged("a value in a NULL column")),
            };
            if c != Ordering::Equal {
                return Ok(c);
            }
        }
        Ok(Ordering::Equal)
    }

    /// The columns of `rows`, each encoded by an [`Encoder`] of this codec.
    pub fn decode<'a>(
        &self,
        rows: impl ExactSizeIterator<Item = &'a [u8]> + Clone,
    ) -> Result<Vec<ArrayRef>> {
        let n = rows.len();
        // The rows' bytes bound each string column's: sized once, a column
        // neither grows by copying nor faults in pages twice (a tenth of
        // q18's output time otherwise); the excess is given back below.
        let bound: usize = rows.clone().map(<[u8]>::len).sum();
        let mut builders: Vec<Builder<'a>> = self
            .kinds
            .iter()
            .map(|k| match *k {
                Kind::Fixed(width, _) => Builder::Fixed {
                    values: MutableBuffer::with_capacity(n * width),
                    width,
                    nulls: NullBufferBuilder::new(n),
                },
                Kind::Boolean => Builder::Boolean(BooleanBuilder::with_capacity(n)),
                Kind::Bytes => Builder::Bytes {
                    offsets: {
                        let mut o = Vec::with_capacity(n + 1);
                        o.push(0);
                        o
                    },
                    values: Vec::with_capacity(bound),
                    nulls: NullBufferBuilder::new(n),
                },
                Kind::Null => Builder::Null,
                Kind::Other => Builder::Other(Vec::with_capacity(n)),
            })
            .collect();
        for row in rows {
            let mut c = Cursor { bytes: row };
            for b in &mut builders {
                let valid = c.valid()?;
                match b {
                    Builder::Fixed {
                        values,
                        width,
                        nulls,
                    } => {
                        if valid {
                            values.extend_from_slice(c.take(*width)?);
                        } else {
                            values.extend_zeros(*width);
                        }
                        nulls.append(valid);
                    }
                    Builder::Boolean(b) => {
                        if valid {
                            b.append_value(match c.take(1)? {
                                [0] => false,
                                [1] => true,
                                _ => return Err(damaged("a boolean that is neither 0 nor 1")),
                            });
                        } else {
                            b.append_null();
                        }
                    }
                    Builder::Bytes {
                        offsets,
                        values,
                        nulls,
                    } => {
                        if valid {
                            values.extend_from_slice(c.sized()?);
                        }
                        offsets.push(values.len() as i64);
                        nulls.append(valid);
                    }
                    Builder::Null if valid => return Err(damaged("a value in a NULL column")),
                    Builder::Null => {}
                    Builder::Other(rows) if valid => rows.push(c.sized()?),
                    Builder::Other(_) => return Err(damaged("a NULL flag on a nested value")),
                }
            }
            if !c.bytes.is_empty() {
                return Err(damaged("bytes after the last column"));
            }
        }
        builders
            .into_iter()
            .enumerate()
            .map(|(i, b)| self.finish(i, b, n))
            .collect()
    }

    fn finish(&self, column: usize, builder: Builder<'_>, n: usize) -> Result<ArrayRef> {
        let data_type = self.schema.field(column).data_type();
        Ok(match builder {
            Builder::Fixed {
                values,
                nulls: mut n_b,
                ..
            } => {
                let data = ArrayData::builder(data_type.clone())
                    .len(n)
                    .add_buffer(values.into())
                    .nulls(n_b.finish())
                    .build()?;
                arrow::array::make_array(data)
            }
            Builder::Boolean(mut b) => Arc::new(b.finish()),
            Builder::Bytes {
                offsets,
                values,
                nulls: mut n_b,
            } => bytes_array(data_type, offsets, values, n_b.finish())?,
            Builder::Null => Arc::new(NullArray::new(n)),
            Builder::Other(rows) => {
                let converter = self.converter(column)?;
                let parser = converter.parser();
                let mut columns =
                    converter.convert_rows(rows.into_iter().map(|r| parser.parse(r)))?;
                let column = columns
                    .pop()
                    .ok_or_else(|| damaged("a nested column decoded to nothing"))?;
                // Arrow's row format gives a dictionary's values back
                // unpacked; the output keeps the input's type.
                if column.data_type() == data_type {
                    column
                } else {
                    arrow::compute::cast(&column, data_type)?
                }
            }
        })
    }
}

/// A string or binary array of type `data_type` from `offsets` (i64,
/// narrowed where the type needs) and `values`, checking UTF-8.
fn bytes_array(
    data_type: &DataType,
    offsets: Vec<i64>,
    mut values: Vec<u8>,
    nulls: Option<NullBuffer>,
) -> Result<ArrayRef> {
    values.shrink_to_fit();
    let narrow = |offsets: Vec<i64>| -> Result<OffsetBuffer<i32>> {
        let last = offsets.last().copied().unwrap_or(0);
        if i32::try_from(last).is_err() {
            return Err(EngineError::Internal(format!(
                "{last} bytes of top-n strings in one output batch overflow its offsets"
            )));
        }
        Ok(OffsetBuffer::new(ScalarBuffer::from(
            offsets.into_iter().map(|o| o as i32).collect::<Vec<_>>(),
        )))
    };
    let wide = |offsets: Vec<i64>| OffsetBuffer::new(ScalarBuffer::from(offsets));
    let values = Buffer::from_vec(values);
    Ok(match data_type {
        DataType::Utf8 => Arc::new(StringArray::try_new(narrow(offsets)?, values, nulls)?),
        DataType::LargeUtf8 => Arc::new(LargeStringArray::try_new(wide(offsets), values, nulls)?),
        DataType::Binary => Arc::new(BinaryArray::try_new(narrow(offsets)?, values, nulls)?),
        DataType::LargeBinary => Arc::new(LargeBinaryArray::try_new(wide(offsets), values, nulls)?),
        DataType::Utf8View => Arc::new(StringViewArray::from(&LargeStringArray::try_new(
            wide(offsets),
            values,
            nulls,
        )?)),
        DataType::BinaryView => Arc::new(BinaryViewArray::from(&LargeBinaryArray::try_new(
            wide(offsets),
            values,
            nulls,
        )?)),
        other => {
            return Err(EngineError::Internal(format!(
                "top-n: {other} is not a string or binary type"
            )))
        }
    })
}

#[cfg(test)]
#[path = "payload_tests.rs"]
mod tests;
