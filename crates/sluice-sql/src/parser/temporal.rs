//! Token-level support for Flink's `JOIN t FOR SYSTEM_TIME AS OF l.ts [AS
//! a] ON l.k = t.k`: an event-time temporal join when `t` is a versioned
//! source, a lookup join when `t` is a lookup table.
//!
//! sqlparser reads a table version only in dialects that would also take
//! other words after a table name for one, and DataFusion refuses it, so
//! the clause is moved into the join's condition as a marker call: the join
//! becomes `JOIN t [AS a] ON __temporal_as_of(l.ts) AND l.k = t.k`, which
//! DataFusion plans as any join. The planner takes it apart
//! (`crate::temporal`), or drops it for a lookup join (read at processing
//! time whatever the time says). `PROCTIME()` becomes `NULL`: no event
//! time, which only a lookup join accepts.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan, Whitespace};

use crate::error::{Result, SqlError};
use crate::temporal::MARKER;

use super::is_word;

const HOW: &str = "write l JOIN t FOR SYSTEM_TIME AS OF l.ts ON l.k = t.k";

/// Rewrite every `FOR SYSTEM_TIME AS OF` of a statement; also return the
/// name of the table each clause followed.
pub(super) fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<(Vec<TokenWithSpan>, Vec<String>)> {
    let mut tokens = tokens;
    let mut tables = Vec::new();
    while let Some((out, table)) = rewrite_first(&tokens)? {
        tokens = out;
        tables.push(table);
    }
    Ok((tokens, tables))
}

/// Rewrite the first clause, if there is one.
fn rewrite_first(tokens: &[TokenWithSpan]) -> Result<Option<(Vec<TokenWithSpan>, String)>> {
    let solid: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
        .map(|(i, _)| i)
        .collect();
    let tok = |k: usize| solid.get(k).map(|&i| &tokens[i].token);
    let Some(k) = (0..solid.len()).find(|&k| {
        ["FOR", "SYSTEM_TIME", "AS", "OF"]
            .iter()
            .enumerate()
            .all(|(d, w)| tok(k + d).is_some_and(|t| is_word(t, w)))
    }) else {
        return Ok(None);
    };
    let table = match k.checked_sub(1).and_then(tok) {
        Some(Token::Word(w)) => w.value.clone(),
        _ => {
            return Err(SqlError::Syntax(
                "FOR SYSTEM_TIME AS OF must follow a table name".into(),
            ))
        }
    };
    let start = k + 4;
    let proctime = tok(start).is_some_and(|t| is_word(t, "PROCTIME"))
        && tok(start + 1) == Some(&Token::LParen)
        && tok(start + 2) == Some(&Token::RParen);
    // The time expression runs to the ON (or AS alias) at its depth.
    let mut depth = 0i32;
    let mut j = start;
    let end = loop {
        let Some(t) = tok(j) else { break None };
        match t {
            Token::LParen => depth += 1,
            Token::RParen if depth == 0 => break None,
            Token::RParen => depth -= 1,
            t if depth == 0 && (is_word(t, "ON") || is_word(t, "AS")) => break Some(j),
            t if depth == 0
                && ["JOIN", "WHERE", "GROUP", "UNION", "HAVING", "USING"]
                    .iter()
                    .any(|w| is_word(t, w)) =>
            {
                break None
            }
            _ => {}
        }
        j += 1;
    };
    let Some(end) = end else {
        return Err(SqlError::Unsupported(format!(
            "FOR SYSTEM_TIME AS OF without an ON condition; {HOW}"
        )));
    };
    if end == start {
        return Err(SqlError::Unsupported(format!(
            "FOR SYSTEM_TIME AS OF without a time; {HOW}"
        )));
    }
    let (alias, on) = if tok(end).is_some_and(|t| is_word(t, "AS")) {
        (Some(end + 1), end + 2)
    } else {
        (None, end)
    };
    if !tok(on).is_some_and(|t| is_word(t, "ON")) {
        return Err(SqlError::Unsupported(format!(
            "FOR SYSTEM_TIME AS OF without an ON condition; {HOW}"
        )));
    }
    let span = tokens[solid[k]].span;
    let make = |t: Token| TokenWithSpan::new(t, span);
    let space = || make(Token::Whitespace(Whitespace::Space));
    let mut out: Vec<TokenWithSpan> = tokens[..solid[k]].to_vec();
    if let Some(a) = alias {
        out.extend([
            make(Token::make_keyword("AS")),
            space(),
            tokens[solid[a]].clone(),
        ]);
    }
    out.extend([
        space(),
        make(Token::make_keyword("ON")),
        space(),
        make(Token::make_word(MARKER, None)),
        make(Token::LParen),
    ]);
    if proctime && end == start + 3 {
        out.push(make(Token::make_keyword("NULL")));
    } else {
        out.extend(tokens[solid[start]..solid[end]].iter().cloned());
    }
    out.extend([
        make(Token::RParen),
        space(),
        make(Token::make_keyword("AND")),
        space(),
    ]);
    out.extend(tokens[solid[on] + 1..].iter().cloned());
    Ok(Some((out, table)))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use crate::ast::Statement;
    use crate::parser::parse_sql;

    /// `PRIMARY KEY (k)` is stored; a column named `primary` is still a
    /// column; a key naming no column is refused.
    #[test]
    fn primary_key_on_create_source() {
        let s = parse_sql(
            "CREATE SOURCE v (primary BIGINT, k BIGINT, ts TIMESTAMP, PRIMARY KEY (k, primary), \
             WATERMARK FOR ts AS ts - INTERVAL '1' SECOND)",
        )
        .unwrap();
        let Statement::CreateSource(src) = &s[0] else {
            panic!("{s:?}")
        };
        assert_eq!(src.primary_key, vec!["k", "primary"]);
        assert_eq!(src.schema.fields().len(), 3);
        let err = parse_sql("CREATE SOURCE v (k BIGINT, PRIMARY KEY (x))").unwrap_err();
        assert_eq!(
            err.to_string(),
            "PRIMARY KEY (x): source 'v' has no such column"
        );
    }
}
