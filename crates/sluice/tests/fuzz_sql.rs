//! The short, CI-sized counterpart of the `sql` fuzz target (`fuzz/` at the
//! repository root): the same entry point, [`sluice::fuzzing::check_sql`],
//! fed (a) every file of the committed seed corpus, (b) random mutations of
//! them and (c) statements generated from a small grammar of the dialect
//! over the preamble's relations. Only results or clean, coded errors may
//! come out; every run has a watchdog, so a hang fails instead of stalling.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sluice::fuzzing::{check_sql, SqlOutcome};

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../fuzz/corpus/sql");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Cases per property: the given default, or `SLUICE_FUZZ_CASES` for a
/// longer local campaign (the watchdogs then allow an hour).
fn cases(default: u32) -> u32 {
    std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The watchdog limit for a property run: `default`, or an hour for a
/// campaign sized by `SLUICE_FUZZ_CASES`.
fn run_limit(default: Duration) -> Duration {
    if std::env::var_os("SLUICE_FUZZ_CASES").is_some() {
        Duration::from_secs(3600)
    } else {
        default
    }
}

/// Run `f` on its own thread and fail if it takes longer than `limit`.
fn with_watchdog(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("fuzz run still going after {limit:?}"),
    }
}

fn runner(default_cases: u32) -> TestRunner {
    TestRunner::new(Config {
        cases: cases(default_cases),
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn every_corpus_file_runs_cleanly() {
    with_watchdog(Duration::from_secs(60), || {
        let files = corpus();
        assert!(files.len() >= 20, "only {} SQL corpus files", files.len());
        let mut executed = 0;
        for (_, bytes) in &files {
            if let SqlOutcome::Executed(_) = check_sql(bytes) {
                executed += 1;
            }
        }
        // Most seeds get past the parser, so mutations start from there.
        assert!(
            executed * 2 > files.len(),
            "{executed} of {} executed",
            files.len()
        );
    });
}

/// The harness really executes: a valid statement over the preamble's
/// relations succeeds, and a bad one ends in the expected coded error.
#[test]
fn harness_executes_against_the_preamble() {
    let ok = check_sql(b"CREATE STREAM s AS SELECT auction, price * 2 AS p FROM bids");
    assert!(matches!(ok, SqlOutcome::Executed(Ok(0))), "{ok:?}");
    let bad = check_sql(b"CREATE STREAM s AS SELECT nope FROM bids");
    let SqlOutcome::Executed(Err(e)) = bad else {
        panic!("expected an execution error, got {bad:?}");
    };
    assert_eq!(e.code(), "SLC-SQL-006", "{e}");
    assert!(e.to_string().contains("nope"), "{e}");
    let outside =
        check_sql(b"CREATE SOURCE x (a BIGINT) WITH (connector = 'file', path = '/etc/passwd')");
    assert!(matches!(outside, SqlOutcome::NotExecuted), "{outside:?}");
}

fn mutate(mut bytes: Vec<u8>, edits: &[(u8, usize, u8, Vec<u8>)], donors: &[Vec<u8>]) -> Vec<u8> {
    for (kind, at, byte, insert) in edits {
        let len = bytes.len();
        let at = if len == 0 { 0 } else { at % (len + 1) };
        match kind % 5 {
            0 if at < len => bytes[at] = *byte,
            1 => bytes.truncate(at),
            2 => {
                bytes.splice(at..at, insert.iter().copied());
            }
            3 => {
                bytes.drain(at..(at + usize::from(*byte % 16)).min(len));
            }
            4 => {
                let donor = &donors[usize::from(*byte) % donors.len()];
                let from = (at * 7) % (donor.len() + 1);
                bytes.truncate(at);
                bytes.extend_from_slice(&donor[from..]);
            }
            _ => {}
        }
    }
    bytes
}

#[test]
fn mutated_corpus_runs_cleanly() {
    with_watchdog(run_limit(Duration::from_secs(120)), || {
        let files: Vec<Vec<u8>> = corpus().into_iter().map(|(_, b)| b).collect();
        let tokens = prop::sample::select(
            [
                "(",
                ")",
                ",",
                ";",
                "'",
                "\"",
                "--",
                "/*",
                " ",
                "\n",
                "*",
                "0",
                "-1",
                "99999999999999999999",
                "INTERVAL '1' SECOND",
                "NULL",
                "SELECT",
                "FROM",
                "GROUP BY",
                "EMIT CHANGES",
                "tumble(",
                "hop(",
                "session(",
                "WATERMARK FOR",
                "é",
                "\u{0}",
            ]
            .map(|s| s.as_bytes().to_vec())
            .to_vec(),
        );
        let edit = (any::<u8>(), any::<usize>(), any::<u8>(), tokens);
        let strategy = (0..files.len(), prop::collection::vec(edit, 1..5));
        runner(128)
            .run(&strategy, |(index, edits)| {
                check_sql(&mutate(files[index].clone(), &edits, &files));
                Ok(())
            })
            .unwrap();
    });
}

const COLUMNS: &[&str] = &[
    "auction",
    "bidder",
    "price",
    "channel",
    "date_time",
    "big",
    "i",
    "small",
    "tiny",
    "ubig",
    "dbl",
    "flt",
    "flag",
    "name",
    "day",
    "ts",
    "ts_tz",
    "amount",
    "wide",
    "id",
    "city",
    "n",
    "top",
    "bids",
    "volume",
    "window_start",
    "missing",
    "*",
];
const RELATIONS: &[&str] = &[
    "bids",
    "t",
    "people",
    "per_auction",
    "by_name",
    "late_bids",
    "nope",
];
const INTERVALS: &[&str] = &[
    "INTERVAL '10' SECOND",
    "INTERVAL '1' MINUTE",
    "INTERVAL '1' MILLISECOND",
    "INTERVAL '0' SECOND",
    "INTERVAL '-5' SECOND",
    "INTERVAL '1' DAY",
    "INTERVAL '1' MONTH",
    "INTERVAL '300000000000' YEAR",
    "INTERVAL '2.5' SECOND",
    "INTERVAL 'x' SECOND",
];
const LITERALS: &[&str] = &[
    "0",
    "1",
    "-1",
    "9223372036854775807",
    "-9223372036854775808",
    "1e308",
    "'a'",
    "''",
    "NULL",
    "TRUE",
    "1.5",
    "CAST('2024-05-01' AS TIMESTAMP)",
    "DATE '2024-05-01'",
];

fn pick(options: &'static [&'static str]) -> impl Strategy<Value = String> + Clone {
    prop::sample::select(options).prop_map(str::to_string)
}

fn expr() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![pick(COLUMNS), pick(LITERALS)];
    leaf.prop_recursive(3, 12, 3, |inner| {
        prop_oneof![
            (
                inner.clone(),
                pick(&["+", "-", "*", "/", "%", "=", "<", ">=", "AND", "OR", "||"]),
                inner.clone()
            )
                .prop_map(|(a, op, b)| format!("({a} {op} {b})")),
            (
                pick(&[
                    "upper",
                    "abs",
                    "length",
                    "round",
                    "coalesce",
                    "date_trunc",
                    "to_timestamp"
                ]),
                inner.clone()
            )
                .prop_map(|(f, a)| format!("{f}({a})")),
            (
                inner.clone(),
                pick(&[
                    "BIGINT",
                    "INT",
                    "DOUBLE",
                    "VARCHAR",
                    "BOOLEAN",
                    "TIMESTAMP",
                    "DECIMAL(10, 2)",
                    "DECIMAL(50, 2)",
                    "DATE"
                ])
            )
                .prop_map(|(a, t)| format!("CAST({a} AS {t})")),
            (inner.clone(), inner).prop_map(|(a, b)| format!("CASE WHEN {a} THEN {b} END")),
        ]
    })
}

fn window() -> impl Strategy<Value = String> {
    let ts = pick(&["date_time", "ts", "ts_tz", "day", "big", "name"]);
    (
        pick(&["tumble", "tumble_end", "hop", "hop_end", "session"]),
        ts,
        pick(INTERVALS),
        pick(INTERVALS),
    )
        .prop_map(|(f, ts, a, b)| match f.as_str() {
            "hop" | "hop_end" => format!("{f}({ts}, {a}, {b})"),
            _ => format!("{f}({ts}, {a})"),
        })
}

fn aggregate() -> impl Strategy<Value = String> {
    (
        pick(&[
            "COUNT",
            "SUM",
            "AVG",
            "MIN",
            "MAX",
            "first_value",
            "last_value",
            "COUNT(DISTINCT",
        ]),
        expr(),
    )
        .prop_map(|(f, e)| match f.as_str() {
            "COUNT(DISTINCT" => format!("COUNT(DISTINCT {e})"),
            "COUNT" if e.len() % 2 == 0 => "COUNT(*)".to_string(),
            _ => format!("{f}({e})"),
        })
}

fn select() -> impl Strategy<Value = String> {
    let items = prop::collection::vec(prop_oneof![expr(), aggregate(), window()], 1..4);
    let join = prop::option::of((pick(RELATIONS), expr()));
    let group = prop::option::of(prop::collection::vec(
        prop_oneof![window(), pick(COLUMNS)],
        1..3,
    ));
    (
        items,
        pick(RELATIONS),
        join,
        prop::option::of(expr()),
        group,
        pick(&["", " EMIT ON WINDOW CLOSE", " EMIT CHANGES"]),
    )
        .prop_map(|(items, from, join, filter, group, emit)| {
            let mut sql = format!("SELECT {} FROM {from} AS a", items.join(", "));
            if let Some((rel, on)) = join {
                sql.push_str(&format!(" JOIN {rel} AS b ON {on}"));
            }
            if let Some(f) = filter {
                sql.push_str(&format!(" WHERE {f}"));
            }
            if let Some(g) = group {
                sql.push_str(&format!(" GROUP BY {}", g.join(", ")));
            }
            sql.push_str(&emit);
            sql
        })
}

/// A relation of the preamble and its columns by role, for well-typed
/// queries that get past name resolution and reach the streaming planner.
struct Relation {
    name: &'static str,
    keys: &'static [&'static str],
    numbers: &'static [&'static str],
    time: &'static str,
}

const TYPED: &[Relation] = &[
    Relation {
        name: "bids",
        keys: &["auction", "bidder", "channel"],
        numbers: &["price", "auction", "bidder"],
        time: "date_time",
    },
    Relation {
        name: "t",
        keys: &["name", "flag", "day", "tiny", "big", "amount"],
        numbers: &[
            "big", "i", "small", "tiny", "ubig", "dbl", "flt", "amount", "wide",
        ],
        time: "ts",
    },
    Relation {
        name: "people",
        keys: &["city", "name", "id"],
        numbers: &["id"],
        time: "ts",
    },
];

const SANE_INTERVALS: &[&str] = &[
    "INTERVAL '100' MILLISECOND",
    "INTERVAL '1' SECOND",
    "INTERVAL '10' SECOND",
    "INTERVAL '1' MINUTE",
    "INTERVAL '1' HOUR",
    "INTERVAL '1' DAY",
];

/// A well-typed continuous query: a projection, filter, windowed or plain
/// aggregate, or a windowed join over the preamble's relations.
fn typed_select() -> impl Strategy<Value = String> {
    (0..TYPED.len()).prop_flat_map(|r| {
        let rel = &TYPED[r];
        (
            prop::sample::select(rel.keys),
            prop::sample::select(rel.numbers),
            pick(&[
                "SUM",
                "AVG",
                "MIN",
                "MAX",
                "COUNT",
                "first_value",
                "last_value",
            ]),
            pick(&[
                "tumble",
                "hop",
                "session",
                "tumble_end",
                "hop_end",
                "none",
                "project",
                "join",
            ]),
            pick(SANE_INTERVALS),
            pick(SANE_INTERVALS),
            prop::option::of((pick(&["+", "-", "*", "/", "%", ">", "="]), pick(LITERALS))),
            pick(&["", " EMIT ON WINDOW CLOSE", " EMIT CHANGES"]),
        )
            .prop_map(move |(key, num, agg, shape, a, b, arith, emit)| {
                let value = match &arith {
                    Some((op, lit)) => format!("({num} {op} {lit})"),
                    None => num.to_string(),
                };
                let time = rel.time;
                let from = rel.name;
                let window = match shape.as_str() {
                    "hop" | "hop_end" => Some(format!("{shape}({time}, {a}, {b})")),
                    "tumble" | "tumble_end" => Some(format!("{shape}({time}, {a})")),
                    "session" => Some(format!("session({time}, {a})")),
                    _ => None,
                };
                match (shape.as_str(), window) {
                    ("project", _) => format!(
                        "SELECT {key}, {value} AS v, {time} FROM {from} WHERE {num} IS NOT NULL"
                    ),
                    ("join", _) => format!(
                        "SELECT p.city, tumble(b.date_time, {a}) AS w, {agg}(b.price) AS v \
                         FROM bids AS b JOIN people AS p ON b.bidder = p.id \
                         GROUP BY p.city, tumble(b.date_time, {a}){emit}"
                    ),
                    (_, Some(w)) => format!(
                        "SELECT {key}, {w} AS w, {agg}({value}) AS v, COUNT(*) AS n \
                         FROM {from} GROUP BY {key}, {w}{emit}"
                    ),
                    (_, None) => format!(
                        "SELECT {key}, {agg}({value}) AS v FROM {from} GROUP BY {key}{emit}"
                    ),
                }
            })
    })
}

fn with_clause() -> impl Strategy<Value = String> {
    let option = (
        pick(&[
            "connector",
            "path",
            "format",
            "on_error",
            "batch_size",
            "idle_timeout",
            "bogus",
        ]),
        pick(&[
            "'push'",
            "'file'",
            "'out.csv'",
            "'csv'",
            "'parquet'",
            "'skip'",
            "'0'",
            "'1s'",
            "'-1'",
            "'18446744073709551616'",
            "''",
        ]),
    )
        .prop_map(|(k, v)| format!("{k} = {v}"));
    prop::option::of(prop::collection::vec(option, 0..4))
        .prop_map(|o| o.map_or(String::new(), |v| format!(" WITH ({})", v.join(", "))))
}

fn statement() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        4 => pick(&["s1", "s2", "x1", "\"odd name\""]),
        1 => pick(&["t", "bids", "late_bids", "by_name"]),
    ];
    let kind = pick(&["SOURCE", "STREAM", "MATERIALIZED VIEW", "SINK"]);
    let column = (
        pick(COLUMNS),
        pick(&[
            "BIGINT",
            "INT",
            "DOUBLE",
            "VARCHAR",
            "BOOLEAN",
            "TIMESTAMP",
            "DATE",
            "DECIMAL(10, 2)",
            "DECIMAL(50, 2)",
            "DECIMAL(5, 9)",
            "BLOB",
            "BIGINT UNSIGNED",
        ]),
    )
        .prop_map(|(c, t)| format!("{c} {t}"));
    let watermark = prop::option::of((pick(COLUMNS), pick(INTERVALS))).prop_map(|w| {
        w.map_or(String::new(), |(c, i)| {
            format!(", WATERMARK FOR {c} AS {c} - {i}")
        })
    });
    let set_value = pick(&[
        "'0s'",
        "'10s'",
        "'300000000000y'",
        "0",
        "1",
        "-1",
        "'exactly_once'",
        "'at_least_once'",
        "'none'",
        "'x'",
    ]);
    prop_oneof![
        1 => (name.clone(), select()).prop_map(|(n, q)| format!("CREATE STREAM {n} AS {q}")),
        3 => (name.clone(), typed_select()).prop_map(|(n, q)| format!("CREATE STREAM {n} AS {q}")),
        1 => (name.clone(), typed_select())
            .prop_map(|(n, q)| format!("CREATE MATERIALIZED VIEW {n} AS {q}")),
        1 => typed_select().prop_map(|q| format!("EXPLAIN CREATE STREAM e AS {q}")),
        1 => (name.clone(), select()).prop_map(|(n, q)| format!("CREATE MATERIALIZED VIEW {n} AS {q}")),
        1 => select().prop_map(|q| format!("EXPLAIN CREATE STREAM e AS {q}")),
        1 => (
            name.clone(),
            prop::collection::vec(column, 0..4),
            watermark,
            prop::option::of(name.clone()),
            with_clause()
        )
            .prop_map(|(n, cols, wm, late, with)| {
                let late = late.map_or(String::new(), |l| format!(" LATE DATA TO {l}"));
                format!("CREATE SOURCE {n} ({}{wm}){late}{with}", cols.join(", "))
            }),
        1 => (
            name.clone(),
            pick(RELATIONS),
            prop::option::of(expr()),
            with_clause(),
        )
            .prop_map(|(n, from, filter, with)| {
                let filter = filter.map_or(String::new(), |f| format!(" WHERE {f}"));
                format!("CREATE SINK {n} FROM {from}{filter}{with}")
            }),
        1 => (kind.clone(), any::<bool>(), name.clone())
            .prop_map(|(k, e, n)| format!("DROP {k}{} {n}", if e { " IF EXISTS" } else { "" })),
        1 => kind.prop_map(|k| format!("SHOW {k}S")),
        1 => pick(RELATIONS).prop_map(|r| format!("DESCRIBE {r}")),
        1 => (
            pick(&[
                "checkpoint_interval",
                "delivery",
                "batch_size",
                "checkpoint_retain",
                "idle_timeout",
                "checkpoint_alignment_timeout",
                "subscription_history",
                "bogus"
            ]),
            set_value
        )
            .prop_map(|(k, v)| format!("SET {k} = {v}")),
        1 => (
            pick(&["by_name", "per_auction", "bids"]),
            prop::option::of(expr())
        )
            .prop_map(|(r, f)| format!(
                "SELECT * FROM {r}{}",
                f.map_or(String::new(), |f| format!(" WHERE {f}"))
            )),
    ]
}

#[test]
fn generated_statements_run_cleanly() {
    with_watchdog(run_limit(Duration::from_secs(120)), || {
        let script = prop::collection::vec(statement(), 1..4).prop_map(|s| s.join(";\n"));
        let executed = std::cell::Cell::new(0u32);
        runner(256)
            .run(&script, |sql| {
                if let SqlOutcome::Executed(Ok(_)) = check_sql(sql.as_bytes()) {
                    executed.set(executed.get() + 1);
                }
                Ok(())
            })
            .unwrap();
        // The generator stays useful: a good share of scripts run through.
        assert!(
            executed.get() >= 25,
            "only {} scripts executed",
            executed.get()
        );
    });
}
