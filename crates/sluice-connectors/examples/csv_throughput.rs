//! Measures CSV source parsing throughput on a 5-column numeric/timestamp
//! schema: `cargo run --release -p sluice-connectors --example csv_throughput [rows]`.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice_connectors::{FileFormat, FileSourceConfig, FileSourceReader, OnError};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rows: u64 = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 5_000_000,
    };
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("bench.csv");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path)?);
        writeln!(out, "id,ts,price,qty,user")?;
        for i in 0..rows {
            let secs = i % 86_400;
            writeln!(
                out,
                "{i},2024-01-01 {:02}:{:02}:{:02}.{:03},{}.{:02},{},{}",
                secs / 3600,
                (secs / 60) % 60,
                secs % 60,
                i % 1000,
                i % 10_000,
                i % 100,
                i % 500,
                i * 7 % 100_003
            )?;
        }
    }
    let bytes = std::fs::metadata(&path)?.len();
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Millisecond, None),
            false,
        ),
        Field::new("price", DataType::Float64, true),
        Field::new("qty", DataType::Int32, true),
        Field::new("user", DataType::Int64, true),
    ]));
    let start = Instant::now();
    let mut reader = FileSourceReader::open(FileSourceConfig {
        path: path.to_string_lossy().into_owned(),
        base_dir: None,
        format: FileFormat::Csv,
        schema,
        batch_size: 8192,
        on_error: OnError::Fail,
        unread_columns: Vec::new(),
        max_record_bytes: sluice_connectors::DEFAULT_MAX_RECORD_BYTES,
        share: None,
    })?;
    let mut total = 0u64;
    while let Some(batch) = reader.next_batch()? {
        total += batch.num_rows() as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{total} rows, {:.1} MB in {secs:.3}s: {:.2} M rows/s, {:.0} MB/s",
        bytes as f64 / 1e6,
        total as f64 / secs / 1e6,
        bytes as f64 / secs / 1e6
    );
    Ok(())
}
