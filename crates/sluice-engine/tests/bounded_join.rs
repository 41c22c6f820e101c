//! A join whose condition caps one side's event time by a column of the
//! other (Nexmark q9: `B.ts BETWEEN A.ts AND A.expires`), and the top-N per
//! auction over it: exact rows, state freed as the watermark passes, and
//! snapshot/restore, driven cycle by cycle at the operator level.

use std::sync::Arc;

use arrow::array::{Int64Array, TimestampMillisecondArray};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;
use arrow::util::pretty::pretty_format_batches;
use rustc_hash::FxHashMap;
use sluice_engine::catalog::{Catalog, SourceDef};
use sluice_engine::operators::{CycleInputs, Operator};
use sluice_engine::options::PipelineOptions;
use sluice_sql::{parse_sql, Statement, StreamPlan, StreamPlanner};

const AUCTION: &str = "CREATE SOURCE auction (id BIGINT, ts TIMESTAMP, expires TIMESTAMP, \
                       WATERMARK FOR ts AS ts)";
const BID: &str =
    "CREATE SOURCE bid (auction BIGINT, price BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)";

/// Every auction's highest bid placed while it was open (q9's shape).
const WINNERS: &str = "CREATE STREAM w AS SELECT id, expires, price, bts FROM (\
     SELECT A.id, A.expires, B.price, B.ts AS bts, \
            ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.ts ASC) AS rn \
     FROM auction AS A JOIN bid AS B ON A.id = B.auction \
     WHERE B.ts BETWEEN A.ts AND A.expires) WHERE rn <= 1";

/// The join alone.
const PAIRS: &str = "CREATE STREAM p AS SELECT A.id, B.price, B.ts AS bts \
     FROM auction AS A JOIN bid AS B ON A.id = B.auction \
     WHERE B.ts >= A.ts AND B.ts < A.expires";

fn ts_field(name: &str) -> Field {
    Field::new(name, DataType::Timestamp(TimeUnit::Millisecond, None), true)
}

/// Auctions as (id, ts, expires).
fn auctions(rows: &[(i64, i64, i64)]) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("id", DataType::Int64, true),
        ts_field("ts"),
        ts_field("expires"),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.1),
            )),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.2),
            )),
        ],
    )
    .expect("auction batch")
}

/// Bids as (auction, price, ts).
fn bids(rows: &[(i64, i64, i64)]) -> RecordBatch {
    let schema = Schema::new(vec![
        Field::new("auction", DataType::Int64, true),
        Field::new("price", DataType::Int64, true),
        ts_field("ts"),
    ]);
    RecordBatch::try_new(
        Arc::new(schema),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(TimestampMillisecondArray::from_iter_values(
                rows.iter().map(|r| r.2),
            )),
        ],
    )
    .expect("bid batch")
}

async fn plan(query: &str) -> StreamPlan {
    let mut catalog = Catalog::default();
    for ddl in [AUCTION, BID] {
        let Statement::CreateSource(src) = parse_sql(ddl)
            .expect("parse")
            .into_iter()
            .next()
            .expect("one statement")
        else {
            unreachable!()
        };
        catalog.sources.push(
            SourceDef::from_statement(src, &PipelineOptions::default(), None).expect("source"),
        );
    }
    let Statement::CreateStream(cs) = parse_sql(query)
        .expect("parse")
        .into_iter()
        .next()
        .expect("one statement")
    else {
        unreachable!()
    };
    StreamPlanner::plan_stream(&catalog, &cs)
        .await
        .expect("plan")
}

async fn compile(query: &str) -> Operator {
    Operator::compile(&plan(query).await.root).expect("compile")
}

/// One cycle: auctions, bids, then the watermark.
type Step<'a> = (&'a [(i64, i64, i64)], &'a [(i64, i64, i64)], i64);

fn run(op: &mut Operator, (a, b, wm): Step<'_>) -> Vec<String> {
    let mut inputs: CycleInputs = FxHashMap::default();
    if !a.is_empty() {
        inputs.insert(Arc::from("auction"), vec![auctions(a)]);
    }
    if !b.is_empty() {
        inputs.insert(Arc::from("bid"), vec![bids(b)]);
    }
    let out = op.run(&inputs, wm).expect("run");
    let text = pretty_format_batches(&out).expect("format").to_string();
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    rows.sort();
    rows
}

/// Rows held by each stateful operator, in tree order.
fn held(op: &mut Operator) -> Vec<usize> {
    let mut ops = Vec::new();
    op.stateful_operators(&mut ops);
    ops.iter()
        .map(|o| o.held_rows().expect("counts its rows"))
        .collect()
}

#[tokio::test]
async fn explain_shows_what_frees_each_side_and_when_a_partition_is_complete() {
    let text = plan(WINNERS).await.root.to_string();
    assert!(
        text.contains("left rows: until watermark - 0ms > a.expires; right rows: until watermark - 0ms > b.ts"),
        "{text}"
    );
    assert!(
        text.contains(
            "limit=1, emit=once the partition is complete; state: 1 rows per partition, \
             freed once the watermark passes the partition's latest a.expires"
        ),
        "{text}"
    );
    // A strict cap: complete one millisecond sooner.
    let text = plan(
        "CREATE STREAM x AS SELECT * FROM (SELECT A.id, B.price, ROW_NUMBER() OVER \
         (PARTITION BY B.auction ORDER BY B.price) AS rn FROM auction AS A JOIN bid AS B \
         ON A.id = B.auction WHERE B.ts >= A.ts AND B.ts < A.expires) WHERE rn <= 2",
    )
    .await
    .root
    .to_string();
    assert!(
        text.contains("freed once the watermark passes the partition's latest a.expires - 1ms"),
        "{text}"
    );
    // Capped by the auction's own event time only: no completion (bids of
    // an auction keep coming), so the top-N stays a changelog.
    let text = plan(
        "CREATE STREAM x AS SELECT * FROM (SELECT A.id, B.price, ROW_NUMBER() OVER \
         (PARTITION BY A.id ORDER BY B.price) AS rn FROM auction AS A JOIN bid AS B \
         ON A.id = B.auction WHERE B.ts >= A.ts AND B.ts <= A.ts + INTERVAL '5' SECOND) \
         WHERE rn <= 1",
    )
    .await;
    assert!(plan_is_changelog(&text), "{}", text.root);
}

fn plan_is_changelog(p: &StreamPlan) -> bool {
    p.changelog
}

#[tokio::test]
async fn winners_are_emitted_once_when_the_auction_expires_and_state_is_freed() {
    let mut op = compile(WINNERS).await;
    // Auction 1 open [0, 100], auction 2 open [10, 300].
    let out = run(
        &mut op,
        (&[(1, 0, 100), (2, 10, 300)], &[(1, 5, 20), (2, 7, 30)], 20),
    );
    assert!(out.is_empty(), "{out:?}");
    // A higher bid for 1; one for 2 before it opened (no match).
    let out = run(&mut op, (&[], &[(1, 9, 90), (2, 50, 5)], 40));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(held(&mut op), [2 + 2, 2], "join: 2 auctions, 2 bids >= 40");
    // The watermark reaches 100: auction 1 still open (not past 100).
    let out = run(&mut op, (&[], &[(1, 9, 100)], 100));
    assert!(out.is_empty(), "{out:?}");
    // Past 100: auction 1 is final, the earliest of its tied 9s wins.
    let out = run(&mut op, (&[], &[(2, 8, 150)], 101));
    assert_eq!(
        out,
        ["| 1 | 1970-01-01T00:00:00.100 | 9 | 1970-01-01T00:00:00.090 |"]
    );
    // The join frees a batch once every row in it may go: the two auctions
    // arrived together, so both stay until 300 passes.
    assert_eq!(
        held(&mut op),
        [2 + 1, 1],
        "auctions, bid at 150; auction 2's top row"
    );
    // Past 300: auction 2 final; nothing left anywhere.
    let out = run(&mut op, (&[], &[(2, 1, 310)], 301));
    assert_eq!(
        out,
        ["| 2 | 1970-01-01T00:00:00.300 | 8 | 1970-01-01T00:00:00.150 |"]
    );
    let out = run(&mut op, (&[], &[], 400));
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(held(&mut op), [0, 0]);
    assert_eq!(op.dropped_late(), 0);
}

#[tokio::test]
async fn a_strict_cap_frees_the_auction_when_the_watermark_reaches_it() {
    let mut op = compile(PAIRS).await;
    let out = run(&mut op, (&[(1, 0, 100)], &[(1, 5, 20), (1, 6, 100)], 99));
    assert_eq!(out, ["| 1 | 5 | 1970-01-01T00:00:00.020 |"]);
    assert_eq!(held(&mut op), [1 + 2]);
    // At 100 no bid can have ts < 100 any more: the auction goes.
    run(&mut op, (&[], &[], 100));
    assert_eq!(
        held(&mut op),
        [2],
        "the bids' batch waits for its bid at 100"
    );
    run(&mut op, (&[], &[], 101));
    assert_eq!(held(&mut op), [0]);
}

#[tokio::test]
async fn a_later_auction_with_the_same_id_extends_an_open_partition() {
    let mut op = compile(WINNERS).await;
    run(&mut op, (&[(1, 0, 50)], &[(1, 5, 10)], 10));
    // A second auction 1, open until 200, arrives before the first expires:
    // the partition stays open until 200 and ranks both auctions' bids.
    run(&mut op, (&[(1, 20, 200)], &[(1, 7, 120)], 30));
    let out = run(&mut op, (&[], &[], 60));
    assert!(out.is_empty(), "{out:?}");
    let out = run(&mut op, (&[], &[], 201));
    assert_eq!(
        out,
        ["| 1 | 1970-01-01T00:00:00.200 | 7 | 1970-01-01T00:00:00.120 |"]
    );
    assert_eq!(held(&mut op), [0, 0]);
}

#[tokio::test]
async fn the_bounded_join_and_its_top_n_survive_snapshot_and_restore() {
    let first: &[Step<'_>] = &[
        (&[(1, 0, 100), (2, 10, 300)], &[(1, 5, 20), (2, 7, 30)], 20),
        (&[(3, 30, 60)], &[(1, 9, 90), (3, 4, 35)], 40),
    ];
    let second: &[Step<'_>] = &[
        (&[], &[(3, 6, 50), (1, 2, 95)], 55),
        (&[(4, 70, 80)], &[(2, 8, 150), (4, 1, 75)], 101),
        (&[], &[(2, 9, 290)], 350),
    ];
    for query in [WINNERS, PAIRS] {
        let mut original = compile(query).await;
        for step in first {
            run(&mut original, *step);
        }
        let mut parts = Vec::new();
        original.snapshot(&mut parts).expect("snapshot");
        let mut restored = compile(query).await;
        restored
            .restore(&mut parts.into_iter().collect())
            .expect("restore");
        let mut emitted = 0;
        for step in second {
            let a = run(&mut original, *step);
            let b = run(&mut restored, *step);
            assert_eq!(a, b, "{query}");
            emitted += a.len();
        }
        assert!(emitted > 0, "{query}");
        assert_eq!(held(&mut restored), held(&mut original));
    }
}
