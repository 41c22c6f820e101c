//! LaminarDB 0.33 (crates.io `laminar-db`) on one query of the peers
//! benchmark, for `benches/peers/peers.py`: the Rust crate instead of the
//! older Python wheel, so LaminarDB is measured at its current version and
//! without a Python caller in the loop.
//!
//! Loads the CSV inputs into Arrow batches of 8,192 rows (untimed), pushes
//! them into LaminarDB sources, counts the rows of `CREATE STREAM out AS
//! <sql>` on a subscription, and prints one JSON line:
//! `{"rows":..,"secs":..,"eps":..,"out_rows":..,"cpu_secs":..,"eps_per_core":..}`.
//! With `--dump PATH` it then writes the output rows to a CSV file so
//! peers.py can compare them with Sluice's. An error is the only thing
//! written to stderr (exit status 1); peers.py shows it in the table.
//! See `args::USAGE` and `run` for the method.

mod args;
mod error;
mod input;
mod run;

use std::fs::File;
use std::io::Write;
use std::path::Path;

use arrow::array::RecordBatch;

use crate::error::{BenchError, Result};

#[tokio::main]
async fn main() {
    if let Err(e) = main_inner().await {
        eprintln!("{e}");
        std::process::exit(1);
    }
}

async fn main_inner() -> Result<()> {
    let args = args::parse(std::env::args().skip(1))?;
    let m = run::run(&args).await?;
    if let Some(path) = &args.dump {
        dump(path, &m.output)?;
    }
    let rate = |secs: f64| {
        if secs > 0.0 {
            m.rows as f64 / secs
        } else {
            0.0
        }
    };
    let line = format!(
        "{{\"query\":{},\"rows\":{},\"secs\":{},\"eps\":{},\"out_rows\":{},\"cpu_secs\":{},\"eps_per_core\":{}}}\n",
        json_string(&args.query),
        m.rows,
        m.secs,
        rate(m.secs),
        m.out_rows,
        m.cpu_secs,
        rate(m.cpu_secs)
    );
    let mut out = std::io::stdout().lock();
    out.write_all(line.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::Write {
            path: "stdout".into(),
            message: e.to_string(),
        })
}

/// The output rows as CSV with a header, in arrival order.
fn dump(path: &Path, batches: &[RecordBatch]) -> Result<()> {
    let fail = |message: String| BenchError::Write {
        path: path.to_path_buf(),
        message,
    };
    let file = File::create(path).map_err(|e| fail(e.to_string()))?;
    let mut writer = arrow::csv::WriterBuilder::new()
        .with_header(true)
        .build(file);
    for batch in batches {
        writer.write(batch).map_err(|e| fail(e.to_string()))?;
    }
    Ok(())
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
