//! Token-level support for Flink's window table-valued functions.
//!
//! sqlparser reads `FROM TABLE(expr)` as a table function, but not the
//! `TABLE name` argument that Flink passes to `TUMBLE`, `HOP` and `SESSION`
//! (it stops at the name). Dropping that one `TABLE` word turns
//! `TABLE(TUMBLE(TABLE src, DESCRIPTOR(ts), size))` into
//! `TABLE(TUMBLE(src, DESCRIPTOR(ts), size))`, which sqlparser parses as a
//! table function whose first argument is the relation's name; the planner
//! (`crate::window_tvf`) then maps it onto the `GROUP BY` window functions.

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Result, SqlError};

use super::is_word;

/// The window TVFs, by the name Flink gives them.
const TVF_NAMES: [&str; 3] = ["TUMBLE", "HOP", "SESSION"];

/// Drop the `TABLE` word before the data argument of every window TVF
/// written as `TABLE(TUMBLE|HOP|SESSION(...))`; refuse `PARTITION BY` in it.
pub(super) fn strip_table_arguments(tokens: Vec<TokenWithSpan>) -> Result<Vec<TokenWithSpan>> {
    // Indices of tokens that are not whitespace, to look ahead by words.
    let solid: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect();
    let tok = |k: usize| solid.get(k).map(|&i| &tokens[i].token);
    let mut drop = vec![false; tokens.len()];
    let mut k = 0;
    while k < solid.len() {
        let is_tvf = tok(k).is_some_and(|t| is_word(t, "TABLE"))
            && tok(k + 1) == Some(&Token::LParen)
            && tok(k + 2).is_some_and(|t| TVF_NAMES.iter().any(|n| is_word(t, n)))
            && tok(k + 3) == Some(&Token::LParen);
        if !is_tvf {
            // `FROM TUMBLE(TABLE t, ...)` without the `TABLE(...)` around it.
            let bare = tok(k).is_some_and(|t| TVF_NAMES.iter().any(|n| is_word(t, n)))
                && tok(k + 1) == Some(&Token::LParen)
                && tok(k + 2).is_some_and(|t| is_word(t, "TABLE"));
            if bare {
                let name = tok(k).map(ToString::to_string).unwrap_or_default();
                return Err(SqlError::Unsupported(format!(
                    "{0}(TABLE ...) outside TABLE(...): write FROM TABLE({0}(TABLE t, DESCRIPTOR(ts), ...))",
                    name.to_ascii_uppercase()
                )));
            }
            k += 1;
            continue;
        }
        let name = tok(k + 2).map(ToString::to_string).unwrap_or_default();
        // Walk the call's arguments at depth 1.
        let mut depth = 0i32;
        let mut j = k + 3;
        let mut arg_start = true;
        while let Some(t) = tok(j) {
            match t {
                Token::LParen => depth += 1,
                Token::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                _ => {}
            }
            if depth == 1 {
                if arg_start && is_word(t, "TABLE") {
                    drop[solid[j]] = true;
                } else if is_word(t, "PARTITION") {
                    return Err(SqlError::Unsupported(format!(
                        "PARTITION BY inside {}(TABLE ...): sessions are already per GROUP BY key; write SESSION(TABLE t, DESCRIPTOR(ts), gap) and GROUP BY window_start, window_end and the partition columns",
                        name.to_ascii_uppercase()
                    )));
                }
                arg_start = matches!(t, Token::LParen | Token::Comma | Token::RArrow);
            }
            j += 1;
        }
        k = j;
    }
    Ok(tokens
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|(t, _)| t)
        .collect())
}
