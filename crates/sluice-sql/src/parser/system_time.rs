//! Token-level support for Flink's lookup-join spelling
//! `JOIN dim FOR SYSTEM_TIME AS OF s.proc_time [AS d] ON ...`.
//!
//! sqlparser reads `FOR SYSTEM_TIME AS OF` only in dialects with table
//! versioning, which would also turn words such as `AT` or `CHANGES` after
//! a table name into versions. So the clause is removed here, before
//! parsing, and the names of the tables it followed are recorded: the
//! planner accepts them only when they are lookup tables (read at
//! processing time, whatever the time expression says).

use datafusion::sql::sqlparser::tokenizer::{Token, TokenWithSpan};

use crate::error::{Result, SqlError};

use super::is_word;

/// Words that end the time expression of `FOR SYSTEM_TIME AS OF expr`.
const ENDS: [&str; 14] = [
    "AS", "ON", "JOIN", "INNER", "LEFT", "RIGHT", "FULL", "CROSS", "WHERE", "GROUP", "USING",
    "NATURAL", "UNION", "HAVING",
];

/// Remove every `FOR SYSTEM_TIME AS OF expr` clause; return the tokens
/// left and the name of the table each clause followed.
pub(super) fn strip_system_time(
    tokens: Vec<TokenWithSpan>,
) -> Result<(Vec<TokenWithSpan>, Vec<String>)> {
    let solid: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !matches!(t.token, Token::Whitespace(_)))
        .map(|(i, _)| i)
        .collect();
    let tok = |k: usize| solid.get(k).map(|&i| &tokens[i].token);
    let mut drop = vec![false; tokens.len()];
    let mut tables = Vec::new();
    let mut k = 0;
    while k < solid.len() {
        let clause = ["FOR", "SYSTEM_TIME", "AS", "OF"]
            .iter()
            .enumerate()
            .all(|(j, w)| tok(k + j).is_some_and(|t| is_word(t, w)));
        if !clause {
            k += 1;
            continue;
        }
        let table = match k.checked_sub(1).and_then(tok) {
            Some(Token::Word(w)) => w.value.clone(),
            _ => {
                return Err(SqlError::Syntax(
                    "FOR SYSTEM_TIME AS OF must follow a table name".into(),
                ))
            }
        };
        let mut j = k + 4;
        let mut depth = 0i32;
        while let Some(t) = tok(j) {
            match t {
                Token::LParen => depth += 1,
                Token::RParen if depth == 0 => break,
                Token::RParen => depth -= 1,
                Token::Comma | Token::SemiColon | Token::EOF if depth == 0 => break,
                t if depth == 0 && ENDS.iter().any(|w| is_word(t, w)) => break,
                _ => {}
            }
            j += 1;
        }
        if j == k + 4 {
            return Err(SqlError::Syntax(format!(
                "FOR SYSTEM_TIME AS OF after '{table}' needs a time expression (such as PROCTIME() or s.proc_time)"
            )));
        }
        for d in &mut drop[solid[k]..solid.get(j).copied().unwrap_or(tokens.len())] {
            *d = true;
        }
        tables.push(table);
        k = j;
    }
    let kept = tokens
        .into_iter()
        .zip(drop)
        .filter(|(_, d)| !d)
        .map(|(t, _)| t)
        .collect();
    Ok((kept, tables))
}
