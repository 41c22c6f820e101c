//! The benchmark queries, embedded from `benches/nexmark/` so the `sluice`
//! binary runs them from any directory. The files stay the single source of
//! truth: `sluice run benches/nexmark/q5.sql` reads the same text.

use std::path::Path;

use crate::error::{BenchError, Result};

/// Every query file: (name, SQL text).
pub const QUERIES: &[(&str, &str)] = &[
    ("q0", include_str!("../../../benches/nexmark/q0.sql")),
    ("q1", include_str!("../../../benches/nexmark/q1.sql")),
    ("q2", include_str!("../../../benches/nexmark/q2.sql")),
    ("q5", include_str!("../../../benches/nexmark/q5.sql")),
    ("q7", include_str!("../../../benches/nexmark/q7.sql")),
    (
        "q5_full",
        include_str!("../../../benches/nexmark/q5_full.sql"),
    ),
    (
        "q7_full",
        include_str!("../../../benches/nexmark/q7_full.sql"),
    ),
    ("q10", include_str!("../../../benches/nexmark/q10.sql")),
    ("q11", include_str!("../../../benches/nexmark/q11.sql")),
    ("q12", include_str!("../../../benches/nexmark/q12.sql")),
    ("q14", include_str!("../../../benches/nexmark/q14.sql")),
    ("q15", include_str!("../../../benches/nexmark/q15.sql")),
    ("q16", include_str!("../../../benches/nexmark/q16.sql")),
    ("q17", include_str!("../../../benches/nexmark/q17.sql")),
    ("q18", include_str!("../../../benches/nexmark/q18.sql")),
    ("q19", include_str!("../../../benches/nexmark/q19.sql")),
    ("q21", include_str!("../../../benches/nexmark/q21.sql")),
    ("q22", include_str!("../../../benches/nexmark/q22.sql")),
    (
        "tumble_count",
        include_str!("../../../benches/nexmark/tumble_count.sql"),
    ),
];

/// Nexmark queries over two sources (joins). `sluice bench nexmark` drives
/// one source from memory, so these run through `sluice run`, with the
/// Nexmark connector generating both streams on the fly.
pub const JOIN_QUERIES: &[(&str, &str)] = &[
    ("q3", include_str!("../../../benches/nexmark/q3.sql")),
    ("q4", include_str!("../../../benches/nexmark/q4.sql")),
    ("q6", include_str!("../../../benches/nexmark/q6.sql")),
    ("q8", include_str!("../../../benches/nexmark/q8.sql")),
    ("q9", include_str!("../../../benches/nexmark/q9.sql")),
    ("q13", include_str!("../../../benches/nexmark/q13.sql")),
    ("q20", include_str!("../../../benches/nexmark/q20.sql")),
];

/// A query by name (`q5`) or by path (`my/query.sql`): (name, text).
pub fn load(query: &str) -> Result<(String, String)> {
    if let Some((name, text)) = QUERIES.iter().find(|(n, _)| *n == query) {
        return Ok((name.to_string(), text.to_string()));
    }
    if let Some((name, text)) = JOIN_QUERIES.iter().find(|(n, _)| *n == query) {
        return Ok((name.to_string(), text.to_string()));
    }
    let path = Path::new(query);
    if path.extension().is_some_and(|e| e == "sql") {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::io(format!("reading {}", path.display()), e))?;
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| query.to_string());
        return Ok((name, text));
    }
    let known: Vec<&str> = QUERIES
        .iter()
        .chain(JOIN_QUERIES)
        .map(|(n, _)| *n)
        .collect();
    Err(BenchError::Script(format!(
        "unknown query '{query}' (known: {}; or a path to a .sql file)",
        known.join(", ")
    )))
}
