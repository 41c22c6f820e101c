//! Every pipeline option out of range through SQL `SET` on a running
//! database (which must keep working), the builder, and per-source ranges.

use std::sync::Arc;

use sluice::arrow::array::{Int64Array, TimestampMillisecondArray};
use sluice::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::pretty::pretty_format_batches;
use sluice_engine::options::{OptionKind, PIPELINE_OPTIONS, PIPELINE_OPTION_SPECS};

use crate::LIMIT;

/// Values outside each option's allowed range, derived from its spec so a
/// new option is covered without editing this test.
fn bad_values(kind: OptionKind) -> Vec<String> {
    match kind {
        OptionKind::Duration { min, max, .. } => vec![
            "0s".into(),
            format!("{}ns", min.as_nanos() - 1),
            format!("{}ms", max.as_millis() + 1),
            "300000000000y".into(),
            "sometime".into(),
        ],
        OptionKind::Count { min, max } => {
            // A count whose minimum is 0 (restart_budget) has no value below it but -1.
            let below: Vec<String> = min
                .checked_sub(1)
                .map(|m| m.to_string())
                .into_iter()
                .collect();
            let mut v = below;
            v.extend([
                (max + 1).to_string(),
                "2305843009213693952".into(),
                "18446744073709551616".into(),
                "-1".into(),
                "many".into(),
            ]);
            v
        }
        OptionKind::Choice(_) => vec!["maybe_once".into(), "".into()],
        OptionKind::Text => vec!["".into(), "  ".into()],
    }
}

fn batch(keys: &[i64], ts: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(keys.to_vec())),
            Arc::new(TimestampMillisecondArray::from(ts.to_vec())),
        ],
    )
    .unwrap()
}

async fn refuse_every_bad_set(db: &sluice::Database) {
    let names: Vec<&str> = PIPELINE_OPTION_SPECS.iter().map(|s| s.name).collect();
    assert_eq!(names, PIPELINE_OPTIONS, "every option is enumerated");
    for spec in PIPELINE_OPTION_SPECS {
        for v in bad_values(spec.kind) {
            let sql = format!("SET {} = '{v}'", spec.name);
            let e = db
                .execute(&sql)
                .await
                .expect_err(&format!("{sql} must be refused"));
            assert_eq!(e.code(), "SLC-ENG-003", "{sql}: {e}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!("invalid option: option '{}':", spec.name)),
                "{sql}: {msg}"
            );
            if !matches!(spec.kind, OptionKind::Text) {
                assert!(msg.contains(&spec.allowed()), "{sql}: {msg}");
            }
        }
    }
}

#[tokio::test]
async fn every_bad_set_is_refused_and_the_running_database_still_works() {
    tokio::time::timeout(LIMIT, async {
        let db = sluice::Database::open_in_memory().await.unwrap();
        db.execute("CREATE SOURCE s (k BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)")
            .await
            .unwrap();
        db.execute("CREATE MATERIALIZED VIEW c AS SELECT k, COUNT(*) AS n FROM s GROUP BY k")
            .await
            .unwrap();
        let src = db.source("s").await.unwrap();
        src.push(batch(&[1, 2, 1], &[1, 2, 3])).await.unwrap();
        // The coordinator runs (CREATE started it); refuse everything now...
        refuse_every_bad_set(&db).await;
        db.start().await.unwrap();
        // ...and again once the pipeline was started.
        refuse_every_bad_set(&db).await;
        src.push(batch(&[2], &[4])).await.unwrap();
        src.finish().await.unwrap();
        db.run_to_completion().await.unwrap();
        let out = db.execute("SELECT k, n FROM c ORDER BY k").await.unwrap();
        assert_eq!(
            pretty_format_batches(&out).unwrap().to_string(),
            "+---+---+\n| k | n |\n+---+---+\n| 1 | 2 |\n| 2 | 2 |\n+---+---+"
        );
        db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn builder_refuses_out_of_range_values_and_a_good_set_still_applies() {
    let e = sluice::Database::builder()
        .set("checkpoint_interval", "0s")
        .err()
        .unwrap();
    assert_eq!(e.code(), "SLC-ENG-003");
    assert_eq!(
        e.to_string(),
        "invalid option: option 'checkpoint_interval': '0s' is out of range (10ms to 1day, or off)"
    );
    let e = sluice::Database::builder()
        .set("channel_capacity", "2305843009213693952")
        .err()
        .unwrap();
    assert_eq!(
        e.to_string(),
        "invalid option: option 'channel_capacity': '2305843009213693952' is out of range (1 to 65536)"
    );
    tokio::time::timeout(LIMIT, async {
        let db = sluice::Database::open_in_memory().await.unwrap();
        db.execute("SET CHANNEL_CAPACITY = '4'").await.unwrap();
        db.execute("CREATE SOURCE s (k BIGINT)").await.unwrap();
        // The upper-case name is the same option: still refused once running.
        let e = db.execute("SET CHANNEL_CAPACITY = '8'").await.unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid option: option 'channel_capacity' sizes the pipeline and must be set before the first CREATE"
        );
        db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

#[tokio::test]
async fn file_source_options_are_range_checked_naming_the_source() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "k\n1\n").unwrap();
    let db = sluice::Database::builder()
        .base_dir(dir.path())
        .open()
        .await
        .unwrap();
    let cases = [
        (
            "batch_size = '0'",
            "invalid option: source 's': option 'batch_size': '0' is out of range (1 to 1048576)",
        ),
        (
            "batch_size = '2305843009213693952'",
            "invalid option: source 's': option 'batch_size': '2305843009213693952' is out of range (1 to 1048576)",
        ),
        (
            "idle_timeout = '0s'",
            "invalid option: source 's': option 'idle_timeout': '0s' is out of range (1ms to 1day)",
        ),
        (
            "idle_timeout = '300000000000y'",
            "invalid option: source 's': option 'idle_timeout': '300000000000y' is out of range (1ms to 1day)",
        ),
    ];
    for (opt, want) in cases {
        let sql =
            format!("CREATE SOURCE s (k BIGINT) WITH (connector = 'file', path = 'in.csv', {opt})");
        let e = db.execute(&sql).await.unwrap_err();
        assert_eq!(e.code(), "SLC-ENG-003", "{sql}");
        assert_eq!(e.to_string(), want, "{sql}");
    }
    db.execute("CREATE SOURCE s (k BIGINT) WITH (connector = 'file', path = 'in.csv', batch_size = '1048576', idle_timeout = '1day')")
        .await
        .unwrap();
    db.shutdown().await.unwrap();
}
