//! Lookup tables as the engine binds them: the table, its key columns and
//! the options of the cache every lookup join over it keeps.
//!
//! The cache is not state: it is never checkpointed, and a restore (or a
//! restart) starts with it empty. That is sound because a lookup join reads
//! the table at processing time anyway: a cached row is only a row the
//! table had a moment ago, which the TTL bounds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use sluice_connectors::{LookupError, LookupTable};
use sluice_sql::LookupHandle;

/// Cache options of a lookup table, given at registration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LookupOptions {
    /// `lookup.cache.max_rows`: the most table rows one lookup join keeps
    /// cached (a cached miss counts as one row). 0 turns the cache off.
    pub max_rows: usize,
    /// `lookup.cache.ttl`: how long a cached key is trusted; None: until
    /// evicted.
    pub ttl: Option<Duration>,
    /// `lookup.cache.missing`: whether a key the table does not have is
    /// cached too (negative caching).
    pub cache_missing: bool,
}

impl Default for LookupOptions {
    fn default() -> Self {
        LookupOptions {
            max_rows: 10_000,
            ttl: None,
            cache_missing: true,
        }
    }
}

impl LookupOptions {
    /// Options from `(name, value)` pairs: `lookup.cache.max_rows` (a
    /// count), `lookup.cache.ttl` (a duration such as `30s`) and
    /// `lookup.cache.missing` (`true`/`false`); others are refused.
    pub fn from_pairs(table: &str, pairs: &[(&str, &str)]) -> Result<Self, LookupError> {
        let invalid = |message: String| LookupError::Invalid {
            table: table.to_string(),
            message,
        };
        let mut o = LookupOptions::default();
        for (name, value) in pairs {
            match name.to_ascii_lowercase().as_str() {
                "lookup.cache.max_rows" => {
                    o.max_rows = value.trim().parse().map_err(|_| {
                        invalid(format!(
                            "lookup.cache.max_rows must be a row count, found '{value}'"
                        ))
                    })?
                }
                "lookup.cache.ttl" => {
                    o.ttl = Some(humantime::parse_duration(value.trim()).map_err(|e| {
                        invalid(format!(
                            "lookup.cache.ttl must be a duration such as 30s, found '{value}' ({e})"
                        ))
                    })?)
                }
                "lookup.cache.missing" => {
                    o.cache_missing = value.trim().parse().map_err(|_| {
                        invalid(format!(
                            "lookup.cache.missing must be true or false, found '{value}'"
                        ))
                    })?
                }
                other => {
                    return Err(invalid(format!(
                        "unknown option '{other}' (known: lookup.cache.max_rows, lookup.cache.ttl, lookup.cache.missing)"
                    )))
                }
            }
        }
        Ok(o)
    }

    /// The cache in words, for `EXPLAIN`.
    pub fn describe(&self) -> String {
        if self.max_rows == 0 {
            return "cache: off".into();
        }
        format!(
            "cache: at most {} rows, ttl {}, misses {}",
            self.max_rows,
            self.ttl
                .map(|t| humantime::format_duration(t).to_string())
                .unwrap_or_else(|| "none".into()),
            if self.cache_missing {
                "cached"
            } else {
                "not cached"
            }
        )
    }
}

/// Counters of the lookup joins over one table, shared with the caller of
/// the registration so a test or a dashboard can see the cache work.
#[derive(Debug, Default)]
pub struct LookupStats {
    keys: AtomicU64,
    hits: AtomicU64,
    looked_up: AtomicU64,
    calls: AtomicU64,
    max_cached_rows: AtomicU64,
}

impl LookupStats {
    /// Distinct non-NULL keys of input batches, summed over batches.
    pub fn keys(&self) -> u64 {
        self.keys.load(Ordering::Relaxed)
    }
    /// Of those, the keys the cache answered.
    pub fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
    /// Of those, the keys asked from the table.
    pub fn looked_up(&self) -> u64 {
        self.looked_up.load(Ordering::Relaxed)
    }
    /// Calls of [`LookupTable::lookup`].
    pub fn calls(&self) -> u64 {
        self.calls.load(Ordering::Relaxed)
    }
    /// The most rows any one cache held after any batch.
    pub fn max_cached_rows(&self) -> u64 {
        self.max_cached_rows.load(Ordering::Relaxed)
    }

    pub(crate) fn record(&self, keys: usize, looked_up: usize, cached_rows: u64) {
        self.keys.fetch_add(keys as u64, Ordering::Relaxed);
        self.hits
            .fetch_add((keys - looked_up) as u64, Ordering::Relaxed);
        self.looked_up
            .fetch_add(looked_up as u64, Ordering::Relaxed);
        if looked_up > 0 {
            self.calls.fetch_add(1, Ordering::Relaxed);
        }
        self.max_cached_rows
            .fetch_max(cached_rows, Ordering::Relaxed);
    }
}

/// A registered lookup table, as the plan carries it (see
/// [`LookupHandle`]).
pub struct LookupBinding {
    /// The name it was registered under.
    pub name: String,
    /// Its schema.
    pub schema: SchemaRef,
    /// Its key columns, leading first.
    pub keys: Vec<String>,
    /// The table.
    pub table: Arc<dyn LookupTable>,
    /// The cache options.
    pub options: LookupOptions,
    /// Counters.
    pub stats: Arc<LookupStats>,
}

impl std::fmt::Debug for LookupBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LookupBinding({}, {:?})", self.name, self.options)
    }
}

impl LookupBinding {
    /// The binding checked: every key column is a column of the schema.
    pub fn new(
        name: &str,
        schema: SchemaRef,
        keys: &[&str],
        table: Arc<dyn LookupTable>,
        options: LookupOptions,
    ) -> Result<Arc<Self>, LookupError> {
        if keys.is_empty() {
            return Err(LookupError::Invalid {
                table: name.into(),
                message: "a lookup table needs at least one key column".into(),
            });
        }
        for k in keys {
            if schema.column_with_name(k).is_none() {
                return Err(LookupError::Invalid {
                    table: name.into(),
                    message: format!("key column '{k}' is not a column of its schema"),
                });
            }
        }
        Ok(Arc::new(LookupBinding {
            name: name.into(),
            schema,
            keys: keys.iter().map(|k| k.to_string()).collect(),
            table,
            options,
            stats: Arc::default(),
        }))
    }

    /// The handle a plan carries.
    pub fn handle(self: &Arc<Self>) -> LookupHandle {
        LookupHandle {
            binding: Arc::clone(self) as Arc<dyn std::any::Any + Send + Sync>,
            describe: self.options.describe(),
        }
    }

    /// The binding behind a plan's handle.
    pub fn from_handle(handle: &LookupHandle) -> Option<Arc<Self>> {
        Arc::clone(&handle.binding).downcast::<LookupBinding>().ok()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn options_parse_and_refuse_by_name() {
        let o = LookupOptions::from_pairs(
            "dim",
            &[
                ("lookup.cache.max_rows", "5"),
                ("lookup.cache.ttl", "2s"),
                ("lookup.cache.missing", "false"),
            ],
        )
        .unwrap();
        assert_eq!(
            o,
            LookupOptions {
                max_rows: 5,
                ttl: Some(Duration::from_secs(2)),
                cache_missing: false
            }
        );
        assert_eq!(
            o.describe(),
            "cache: at most 5 rows, ttl 2s, misses not cached"
        );
        let e = LookupOptions::from_pairs("dim", &[("lookup.cache.size", "5")]).unwrap_err();
        assert_eq!(e.code(), "SLC-LKP-004");
        assert_eq!(e.to_string(), "lookup table 'dim': unknown option 'lookup.cache.size' (known: lookup.cache.max_rows, lookup.cache.ttl, lookup.cache.missing)");
        let e = LookupOptions::from_pairs("dim", &[("lookup.cache.ttl", "soon")]).unwrap_err();
        assert!(e.to_string().starts_with(
            "lookup table 'dim': lookup.cache.ttl must be a duration such as 30s, found 'soon'"
        ));
    }
}
