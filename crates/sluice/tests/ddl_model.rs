//! Random DDL on a running, checkpointed pipeline: after every statement
//! the catalog the engine reports (SHOW SOURCES / STREAMS / MATERIALIZED
//! VIEWS / SINKS) equals a model, refused statements (duplicate names,
//! unknown inputs, drops of objects still read) change nothing and carry
//! the exact code, and at the end every materialized view equals a batch
//! oracle (DataFusion over the same input rows) and every sink's file holds
//! exactly the rows its input passed after the sink was created.
//!
//! Among the refused statements is a sink the coordinator cannot open (its
//! directory is a regular file): the defect that made this test, where
//! the statement returned Ok and the whole pipeline halted. It is refused
//! with the connector's code and the pipeline runs on.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use sluice::arrow::array::{Array, Int64Array, StringArray};
use sluice::arrow::datatypes::{DataType, Field, Schema};
use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::pretty::pretty_format_batches;
use sluice::Database;

const LIMIT: Duration = Duration::from_secs(60);

/// A regular file in the base directory, where an unopenable sink wants
/// its directory.
const BLOCKER: &str = "blocker";

#[derive(Debug, Clone)]
enum Op {
    Source(u8),
    Stream(u8, u8, i64),
    View(u8, u8),
    Sink(u8, u8),
    /// A sink whose file cannot be created.
    UnopenableSink(u8, u8),
    Drop(u8),
    Duplicate(u8),
    UnknownInput(u8),
    Push(u8, Vec<(i64, i64)>),
    Checkpoint,
}

fn op() -> impl Strategy<Value = Op> {
    let n = 0u8..3;
    prop_oneof![
        3 => n.clone().prop_map(Op::Source),
        3 => (n.clone(), any::<u8>(), -2i64..6).prop_map(|(a, b, c)| Op::Stream(a, b, c)),
        2 => (n.clone(), any::<u8>()).prop_map(|(a, b)| Op::View(a, b)),
        2 => (n.clone(), any::<u8>()).prop_map(|(a, b)| Op::Sink(a, b)),
        1 => (n.clone(), any::<u8>()).prop_map(|(a, b)| Op::UnopenableSink(a, b)),
        3 => any::<u8>().prop_map(Op::Drop),
        1 => any::<u8>().prop_map(Op::Duplicate),
        1 => n.clone().prop_map(Op::UnknownInput),
        3 => (any::<u8>(), prop::collection::vec((0i64..4, -3i64..9), 1..6))
            .prop_map(|(a, r)| Op::Push(a, r)),
        1 => Just(Op::Checkpoint),
    ]
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Source,
    Stream,
    View,
    Sink,
}

#[derive(Debug, Clone)]
struct Obj {
    kind: Kind,
    from: Option<String>,
    /// The source every row comes from, and the filters on the way.
    root: String,
    filters: Vec<i64>,
    /// Rows pushed to `root` before this object existed.
    rows_before: usize,
    /// A sink's file (relative to the base directory).
    path: Option<String>,
}

#[derive(Default)]
struct Model {
    objects: BTreeMap<String, Obj>,
    rows: BTreeMap<String, Vec<(i64, i64)>>,
    sinks_made: usize,
    /// Rows pushed so far, to every source.
    pushed: u64,
}

impl Model {
    fn names(&self, kinds: &[Kind]) -> Vec<String> {
        self.objects
            .iter()
            .filter(|(_, o)| kinds.contains(&o.kind))
            .map(|(n, _)| n.clone())
            .collect()
    }
    fn pick(&self, kinds: &[Kind], i: u8) -> Option<String> {
        let names = self.names(kinds);
        (!names.is_empty()).then(|| names[usize::from(i) % names.len()].clone())
    }
    fn derive(&self, kind: Kind, from: &str, filter: Option<i64>) -> Obj {
        let parent = &self.objects[from];
        let mut filters = parent.filters.clone();
        filters.extend(filter);
        Obj {
            kind,
            from: Some(from.to_string()),
            root: parent.root.clone(),
            filters,
            rows_before: self.rows.get(&parent.root).map_or(0, Vec::len),
            path: None,
        }
    }
}

/// What a statement must do: the model after it, or the error code.
enum Expect {
    Ok(Option<(String, Obj)>),
    Removed(String),
    Err(&'static str),
}

fn batch(rows: &[(i64, i64)]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
        ],
    )
    .unwrap()
}

fn shown(batches: &[RecordBatch]) -> Vec<String> {
    let mut out = Vec::new();
    for b in batches {
        let names = b.column(0).as_any().downcast_ref::<StringArray>().unwrap();
        out.extend((0..names.len()).map(|i| names.value(i).to_string()));
    }
    out.sort();
    out
}

async fn check_catalog(db: &Database, m: &Model, after: &str) {
    for (show, kind) in [
        ("SHOW SOURCES", Kind::Source),
        ("SHOW STREAMS", Kind::Stream),
        ("SHOW MATERIALIZED VIEWS", Kind::View),
        ("SHOW SINKS", Kind::Sink),
    ] {
        let got = shown(&db.execute(show).await.unwrap());
        assert_eq!(got, m.names(&[kind]), "{show} after {after}");
    }
}

/// The view's rows by DataFusion over the rows its source received.
async fn oracle(rows: &[(i64, i64)], filters: &[i64]) -> String {
    let ctx = SessionContext::new();
    let b = batch(rows);
    let table = MemTable::try_new(b.schema(), vec![vec![b]]).unwrap();
    ctx.register_table("input", Arc::new(table)).unwrap();
    let mut sql = "SELECT k, COUNT(*) AS c, SUM(v) AS s FROM input WHERE true".to_string();
    for f in filters {
        sql.push_str(&format!(" AND v > {f}"));
    }
    sql.push_str(" GROUP BY k ORDER BY k");
    let out = ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&out).unwrap().to_string()
}

/// Push `rows` to `src` and wait until the pipeline took them in, so the
/// next statement applies after them (the coordinator applies control
/// messages between cycles).
async fn push(db: &Database, m: &mut Model, src: &str, rows: &[(i64, i64)]) {
    db.source(src)
        .await
        .unwrap()
        .push(batch(rows))
        .await
        .unwrap();
    m.rows
        .entry(src.to_string())
        .or_default()
        .extend(rows.iter().copied());
    m.pushed += rows.len() as u64;
    while db.metrics().rows_in() < m.pushed {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let db = Database::builder()
        .state_dir(dir.path().join("state"))
        .base_dir(dir.path())
        .set("checkpoint_interval", "1h")
        .unwrap()
        .open()
        .await
        .unwrap();
    std::fs::write(dir.path().join(BLOCKER), "a file, not a directory").unwrap();
    db.start().await.unwrap();
    let mut m = Model::default();
    let rel = [Kind::Source, Kind::Stream];
    for op in ops {
        let (sql, expect) = match &op {
            Op::Source(n) => {
                let name = format!("s{n}");
                let e = if m.objects.contains_key(&name) {
                    Expect::Err("SLC-ENG-001")
                } else {
                    let o = Obj {
                        kind: Kind::Source,
                        from: None,
                        root: name.clone(),
                        filters: vec![],
                        rows_before: 0,
                        path: None,
                    };
                    Expect::Ok(Some((name.clone(), o)))
                };
                (format!("CREATE SOURCE {name} (k BIGINT, v BIGINT)"), e)
            }
            Op::Stream(n, i, c) => {
                let Some(from) = m.pick(&rel, *i) else {
                    continue;
                };
                let name = format!("t{n}");
                let e = if m.objects.contains_key(&name) {
                    Expect::Err("SLC-ENG-001")
                } else {
                    Expect::Ok(Some((
                        name.clone(),
                        m.derive(Kind::Stream, &from, Some(*c)),
                    )))
                };
                (
                    format!("CREATE STREAM {name} AS SELECT k, v FROM {from} WHERE v > {c}"),
                    e,
                )
            }
            Op::View(n, i) => {
                let Some(from) = m.pick(&rel, *i) else {
                    continue;
                };
                let name = format!("v{n}");
                let e = if m.objects.contains_key(&name) {
                    Expect::Err("SLC-ENG-001")
                } else {
                    Expect::Ok(Some((name.clone(), m.derive(Kind::View, &from, None))))
                };
                let sql = format!(
                    "CREATE MATERIALIZED VIEW {name} AS SELECT k, COUNT(*) AS c, SUM(v) AS s FROM {from} GROUP BY k"
                );
                (sql, e)
            }
            Op::Sink(n, i) => {
                let Some(from) = m.pick(&rel, *i) else {
                    continue;
                };
                let name = format!("k{n}");
                m.sinks_made += 1;
                let path = format!("out_{}.csv", m.sinks_made);
                let e = if m.objects.contains_key(&name) {
                    Expect::Err("SLC-ENG-001")
                } else {
                    let mut o = m.derive(Kind::Sink, &from, None);
                    o.path = Some(path.clone());
                    Expect::Ok(Some((name.clone(), o)))
                };
                let sql = format!(
                    "CREATE SINK {name} FROM {from} WITH (connector = 'file', path = '{path}', format = 'csv')"
                );
                (sql, e)
            }
            Op::UnopenableSink(n, i) => {
                let Some(from) = m.pick(&rel, *i) else {
                    continue;
                };
                let name = format!("k{n}");
                // A name already taken is refused before the file is tried.
                let e = if m.objects.contains_key(&name) {
                    Expect::Err("SLC-ENG-001")
                } else {
                    Expect::Err("SLC-CONN-001")
                };
                let sql = format!(
                    "CREATE SINK {name} FROM {from} WITH (connector = 'file', path = '{BLOCKER}/out.csv', format = 'csv')"
                );
                (sql, e)
            }
            Op::Drop(i) => {
                let all = [Kind::Source, Kind::Stream, Kind::View, Kind::Sink];
                let Some(name) = m.pick(&all, *i) else {
                    continue;
                };
                let keyword = match m.objects[&name].kind {
                    Kind::Source => "SOURCE",
                    Kind::Stream => "STREAM",
                    Kind::View => "MATERIALIZED VIEW",
                    Kind::Sink => "SINK",
                };
                let read = m.objects.values().any(|o| o.from.as_deref() == Some(&name));
                let e = if read {
                    Expect::Err("SLC-ENG-001")
                } else {
                    Expect::Removed(name.clone())
                };
                (format!("DROP {keyword} {name}"), e)
            }
            Op::Duplicate(i) => {
                let all = [Kind::Source, Kind::Stream, Kind::View, Kind::Sink];
                let Some(name) = m.pick(&all, *i) else {
                    continue;
                };
                (
                    format!("CREATE SOURCE {name} (k BIGINT, v BIGINT)"),
                    Expect::Err("SLC-ENG-001"),
                )
            }
            Op::UnknownInput(n) => {
                let name = format!("u{n}");
                (
                    format!("CREATE STREAM {name} AS SELECT k, v FROM nowhere"),
                    Expect::Err("SLC-SQL-006"),
                )
            }
            Op::Push(i, rows) => {
                let Some(src) = m.pick(&[Kind::Source], *i) else {
                    continue;
                };
                push(&db, &mut m, &src, rows).await;
                continue;
            }
            Op::Checkpoint => ("CHECKPOINT".to_string(), Expect::Ok(None)),
        };
        let got = db.execute(&sql).await;
        match expect {
            Expect::Ok(obj) => {
                got.unwrap_or_else(|e| panic!("{sql}: {e}"));
                if let Some((name, o)) = obj {
                    m.objects.insert(name, o);
                }
            }
            Expect::Removed(name) => {
                got.unwrap_or_else(|e| panic!("{sql}: {e}"));
                m.objects.remove(&name);
                m.rows.remove(&name);
            }
            Expect::Err(code) => {
                let e = got.expect_err(&sql);
                assert_eq!(e.code(), code, "{sql}: {e}");
            }
        }
        check_catalog(&db, &m, &sql).await;
    }
    for src in m.names(&[Kind::Source]) {
        push(&db, &mut m, &src, &[(0, 1), (1, 4), (2, 7), (1, -2)]).await;
        db.source(&src).await.unwrap().finish().await.unwrap();
    }
    if !m.names(&[Kind::Source]).is_empty() {
        db.run_to_completion().await.unwrap();
    }
    for (name, o) in &m.objects {
        if o.kind != Kind::View {
            continue;
        }
        // A view sees the rows its source received after it was created.
        let rows = m.rows.get(&o.root).cloned().unwrap_or_default()[o.rows_before..].to_vec();
        let got = db
            .execute(&format!("SELECT k, c, s FROM {name} ORDER BY k"))
            .await
            .unwrap();
        let got = pretty_format_batches(&got).unwrap().to_string();
        assert_eq!(got, oracle(&rows, &o.filters).await, "view {name}");
        eprintln!("COMPARED view {name} rows {}", rows.len());
    }
    // Each push waited for its rows to be taken in: the source queue never
    // came near its 64 MiB high-water mark.
    assert_eq!(db.metrics().source_pressure_cycles, 0);
    db.shutdown().await.unwrap();
    if let Some(halted) = db.status().await.and_then(|s| s.halted) {
        panic!("the pipeline halted: {halted:?}");
    }
    // A sink's file holds the rows its input passed after it was created,
    // each once (the file's order is the rows' order within each cycle).
    for (name, o) in &m.objects {
        let Some(path) = &o.path else {
            continue;
        };
        let mut want: Vec<(i64, i64)> = m.rows.get(&o.root).cloned().unwrap_or_default()
            [o.rows_before..]
            .iter()
            .copied()
            .filter(|(_, v)| o.filters.iter().all(|f| v > f))
            .collect();
        let text = std::fs::read_to_string(dir.path().join(path)).unwrap_or_default();
        let mut got: Vec<(i64, i64)> = text
            .lines()
            .filter(|l| *l != "k,v")
            .map(|l| {
                let (k, v) = l.split_once(',').unwrap_or_else(|| panic!("{path}: {l:?}"));
                (k.parse().unwrap(), v.parse().unwrap())
            })
            .collect();
        want.sort_unstable();
        got.sort_unstable();
        assert_eq!(got, want, "sink {name} ({path})");
        eprintln!("COMPARED sink {name} rows {}", want.len());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default() })]

    #[test]
    fn the_engine_catalog_follows_the_model_and_views_match_the_oracle(
        ops in prop::collection::vec(op(), 1..30),
    ) {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            tokio::time::timeout(LIMIT, run(ops)).await.expect("timed out");
        });
    }
}

/// DROP SOURCE of a push source whose batches are still queued, and a push
/// through a handle kept from before the drop: both used to halt the whole
/// pipeline ("source 's': no such source (dropped?)", SLC-ENG-005). Now the
/// queued batches are discarded, the stale handle is refused (SLC-ENG-001,
/// naming the source), and the pipeline runs on.
#[tokio::test]
async fn dropping_a_push_source_with_queued_batches_keeps_the_pipeline_running() {
    tokio::time::timeout(LIMIT, async {
        let db = Database::open_in_memory().await.unwrap();
        db.execute("CREATE SOURCE s (k BIGINT, v BIGINT)")
            .await
            .unwrap();
        db.execute("CREATE SOURCE t (k BIGINT, v BIGINT)")
            .await
            .unwrap();
        db.execute(
            "CREATE MATERIALIZED VIEW c AS SELECT k, COUNT(*) AS c, SUM(v) AS s FROM t GROUP BY k",
        )
        .await
        .unwrap();
        let s = db.source("s").await.unwrap();
        for i in 0..16 {
            s.push(batch(&[(i, i)])).await.unwrap();
        }
        db.execute("DROP SOURCE s").await.unwrap();
        let e = s.push(batch(&[(1, 1)])).await.unwrap_err();
        assert_eq!(e.code(), "SLC-ENG-001", "{e}");
        assert!(e.to_string().contains("source 's'"), "{e}");
        let t = db.source("t").await.unwrap();
        t.push(batch(&[(1, 2), (1, 3), (2, 5)])).await.unwrap();
        t.finish().await.unwrap();
        db.run_to_completion().await.unwrap();
        let halted = db.status().await.and_then(|s| s.halted);
        assert!(halted.is_none(), "{halted:?}");
        let got = db
            .execute("SELECT k, c, s FROM c ORDER BY k")
            .await
            .unwrap();
        assert_eq!(
            pretty_format_batches(&got).unwrap().to_string(),
            oracle(&[(1, 2), (1, 3), (2, 5)], &[]).await
        );
        db.shutdown().await.unwrap();
    })
    .await
    .expect("timed out");
}

/// Every statement that changes the catalog is checked against the
/// lifecycle first: on a closed pipeline it is refused (SLC-ENG-006) and
/// the catalog stays as it was. Before, CREATE SOURCE / SINK on a closed
/// database added the object to the catalog and only then found the
/// coordinator gone.
#[tokio::test]
async fn statements_on_a_closed_pipeline_are_refused_and_change_nothing() {
    tokio::time::timeout(LIMIT, async {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::builder()
            .base_dir(dir.path())
            .open()
            .await
            .unwrap();
        db.execute("CREATE SOURCE s (k BIGINT, v BIGINT)")
            .await
            .unwrap();
        db.shutdown().await.unwrap();
        for sql in [
            "CREATE SOURCE t (k BIGINT, v BIGINT)",
            "CREATE STREAM q AS SELECT k, v FROM s",
            "CREATE SINK o FROM s WITH (connector = 'file', path = 'o.csv')",
            "DROP SOURCE s",
            "SET batch_size = '10'",
        ] {
            let e = db.execute(sql).await.unwrap_err();
            assert_eq!(e.code(), "SLC-ENG-006", "{sql}: {e}");
        }
        for (show, want) in [
            ("SHOW SOURCES", vec!["s".to_string()]),
            ("SHOW STREAMS", vec![]),
            ("SHOW SINKS", vec![]),
        ] {
            assert_eq!(shown(&db.execute(show).await.unwrap()), want, "{show}");
        }
        assert_eq!(db.start().await.unwrap_err().code(), "SLC-ENG-006");
    })
    .await
    .expect("timed out");
}
