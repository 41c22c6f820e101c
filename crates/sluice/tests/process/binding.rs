//! Binding functions from SQL and Rust; their output as a stream that SQL,
//! sinks, subscriptions and views consume; SHOW and DESCRIBE; bad bindings.

use std::sync::Arc;

use sluice::arrow::array::{Array, AsArray, Int64Array};
use sluice::arrow::datatypes::{DataType, Field, Int64Type, Schema};
use sluice::arrow::record_batch::RecordBatch;
use sluice::process::benchmark::{descriptor, KeyedCounter};
use sluice::process::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessRuntime, PythonEnvironmentBinding, ValueMutation, ValueState,
};

use crate::common::{collect, events_batch, log_rows, open, oracle, Event, LogRow};

/// Emits `(key, running count)` for every input row.
struct RunningCount;

fn count_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("key", DataType::Int64, false),
        Field::new("n", DataType::Int64, false),
    ]))
}

impl NativeProcessFunction for RunningCount {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        activations
            .iter()
            .map(|a| {
                let ProcessCallback::Input(row) = &a.callback else {
                    return Err("no timers are set".to_string());
                };
                let n = match a.state {
                    ValueState::Int64(n) => n + 1,
                    _ => 1,
                };
                let key = row.column(0).as_primitive::<Int64Type>().value(0);
                Ok(ProcessActivationResult {
                    activation_id: a.id,
                    output: Some(
                        RecordBatch::try_new(
                            count_schema(),
                            vec![
                                Arc::new(Int64Array::from(vec![key])),
                                Arc::new(Int64Array::from(vec![n])),
                            ],
                        )
                        .map_err(|e| e.to_string())?,
                    ),
                    mutations: vec![ValueMutation::Set(Some(n))],
                    timers: vec![],
                })
            })
            .collect()
    }
}

fn running_count_descriptor() -> sluice::process::ProcessFunctionDescriptor {
    sluice::process::ProcessFunctionDescriptor {
        name: "running_count".into(),
        output_schema: count_schema(),
        ..descriptor("running_count")
    }
}

fn events() -> Vec<Vec<Event>> {
    vec![
        vec![(1, 5, 1_000), (2, 1500, 1_200), (1, 7, 900)],
        vec![(3, 2, 2_500), (1, 1, 3_100)],
        vec![(2, 9, 6_000), (2, 4, 5_500), (4, 8, 200)],
        vec![(1, 3, 9_000)],
    ]
}

fn strings(b: &RecordBatch, col: usize) -> Vec<String> {
    let c = b.column(col).as_string::<i32>();
    (0..b.num_rows())
        .map(|i| {
            if c.is_valid(i) {
                c.value(i).to_string()
            } else {
                "NULL".into()
            }
        })
        .collect()
}

#[tokio::test]
async fn bound_functions_feed_sql_sinks_subscriptions_and_views() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(None, &[]).await;
    db.register_process_function(running_count_descriptor(), || RunningCount)
        .await
        .unwrap();
    let sink = dir.path().join("timers.csv");
    db.execute(&format!(
        "CREATE SOURCE events (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts - INTERVAL '1' SECOND);
         CREATE STREAM log AS PROCESS activation_log VERSION 1 FROM events;
         CREATE STREAM flushes AS SELECT key, count FROM log WHERE callback = 'timer:flush';
         CREATE SINK flushes_out FROM flushes WITH (connector = 'file', path = '{}', format = 'csv');",
        sink.display()
    ))
    .await
    .unwrap();
    let info = db
        .bind_process_function("running_count", "events", "counts")
        .await
        .unwrap();
    assert_eq!(
        (info.input.as_str(), info.output.as_str()),
        ("events", "counts")
    );
    db.execute(
        "CREATE MATERIALIZED VIEW totals AS SELECT key, MAX(n) AS n FROM counts GROUP BY key",
    )
    .await
    .unwrap();
    let log_sub = db.subscribe("log").await.unwrap();
    let counts_sub = db.subscribe("counts").await.unwrap();
    let src = db.source("events").await.unwrap();
    for b in events() {
        if let Err(e) = src.push(events_batch(&b)).await {
            panic!("{e}: {:?}", db.status().await);
        }
    }
    src.finish().await.unwrap();
    db.run_to_completion().await.unwrap();
    let totals = db
        .execute("SELECT key, n FROM totals ORDER BY key")
        .await
        .unwrap();
    db.shutdown().await.unwrap();

    let expected = oracle(&events(), 1_000, 1_000, |_| true);
    let got = log_rows(&collect(log_sub).await);
    assert_eq!(got, expected);
    // Late rows ((1, 7, 900) is on time; (4, 8, 200) arrives after the
    // watermark passed 2_100) never reach the function.
    assert!(!got.iter().any(|r| r.1 == 4));

    let counts = collect(counts_sub).await;
    let pairs: Vec<(i64, i64)> = counts
        .iter()
        .flat_map(|b| {
            let k = b.column(0).as_primitive::<Int64Type>().clone();
            let n = b.column(1).as_primitive::<Int64Type>().clone();
            (0..b.num_rows()).map(move |i| (k.value(i), n.value(i)))
        })
        .collect();
    assert_eq!(
        pairs,
        vec![
            (1, 1),
            (2, 1),
            (1, 2),
            (3, 1),
            (1, 3),
            (2, 2),
            (2, 3),
            (1, 4)
        ]
    );
    let t = &totals[0];
    let keys = t.column(0).as_primitive::<Int64Type>().values().to_vec();
    let ns = t.column(1).as_primitive::<Int64Type>().values().to_vec();
    assert_eq!((keys, ns), (vec![1, 2, 3], vec![4, 3, 1]));

    let flushes: Vec<LogRow> = expected
        .iter()
        .filter(|r| r.2 == "timer:flush")
        .cloned()
        .collect();
    let mut want = String::from("key,count\n");
    for r in &flushes {
        want.push_str(&format!("{},{}\n", r.1, r.3));
    }
    assert_eq!(std::fs::read_to_string(&sink).unwrap(), want);
    assert!(
        flushes.len() >= 3,
        "every counted key flushed at least once"
    );
}

#[tokio::test]
async fn show_and_describe_list_functions_and_bindings() {
    let db = open(None, &[]).await;
    db.register_process_function(descriptor("keyed_counter"), || KeyedCounter)
        .await
        .unwrap();
    db.execute(
        "CREATE SOURCE events (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM a AS PROCESS activation_log FROM events;
         CREATE MATERIALIZED VIEW b AS PROCESS activation_log FROM events;",
    )
    .await
    .unwrap();
    let shown = db.execute("SHOW PROCESS FUNCTIONS").await.unwrap();
    let b = &shown[0];
    let hash = descriptor("keyed_counter").binding_hash();
    assert_eq!(
        strings(b, 0),
        ["activation_log", "activation_log", "keyed_counter"]
    );
    assert_eq!(strings(b, 1), ["1", "1", "1"]);
    assert_eq!(strings(b, 2), ["native", "native", "native"]);
    assert_eq!(strings(b, 3), ["replay_safe", "replay_safe", "replay_safe"]);
    assert_eq!(strings(b, 4), ["key", "key", "key"]);
    assert_eq!(strings(b, 5)[2], hash);
    assert_eq!(strings(b, 6), ["events", "events", "NULL"]);
    assert_eq!(strings(b, 7), ["a", "b", "NULL"]);

    let d = db.execute("DESCRIBE activation_log").await.unwrap();
    let props = strings(&d[0], 0);
    let values = strings(&d[0], 1);
    let get = |p: &str| values[props.iter().position(|x| x == p).unwrap()].clone();
    assert_eq!(get("input_columns"), "key Int64, amount Int64");
    assert_eq!(
        get("output_columns"),
        "activation_id Int64, key Int64, callback Utf8, count Int64, watermark Int64"
    );
    assert_eq!(get("initial_state"), "absent");
    assert_eq!(
        values[props.len() - 2..].to_vec(),
        ["events -> a".to_string(), "events -> b".to_string()]
    );
    let d = db.execute("DESCRIBE b").await.unwrap();
    assert_eq!(
        strings(&d[0], 0),
        ["activation_id", "key", "callback", "count", "watermark"]
    );
    let shown = db.execute("SHOW MATERIALIZED VIEWS").await.unwrap();
    assert_eq!(
        strings(&shown[0], 1),
        ["process function activation_log v1 over events"]
    );
    db.execute("DROP MATERIALIZED VIEW b").await.unwrap();
    let err = db
        .execute("DROP SOURCE events")
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("a read(s) it"), "{err}");
    db.shutdown().await.unwrap();
}

#[tokio::test]
async fn bad_bindings_and_registrations_are_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(None, &[]).await;
    db.execute(&format!(
        "CREATE SOURCE events (key BIGINT, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE SOURCE narrow (key BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE SOURCE typed (key VARCHAR, amount BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts);
         CREATE STREAM changes AS SELECT key, COUNT(*) AS n FROM events GROUP BY key;
         CREATE SINK out FROM events WITH (connector = 'file', path = '{}', format = 'csv');",
        dir.path().join("out.csv").display()
    ))
    .await
    .unwrap();
    let cases = [
        (
            "CREATE STREAM x AS PROCESS nope FROM events",
            "no process function named 'nope' is registered (registered: activation_log)",
        ),
        (
            "CREATE STREAM x AS PROCESS activation_log VERSION 2 FROM events",
            "VERSION 2 was asked for, but version 1 is registered",
        ),
        (
            "CREATE STREAM x AS PROCESS activation_log FROM missing",
            "no source or stream named 'missing'",
        ),
        (
            "CREATE STREAM x AS PROCESS activation_log FROM out",
            "'out' is a sink",
        ),
        (
            "CREATE STREAM x AS PROCESS activation_log FROM narrow",
            "input 'narrow' has no column 'amount'",
        ),
        (
            "CREATE STREAM x AS PROCESS activation_log FROM typed",
            "column 'key' of input 'typed' is Utf8, but the function declares Int64",
        ),
        (
            "CREATE STREAM x AS PROCESS activation_log FROM changes",
            "'changes' is a changelog",
        ),
        (
            "CREATE STREAM events AS PROCESS activation_log FROM narrow",
            "a source named 'events' already exists",
        ),
    ];
    for (sql, needle) in cases {
        let e = db.execute(sql).await.unwrap_err().to_string();
        assert!(e.contains(needle), "{sql}\n  {e}");
    }
    let e = db
        .register_process_function(
            sluice::process::benchmark::activation_log_descriptor("activation_log"),
            || KeyedCounter,
        )
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("'activation_log' is already registered"), "{e}");
    let mut d = descriptor("bad_key");
    d.key_columns = vec!["missing".into()];
    let e = db
        .register_process_function(d, || KeyedCounter)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("key column 'missing' is not in the input schema"),
        "{e}"
    );
    let mut d = descriptor("py");
    d.runtime = ProcessRuntime::Python(PythonEnvironmentBinding {
        package: "p".into(),
        version: "1".into(),
        files: Default::default(),
        ..Default::default()
    });
    let e = db
        .register_process_function(d, || KeyedCounter)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("must be registered with ProcessRuntime::Native"),
        "{e}"
    );
    let shown = db.execute("SHOW STREAMS").await.unwrap();
    assert_eq!(strings(&shown[0], 0), ["changes"], "nothing was bound");
    db.shutdown().await.unwrap();
}
