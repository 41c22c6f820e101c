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
        "tumble_count",
        include_str!("../../../benches/nexmark/tumble_count.sql"),
    ),
];

/// Nexmark queries that need joins, which Sluice does not have yet.
pub const PENDING: &[(&str, &str)] = &[
    ("q3", "local item suggestion: joins auctions with persons"),
    ("q4", "average price per category: joins bids with auctions"),
    ("q8", "monitor new users: joins persons with auctions"),
];

/// A query by name (`q5`) or by path (`my/query.sql`): (name, text).
pub fn load(query: &str) -> Result<(String, String)> {
    if let Some((name, text)) = QUERIES.iter().find(|(n, _)| *n == query) {
        return Ok((name.to_string(), text.to_string()));
    }
    if let Some((_, why)) = PENDING.iter().find(|(n, _)| *n == query) {
        return Err(BenchError::Script(format!(
            "Nexmark {query} ({why}) waits for joins, which Sluice does not have yet"
        )));
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
    let known: Vec<&str> = QUERIES.iter().map(|(n, _)| *n).collect();
    Err(BenchError::Script(format!(
        "unknown query '{query}' (known: {}; or a path to a .sql file)",
        known.join(", ")
    )))
}
