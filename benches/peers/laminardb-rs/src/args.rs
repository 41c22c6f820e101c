//! Command line of the driver. Hand-parsed (no argument-parsing crate) to
//! keep this build, which already compiles DataFusion, no larger.

use std::path::PathBuf;
use std::time::Duration;

use crate::error::{BenchError, Result};

pub const USAGE: &str = "\
usage: laminardb-bench --query NAME --sql 'SELECT ...'
         (--source NAME --columns 'col TYPE, ...' --csv PATH)...
         [--watermark COLUMN:SECONDS] [--interleave-by COLUMN]
         [--expected ROWS] [--idle-timeout SECONDS] [--dump PATH]

Creates one LaminarDB source per --source (the CSV's header must name its
columns in order), `CREATE STREAM out AS <sql>`, loads every CSV into Arrow
batches of 8,192 rows, then times pushing them and receiving the output.
Prints one JSON line: rows, secs, eps, out_rows, cpu_secs, eps_per_core.";

/// One input stream: a LaminarDB source fed from a CSV file.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    pub name: String,
    /// Column definitions in LaminarDB's DDL, e.g. `auction BIGINT, ...`.
    pub columns: String,
    pub csv: PathBuf,
}

/// `WATERMARK FOR column AS column - INTERVAL 'delay' SECOND` on every source.
#[derive(Debug, Clone)]
pub struct Watermark {
    pub column: String,
    pub delay_secs: u64,
}

#[derive(Debug, Clone)]
pub struct Args {
    pub query: String,
    pub sql: String,
    pub sources: Vec<SourceSpec>,
    pub watermark: Option<Watermark>,
    /// Push the batches of all sources merged in the order of each batch's
    /// largest value of this (event-time) column, as the Python driver did
    /// for the joins; without it, source after source in file order.
    pub interleave_by: Option<String>,
    /// Stop timing once this many output rows arrived; without it the run
    /// ends only after `idle_timeout` without output.
    pub expected: Option<u64>,
    pub idle_timeout: Duration,
    pub dump: Option<PathBuf>,
}

/// A source being assembled from `--source`, `--columns` and `--csv`.
#[derive(Default)]
struct Partial {
    name: String,
    columns: Option<String>,
    csv: Option<PathBuf>,
}

impl Partial {
    fn finish(self) -> Result<SourceSpec> {
        let missing =
            |what: &str| BenchError::Usage(format!("--source {} has no {what}", self.name));
        Ok(SourceSpec {
            columns: self.columns.clone().ok_or_else(|| missing("--columns"))?,
            csv: self.csv.clone().ok_or_else(|| missing("--csv"))?,
            name: self.name,
        })
    }
}

pub fn parse(mut argv: impl Iterator<Item = String>) -> Result<Args> {
    let mut query = None;
    let mut sql = None;
    let mut sources = Vec::new();
    let mut current: Option<Partial> = None;
    let mut watermark = None;
    let mut interleave_by = None;
    let mut expected = None;
    let mut idle_timeout = Duration::from_secs(10);
    let mut dump = None;
    while let Some(flag) = argv.next() {
        if flag == "--help" || flag == "-h" {
            return Err(BenchError::Usage(USAGE.to_string()));
        }
        let value = argv
            .next()
            .ok_or_else(|| BenchError::Usage(format!("{flag} needs a value")))?;
        match flag.as_str() {
            "--query" => query = Some(value),
            "--sql" => sql = Some(value),
            "--source" => {
                if let Some(done) = current.take() {
                    sources.push(done.finish()?);
                }
                current = Some(Partial {
                    name: value,
                    ..Partial::default()
                });
            }
            "--columns" | "--csv" => {
                let part = current
                    .as_mut()
                    .ok_or_else(|| BenchError::Usage(format!("{flag} must follow a --source")))?;
                if flag == "--columns" {
                    part.columns = Some(value);
                } else {
                    part.csv = Some(PathBuf::from(value));
                }
            }
            "--watermark" => watermark = Some(parse_watermark(&value)?),
            "--interleave-by" => interleave_by = Some(value),
            "--expected" => expected = Some(number(&flag, &value)?),
            "--idle-timeout" => {
                let secs: f64 = value
                    .parse()
                    .ok()
                    .filter(|s: &f64| s.is_finite() && *s > 0.0)
                    .ok_or_else(|| {
                        BenchError::Usage(format!("--idle-timeout {value}: not a positive number"))
                    })?;
                idle_timeout = Duration::from_secs_f64(secs);
            }
            "--dump" => dump = Some(PathBuf::from(value)),
            other => {
                return Err(BenchError::Usage(format!(
                    "unknown option {other}\n{USAGE}"
                )))
            }
        }
    }
    if let Some(done) = current.take() {
        sources.push(done.finish()?);
    }
    if sources.is_empty() {
        return Err(BenchError::Usage(format!("no --source given\n{USAGE}")));
    }
    Ok(Args {
        query: query.ok_or_else(|| BenchError::Usage("--query is required".into()))?,
        sql: sql.ok_or_else(|| BenchError::Usage("--sql is required".into()))?,
        sources,
        watermark,
        interleave_by,
        expected,
        idle_timeout,
        dump,
    })
}

fn number(flag: &str, value: &str) -> Result<u64> {
    value
        .parse()
        .map_err(|_| BenchError::Usage(format!("{flag} {value}: not a row count")))
}

fn parse_watermark(value: &str) -> Result<Watermark> {
    let bad = || BenchError::Usage(format!("--watermark {value}: expected COLUMN:SECONDS"));
    let (column, delay) = value.split_once(':').ok_or_else(bad)?;
    if column.is_empty()
        || !column
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(bad());
    }
    Ok(Watermark {
        column: column.to_string(),
        delay_secs: delay.parse().map_err(|_| bad())?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(args: &[&str]) -> Result<Args> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn sources_collect_their_columns_and_files() {
        let a = parse_str(&[
            "--query",
            "q3",
            "--sql",
            "SELECT 1",
            "--source",
            "person",
            "--columns",
            "id BIGINT",
            "--csv",
            "p.csv",
            "--source",
            "auction",
            "--csv",
            "a.csv",
            "--columns",
            "seller BIGINT",
            "--watermark",
            "date_time:2",
            "--expected",
            "42",
            "--idle-timeout",
            "1.5",
        ])
        .expect("parse");
        let sources: Vec<_> = a
            .sources
            .iter()
            .map(|s| {
                (
                    s.name.as_str(),
                    s.columns.as_str(),
                    s.csv.to_str().expect("utf-8"),
                )
            })
            .collect();
        assert_eq!(
            sources,
            vec![
                ("person", "id BIGINT", "p.csv"),
                ("auction", "seller BIGINT", "a.csv")
            ]
        );
        let w = a.watermark.expect("watermark");
        assert_eq!((w.column.as_str(), w.delay_secs), ("date_time", 2));
        assert_eq!(a.expected, Some(42));
        assert_eq!(a.idle_timeout, Duration::from_millis(1500));
        assert_eq!(a.dump, None);
    }

    #[test]
    fn a_source_without_its_csv_is_refused() {
        let err = parse_str(&[
            "--query",
            "q",
            "--sql",
            "S",
            "--source",
            "bid",
            "--columns",
            "a BIGINT",
        ])
        .expect_err("no --csv");
        assert_eq!(err.to_string(), "--source bid has no --csv [SLC-LDB-001]");
    }

    #[test]
    fn a_watermark_needs_a_column_and_seconds() {
        let err = parse_str(&["--watermark", "date_time - 2"]).expect_err("bad watermark");
        assert_eq!(
            err.to_string(),
            "--watermark date_time - 2: expected COLUMN:SECONDS [SLC-LDB-001]"
        );
    }
}
