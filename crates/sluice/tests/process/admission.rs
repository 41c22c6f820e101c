//! Admission of process functions when a checkpointed pipeline starts:
//! every rule has its own error, and a pipeline that follows them starts.

use sluice::process::benchmark::{descriptor, KeyedCounter};
use sluice::process::ProcessDeterminism;

use crate::common::open;

const EVENTS: &str =
    "CREATE SOURCE ev (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)";

/// Start a checkpointed pipeline built by `sql` and return the error, if any.
async fn start(delivery: &str, sql: &str, deterministic: bool) -> Option<String> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("ev.csv");
    std::fs::write(&data, "key,amount,ts\n1,2,1970-01-01 00:00:01\n").unwrap();
    let db = open(
        Some(&dir.path().join("state")),
        &[("checkpoint_interval", "1h"), ("delivery", delivery)],
    )
    .await;
    let mut d = descriptor("counter");
    if !deterministic {
        d.determinism = ProcessDeterminism::NonDeterministic;
    }
    db.register_process_function(d, || KeyedCounter)
        .await
        .unwrap();
    let sql = sql.replace(
        "{file}",
        &format!(
            "WITH (connector = 'file', path = '{}', format = 'csv')",
            data.display()
        ),
    );
    db.execute(&sql).await.unwrap();
    let r = db.start().await.err().map(|e| e.to_string());
    db.shutdown().await.ok();
    r
}

#[tokio::test]
async fn a_single_replayable_source_read_batch_by_batch_is_admitted() {
    let sql = format!(
        "{EVENTS} {{file}};
         CREATE STREAM big AS SELECT key, amount * 2 AS amount FROM ev WHERE amount > 1;
         CREATE STREAM c AS PROCESS counter FROM big;
         CREATE STREAM d AS PROCESS activation_log FROM ev;"
    );
    assert_eq!(start("at_least_once", &sql, true).await, None);
}

#[tokio::test]
async fn each_admission_rule_is_named_when_broken() {
    let one = format!("{EVENTS} {{file}}; CREATE STREAM c AS PROCESS counter FROM ev;");
    let cases = [
        ("exactly_once", one.clone(), true, "exactly-once delivery of process functions is unsupported"),
        ("at_least_once", one.clone(), false, "needs determinism ReplaySafe; this function is declared NonDeterministic"),
        (
            "at_least_once",
            format!("{EVENTS} {{file}}; CREATE SOURCE other (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts) {{file}}; CREATE STREAM c AS PROCESS counter FROM ev;"),
            true,
            "needs exactly one replayable source, but the pipeline has 2 (ev, other)",
        ),
        (
            "at_least_once",
            format!("{EVENTS}; CREATE STREAM c AS PROCESS counter FROM ev;"),
            true,
            "source 'ev' is a push source",
        ),
        (
            "at_least_once",
            format!("{EVENTS} {{file}};
                     CREATE STREAM w AS SELECT key, COUNT(*) AS amount, tumble(ts, INTERVAL '1' SECOND) AS ts FROM ev GROUP BY key, tumble(ts, INTERVAL '1' SECOND);
                     CREATE STREAM c AS PROCESS counter FROM w;"),
            true,
            "its input 'w' is not read batch by batch from source 'ev'",
        ),
        (
            "at_least_once",
            format!("{EVENTS} {{file}};
                     CREATE STREAM l AS PROCESS activation_log FROM ev;
                     CREATE STREAM again AS SELECT key, count AS amount FROM l;
                     CREATE STREAM c AS PROCESS counter FROM again;"),
            true,
            "its input 'again' is not read batch by batch",
        ),
    ];
    for (delivery, sql, deterministic, needle) in cases {
        let e = start(delivery, &sql, deterministic)
            .await
            .unwrap_or_else(|| panic!("admitted: {sql}"));
        assert!(e.contains(needle), "{sql}\n  {e}");
        assert!(
            e.contains("process function 'counter' v1") && e.contains("bound as 'c'"),
            "{e}"
        );
    }
}
