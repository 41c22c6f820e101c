//! Parsing the Sluice dialect into typed [`Statement`]s.
//!
//! The text is tokenized once by sqlparser; statements are split at top-level
//! semicolons; each is dispatched on its leading words. Streaming clauses that
//! standard SQL lacks (`WATERMARK FOR`, `LATE DATA TO`, `EMIT ...`) are parsed
//! here with sqlparser's own token-level API, and everything relational is
//! left to sqlparser's query and expression parsers.

use std::sync::Arc;

use arrow::datatypes::{Field, Schema};
use datafusion::sql::sqlparser::ast as sp;
use datafusion::sql::sqlparser::dialect::GenericDialect;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::{Location, Span, Token, TokenWithSpan, Tokenizer};

use crate::ast::{
    CreateProcessStream, CreateSink, CreateSource, CreateStream, EmitMode, ObjectKind, Statement,
    WatermarkSpec, WithOptions,
};
use crate::error::{Result, SqlError};
use crate::types::arrow_type;

mod asof;
mod process_function;
mod temporal;
mod window_tvf;

/// Parse a script of `;`-separated statements.
pub fn parse_sql(sql: &str) -> Result<Vec<Statement>> {
    let dialect = GenericDialect {};
    let tokens = Tokenizer::new(&dialect, sql).tokenize_with_location()?;
    split_statements(tokens)
        .into_iter()
        .map(parse_statement_tokens)
        .collect()
}

/// Split a token list at top-level semicolons, dropping empty statements.
///
/// Each statement ends with an end-of-input token placed right after its
/// last word, so an error "at the end" still says where (sqlparser's own
/// end-of-input token has no position).
fn split_statements(tokens: Vec<TokenWithSpan>) -> Vec<Vec<TokenWithSpan>> {
    let mut out = Vec::new();
    let mut current = Vec::new();
    let mut depth = 0i32;
    for t in tokens {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            Token::SemiColon if depth == 0 => {
                if has_content(&current) {
                    out.push(with_located_end(std::mem::take(&mut current)));
                } else {
                    current.clear();
                }
                continue;
            }
            _ => {}
        }
        current.push(t);
    }
    if has_content(&current) {
        out.push(with_located_end(current));
    }
    out
}

fn with_located_end(mut tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let end = tokens
        .iter()
        .rev()
        .find(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
        .map_or(Location::new(0, 0), |t| t.span.end);
    tokens.retain(|t| t.token != Token::EOF);
    tokens.push(TokenWithSpan::new(Token::EOF, Span::new(end, end)));
    tokens
}

/// What was found where a word was expected, with its position.
fn found(t: &TokenWithSpan) -> String {
    let at = t.span.start;
    match &t.token {
        Token::EOF => format!("the end of the statement{at}"),
        Token::Word(w) => format!("unknown word '{}'{at}", w.value),
        other => format!("'{other}'{at}"),
    }
}

fn has_content(tokens: &[TokenWithSpan]) -> bool {
    tokens
        .iter()
        .any(|t| !matches!(t.token, Token::Whitespace(_) | Token::EOF))
}

/// Whether a token is the unquoted word `word` (case-insensitive).
fn is_word(t: &Token, word: &str) -> bool {
    matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case(word))
}

/// Consume the next token if it is the unquoted word `word`.
fn parse_word(p: &mut Parser<'_>, word: &str) -> bool {
    if is_word(&p.peek_token().token, word) {
        p.next_token();
        true
    } else {
        false
    }
}

/// An identifier as DataFusion resolves it: unquoted names are lower-cased.
fn ident(p: &mut Parser<'_>) -> Result<String> {
    let id = p.parse_identifier()?;
    Ok(match id.quote_style {
        Some(_) => id.value,
        None => id.value.to_ascii_lowercase(),
    })
}

fn same_ident(id: &sp::Ident, name: &str) -> bool {
    match id.quote_style {
        Some(_) => id.value == name,
        None => id.value.eq_ignore_ascii_case(name),
    }
}

fn expect_word(p: &mut Parser<'_>, word: &str) -> Result<()> {
    if parse_word(p, word) {
        Ok(())
    } else {
        Err(SqlError::Syntax(format!(
            "expected {word}, found {}",
            found(&p.peek_token())
        )))
    }
}

fn expect_end(p: &mut Parser<'_>, what: &str) -> Result<()> {
    let t = p.peek_token();
    if t.token == Token::EOF {
        Ok(())
    } else {
        Err(SqlError::Syntax(format!(
            "unexpected {}{} after {what}",
            t.token, t.span.start
        )))
    }
}

fn parse_statement_tokens(tokens: Vec<TokenWithSpan>) -> Result<Statement> {
    let dialect = GenericDialect {};
    let words: Vec<Token> = tokens
        .iter()
        .map(|t| t.token.clone())
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .filter(|t| *t != Token::EOF)
        .take(4)
        .collect();
    let lead = |i: usize, w: &str| words.get(i).is_some_and(|t| is_word(t, w));

    if lead(0, "EXPLAIN") {
        let rest = strip_leading_word(tokens);
        return Ok(Statement::Explain(Box::new(parse_statement_tokens(rest)?)));
    }
    if lead(0, "CREATE") && (lead(1, "STREAM") || (lead(1, "MATERIALIZED") && lead(2, "VIEW"))) {
        let (tokens, emit) = split_emit_clause(tokens)?;
        let tokens = window_tvf::strip_table_arguments(tokens)?;
        let tokens = asof::rewrite(tokens)?;
        let (tokens, system_time) = temporal::rewrite(tokens)?;
        let mut p = Parser::new(&dialect).with_tokens_with_locations(tokens);
        return parse_create_stream(&mut p, emit, system_time);
    }
    let mut p = Parser::new(&dialect).with_tokens_with_locations(tokens);
    if lead(0, "CREATE") && lead(1, "SOURCE") {
        return parse_create_source(&mut p);
    }
    if lead(0, "CREATE") && lead(1, "SINK") {
        return parse_create_sink(&mut p);
    }
    if lead(0, "CREATE") && lead(1, "PROCESS") && lead(2, "FUNCTION") {
        return process_function::parse(&mut p);
    }
    if lead(0, "CREATE") {
        // None of the CREATE forms above: name the word that is not one.
        p.next_token();
        parse_kind(&mut p, false, "CREATE")?;
        return Err(SqlError::Syntax(
            "expected CREATE SOURCE | STREAM | MATERIALIZED VIEW | SINK | PROCESS FUNCTION".into(),
        ));
    }
    if lead(0, "DROP") {
        return parse_drop(&mut p);
    }
    if lead(0, "SHOW") && lead(1, "CHECKPOINTS") && words.len() == 2 {
        return Ok(Statement::ShowCheckpoints);
    }
    if lead(0, "SHOW") && lead(1, "CLUSTER") && words.len() == 2 {
        return Ok(Statement::ShowCluster);
    }
    if lead(0, "SHOW") && lead(1, "EXCHANGES") {
        if words.len() != 2 {
            return Err(SqlError::Syntax("SHOW EXCHANGES takes no arguments".into()));
        }
        return Ok(Statement::ShowExchanges);
    }
    if lead(0, "SHOW") && lead(1, "PROCESS") {
        if !(lead(2, "FUNCTIONS") && words.len() == 3) {
            return Err(SqlError::Syntax("expected SHOW PROCESS FUNCTIONS".into()));
        }
        return Ok(Statement::ShowProcessFunctions);
    }
    if lead(0, "SHOW") {
        return parse_show(&mut p);
    }
    if lead(0, "CHECKPOINT") {
        if words.len() != 1 {
            return Err(SqlError::Syntax("CHECKPOINT takes no arguments".into()));
        }
        return Ok(Statement::Checkpoint);
    }
    if lead(0, "DESCRIBE") || lead(0, "DESC") {
        p.next_token();
        let name = ident(&mut p)?;
        expect_end(&mut p, "DESCRIBE name")?;
        return Ok(Statement::Describe(name));
    }
    if lead(0, "SET") {
        return parse_set(&mut p);
    }
    if lead(0, "SELECT") || lead(0, "WITH") || words.first() == Some(&Token::LParen) {
        let q = p.parse_query()?;
        expect_end(&mut p, "the query")?;
        return Ok(Statement::Query(q));
    }
    let first = words.first().map(|t| t.to_string()).unwrap_or_default();
    Err(SqlError::Unsupported(format!(
        "statement starting with '{first}' (supported: CREATE SOURCE | STREAM | MATERIALIZED VIEW | SINK, DROP, SHOW, DESCRIBE, EXPLAIN, SET, SELECT, CHECKPOINT)"
    )))
}

fn strip_leading_word(tokens: Vec<TokenWithSpan>) -> Vec<TokenWithSpan> {
    let mut seen = false;
    tokens
        .into_iter()
        .filter(|t| {
            if seen || matches!(t.token, Token::Whitespace(_)) {
                return true;
            }
            seen = true;
            false
        })
        .collect()
}

/// Remove a trailing `EMIT ON WINDOW CLOSE` / `EMIT CHANGES` clause.
///
/// It is split off at the token level because sqlparser would otherwise read
/// `FROM t EMIT` as a table alias.
fn split_emit_clause(
    mut tokens: Vec<TokenWithSpan>,
) -> Result<(Vec<TokenWithSpan>, Option<EmitMode>)> {
    let mut depth = 0i32;
    let mut emit_at = None;
    for (i, t) in tokens.iter().enumerate() {
        match t.token {
            Token::LParen => depth += 1,
            Token::RParen => depth -= 1,
            _ if depth == 0 && is_word(&t.token, "EMIT") => emit_at = Some(i),
            _ => {}
        }
    }
    let Some(at) = emit_at else {
        return Ok((tokens, None));
    };
    let tail: Vec<Token> = tokens
        .split_off(at)
        .into_iter()
        .map(|t| t.token)
        .filter(|t| !matches!(t, Token::Whitespace(_) | Token::EOF))
        .collect();
    let words: Vec<String> = tail
        .iter()
        .map(|t| t.to_string().to_ascii_uppercase())
        .collect();
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let emit = match words.as_slice() {
        ["EMIT", "ON", "WINDOW", "CLOSE"] => EmitMode::OnWindowClose,
        ["EMIT", "CHANGES"] => EmitMode::Changes,
        _ => {
            return Err(SqlError::Syntax(format!(
                "unknown emit clause '{}' (expected EMIT ON WINDOW CLOSE or EMIT CHANGES)",
                words.join(" ")
            )))
        }
    };
    Ok((tokens, Some(emit)))
}

fn parse_create_stream(
    p: &mut Parser<'_>,
    emit: Option<EmitMode>,
    system_time: Vec<String>,
) -> Result<Statement> {
    expect_word(p, "CREATE")?;
    let materialized = if parse_word(p, "MATERIALIZED") {
        expect_word(p, "VIEW")?;
        true
    } else {
        expect_word(p, "STREAM")?;
        false
    };
    let name = ident(p)?;
    if !p.parse_keyword(Keyword::AS) {
        return Err(SqlError::Syntax(format!(
            "expected AS after CREATE ... {name}"
        )));
    }
    if parse_word(p, "PROCESS") {
        if emit.is_some() {
            return Err(SqlError::Syntax(format!(
                "'{name}': EMIT does not apply to AS PROCESS (a process function emits what its handler returns)"
            )));
        }
        return parse_process_binding(p, name, materialized);
    }
    let query = p.parse_query()?;
    expect_end(p, "the query")?;
    Ok(Statement::CreateStream(CreateStream {
        name,
        materialized,
        query,
        emit,
        system_time,
    }))
}

/// The number after `VERSION` in `what`'s declaration.
fn version_number(p: &mut Parser<'_>, what: &str) -> Result<u32> {
    let t = p.next_token();
    let v = match &t.token {
        Token::Number(n, _) => n.parse::<u32>().ok(),
        _ => None,
    };
    v.ok_or_else(|| {
        SqlError::Syntax(format!(
            "{what}: expected a version number after VERSION, found {}",
            t.token
        ))
    })
}

/// `PROCESS function [VERSION n] FROM input`, after `CREATE STREAM name AS`.
fn parse_process_binding(
    p: &mut Parser<'_>,
    name: String,
    materialized: bool,
) -> Result<Statement> {
    let function = ident(p)?;
    let version = if parse_word(p, "VERSION") {
        Some(version_number(p, &format!("'{name}'"))?)
    } else {
        None
    };
    if !p.parse_keyword(Keyword::FROM) {
        return Err(SqlError::Syntax(format!(
            "'{name}': expected FROM <input> after PROCESS {function}"
        )));
    }
    let input = ident(p)?;
    expect_end(p, "CREATE STREAM ... AS PROCESS function FROM input")?;
    Ok(Statement::CreateProcessStream(CreateProcessStream {
        name,
        materialized,
        function,
        version,
        input,
    }))
}

/// One `name TYPE [NOT NULL | NULL]` column of `owner`'s column list.
fn parse_column(p: &mut Parser<'_>, owner: &str, fields: &mut Vec<Field>) -> Result<()> {
    let col = ident(p)?;
    let ty = p.parse_data_type()?;
    let nullable = if p.parse_keywords(&[Keyword::NOT, Keyword::NULL]) {
        false
    } else {
        let _ = p.parse_keyword(Keyword::NULL);
        true
    };
    if fields.iter().any(|f| f.name() == &col) {
        return Err(SqlError::Catalog(format!(
            "{owner} declares column '{col}' twice"
        )));
    }
    fields.push(Field::new(&col, arrow_type(&ty, &col)?, nullable));
    Ok(())
}

fn parse_create_source(p: &mut Parser<'_>) -> Result<Statement> {
    expect_word(p, "CREATE")?;
    expect_word(p, "SOURCE")?;
    let name = ident(p)?;
    p.expect_token(&Token::LParen)?;
    let mut fields: Vec<Field> = Vec::new();
    let mut watermark = None;
    let mut primary_key: Vec<String> = Vec::new();
    loop {
        if is_word(&p.peek_token().token, "PRIMARY") && is_word(&p.peek_nth_token(1).token, "KEY") {
            p.next_token();
            p.next_token();
            if !primary_key.is_empty() {
                return Err(SqlError::Syntax(format!(
                    "source '{name}' declares PRIMARY KEY twice"
                )));
            }
            p.expect_token(&Token::LParen)?;
            loop {
                primary_key.push(ident(p)?);
                if !p.consume_token(&Token::Comma) {
                    break;
                }
            }
            p.expect_token(&Token::RParen)?;
        } else if parse_word(p, "WATERMARK") {
            if watermark.is_some() {
                return Err(SqlError::Syntax(format!(
                    "source '{name}' declares WATERMARK twice"
                )));
            }
            watermark = Some(parse_watermark(p)?);
        } else {
            parse_column(p, &format!("source '{name}'"), &mut fields)?;
        }
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen)?;
        break;
    }
    if let Some(wm) = &watermark {
        let field = fields
            .iter()
            .find(|f| f.name() == &wm.column)
            .ok_or_else(|| {
                SqlError::Catalog(format!(
                    "WATERMARK FOR '{}': source '{name}' has no such column",
                    wm.column
                ))
            })?;
        if !matches!(
            field.data_type(),
            arrow::datatypes::DataType::Timestamp(_, _) | arrow::datatypes::DataType::Int64
        ) {
            return Err(SqlError::Type(format!(
                "WATERMARK FOR '{}': the event-time column must be TIMESTAMP or BIGINT (milliseconds), found {}",
                wm.column,
                field.data_type()
            )));
        }
    }
    for k in &primary_key {
        if !fields.iter().any(|f| f.name() == k) {
            return Err(SqlError::Catalog(format!(
                "PRIMARY KEY ({k}): source '{name}' has no such column"
            )));
        }
    }
    let mut late_data_to = None;
    if parse_word(p, "LATE") {
        expect_word(p, "DATA")?;
        expect_word(p, "TO")?;
        late_data_to = Some(ident(p)?);
        if watermark.is_none() {
            return Err(SqlError::Syntax(format!(
                "source '{name}': LATE DATA TO needs a WATERMARK FOR clause, since without one no row is late"
            )));
        }
    }
    let options = parse_with_options(p)?;
    expect_end(p, "CREATE SOURCE")?;
    Ok(Statement::CreateSource(CreateSource {
        name,
        schema: Arc::new(Schema::new(fields)),
        watermark,
        late_data_to,
        primary_key,
        options,
    }))
}

fn parse_watermark(p: &mut Parser<'_>) -> Result<WatermarkSpec> {
    if !p.parse_keyword(Keyword::FOR) {
        return Err(SqlError::Syntax("expected FOR after WATERMARK".into()));
    }
    let column = ident(p)?;
    if !p.parse_keyword(Keyword::AS) {
        return Err(SqlError::Syntax(format!(
            "expected AS after WATERMARK FOR {column}"
        )));
    }
    let expr = p.parse_expr()?;
    let delay_ms = match &expr {
        sp::Expr::Identifier(id) if same_ident(id, &column) => 0,
        sp::Expr::BinaryOp {
            left,
            op: sp::BinaryOperator::Minus,
            right,
        } if matches!(left.as_ref(), sp::Expr::Identifier(id) if same_ident(id, &column)) => {
            match right.as_ref() {
                sp::Expr::Interval(iv) => interval_ms(iv)?,
                other => {
                    return Err(SqlError::Unsupported(format!(
                        "watermark expression '{expr}': expected {column} - INTERVAL '...', found '{other}'"
                    )))
                }
            }
        }
        _ => {
            return Err(SqlError::Unsupported(format!(
                "watermark expression '{expr}' (supported: {column} or {column} - INTERVAL 'n' UNIT)"
            )))
        }
    };
    if delay_ms < 0 {
        return Err(SqlError::Syntax(format!(
            "watermark delay for '{column}' must not be negative"
        )));
    }
    Ok(WatermarkSpec { column, delay_ms })
}

/// Milliseconds of a fixed-length SQL interval literal.
pub fn interval_ms(iv: &sp::Interval) -> Result<i64> {
    let text = match iv.value.as_ref() {
        sp::Expr::Value(v) => match &v.value {
            sp::Value::SingleQuotedString(s) => s.clone(),
            sp::Value::Number(n, _) => n.clone(),
            other => return Err(SqlError::Syntax(format!("bad interval value {other}"))),
        },
        other => return Err(SqlError::Syntax(format!("bad interval value {other}"))),
    };
    let (num, unit) = match &iv.leading_field {
        Some(f) => (text.trim().to_string(), f.to_string()),
        None => {
            let mut parts = text.split_whitespace();
            let n = parts.next().unwrap_or_default().to_string();
            let u = parts.next().unwrap_or("SECOND").to_string();
            (n, u)
        }
    };
    let value: f64 = num
        .parse()
        .map_err(|_| SqlError::Syntax(format!("interval value '{num}' is not a number")))?;
    let unit_ms = match unit.to_ascii_uppercase().trim_end_matches('S') {
        "MILLISECOND" => 1.0,
        "SECOND" => 1_000.0,
        "MINUTE" => 60_000.0,
        "HOUR" => 3_600_000.0,
        "DAY" => 86_400_000.0,
        other => {
            return Err(SqlError::Unsupported(format!(
                "interval unit '{other}' (use MILLISECOND, SECOND, MINUTE, HOUR or DAY)"
            )))
        }
    };
    Ok((value * unit_ms).round() as i64)
}

fn parse_with_options(p: &mut Parser<'_>) -> Result<WithOptions> {
    if !p.parse_keyword(Keyword::WITH) {
        return Ok(WithOptions::default());
    }
    p.expect_token(&Token::LParen)?;
    let mut pairs = Vec::new();
    loop {
        let key = ident(p)?;
        p.expect_token(&Token::Eq)?;
        let value = parse_value(p, &format!("option '{key}'"))?;
        pairs.push((key, value));
        if p.consume_token(&Token::Comma) {
            continue;
        }
        p.expect_token(&Token::RParen)?;
        break;
    }
    WithOptions::new(pairs)
}

/// An option value: a quoted string, a number or a bare word.
fn parse_value(p: &mut Parser<'_>, context: &str) -> Result<String> {
    match p.next_token().token {
        Token::SingleQuotedString(s) => Ok(s),
        Token::Number(n, _) => Ok(n),
        Token::Word(w) => Ok(w.value),
        other => Err(SqlError::Syntax(format!(
            "{context}: expected a value, found {other}"
        ))),
    }
}

fn parse_create_sink(p: &mut Parser<'_>) -> Result<Statement> {
    expect_word(p, "CREATE")?;
    expect_word(p, "SINK")?;
    let name = ident(p)?;
    if !p.parse_keyword(Keyword::FROM) {
        return Err(SqlError::Syntax(format!(
            "expected FROM after CREATE SINK {name}"
        )));
    }
    let from = ident(p)?;
    let filter = if p.parse_keyword(Keyword::WHERE) {
        Some(Box::new(p.parse_expr()?))
    } else {
        None
    };
    let options = parse_with_options(p)?;
    expect_end(p, "CREATE SINK")?;
    Ok(Statement::CreateSink(CreateSink {
        name,
        from,
        filter,
        options,
    }))
}

fn parse_kind(p: &mut Parser<'_>, plural: bool, after: &str) -> Result<ObjectKind> {
    let s = |w: &str| {
        if plural {
            format!("{w}S")
        } else {
            w.to_string()
        }
    };
    if parse_word(p, &s("SOURCE")) {
        Ok(ObjectKind::Source)
    } else if parse_word(p, &s("STREAM")) {
        Ok(ObjectKind::Stream)
    } else if parse_word(p, &s("SINK")) {
        Ok(ObjectKind::Sink)
    } else if parse_word(p, "MATERIALIZED") {
        expect_word(p, &s("VIEW"))?;
        Ok(ObjectKind::MaterializedView)
    } else {
        Err(SqlError::Syntax(format!(
            "{} after {after}: expected {}",
            found(&p.peek_token()),
            ["SOURCE", "STREAM", "MATERIALIZED VIEW", "SINK"]
                .map(s)
                .join(", ")
        )))
    }
}

fn parse_drop(p: &mut Parser<'_>) -> Result<Statement> {
    expect_word(p, "DROP")?;
    let kind = parse_kind(p, false, "DROP")?;
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let name = ident(p)?;
    expect_end(p, "DROP")?;
    Ok(Statement::Drop {
        kind,
        name,
        if_exists,
    })
}

fn parse_show(p: &mut Parser<'_>) -> Result<Statement> {
    expect_word(p, "SHOW")?;
    let kind = parse_kind(p, true, "SHOW")?;
    expect_end(p, "SHOW")?;
    Ok(Statement::Show(kind))
}

fn parse_set(p: &mut Parser<'_>) -> Result<Statement> {
    expect_word(p, "SET")?;
    let name = ident(p)?.to_ascii_lowercase();
    if !p.consume_token(&Token::Eq) && !p.parse_keyword(Keyword::TO) {
        return Err(SqlError::Syntax(format!("expected = after SET {name}")));
    }
    let value = parse_value(p, &format!("SET {name}"))?;
    expect_end(p, "SET")?;
    Ok(Statement::Set { name, value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_source_with_watermark_and_late_data() {
        let s = parse_sql(
            "CREATE SOURCE bids (auction BIGINT, price BIGINT, ts TIMESTAMP, \
             WATERMARK FOR ts AS ts - INTERVAL '4' SECOND) LATE DATA TO late_bids \
             WITH (connector = 'file', path = 'x.csv', format = 'csv');",
        )
        .unwrap();
        let Statement::CreateSource(src) = &s[0] else {
            panic!("not a source")
        };
        assert_eq!(src.name, "bids");
        assert_eq!(src.schema.fields().len(), 3);
        assert_eq!(
            src.watermark,
            Some(WatermarkSpec {
                column: "ts".into(),
                delay_ms: 4000
            })
        );
        assert_eq!(src.late_data_to.as_deref(), Some("late_bids"));
        assert_eq!(src.options.entries().len(), 3);
    }

    #[test]
    fn show_exchanges_takes_no_arguments() {
        for text in ["SHOW EXCHANGES", "show exchanges;"] {
            assert!(matches!(
                parse_sql(text).unwrap().as_slice(),
                [Statement::ShowExchanges]
            ));
        }
        let err = parse_sql("SHOW EXCHANGES now").unwrap_err().to_string();
        assert!(err.contains("SHOW EXCHANGES takes no arguments"), "{err}");
    }

    #[test]
    fn splits_emit_clause_and_statements() {
        let s = parse_sql(
            "SET idle_timeout = '5s'; CREATE STREAM a AS SELECT x FROM t EMIT CHANGES; \
             CREATE MATERIALIZED VIEW b AS SELECT x FROM t",
        )
        .unwrap();
        assert_eq!(s.len(), 3);
        let Statement::CreateStream(a) = &s[1] else {
            panic!()
        };
        assert_eq!(a.emit, Some(EmitMode::Changes));
        assert!(!a.materialized);
        let Statement::CreateStream(b) = &s[2] else {
            panic!()
        };
        assert!(b.materialized);
        assert_eq!(b.emit, None);
    }

    #[test]
    fn rejects_unknown_emit_and_statement() {
        let e = parse_sql("CREATE STREAM a AS SELECT x FROM t EMIT SOMETIMES").unwrap_err();
        assert!(e.to_string().contains("EMIT SOMETIMES"), "{e}");
        let e = parse_sql("GRANT ALL ON x TO y").unwrap_err();
        assert!(e.to_string().contains("GRANT"), "{e}");
    }

    #[test]
    fn watermark_interval_units() {
        let s = parse_sql(
            "CREATE SOURCE s (ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1.5' MINUTE)",
        )
        .unwrap();
        let Statement::CreateSource(src) = &s[0] else {
            panic!()
        };
        assert_eq!(src.watermark.as_ref().unwrap().delay_ms, 90_000);
        let e =
            parse_sql("CREATE SOURCE s (ts TIMESTAMP, WATERMARK FOR ts AS ts * 2)").unwrap_err();
        assert!(e.to_string().contains("watermark expression"), "{e}");
    }

    #[test]
    fn parses_process_bindings() {
        let s = parse_sql("CREATE STREAM alerts AS PROCESS fraud VERSION 2 FROM bids").unwrap();
        let Statement::CreateProcessStream(p) = &s[0] else {
            panic!("{s:?}")
        };
        assert_eq!(
            p,
            &CreateProcessStream {
                name: "alerts".into(),
                materialized: false,
                function: "fraud".into(),
                version: Some(2),
                input: "bids".into(),
            }
        );
        let s = parse_sql("CREATE MATERIALIZED VIEW v AS PROCESS f FROM t").unwrap();
        assert!(
            matches!(&s[0], Statement::CreateProcessStream(p) if p.materialized && p.version.is_none())
        );
        assert!(matches!(
            parse_sql("SHOW PROCESS FUNCTIONS").unwrap()[0],
            Statement::ShowProcessFunctions
        ));
        for (sql, needle) in [
            (
                "CREATE STREAM a AS PROCESS f VERSION x FROM t",
                "version number",
            ),
            ("CREATE STREAM a AS PROCESS f t", "expected FROM"),
            (
                "CREATE STREAM a AS PROCESS f FROM t EMIT CHANGES",
                "EMIT does not apply",
            ),
            (
                "CREATE STREAM a AS PROCESS f FROM t WHERE x",
                "unexpected WHERE",
            ),
            ("SHOW PROCESS FUNCTIONS now", "SHOW PROCESS FUNCTIONS"),
        ] {
            let e = parse_sql(sql).unwrap_err().to_string();
            assert!(e.contains(needle), "{sql}: {e}");
        }
    }

    #[test]
    fn duplicate_options_are_refused() {
        let e = parse_sql("CREATE SINK k FROM s WITH (path = 'a', path = 'b')").unwrap_err();
        assert!(e.to_string().contains("'path' is given twice"), "{e}");
    }
}
