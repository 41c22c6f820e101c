//! Token-level support for `ASOF JOIN`, in both common spellings.
//!
//! sqlparser reads Snowflake's `l ASOF JOIN r MATCH_CONDITION (c) ON k`,
//! but DataFusion refuses to plan it, and neither DuckDB's `l ASOF JOIN r ON
//! k AND c` nor a `LEFT ASOF JOIN` parses at all. Both are rewritten here
//! into an ordinary `JOIN` (or `LEFT JOIN`) whose `ON` starts with a marker
//! call, `__asof_match(c)` for Snowflake's spelling and `__asof_match(TRUE)`
//! for DuckDB's (the match condition is then one of the `ON` conjuncts).
//! DataFusion plans that as any join; the planner (`crate::asof`) finds the
//! marker and builds the ASOF join from the condition.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::asof::MARKER;
use crate::error::{Result, SqlError};

use super::is_word;

/// What a token of the input becomes.
enum Edit {
    Drop,
    Replace(Vec<Token>),
}

/// Rewrite every `[LEFT [OUTER] | INNER] ASOF JOIN` of a statement.
pub(super) fn rewrite(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    let solid: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect();
    let tok = |k: usize| solid.get(k).map(|&i| &tokens[i].token);
    let mut edits: Vec<Option<Edit>> = (0..tokens.len()).map(|_| None).collect();
    for k in 0..solid.len() {
        if !(tok(k).is_some_and(|t| is_word(t, "ASOF"))
            && tok(k + 1).is_some_and(|t| is_word(t, "JOIN")))
        {
            continue;
        }
        let before = k.checked_sub(1).and_then(tok);
        for side in ["RIGHT", "FULL"] {
            let outer = before.is_some_and(|t| is_word(t, "OUTER"));
            let at = if outer {
                k.checked_sub(2)
            } else {
                before.map(|_| k - 1)
            };
            if at.and_then(tok).is_some_and(|t| is_word(t, side)) {
                return Err(SqlError::Unsupported(format!(
                    "{side} ASOF JOIN (only ASOF JOIN and LEFT ASOF JOIN are supported); swap the inputs and write LEFT ASOF JOIN"
                )));
            }
        }
        edits[solid[k]] = Some(Edit::Drop);
        // The first MATCH_CONDITION or ON after the right input, at its depth.
        let mut depth = 0i32;
        let mut j = k + 2;
        let found = loop {
            let Some(t) = tok(j) else { break None };
            match t {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => break None,
                Token::RParen => depth -= 1,
                t if depth == 0 && (is_word(t, "MATCH_CONDITION") || is_word(t, "ON")) => {
                    break Some(j)
                }
                t if depth == 0
                    && ["JOIN", "WHERE", "GROUP", "UNION", "HAVING"]
                        .iter()
                        .any(|w| is_word(t, w)) =>
                {
                    break None
                }
                _ => {}
            }
            j += 1;
        };
        let Some(j) = found else {
            return Err(SqlError::Unsupported(
                "ASOF JOIN without a condition; write l ASOF JOIN r ON l.k = r.k AND l.ts >= r.ts"
                    .into(),
            ));
        };
        let marker = Token::make_word(MARKER, None);
        if tok(j).is_some_and(|t| is_word(t, "ON")) {
            // DuckDB: `ON cond` becomes `ON __asof_match(TRUE) AND cond`.
            edits[solid[j]] = Some(Edit::Replace(vec![
                Token::make_keyword("ON"),
                marker,
                Token::LParen,
                Token::make_keyword("TRUE"),
                Token::RParen,
                Token::make_keyword("AND"),
            ]));
            continue;
        }
        // Snowflake: `MATCH_CONDITION (c) [ON k]` becomes
        // `ON __asof_match(c) [AND k]`.
        if tok(j + 1) != Some(&Token::LParen) {
            return Err(SqlError::Syntax(
                "expected ( after MATCH_CONDITION".to_string(),
            ));
        }
        let mut depth = 0i32;
        let mut close = None;
        for m in j + 1..solid.len() {
            match tok(m) {
                Some(Token::LParen) => depth += 1,
                Some(Token::RParen) => {
                    depth -= 1;
                    if depth == 0 {
                        close = Some(m);
                        break;
                    }
                }
                _ => {}
            }
        }
        let Some(close) = close else {
            return Err(SqlError::Syntax(
                "MATCH_CONDITION ( ... has no closing parenthesis".into(),
            ));
        };
        if tok(close + 1).is_some_and(|t| is_word(t, "USING")) {
            return Err(SqlError::Unsupported(
                "USING (...) after an ASOF JOIN's MATCH_CONDITION; write ON l.k = r.k".into(),
            ));
        }
        edits[solid[j]] = Some(Edit::Replace(vec![Token::make_keyword("ON"), marker]));
        if tok(close + 1).is_some_and(|t| is_word(t, "ON")) {
            edits[solid[close + 1]] = Some(Edit::Replace(vec![Token::make_keyword("AND")]));
        }
    }
    let mut out = Vec::with_capacity(tokens.len());
    for (t, edit) in tokens.into_iter().zip(edits) {
        match edit {
            None => out.push(t),
            Some(Edit::Drop) => {}
            Some(Edit::Replace(new)) => {
                for n in new {
                    out.push(TokenWithSpan::new(n, t.span));
                    out.push(TokenWithSpan::new(
                        Token::Whitespace(datafusion::sql::sqlparser::tokenizer::Whitespace::Space),
                        t.span,
                    ));
                }
            }
        }
    }
    Ok(out)
}
