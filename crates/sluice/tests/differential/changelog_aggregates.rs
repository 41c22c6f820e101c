//! GROUP BY over a changelog input (an updating aggregate, and a windowed
//! aggregate with EMIT CHANGES) against the batch oracle: the folded
//! changelog and the materialized view equal the nested query in batch.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    block_on, complete, config, drain, fold, interval, open_tuned, push_all, select, source_ddl,
};
use crate::gen::{per_cycle, split_late, stream, Stream};
use crate::oracle::{query, table};

const PER_KEY: &str = "SELECT key, MAX(value) AS mx, COUNT(*) AS n FROM src GROUP BY key";
const PARITY: &str = "SELECT key % 2 AS parity, COUNT(*) AS groups, SUM(mx) AS s, \
                      MAX(mx) AS top, MIN(n) AS least, AVG(n) AS avg_n \
                      FROM per_key GROUP BY key % 2";
const TOTAL: &str = "SELECT COUNT(*) AS groups, SUM(n) AS rows_in FROM per_key";

fn per_window(input: &str) -> String {
    let w = interval(10_000);
    format!(
        "SELECT key, tumble(ts, {w}) AS ws, COUNT(*) AS n FROM {input} GROUP BY key, tumble(ts, {w})"
    )
}

const WINDOWS_PER_KEY: &str = "SELECT key, COUNT(*) AS windows, MAX(n) AS busiest \
                               FROM per_window GROUP BY key";

async fn over_changelogs(s: &Stream, per_cycle: usize) -> Result<(), TestCaseError> {
    let ddl = format!(
        "{}; CREATE STREAM per_key AS {PER_KEY}; \
         CREATE STREAM parity AS {PARITY}; \
         CREATE MATERIALIZED VIEW parity_view AS {PARITY}; \
         CREATE MATERIALIZED VIEW total AS {TOTAL}; \
         CREATE STREAM per_window AS {} EMIT CHANGES; \
         CREATE MATERIALIZED VIEW windows_per_key AS {WINDOWS_PER_KEY}",
        source_ddl("src", s.delay_ms, ""),
        per_window("src")
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut parity = db.subscribe("parity").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    complete(&db).await;
    let view = select(&db, "SELECT * FROM parity_view").await;
    let total = select(&db, "SELECT * FROM total").await;
    let windows = select(&db, "SELECT * FROM windows_per_key").await;
    db.shutdown().await.expect("shutdown");
    let folded = fold(&drain(&mut parity).await).map_err(TestCaseError::fail)?;

    let t = table(&split_late(s).on_time, &[]);
    let nested = |outer: &str, inner: &str, name: &str| {
        outer.replace(
            &format!("FROM {name}"),
            &format!("FROM ({inner}) AS {name}"),
        )
    };
    let tables = [("src", t)];
    let expected = query(&tables, &nested(PARITY, PER_KEY, "per_key")).await;
    let expected_total = query(&tables, &nested(TOTAL, PER_KEY, "per_key")).await;
    let expected_windows = query(
        &tables,
        &nested(WINDOWS_PER_KEY, &per_window("src"), "per_window"),
    )
    .await;
    prop_assert_eq!(
        &folded,
        &expected,
        "folded changelog of an aggregate over a changelog"
    );
    prop_assert_eq!(&view, &expected, "view over a changelog");
    prop_assert_eq!(&total, &expected_total, "global aggregate over a changelog");
    prop_assert_eq!(
        &windows,
        &expected_windows,
        "aggregate over EMIT CHANGES windows"
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn aggregates_over_changelogs_match_batch(s in stream(60), pc in per_cycle()) {
        block_on(over_changelogs(&s, pc))?;
    }
}
