//! `CREATE PROCESS FUNCTION`: declaring a process function served by a
//! worker (Python or remote Rust) from SQL, so a `sluice run` script needs
//! no Rust.
//!
//! ```sql
//! CREATE PROCESS FUNCTION fraud VERSION 1
//!     (key BIGINT NOT NULL, amount BIGINT NOT NULL)   -- input columns
//!     KEY (key)
//!     RETURNS (value BIGINT NOT NULL)                 -- output columns
//!     WITH (runtime = 'python', path = 'handlers/fraud', entry = 'fraud:Detector');
//! ```
//!
//! The options are checked where the function is registered, which knows
//! each runtime's settings; here only the shape is parsed.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::{expect_end, expect_word, ident, parse_column, parse_with_options, version_number};
use crate::ast::{CreateProcessFunction, Statement};
use crate::error::{Result, SqlError};

/// A parenthesized column list of `owner`.
fn columns(p: &mut Parser<'_>, owner: &str) -> Result<Arc<Schema>> {
    p.expect_token(&Token::LParen)?;
    let mut fields: Vec<Field> = Vec::new();
    loop {
        parse_column(p, owner, &mut fields)?;
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen)?;
        break;
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// `CREATE PROCESS FUNCTION name VERSION n (input) KEY (cols) RETURNS
/// (output) WITH (options)`.
pub(super) fn parse(p: &mut Parser<'_>) -> Result<Statement> {
    expect_word(p, "CREATE")?;
    expect_word(p, "PROCESS")?;
    expect_word(p, "FUNCTION")?;
    let name = ident(p)?;
    expect_word(p, "VERSION")?;
    let version = version_number(p, &format!("process function '{name}'"))?;
    let input = columns(p, &format!("process function '{name}' input"))?;
    expect_word(p, "KEY")?;
    p.expect_token(&Token::LParen)?;
    let mut key = Vec::new();
    loop {
        let k = ident(p)?;
        if input.index_of(&k).is_err() {
            return Err(SqlError::Catalog(format!(
                "process function '{name}': key column '{k}' is not one of its input columns"
            )));
        }
        key.push(k);
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen)?;
        break;
    }
    expect_word(p, "RETURNS")?;
    let output = columns(p, &format!("process function '{name}' output"))?;
    let options = parse_with_options(p)?;
    expect_end(p, "CREATE PROCESS FUNCTION")?;
    Ok(Statement::CreateProcessFunction(CreateProcessFunction {
        name,
        version,
        input,
        key,
        output,
        options,
    }))
}

#[cfg(test)]
mod tests {
    use crate::ast::Statement;
    use crate::parse_sql;

    #[test]
    fn a_declaration_parses_into_its_parts() {
        let s = parse_sql(
            "CREATE PROCESS FUNCTION Fraud VERSION 3 (key BIGINT NOT NULL, amount BIGINT)
             KEY (key) RETURNS (value BIGINT NOT NULL)
             WITH (runtime = 'python', path = 'h/fraud', entry = 'fraud:Detector')",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let Some(Statement::CreateProcessFunction(f)) = s.first() else {
            panic!("{s:?}")
        };
        assert_eq!((f.name.as_str(), f.version), ("fraud", 3));
        assert_eq!(f.key, ["key"]);
        assert_eq!(f.input.fields().len(), 2);
        assert!(!f.input.field(0).is_nullable() && f.input.field(1).is_nullable());
        assert_eq!(f.output.field(0).name(), "value");
        let mut o = f.options.clone();
        assert_eq!(o.take("runtime").as_deref(), Some("python"));
        assert_eq!(o.take("entry").as_deref(), Some("fraud:Detector"));
    }

    #[test]
    fn each_malformed_declaration_is_refused_by_name() {
        let cases = [
            ("CREATE PROCESS FUNCTION f (k BIGINT) KEY (k) RETURNS (v BIGINT)", "expected VERSION"),
            ("CREATE PROCESS FUNCTION f VERSION x (k BIGINT) KEY (k) RETURNS (v BIGINT)", "expected a version number after VERSION"),
            ("CREATE PROCESS FUNCTION f VERSION 1 (k BIGINT) KEY (z) RETURNS (v BIGINT)", "key column 'z' is not one of its input columns"),
            ("CREATE PROCESS FUNCTION f VERSION 1 (k BIGINT, k INT) KEY (k) RETURNS (v BIGINT)", "input declares column 'k' twice"),
            ("CREATE PROCESS FUNCTION f VERSION 1 (k BIGINT) KEY (k) (v BIGINT)", "expected RETURNS"),
            ("CREATE PROCESS FUNCTION f VERSION 1 (k BIGINT) KEY (k) RETURNS (v BIGINT) WITH (a = 1, a = 2)", "option 'a' is given twice"),
            ("CREATE PROCESS FUNCTION f VERSION 1 (k BIGINT) KEY (k) RETURNS (v BIGINT) extra", "CREATE PROCESS FUNCTION"),
        ];
        for (sql, words) in cases {
            let e = match parse_sql(sql) {
                Ok(s) => panic!("{sql} parsed as {s:?}"),
                Err(e) => e.to_string(),
            };
            assert!(e.contains(words), "{sql}: missing '{words}' in {e}");
        }
    }
}
