//! Late rows, deterministically: the LATE DATA TO stream, the late_rows
//! metric, and rows without an event time.

use crate::common::{
    appended, complete, drain, ev, event_batch, event_rows, late_rows, open, select, source_ddl,
    Cell, Event,
};

fn no_time(key: i64, value: Option<i64>) -> Event {
    Event {
        key,
        ts: None,
        value,
    }
}

/// Push `batches` to `src` (which diverts late rows to `late_x`) and return
/// (rows of late_x, late_rows metric, COUNT(*) of the on-time rows).
async fn run(batches: &[Vec<Event>]) -> (Vec<Vec<Cell>>, u64, Vec<Vec<Cell>>) {
    let ddl = format!(
        "{}; CREATE MATERIALIZED VIEW total AS SELECT COUNT(*) AS n FROM src",
        source_ddl("src", 1_000, "LATE DATA TO late_x")
    );
    let db = open(&ddl).await;
    let mut late = db.subscribe("late_x").await.expect("subscribe late_x");
    assert_eq!(
        late.schema().fields().len(),
        3,
        "late_x has the source's columns"
    );
    let src = db.source("src").await.expect("source");
    for b in batches {
        src.push(event_batch(b)).await.expect("push");
    }
    src.finish().await.expect("finish");
    let metrics = complete(&db).await;
    let total = select(&db, "SELECT n FROM total").await;
    db.shutdown().await.expect("shutdown");
    let late_rows_seen = appended(&drain(&mut late).await).expect("late_x is append-only");
    (late_rows_seen, late_rows(&metrics, "src"), total)
}

#[tokio::test]
async fn late_data_stream_receives_exactly_the_late_rows() {
    let batches = vec![
        // Watermark after: 10_000 - 1_000 = 9_000. Nothing is late before any watermark.
        vec![ev(1, 10_000, Some(1)), ev(1, 2_000, Some(2))],
        // 8_999 < 9_000 is late; 9_000 is exactly on time. Watermark after: 11_000.
        vec![
            ev(2, 8_999, Some(3)),
            ev(2, 9_000, Some(4)),
            ev(2, 12_000, None),
        ],
        // Late rows do not move the watermark: 5_000 and 10_999 are late.
        vec![
            ev(3, 5_000, None),
            ev(3, 10_999, Some(5)),
            ev(3, 11_000, Some(6)),
        ],
        // A late row alone in its batch.
        vec![ev(4, 10_000, Some(7))],
    ];
    let expected_late = [
        ev(2, 8_999, Some(3)),
        ev(3, 5_000, None),
        ev(3, 10_999, Some(5)),
        ev(4, 10_000, Some(7)),
    ];
    let (late, count, total) = run(&batches).await;
    assert_eq!(late, event_rows(&expected_late));
    assert_eq!(count, 4, "late_rows metric");
    assert_eq!(
        total,
        vec![vec![Cell::Int(5)]],
        "on-time rows reach queries"
    );
}

#[tokio::test]
async fn rows_without_event_time_are_late() {
    let batches = vec![
        vec![ev(1, 10_000, Some(1))],
        vec![
            no_time(2, Some(2)),
            ev(2, 10_500, Some(3)),
            no_time(3, None),
        ],
    ];
    let (late, count, total) = run(&batches).await;
    assert_eq!(late, event_rows(&[no_time(2, Some(2)), no_time(3, None)]));
    assert_eq!(count, 2, "late_rows metric");
    assert_eq!(total, vec![vec![Cell::Int(2)]]);
}

#[tokio::test]
async fn rows_without_event_time_are_late_before_any_watermark() {
    // The first batch sets the first watermark; a row in it without an event
    // time still cannot be placed in time.
    let batches = vec![vec![no_time(1, Some(1)), ev(1, 10_000, Some(2))]];
    let (late, count, total) = run(&batches).await;
    // Observed: ([], 0, [[Int(2)]]): the row reaches queries and is not counted.
    let expected = (
        event_rows(&[no_time(1, Some(1))]),
        1,
        vec![vec![Cell::Int(1)]],
    );
    assert_eq!(
        (late, count, total),
        expected,
        "(late_x rows, late_rows, COUNT(*))"
    );
}

#[tokio::test]
async fn late_rows_are_counted_without_a_late_stream() {
    let ddl = format!(
        "{}; CREATE MATERIALIZED VIEW total AS SELECT COUNT(*) AS n FROM src",
        source_ddl("src", 0, "")
    );
    let db = open(&ddl).await;
    let src = db.source("src").await.expect("source");
    src.push(event_batch(&[ev(1, 5_000, None)]))
        .await
        .expect("push");
    src.push(event_batch(&[ev(1, 4_999, None), ev(1, 5_000, None)]))
        .await
        .expect("push");
    src.finish().await.expect("finish");
    let metrics = complete(&db).await;
    assert_eq!(late_rows(&metrics, "src"), 1);
    assert_eq!(metrics.rows_in(), 3);
    assert_eq!(metrics.events_ingested, 2);
    assert_eq!(
        select(&db, "SELECT n FROM total").await,
        vec![vec![Cell::Int(2)]]
    );
    db.shutdown().await.expect("shutdown");
}
