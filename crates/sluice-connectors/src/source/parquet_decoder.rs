//! Parquet decoding via the parquet crate's Arrow reader, with by-name
//! projection onto the declared schema and lossless type adaptation.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayRef, AsArray, Int64Array};
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Int64Type, TimeUnit};
use arrow::error::ArrowError;
use arrow::record_batch::{RecordBatch, RecordBatchOptions};
use parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};
use parquet::arrow::ProjectionMask;
use parquet::errors::ParquetError;

use super::parse::ticks_per_second;
use super::{FileDecoder, ReadPlan, Resume};
use crate::error::{ConnectorError, Result};

/// How one file column becomes the declared column.
#[derive(Debug, Clone)]
enum Conversion {
    /// Types already match.
    Identity,
    /// Arrow's cast kernel (strict: fails instead of producing nulls).
    Cast,
    /// Timestamp unit/zone change on raw epoch values, so instants are kept
    /// (arrow's cast would shift values when dropping a time zone).
    Timestamp { from: TimeUnit, to: TimeUnit },
}

/// Decide whether `from` can be converted to `to` without losing values in
/// the common cases: integer and float widening, string/binary flavours,
/// timestamp unit and zone changes, widening decimals, and dictionaries of a
/// convertible value type.
fn conversion(from: &DataType, to: &DataType) -> Option<Conversion> {
    use DataType::*;
    if from == to {
        return Some(Conversion::Identity);
    }
    let cast = match (from, to) {
        (Timestamp(f, _), Timestamp(t, _)) => {
            return Some(Conversion::Timestamp { from: *f, to: *t });
        }
        (Int8, Int16 | Int32 | Int64 | Float32 | Float64)
        | (Int16, Int32 | Int64 | Float32 | Float64)
        | (Int32, Int64 | Float64)
        | (UInt8, UInt16 | UInt32 | UInt64 | Int16 | Int32 | Int64 | Float32 | Float64)
        | (UInt16, UInt32 | UInt64 | Int32 | Int64 | Float32 | Float64)
        | (UInt32, UInt64 | Int64 | Float64)
        | (Float16 | Float32, Float64)
        | (Utf8 | LargeUtf8 | Utf8View, Utf8 | LargeUtf8 | Utf8View)
        | (Binary | LargeBinary | BinaryView, Binary | LargeBinary | BinaryView)
        | (Date32, Date64) => true,
        (Decimal128(p1, s1), Decimal128(p2, s2)) => {
            s2 >= s1 && i16::from(*p2) - i16::from(*s2) >= i16::from(*p1) - i16::from(*s1)
        }
        (Dictionary(_, value), _) => {
            // Only plain casts are allowed after unpacking a dictionary.
            matches!(
                conversion(value, to),
                Some(Conversion::Identity | Conversion::Cast)
            )
        }
        _ => false,
    };
    cast.then_some(Conversion::Cast)
}

fn convert_timestamp(
    array: &ArrayRef,
    from: TimeUnit,
    to: TimeUnit,
    target: &DataType,
) -> std::result::Result<ArrayRef, ArrowError> {
    let raw = cast_with_options(array, &DataType::Int64, &strict())?;
    let raw = raw.as_primitive::<Int64Type>();
    let (from_ticks, to_ticks) = (ticks_per_second(from), ticks_per_second(to));
    let scaled: Int64Array = if to_ticks >= from_ticks {
        let factor = to_ticks / from_ticks;
        raw.try_unary(|v| {
            v.checked_mul(factor).ok_or_else(|| {
                ArrowError::ComputeError(format!("timestamp {v} overflows {target}"))
            })
        })?
    } else {
        let factor = from_ticks / to_ticks;
        raw.unary(|v| v.div_euclid(factor))
    };
    let data = scaled
        .into_data()
        .into_builder()
        .data_type(target.clone())
        .build()?;
    Ok(make_array(data))
}

/// Run a call that decodes file bytes inside the parquet crate, turning a
/// panic into an error naming the file.
///
/// The parquet and arrow-ipc crates panic on some corrupt inputs instead of
/// returning an error (a flipped bit in the embedded Arrow schema, for
/// one, panics on an integer width that does not exist); a corrupt file
/// must be a clean error, not a crashed reader thread. The reader is not
/// used again after such an error (see [`super::FileSourceReader`]).
fn contain_panic<T>(path: &Path, f: impl FnOnce() -> T) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_string());
        ConnectorError::parquet(
            format!("reading parquet file {}", path.display()),
            ParquetError::General(format!("the file is corrupt: {message}")),
        )
    })
}

fn strict() -> CastOptions<'static> {
    CastOptions {
        safe: false,
        ..CastOptions::default()
    }
}

/// Decodes one Parquet file.
pub(crate) struct ParquetDecoder {
    path: PathBuf,
    plan: Arc<ReadPlan>,
    reader: ParquetRecordBatchReader,
    /// Rows read from the file but not returned yet.
    pending: Option<RecordBatch>,
    /// For each declared column: its index in the projected batch and how to
    /// convert it.
    columns: Vec<(usize, Conversion)>,
    rows_consumed: u64,
}

impl ParquetDecoder {
    /// Open `path`, match its columns to the declared schema by name and
    /// start reading after `skip_rows` rows.
    pub fn open(path: &Path, plan: &Arc<ReadPlan>, skip_rows: u64) -> Result<ParquetDecoder> {
        let context = || format!("opening parquet file {}", path.display());
        let file = File::open(path).map_err(|e| ConnectorError::io(path, e))?;
        let builder = contain_panic(path, || ParquetRecordBatchReaderBuilder::try_new(file))?
            .map_err(|e| ConnectorError::parquet(context(), e))?;
        let file_schema = builder.schema().clone();
        // A file with fewer rows than the checkpoint consumed shrank or was
        // replaced: resuming in it would silently skip or repeat rows.
        let rows = u64::try_from(builder.metadata().file_metadata().num_rows()).unwrap_or(0);
        let resume = Resume {
            rows: skip_rows,
            byte_offset: None,
        };
        resume.verify(path, rows.min(skip_rows), 0)?;

        let mut wanted = Vec::with_capacity(plan.schema.fields().len());
        let mut matched = Vec::with_capacity(plan.schema.fields().len());
        for field in plan.schema.fields() {
            let (index, file_field) =
                file_schema.column_with_name(field.name()).ok_or_else(|| {
                    ConnectorError::schema(
                        path,
                        format!(
                            "column '{}' is declared but missing from the parquet file",
                            field.name()
                        ),
                    )
                })?;
            let conv = conversion(file_field.data_type(), field.data_type()).ok_or_else(|| {
                ConnectorError::schema(
                    path,
                    format!(
                        "column '{}' is declared as {} but the file has {}, which cannot be \
                         converted losslessly",
                        field.name(),
                        field.data_type(),
                        file_field.data_type()
                    ),
                )
            })?;
            wanted.push(index);
            matched.push((index, conv));
        }
        // The projected batch holds the selected roots in file order.
        let mut roots = wanted.clone();
        roots.sort_unstable();
        roots.dedup();
        let columns = matched
            .into_iter()
            .map(|(index, conv)| (roots.binary_search(&index).unwrap_or(0), conv))
            .collect();

        let mask = ProjectionMask::roots(builder.parquet_schema(), roots.iter().copied());
        let mut builder = builder
            .with_projection(mask)
            .with_batch_size(plan.batch_size);
        if skip_rows > 0 {
            let offset = usize::try_from(skip_rows).unwrap_or(usize::MAX);
            builder = builder.with_offset(offset);
        }
        let reader = contain_panic(path, || builder.build())?
            .map_err(|e| ConnectorError::parquet(context(), e))?;
        Ok(ParquetDecoder {
            path: path.to_path_buf(),
            plan: plan.clone(),
            reader,
            pending: None,
            columns,
            rows_consumed: skip_rows,
        })
    }

    fn adapt(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let context = || format!("reading parquet file {}", self.path.display());
        let mut arrays = Vec::with_capacity(self.columns.len());
        for ((index, conv), field) in self.columns.iter().zip(self.plan.schema.fields()) {
            let array = batch.column(*index);
            let target = field.data_type();
            let converted = match conv {
                Conversion::Identity => Ok(array.clone()),
                Conversion::Cast => cast_with_options(array, target, &strict()),
                Conversion::Timestamp { from, to } => convert_timestamp(array, *from, *to, target),
            };
            let converted = converted.map_err(|e| {
                ConnectorError::arrow(format!("{}: column '{}'", context(), field.name()), e)
            })?;
            arrays.push(converted);
        }
        let options = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
        RecordBatch::try_new_with_options(self.plan.schema.clone(), arrays, &options)
            .map_err(|e| ConnectorError::arrow(context(), e))
    }
}

impl FileDecoder for ParquetDecoder {
    fn next_batch(&mut self, max_rows: usize) -> Result<Option<RecordBatch>> {
        let batch = loop {
            let next = match self.pending.take() {
                Some(b) => b,
                None => match contain_panic(&self.path, || self.reader.next())? {
                    None => return Ok(None),
                    Some(Ok(b)) => b,
                    Some(Err(e)) => {
                        return Err(ConnectorError::arrow(
                            format!("reading parquet file {}", self.path.display()),
                            e,
                        ))
                    }
                },
            };
            if next.num_rows() > 0 {
                break next;
            }
        };
        let batch = if batch.num_rows() > max_rows {
            self.pending = Some(batch.slice(max_rows, batch.num_rows() - max_rows));
            batch.slice(0, max_rows)
        } else {
            batch
        };
        self.rows_consumed += batch.num_rows() as u64;
        self.adapt(&batch).map(Some)
    }

    fn rows_consumed(&self) -> u64 {
        self.rows_consumed
    }

    fn skipped_rows(&self) -> u64 {
        0
    }

    fn byte_offset(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lossless_rules() {
        use DataType::*;
        let ok = |f: DataType, t: DataType| conversion(&f, &t).is_some();
        assert!(ok(Int32, Int64));
        assert!(ok(UInt32, Int64));
        assert!(ok(Float32, Float64));
        assert!(ok(
            Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            Timestamp(TimeUnit::Nanosecond, None)
        ));
        assert!(ok(Dictionary(Box::new(Int32), Box::new(Utf8)), LargeUtf8));
        assert!(ok(Decimal128(10, 2), Decimal128(12, 3)));
        assert!(!ok(Decimal128(10, 2), Decimal128(10, 3)));
        assert!(!ok(Int64, Int32));
        assert!(!ok(Utf8, Int64));
        assert!(!ok(Float64, Int64));
        assert!(!ok(UInt64, Int64));
    }
}
