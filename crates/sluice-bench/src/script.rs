//! A benchmark script: the query files under `benches/nexmark/`, split into
//! statements so that their Nexmark sources can be swapped.
//!
//! A script declares its input with `CREATE SOURCE ... WITH (connector =
//! 'nexmark', ...)` and its query with `CREATE STREAM`. `sluice run` reads
//! such a file as is. The benchmark instead generates the rows up front and
//! pushes them, so it re-declares the same source (same columns, watermark
//! and late-data stream) as a push source ([`SourceSpec::push_ddl`]); the
//! query tests re-declare it with other options ([`SourceSpec::nexmark_ddl`]).
//! Every other statement is executed verbatim.

use std::fmt::Write as _;

use arrow::datatypes::{DataType, SchemaRef, TimeUnit};
use sluice_connectors::nexmark::NEXMARK_OPTIONS;
use sluice_connectors::{NexmarkConfig, NexmarkStream};
use sluice_sql::{Statement, WatermarkSpec};

use crate::error::{BenchError, Result};

/// A source declared by a script.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// Source name.
    pub name: String,
    /// Declared columns.
    pub schema: SchemaRef,
    /// Event-time declaration.
    pub watermark: Option<WatermarkSpec>,
    /// `LATE DATA TO` stream.
    pub late_data_to: Option<String>,
    /// `WITH` options in written order (keys lower-cased).
    pub options: Vec<(String, String)>,
}

/// One statement of a script.
#[derive(Debug, Clone)]
enum Chunk {
    Source(SourceSpec),
    Other {
        text: String,
        creates_stream: Option<String>,
    },
}

/// A parsed script.
#[derive(Debug, Clone)]
pub struct Script {
    chunks: Vec<Chunk>,
}

impl Script {
    /// Split `text` into statements and classify them.
    pub fn parse(text: &str) -> Result<Self> {
        let mut chunks = Vec::new();
        for part in split_statements(text) {
            let mut stmts = sluice_sql::parse_sql(&part)?;
            let stmt = match stmts.len() {
                0 => continue,
                1 => stmts.remove(0),
                n => {
                    return Err(BenchError::Script(format!(
                        "expected one statement, parsed {n} from: {part}"
                    )))
                }
            };
            chunks.push(match stmt {
                Statement::CreateSource(s) => Chunk::Source(SourceSpec {
                    name: s.name,
                    schema: s.schema,
                    watermark: s.watermark,
                    late_data_to: s.late_data_to,
                    options: s.options.entries().to_vec(),
                }),
                Statement::CreateStream(cs) => Chunk::Other {
                    text: part,
                    creates_stream: Some(cs.name),
                },
                _ => Chunk::Other {
                    text: part,
                    creates_stream: None,
                },
            });
        }
        Ok(Self { chunks })
    }

    /// Every declared source.
    pub fn sources(&self) -> impl Iterator<Item = &SourceSpec> {
        self.chunks.iter().filter_map(|c| match c {
            Chunk::Source(s) => Some(s),
            Chunk::Other { .. } => None,
        })
    }

    /// The stream the script is about: the last one it creates.
    pub fn output(&self) -> Result<&str> {
        self.chunks
            .iter()
            .rev()
            .find_map(|c| match c {
                Chunk::Other {
                    creates_stream: Some(s),
                    ..
                } => Some(s.as_str()),
                _ => None,
            })
            .ok_or_else(|| BenchError::Script("the script creates no stream".into()))
    }

    /// The script's single Nexmark source.
    pub fn nexmark_source(&self) -> Result<&SourceSpec> {
        let mut it = self
            .sources()
            .filter(|s| s.option("connector") == Some("nexmark"));
        match (it.next(), it.next()) {
            (Some(s), None) => Ok(s),
            (None, _) => Err(BenchError::Script(
                "the script declares no source with connector = 'nexmark'".into(),
            )),
            (Some(_), Some(_)) => Err(BenchError::Script(
                "the script declares several Nexmark sources where one was expected".into(),
            )),
        }
    }

    /// The script with every source declared by `render`, as one text.
    pub fn render(&self, mut render: impl FnMut(&SourceSpec) -> Result<String>) -> Result<String> {
        let mut out = String::new();
        for c in &self.chunks {
            match c {
                Chunk::Source(s) => out.push_str(&render(s)?),
                Chunk::Other { text, .. } => out.push_str(text),
            }
            out.push_str(";\n");
        }
        Ok(out)
    }
}

impl SourceSpec {
    /// A `WITH` option's value.
    pub fn option(&self, key: &str) -> Option<&str> {
        self.options
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The generator configuration the source's options describe, with
    /// `overrides` (option name, value) applied on top.
    pub fn nexmark_config(&self, overrides: &[(&str, String)]) -> Result<NexmarkConfig> {
        let stream: NexmarkStream = self
            .option("stream")
            .ok_or_else(|| {
                BenchError::Script(format!("source '{}' has no 'stream' option", self.name))
            })?
            .parse()?;
        let mut cfg = NexmarkConfig::new(stream, self.schema.clone())?;
        for name in NEXMARK_OPTIONS {
            let value = overrides
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .or_else(|| self.option(name));
            if let Some(v) = value {
                cfg.set(name, v)?;
            }
        }
        Ok(cfg)
    }

    /// `CREATE SOURCE` of a push source with the same columns, watermark
    /// and late-data stream.
    pub fn push_ddl(&self) -> Result<String> {
        self.ddl(&[])
    }

    /// `CREATE SOURCE` of the same Nexmark source with `overrides` applied.
    pub fn nexmark_ddl(&self, overrides: &[(&str, String)]) -> Result<String> {
        let mut options = self.options.clone();
        for (k, v) in overrides {
            match options.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.clone(),
                None => options.push((k.to_string(), v.clone())),
            }
        }
        self.ddl(&options)
    }

    fn ddl(&self, options: &[(String, String)]) -> Result<String> {
        let mut cols: Vec<String> = self
            .schema
            .fields()
            .iter()
            .map(|f| Ok(format!("{} {}", f.name(), sql_type(f.data_type())?)))
            .collect::<Result<_>>()?;
        if let Some(w) = &self.watermark {
            cols.push(format!(
                "WATERMARK FOR {c} AS {c} - INTERVAL '{}' MILLISECOND",
                w.delay_ms,
                c = w.column
            ));
        }
        let mut out = format!("CREATE SOURCE {} ({})", self.name, cols.join(", "));
        if let Some(late) = &self.late_data_to {
            let _ = write!(out, " LATE DATA TO {late}");
        }
        if !options.is_empty() {
            let opts: Vec<String> = options
                .iter()
                .map(|(k, v)| format!("{k} = '{}'", v.replace('\'', "''")))
                .collect();
            let _ = write!(out, " WITH ({})", opts.join(", "));
        }
        Ok(out)
    }
}

/// The SQL spelling of a declared column type.
fn sql_type(t: &DataType) -> Result<&'static str> {
    Ok(match t {
        DataType::Int8 => "TINYINT",
        DataType::Int16 => "SMALLINT",
        DataType::Int32 => "INT",
        DataType::Int64 => "BIGINT",
        DataType::Float32 => "REAL",
        DataType::Float64 => "DOUBLE",
        DataType::Boolean => "BOOLEAN",
        DataType::Utf8 => "VARCHAR",
        DataType::Date32 => "DATE",
        DataType::Timestamp(TimeUnit::Millisecond, None) => "TIMESTAMP",
        DataType::Timestamp(TimeUnit::Millisecond, Some(_)) => "TIMESTAMP WITH TIME ZONE",
        other => {
            return Err(BenchError::Script(format!(
                "cannot re-declare a column of type {other}"
            )))
        }
    })
}

/// Split SQL text at top-level `;`, ignoring those inside quotes and comments.
pub fn split_statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                cur.push(c);
                for d in chars.by_ref() {
                    cur.push(d);
                    if d == c {
                        break;
                    }
                }
            }
            '-' if chars.peek() == Some(&'-') => {
                for d in chars.by_ref() {
                    if d == '\n' {
                        cur.push('\n');
                        break;
                    }
                }
            }
            '/' if chars.peek() == Some(&'*') => {
                chars.next();
                let mut prev = ' ';
                for d in chars.by_ref() {
                    if prev == '*' && d == '/' {
                        break;
                    }
                    prev = d;
                }
                cur.push(' ');
            }
            ';' => {
                out.push(std::mem::take(&mut cur));
            }
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = "-- a comment; with a semicolon\n\
        CREATE SOURCE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,\n\
          WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND) LATE DATA TO late\n\
          WITH (connector = 'nexmark', stream = 'bid', events = '100');\n\
        /* block; comment */ CREATE STREAM a AS SELECT auction FROM bid WHERE price > 1;\n\
        CREATE STREAM b AS SELECT auction, ';' AS s FROM a;";

    #[test]
    fn splits_outside_quotes_and_comments() {
        let parts = split_statements(SCRIPT);
        assert_eq!(parts.len(), 3, "{parts:?}");
        assert!(parts[2].ends_with("FROM a"), "{}", parts[2]);
    }

    #[test]
    fn sources_are_redeclared() {
        let s = Script::parse(SCRIPT).expect("parse");
        assert_eq!(s.output().ok(), Some("b"));
        let src = s.nexmark_source().expect("source");
        assert_eq!(src.option("events"), Some("100"));
        let push = src.push_ddl().expect("push ddl");
        assert_eq!(
            push,
            "CREATE SOURCE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP, \
             WATERMARK FOR date_time AS date_time - INTERVAL '2000' MILLISECOND) LATE DATA TO late"
        );
        let again = src
            .nexmark_ddl(&[("events", "7".into()), ("seed", "3".into())])
            .expect("ddl");
        assert!(
            again.ends_with(
                "WITH (connector = 'nexmark', stream = 'bid', events = '7', seed = '3')"
            ),
            "{again}"
        );
        let cfg = src.nexmark_config(&[("seed", "5".into())]).expect("config");
        assert_eq!((cfg.events, cfg.seed), (Some(100), 5));
        let rendered = s.render(|src| src.push_ddl()).expect("render");
        assert_eq!(Script::parse(&rendered).expect("reparse").chunks.len(), 3);
    }
}
