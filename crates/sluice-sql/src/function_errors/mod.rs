//! Function calls whose argument types fit no signature, as user errors.
//!
//! DataFusion reports `SUM(varchar)` as an "Internal error ... likely caused
//! by a bug in DataFusion" wrapped in a planning error, with the candidate
//! signatures in the text. The call is the user's mistake, not a bug: this
//! module recognizes such errors and turns them into
//! [`SqlError::Signature`] (code SLC-SQL-004, like every type error) naming
//! the call with its argument types in SQL terms and the accepted forms.
//! DataFusion exposes no structured form of these errors, so its message
//! is read; an error this module does not recognize stays a planning error.

use datafusion::error::DataFusionError;

use crate::error::SqlError;

#[cfg(test)]
mod tests;

/// Markers of DataFusion's messages for a call no signature accepts.
const NO_MATCH: &str = "No function matches the given name and argument types '";
const CANDIDATES: &str = "Candidate functions:";

/// Arrow type names as DataFusion prints them, and their SQL spelling.
const SQL_NAMES: &[(&str, &str)] = &[
    ("Utf8View", "VARCHAR"),
    ("LargeUtf8", "VARCHAR"),
    ("Utf8", "VARCHAR"),
    ("String", "VARCHAR"),
    ("Int8", "TINYINT"),
    ("Int16", "SMALLINT"),
    ("Int32", "INT"),
    ("Int64", "BIGINT"),
    ("UInt8", "TINYINT UNSIGNED"),
    ("UInt16", "SMALLINT UNSIGNED"),
    ("UInt32", "INT UNSIGNED"),
    ("UInt64", "BIGINT UNSIGNED"),
    ("Float32", "REAL"),
    ("Float64", "DOUBLE"),
    ("Boolean", "BOOLEAN"),
    ("Date32", "DATE"),
    ("Decimal", "DECIMAL"),
    ("Decimal128", "DECIMAL"),
    ("Null", "NULL"),
];

impl SqlError {
    /// The user error for a call no signature accepts, or the DataFusion
    /// error back unchanged when it is something else.
    pub fn try_signature(e: DataFusionError) -> std::result::Result<SqlError, DataFusionError> {
        let text = e.to_string();
        match describe_no_match(&text) {
            Some(message) => Ok(SqlError::Signature {
                message,
                source: Box::new(e),
            }),
            None => Err(e),
        }
    }
}

/// `sum(VARCHAR) matches no signature of sum (it takes sum(DECIMAL), ...)`,
/// from DataFusion's message.
fn describe_no_match(text: &str) -> Option<String> {
    let start = text.find(NO_MATCH)? + NO_MATCH.len();
    let call = &text[start..];
    let call = &call[..call.find("'.").or_else(|| call.find('\''))?];
    let name = call.split('(').next().unwrap_or(call);
    let candidates: Vec<String> = text
        .find(CANDIDATES)
        .map(|at| {
            text[at + CANDIDATES.len()..]
                .lines()
                .map(str::trim)
                .skip_while(|l| l.is_empty())
                .take_while(|l| l.starts_with(name) && l.ends_with(')'))
                .map(sql_type_names)
                .collect()
        })
        .unwrap_or_default();
    let mut message = format!(
        "function {} cannot take these argument types",
        sql_type_names(call)
    );
    if !candidates.is_empty() {
        message.push_str(&format!(" (it takes {})", candidates.join(", ")));
    }
    message.push_str("; CAST the arguments to a type it takes");
    Some(message)
}

/// Replace whole Arrow type words by their SQL names.
fn sql_type_names(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let w = std::mem::take(word);
        match SQL_NAMES.iter().find(|(arrow, _)| *arrow == w) {
            Some((_, sql)) => out.push_str(sql),
            None => out.push_str(&w),
        }
    };
    for c in text.chars() {
        if c.is_ascii_alphanumeric() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}
