//! The SQL entry point shared by the `sql` fuzz target (`fuzz/` at the
//! repository root) and the proptest-driven SQL fuzz test of this crate.
//!
//! [`check_sql`] runs arbitrary text through [`Database::execute`] on an
//! in-memory database that already declares a few sources and streams
//! ([`PREAMBLE`]), so fuzzed statements reach the parser, the catalog, the
//! planner and operator compilation with real relations to resolve. The
//! pipeline is never started: nothing reads input or writes a sink file.
//!
//! The contract checked is that any text ends in `Ok` or a typed error with
//! a stable `SLC-` code and a message; a panic is a bug.
//!
//! Statements that would reach outside the process are parsed but not
//! executed (see [`reaches_outside`]): file sources outside the scratch
//! directory, the Nexmark generator (sized by its options, not by the
//! text) and a checkpoint store (which may be a network URL). Their
//! options are validated by their own tests.
//!
//! This module is not a stable API; it is public only so the fuzz crate,
//! which lives outside the workspace, can reach it.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use sluice_sql::Statement;

use crate::{Database, Error};

/// Declared before every input: sources covering every SQL column type, a
/// watermarked source with a late-data stream, an aggregate stream and a
/// materialized view, so queries and sinks have relations to resolve.
pub const PREAMBLE: &str = "
CREATE SOURCE bids (
    auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, date_time TIMESTAMP,
    WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND
) LATE DATA TO late_bids;
CREATE SOURCE t (
    big BIGINT, i INT, small SMALLINT, tiny TINYINT, ubig BIGINT UNSIGNED,
    dbl DOUBLE, flt REAL, flag BOOLEAN, name VARCHAR, day DATE,
    ts TIMESTAMP, ts_tz TIMESTAMP WITH TIME ZONE, amount DECIMAL(10, 2), wide DECIMAL,
    WATERMARK FOR ts AS ts - INTERVAL '1' SECOND
);
CREATE SOURCE people (id BIGINT, name VARCHAR, city VARCHAR, ts TIMESTAMP,
    WATERMARK FOR ts AS ts);
CREATE STREAM per_auction AS
SELECT auction, tumble(date_time, INTERVAL '10' SECOND) AS window_start,
       COUNT(*) AS bids, SUM(price) AS volume
FROM bids GROUP BY auction, tumble(date_time, INTERVAL '10' SECOND)
EMIT ON WINDOW CLOSE;
CREATE MATERIALIZED VIEW by_name AS
SELECT name, COUNT(*) AS n, MAX(big) AS top FROM t GROUP BY name;
";

/// Stable code prefixes of the public error type.
const CODE_PREFIXES: &[&str] = &["SLC-SQL-", "SLC-ENG-", "SLC-CONN-", "SLC-STO-", "SLC-RMT-"];

/// Whether executing `stmt` could read or write outside the scratch
/// directory or the process (see the module docs).
pub fn reaches_outside(stmt: &Statement) -> bool {
    match stmt {
        Statement::CreateSource(s) => {
            let option = |key: &str| {
                s.options
                    .entries()
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.as_str())
            };
            match option("connector") {
                None | Some("push") => false,
                Some("file") => option("path").is_none_or(|p| {
                    let path = std::path::Path::new(p);
                    path.is_absolute()
                        || p.starts_with('~')
                        || path
                            .components()
                            .any(|c| matches!(c, std::path::Component::ParentDir))
                }),
                Some(_) => true,
            }
        }
        Statement::Set { name, .. } => name == "checkpoint_store",
        // Starts a worker process or connects to one.
        Statement::CreateProcessFunction(_) => true,
        Statement::ShowCheckpoints => true,
        // Reads etcd, where the database runs in a cluster.
        Statement::ShowCluster => true,
        // Counters of this process only.
        Statement::ShowExchanges => false,
        Statement::Explain(inner) => reaches_outside(inner),
        Statement::CreateStream(_)
        | Statement::CreateProcessStream(_)
        | Statement::CreateSink(_)
        | Statement::Drop { .. }
        | Statement::Show(_)
        | Statement::Describe(_)
        | Statement::Checkpoint
        | Statement::ShowProcessFunctions
        | Statement::Query(_) => false,
    }
}

/// What running one input gave.
#[derive(Debug)]
pub enum SqlOutcome {
    /// The text did not parse; the (clean) error.
    ParseError(Error),
    /// It parsed but reaches outside the scratch directory: not executed.
    NotExecuted,
    /// Executed: `Ok` with the number of result batches, or a clean error.
    Executed(Result<usize, Error>),
}

struct Harness {
    runtime: tokio::runtime::Runtime,
    dir: PathBuf,
}

impl Harness {
    fn new() -> Harness {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sluice-fuzz-sql-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir)
            .unwrap_or_else(|e| panic!("fuzz scratch dir {}: {e}", dir.display()));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("fuzz runtime: {e}"));
        Harness { runtime, dir }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

thread_local! {
    static HARNESS: RefCell<Option<Harness>> = const { RefCell::new(None) };
}

/// Run `input` (read as UTF-8, invalid sequences replaced) through
/// [`Database::execute`] after [`PREAMBLE`], checking the contract of the
/// module docs; panics on a violation.
pub fn check_sql(input: &[u8]) -> SqlOutcome {
    let text = String::from_utf8_lossy(input);
    let statements = match sluice_sql::parse_sql(&text) {
        Ok(s) => s,
        Err(e) => return SqlOutcome::ParseError(clean(Error::Sql(e))),
    };
    if statements.iter().any(reaches_outside) {
        return SqlOutcome::NotExecuted;
    }
    HARNESS.with(|cell| {
        let mut slot = cell.borrow_mut();
        let harness = slot.get_or_insert_with(Harness::new);
        let result = harness.runtime.block_on(async {
            let db = Database::builder()
                .base_dir(&harness.dir)
                .open()
                .await
                .unwrap_or_else(|e| panic!("opening the fuzz database: {e}"));
            db.execute(PREAMBLE)
                .await
                .unwrap_or_else(|e| panic!("fuzz preamble: {e}"));
            let result = db.execute(&text).await.map(|batches| batches.len());
            // Stop the coordinator thread; the result of stopping a
            // never-started pipeline is not what is under test.
            let _ = db.abort().await;
            result
        });
        SqlOutcome::Executed(result.map_err(clean))
    })
}

/// Check that an error is a clean one.
fn clean(e: Error) -> Error {
    let code = e.code();
    assert!(
        CODE_PREFIXES.iter().any(|p| code.starts_with(p)),
        "error code '{code}' outside the documented families: {e:?}"
    );
    assert!(
        !e.to_string().trim().is_empty(),
        "empty error message: {e:?}"
    );
    e
}
