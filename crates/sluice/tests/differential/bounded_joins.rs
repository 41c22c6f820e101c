//! A join whose condition caps the right side's event time by a column of
//! the left (`r.ts BETWEEN a.ts AND a.expires`, Nexmark q9's shape), and the
//! top-N per left key over it, against the batch oracle on generated,
//! disordered streams with random batch and cycle sizes.
//!
//! The left rows' `expires` is computed from their value (some before their
//! own time, some NULL), so the cap is a plain column that is not event
//! time. The top-N emits each key's rows once the watermark passes its
//! `expires`, which is exact when a left key names one left row: its case
//! gives the left rows unique keys (the join case keeps the generator's
//! repeated keys).

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{appended, block_on, config, drain, open_tuned, push_interleaved, source_ddl};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

/// The left side with its completion column.
const OPEN: &str = "(SELECT key, ts, CASE WHEN value IS NULL THEN NULL \
     WHEN value > 25 THEN ts + INTERVAL '10 seconds' \
     WHEN value > 5 THEN ts + INTERVAL '3 seconds' \
     WHEN value > 0 THEN ts ELSE ts - INTERVAL '1 second' END AS expires FROM l) AS a";

fn pairs() -> String {
    format!(
        "SELECT a.key, a.ts AS ats, a.expires, r.ts AS rts, r.value AS rv FROM {OPEN} \
         JOIN r ON a.key = r.key WHERE r.ts BETWEEN a.ts AND a.expires"
    )
}

/// Strict cap, written the other way round.
fn strict() -> String {
    format!(
        "SELECT a.key, r.ts AS rts, r.value AS rv FROM {OPEN} JOIN r \
         ON r.key = a.key AND a.expires > r.ts AND a.ts <= r.ts"
    )
}

/// The two highest values per left key (ties on value and time select
/// equal columns, so the rows are exact whatever the tie order).
fn winners() -> String {
    format!(
        "SELECT key, expires, rv, rts, rn FROM (SELECT a.key, a.expires, r.value AS rv, \
         r.ts AS rts, ROW_NUMBER() OVER (PARTITION BY a.key ORDER BY r.value DESC, r.ts ASC) \
         AS rn FROM {OPEN} JOIN r ON a.key = r.key WHERE r.ts BETWEEN a.ts AND a.expires) \
         WHERE rn <= 2"
    )
}

/// Give every left row its own key (push order), and point every right
/// row at one of the five left rows that started last before it (its
/// generated key picks which), so most right rows fall in an open interval.
fn unique_left(left: &Stream, right: &Stream) -> (Stream, Stream) {
    let mut left = left.clone();
    let mut starts = Vec::new();
    for (key, e) in left.batches.iter_mut().flatten().enumerate() {
        e.key = key as i64;
        starts.push((e.ts, e.key));
    }
    starts.sort();
    let mut right = right.clone();
    for e in right.batches.iter_mut().flatten() {
        let open = starts.partition_point(|(ts, _)| *ts <= e.ts);
        let pick = usize::try_from(e.key).expect("generated keys are small") + 1;
        e.key = open.checked_sub(pick).map_or(-1, |i| starts[i].1);
    }
    (left, right)
}

async fn bounded(
    left: &Stream,
    right: &Stream,
    pc: usize,
    queries: &[(&str, String)],
) -> Result<(), TestCaseError> {
    let mut ddl = format!(
        "{}; {}",
        source_ddl("l", left.delay_ms, ""),
        source_ddl("r", right.delay_ms, "")
    );
    for (name, sql) in queries {
        ddl.push_str(&format!("; CREATE STREAM {name} AS {sql}"));
    }
    let db = open_tuned(&ddl, pc).await;
    let mut subs = Vec::new();
    for (name, _) in queries {
        subs.push(db.subscribe(name).await.expect("subscribe"));
    }
    push_interleaved(&db, ("l", &left.batches), ("r", &right.batches)).await;
    db.shutdown().await.expect("shutdown");
    let tables = [
        ("l", table(&split_late(left).on_time, &[])),
        ("r", table(&split_late(right).on_time, &[])),
    ];
    for (sub, (name, sql)) in subs.iter_mut().zip(queries) {
        let got = appended(&drain(sub).await).map_err(TestCaseError::fail)?;
        prop_assert_eq!(got, query(&tables, sql).await, "{}: {}", name, sql);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn a_join_capped_by_a_left_column_matches_batch(
        left in stream(30), right in stream(40), pc in per_cycle()
    ) {
        block_on(bounded(&left, &right, pc, &[("pairs", pairs()), ("strict", strict())]))?;
    }

    #[test]
    fn the_top_n_per_left_key_is_emitted_once_complete_and_matches_batch(
        left in stream(40), right in stream(40), pc in per_cycle()
    ) {
        let (left, right) = unique_left(&left, &right);
        block_on(bounded(&left, &right, pc, &[("winners", winners()), ("pairs", pairs())]))?;
    }
}
