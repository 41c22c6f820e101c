//! Inner equi-joins of two sources, against the batch oracle: the join of
//! each source's on-time rows, whatever the interleaving of their batches,
//! the batch sizes and the cycle sizes.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{appended, block_on, config, drain, open_tuned, push_interleaved, source_ddl};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

const ON: &str = "SELECT l.key, l.value AS lv, r.value AS rv, r.ts AS rts \
                  FROM l JOIN r ON l.key = r.key AND l.value < r.value";
const WHERE: &str = "SELECT l.key, r.value AS rv FROM l, r \
                     WHERE r.key = l.key + 1 AND r.value > 10";
const SELF: &str = "SELECT a.key, a.value AS av, b.value AS bv \
                    FROM l a JOIN l b ON a.key = b.key AND a.ts = b.ts";
/// Time-bounded: both sides' state is dropped as the watermark passes.
const WITHIN: &str = "SELECT l.key, l.ts AS lts, r.ts AS rts, r.value AS rv FROM l JOIN r \
                      ON l.key = r.key AND r.ts BETWEEN l.ts AND l.ts + INTERVAL '3 seconds'";

async fn joins(left: &Stream, right: &Stream, per_cycle: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; {}; CREATE STREAM j_on AS {ON}; CREATE STREAM j_where AS {WHERE}; \
         CREATE STREAM j_self AS {SELF}; CREATE STREAM j_within AS {WITHIN}",
        source_ddl("l", left.delay_ms, ""),
        source_ddl("r", right.delay_ms, "")
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut subs = Vec::new();
    for name in ["j_on", "j_where", "j_self", "j_within"] {
        subs.push(db.subscribe(name).await.expect("subscribe"));
    }
    push_interleaved(&db, ("l", &left.batches), ("r", &right.batches)).await;
    db.shutdown().await.expect("shutdown");
    let tables = [
        ("l", table(&split_late(left).on_time, &[])),
        ("r", table(&split_late(right).on_time, &[])),
    ];
    for (sub, sql) in subs.iter_mut().zip([ON, WHERE, SELF, WITHIN]) {
        let got = appended(&drain(sub).await).map_err(TestCaseError::fail)?;
        let expected = query(&tables, sql).await;
        prop_assert_eq!(got, expected, "{}", sql);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn inner_joins_match_batch(left in stream(40), right in stream(40), per_cycle in per_cycle()) {
        block_on(joins(&left, &right, per_cycle))?;
    }
}
