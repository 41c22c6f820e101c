//! EMIT CHANGES step by step: what each cycle retracts and inserts, and the
//! materialized view's current result while the pipeline runs.

use std::collections::BTreeMap;

use std::time::Duration;

use sluice::{ChangeKind, Database, Subscription};

use crate::common::{
    batch_rows, complete, ev, event_batch, next_within, open_tuned, select, source_ddl, Cell,
    Event, Row, BASE, PATIENCE,
};

/// A database whose source `src` never closes a window before finish
/// (delay 60 s), one source batch per cycle, with `q` as a changelog stream
/// `c` (subscribed) and a changelog view `v`.
async fn setup(q: &str) -> (Database, Subscription) {
    let ddl = format!(
        "{}; CREATE STREAM c AS {q} EMIT CHANGES; CREATE MATERIALIZED VIEW v AS {q} EMIT CHANGES",
        source_ddl("src", 60_000, "")
    );
    let db = open_tuned(&ddl, 1).await;
    let sub = db.subscribe("c").await.expect("subscribe");
    (db, sub)
}

/// Push one batch and return the changes of the cycle it caused (`rows`
/// of them, possibly over several batches: one per window), as a multiset
/// of (is insert, row). Fails if more arrive.
async fn step(
    db: &Database,
    sub: &mut Subscription,
    events: &[Event],
    rows: usize,
) -> BTreeMap<(bool, Row), usize> {
    db.source("src")
        .await
        .expect("source")
        .push(event_batch(events))
        .await
        .expect("push");
    let mut out = BTreeMap::new();
    let mut seen = 0;
    while seen < rows {
        let b = next_within(sub, PATIENCE).await.expect("too few changes");
        for (i, r) in batch_rows(&b.data).into_iter().enumerate() {
            *out.entry((b.kind(i) == ChangeKind::Insert, r)).or_default() += 1;
            seen += 1;
        }
    }
    let extra = next_within(sub, Duration::from_millis(100)).await;
    assert!(extra.is_none(), "unexpected changes: {extra:?}");
    out
}

/// A row of integers.
fn ints(cells: &[i64]) -> Row {
    cells.iter().map(|c| Cell::Int(*c)).collect()
}

fn changes(items: Vec<(bool, Row)>) -> BTreeMap<(bool, Row), usize> {
    let mut out = BTreeMap::new();
    for item in items {
        *out.entry(item).or_default() += 1;
    }
    out
}

const INSERT: bool = true;
const RETRACT: bool = false;

#[tokio::test]
async fn session_merge_retracts_both_merged_sessions() {
    let w = "session(ts, INTERVAL '2' SECOND)";
    let (db, mut sub) = setup(&format!(
        "SELECT key, {w} AS ss, COUNT(*) AS n, SUM(value) AS s FROM src GROUP BY key, {w}"
    ))
    .await;
    let a = step(&db, &mut sub, &[ev(1, BASE, Some(1))], 1).await;
    assert_eq!(a, changes(vec![(INSERT, ints(&[1, BASE, 1, 1]))]));
    let b = step(&db, &mut sub, &[ev(1, BASE + 3_000, Some(2))], 1).await;
    assert_eq!(b, changes(vec![(INSERT, ints(&[1, BASE + 3_000, 1, 2]))]));
    // 1.5 s after the first and before the second: both sessions merge.
    let c = step(&db, &mut sub, &[ev(1, BASE + 1_500, Some(4))], 3).await;
    let expected = changes(vec![
        (RETRACT, ints(&[1, BASE, 1, 1])),
        (RETRACT, ints(&[1, BASE + 3_000, 1, 2])),
        (INSERT, ints(&[1, BASE, 3, 7])),
    ]);
    assert_eq!(c, expected);
    let current = vec![ints(&[1, BASE, 3, 7])];
    assert_eq!(
        select(&db, "SELECT * FROM v").await,
        current,
        "while running"
    );
    finish(&db).await;
    assert_eq!(
        select(&db, "SELECT * FROM v").await,
        current,
        "after finish"
    );
    db.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn tumble_changes_retract_the_previous_row_of_a_group() {
    let w = "tumble(ts, INTERVAL '10' SECOND)";
    let (db, mut sub) = setup(&format!(
        "SELECT key, {w} AS ws, COUNT(*) AS n, MAX(value) AS mx FROM src GROUP BY key, {w}"
    ))
    .await;
    let first = [ev(1, BASE + 1, Some(5)), ev(2, BASE + 2, None)];
    let a = step(&db, &mut sub, &first, 2).await;
    let null_max = vec![Cell::Int(2), Cell::Int(BASE), Cell::Int(1), Cell::Null];
    let expected = changes(vec![(INSERT, ints(&[1, BASE, 1, 5])), (INSERT, null_max)]);
    assert_eq!(a, expected);
    // Only the touched group changes; a new window opens beside the old one.
    let second = [ev(1, BASE + 3, Some(9)), ev(1, BASE + 10_000, Some(1))];
    let b = step(&db, &mut sub, &second, 3).await;
    let expected = changes(vec![
        (RETRACT, ints(&[1, BASE, 1, 5])),
        (INSERT, ints(&[1, BASE, 2, 9])),
        (INSERT, ints(&[1, BASE + 10_000, 1, 1])),
    ]);
    assert_eq!(b, expected);
    let view = select(&db, "SELECT * FROM v").await;
    assert_eq!(view.len(), 3, "{view:?}");
    finish(&db).await;
    let after = select(&db, "SELECT * FROM v").await;
    assert_eq!(after, view, "closing windows changes nothing");
    db.shutdown().await.expect("shutdown");
}

async fn finish(db: &Database) {
    let src = db.source("src").await.expect("source");
    src.finish().await.expect("finish");
    complete(db).await;
}
