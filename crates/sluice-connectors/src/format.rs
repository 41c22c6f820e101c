//! The file formats understood by the file source and sink.

use std::fmt;
use std::path::Path;
use std::str::FromStr;

use crate::error::ConnectorError;

/// On-disk encoding of a file source or sink.
///
/// Kept as a closed enum (rather than a trait object registry) because the
/// set of formats is small and every format needs format-specific decoding
/// code anyway; matching on it keeps dispatch explicit and cheap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileFormat {
    /// Comma separated values with a header row.
    Csv,
    /// Newline delimited JSON: one object per line.
    JsonLines,
    /// Apache Parquet.
    Parquet,
}

/// Spellings accepted by [`FileFormat::from_str`], listed in error messages.
const ACCEPTED: &str = "csv, json, jsonl, ndjson, parquet";

impl FileFormat {
    /// Canonical lower-case name, the inverse of [`FromStr`].
    pub fn name(self) -> &'static str {
        match self {
            FileFormat::Csv => "csv",
            FileFormat::JsonLines => "jsonl",
            FileFormat::Parquet => "parquet",
        }
    }

    /// Guess the format from a file extension (`.csv`, `.json`, `.jsonl`,
    /// `.ndjson`, `.parquet`), so callers can offer a sensible default when
    /// the user does not name a format explicitly.
    pub fn from_path(path: &Path) -> Option<FileFormat> {
        let ext = path.extension()?.to_str()?;
        ext.parse().ok()
    }
}

impl fmt::Display for FileFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FileFormat {
    type Err = ConnectorError;

    /// Parses a format name case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "csv" => Ok(FileFormat::Csv),
            "json" | "jsonl" | "ndjson" => Ok(FileFormat::JsonLines),
            "parquet" => Ok(FileFormat::Parquet),
            _ => Err(ConnectorError::invalid_option(
                "format",
                format!(
                    "unknown file format '{}' (accepted: {ACCEPTED})",
                    crate::quote::bounded(s)
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_all_spellings() {
        assert_eq!("csv".parse::<FileFormat>().ok(), Some(FileFormat::Csv));
        for s in ["json", "jsonl", "ndjson", "JSONL"] {
            assert_eq!(s.parse::<FileFormat>().ok(), Some(FileFormat::JsonLines));
        }
        assert_eq!(
            "parquet".parse::<FileFormat>().ok(),
            Some(FileFormat::Parquet)
        );
        assert_eq!(
            FileFormat::from_path(Path::new("a/b.ndjson")),
            Some(FileFormat::JsonLines)
        );
        assert_eq!(FileFormat::from_path(Path::new("a/b")), None);
    }

    #[test]
    fn unknown_format_names_value_and_accepted() {
        let err = match "xml".parse::<FileFormat>() {
            Ok(f) => panic!("unexpectedly parsed {f}"),
            Err(e) => e,
        };
        assert_eq!(err.code(), "SLC-CONN-004");
        assert_eq!(
            err.to_string(),
            "invalid value for option 'format': unknown file format 'xml' \
             (accepted: csv, json, jsonl, ndjson, parquet)"
        );
    }
}
