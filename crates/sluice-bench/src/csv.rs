//! Writing a generated Nexmark stream to a CSV file, so that peers read
//! exactly the rows Sluice processes (see `benches/peers/`).
//!
//! The file has a header; timestamps are written as
//! `YYYY-MM-DD HH:MM:SS.mmm` (UTC), which Sluice, Flink's `csv` format and
//! pyarrow all read as a millisecond timestamp.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Int64Type, TimestampMillisecondType};
use sluice_connectors::{BatchReader, NexmarkConfig, NexmarkReader};

use crate::error::{BenchError, Result};

/// Rows written and seconds spent.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// Data rows (header excluded).
    pub rows: u64,
    /// Wall-clock seconds.
    pub secs: f64,
}

/// Generate every row of `cfg` (unthrottled) into `path`.
pub fn write_csv(mut cfg: NexmarkConfig, path: &Path) -> Result<Written> {
    cfg.rate = 0;
    let started = Instant::now();
    let io = |e| BenchError::io(format!("writing {}", path.display()), e);
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).map_err(io)?);
    let names: Vec<&str> = cfg
        .schema
        .fields()
        .iter()
        .map(|f| f.name().as_str())
        .collect();
    writeln!(out, "{}", names.join(",")).map_err(io)?;
    let mut reader = NexmarkReader::open(cfg)?;
    let mut rows = 0u64;
    let mut line = String::new();
    while let Some(batch) = reader.next_batch()? {
        for r in 0..batch.num_rows() {
            line.clear();
            for (c, col) in batch.columns().iter().enumerate() {
                if c > 0 {
                    line.push(',');
                }
                if col.is_null(r) {
                    continue;
                }
                match col.data_type() {
                    DataType::Int64 => {
                        line.push_str(&col.as_primitive::<Int64Type>().value(r).to_string())
                    }
                    DataType::Timestamp(_, _) => push_timestamp(
                        &mut line,
                        col.as_primitive::<TimestampMillisecondType>().value(r),
                    ),
                    _ => push_text(&mut line, col.as_string::<i32>().value(r)),
                }
            }
            line.push('\n');
            out.write_all(line.as_bytes()).map_err(io)?;
        }
        rows += batch.num_rows() as u64;
    }
    out.flush().map_err(io)?;
    Ok(Written {
        rows,
        secs: started.elapsed().as_secs_f64(),
    })
}

fn push_text(line: &mut String, s: &str) {
    if s.contains([',', '"', '\n', '\r']) {
        line.push('"');
        line.push_str(&s.replace('"', "\"\""));
        line.push('"');
    } else {
        line.push_str(s);
    }
}

/// `YYYY-MM-DD HH:MM:SS.mmm` of epoch milliseconds (UTC).
pub fn push_timestamp(line: &mut String, ms: i64) {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (y, m, d) = civil_from_days(days);
    let (h, rest) = (in_day / 3_600_000, in_day % 3_600_000);
    let (min, rest) = (rest / 60_000, rest % 60_000);
    let (s, milli) = (rest / 1000, rest % 1000);
    line.push_str(&format!(
        "{y:04}-{m:02}-{d:02} {h:02}:{min:02}:{s:02}.{milli:03}"
    ));
}

/// Proleptic Gregorian (year, month, day) of days since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_formatted_in_utc() {
        let mut s = String::new();
        push_timestamp(&mut s, 1_704_067_200_123);
        assert_eq!(s, "2024-01-01 00:00:00.123");
        s.clear();
        push_timestamp(&mut s, 951_782_400_000 + 86_399_999);
        assert_eq!(s, "2000-02-29 23:59:59.999");
        s.clear();
        push_timestamp(&mut s, -1);
        assert_eq!(s, "1969-12-31 23:59:59.999");
    }

    #[test]
    fn text_is_quoted_only_when_needed() {
        let mut s = String::new();
        push_text(&mut s, "plain");
        push_text(&mut s, "a,\"b\"");
        assert_eq!(s, "plain\"a,\"\"b\"\"\"");
    }
}
