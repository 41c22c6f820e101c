//! Every query under `benches/nexmark/` on a fixed seed, through the real
//! Nexmark connector, compared with the same query computed in batch by
//! DataFusion over the same generated rows. Window bounds in the oracles are
//! plain arithmetic on epoch milliseconds, independent of Sluice's window
//! functions.

use std::sync::Arc;

use datafusion::arrow::array::{ArrayRef, RecordBatch};
use datafusion::arrow::compute::cast;
use datafusion::arrow::datatypes::DataType;
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use sluice::Database;
use sluice_bench::queries::{JOIN_QUERIES, QUERIES};
use sluice_bench::workload::generate;
use sluice_bench::Script;

const SEED: u64 = 42;
const DISORDER_MS: u64 = 2000;

/// A run that takes longer than this has hung (each takes seconds in a
/// debug build).
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The batch oracle of each query, over table `bid`.
fn oracle(query: &str) -> &'static str {
    match query {
        "q0" => "SELECT auction, bidder, price, date_time, extra FROM bid",
        "q1" => "SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid",
        "q2" => "SELECT auction, price FROM bid WHERE auction % 123 = 0",
        // Every hop window [s, s + 10 s) with s a multiple of 2 s containing t.
        "q5" => {
            "WITH t AS (SELECT auction, CAST(date_time AS BIGINT) AS ms FROM bid),
                  w AS (SELECT auction, ms, ms - ms % 2000 - k * 2000 AS ws
                        FROM t CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS h(k))
             SELECT auction, ws AS window_start, ws + 10000 AS window_end, COUNT(*) AS num
             FROM w WHERE ws + 10000 > ms GROUP BY auction, ws"
        }
        "q7" => {
            "SELECT ms - ms % 10000 AS window_start, ms - ms % 10000 + 10000 AS window_end,
                    MAX(price) AS maxprice
             FROM (SELECT price, CAST(date_time AS BIGINT) AS ms FROM bid)
             GROUP BY ms - ms % 10000"
        }
        "tumble_count" => {
            "SELECT auction, ms - ms % 10000 AS window_start, ms - ms % 10000 + 10000 AS window_end,
                    COUNT(*) AS bids, MAX(price) AS maxprice
             FROM (SELECT auction, price, CAST(date_time AS BIGINT) AS ms FROM bid)
             GROUP BY auction, ms - ms % 10000"
        }
        "q5_full" => {
            "WITH t AS (SELECT auction, CAST(date_time AS BIGINT) AS ms FROM bid),
                  w AS (SELECT auction, ms, ms - ms % 2000 - k * 2000 AS ws
                        FROM t CROSS JOIN (VALUES (0), (1), (2), (3), (4)) AS h(k)),
                  c AS (SELECT auction, ws, COUNT(*) AS num FROM w
                        WHERE ws + 10000 > ms GROUP BY auction, ws),
                  m AS (SELECT ws, MAX(num) AS maxnum FROM c GROUP BY ws)
             SELECT c.auction, c.ws AS window_start, c.ws + 10000 AS window_end, c.num
             FROM c JOIN m ON c.ws = m.ws AND c.num = m.maxnum"
        }
        "q7_full" => {
            "WITH t AS (SELECT auction, price, bidder, date_time, extra,
                               CAST(date_time AS BIGINT) AS ms FROM bid),
                  m AS (SELECT ms - ms % 10000 AS ws, MAX(price) AS maxprice
                        FROM t GROUP BY ms - ms % 10000)
             SELECT t.auction, t.price, t.bidder, t.date_time, t.extra
             FROM t JOIN m ON t.price = m.maxprice AND t.ms >= m.ws AND t.ms < m.ws + 10000"
        }
        "q3" => {
            "SELECT P.name, P.city, P.state, A.id
             FROM auction AS A JOIN person AS P ON A.seller = P.id
             WHERE A.category = 10 AND (P.state = 'or' OR P.state = 'id' OR P.state = 'ca')"
        }
        "q4" => {
            "SELECT Q.category, AVG(Q.final) AS avg_price
             FROM (SELECT A.id, A.category, MAX(B.price) AS final
                   FROM auction AS A JOIN bid AS B ON A.id = B.auction
                   WHERE B.date_time >= A.date_time AND B.date_time <= A.expires
                   GROUP BY A.id, A.category) Q
             GROUP BY Q.category"
        }
        // Ties on date_time within a seller go by the rest of the row,
        // ascending, as Sluice's OVER over a changelog orders them.
        "q6" => {
            "SELECT seller,
                    AVG(final) OVER (PARTITION BY seller ORDER BY date_time, id, final
                                     ROWS BETWEEN 10 PRECEDING AND CURRENT ROW) AS avg_final
             FROM (SELECT A.id, A.seller, MAX(B.date_time) AS date_time, MAX(B.price) AS final
                   FROM auction AS A JOIN bid AS B ON A.id = B.auction
                   WHERE B.date_time BETWEEN A.date_time AND A.expires
                   GROUP BY A.id, A.seller) AS Q"
        }
        "q8" => {
            "SELECT P.id, P.name, P.starttime
             FROM (SELECT id, name, ms - ms % 10000 AS starttime
                   FROM (SELECT id, name, CAST(date_time AS BIGINT) AS ms FROM person)
                   GROUP BY id, name, ms - ms % 10000) P
             JOIN (SELECT seller, ms - ms % 10000 AS starttime
                   FROM (SELECT seller, CAST(date_time AS BIGINT) AS ms FROM auction)
                   GROUP BY seller, ms - ms % 10000) A
             ON P.id = A.seller AND P.starttime = A.starttime"
        }
        "q9" => {
            // Ties on price and time go by the rest of the row, ascending,
            // as Sluice's top-N orders them.
            "SELECT id, item_name, description, initial_bid, reserve, date_time, expires,
                    seller, category, extra, auction, bidder, price, bid_date_time, bid_extra
             FROM (SELECT A.id, A.item_name, A.description, A.initial_bid, A.reserve,
                          A.date_time, A.expires, A.seller, A.category, A.extra,
                          B.auction, B.bidder, B.price, B.date_time AS bid_date_time,
                          B.extra AS bid_extra,
                          ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC,
                              B.date_time ASC, B.bidder ASC, B.extra ASC) AS rownum
                   FROM auction AS A JOIN bid AS B ON A.id = B.auction
                   WHERE B.date_time >= A.date_time AND B.date_time <= A.expires)
             WHERE rownum = 1"
        }
        "q10" => {
            "SELECT auction, bidder, price, date_time, extra,
                    to_char(date_time, '%Y-%m-%d') AS dt, to_char(date_time, '%H:%M') AS hm
             FROM bid"
        }
        // A bidder's bids sorted by time; a gap of 10 s or more starts a
        // new session, which ends 10 s after its last bid.
        "q11" => {
            "WITH t AS (SELECT bidder, CAST(date_time AS BIGINT) AS ms FROM bid),
                  l AS (SELECT bidder, ms,
                               CASE WHEN ms - LAG(ms) OVER (PARTITION BY bidder ORDER BY ms) < 10000
                                    THEN 0 ELSE 1 END AS brk
                        FROM t),
                  s AS (SELECT bidder, ms,
                               SUM(brk) OVER (PARTITION BY bidder ORDER BY ms
                                              ROWS UNBOUNDED PRECEDING) AS sid
                        FROM l)
             SELECT bidder, COUNT(*) AS bid_count, MIN(ms) AS starttime,
                    MAX(ms) + 10000 AS endtime
             FROM s GROUP BY bidder, sid"
        }
        "q12" => {
            "SELECT bidder, COUNT(*) AS bid_count, ms - ms % 10000 AS window_start,
                    ms - ms % 10000 + 10000 AS window_end
             FROM (SELECT bidder, CAST(date_time AS BIGINT) AS ms FROM bid)
             GROUP BY bidder, ms - ms % 10000"
        }
        "q13" => {
            "SELECT B.auction, B.bidder, B.price, B.date_time, S.name AS value
             FROM bid AS B JOIN side_input AS S ON B.bidder = S.id"
        }
        "q14" => {
            "SELECT auction, bidder, 0.908 * price AS price,
                    CASE WHEN h >= 8 AND h <= 18 THEN 'dayTime'
                         WHEN h <= 6 OR h >= 20 THEN 'nightTime'
                         ELSE 'otherTime' END AS bid_time_type,
                    date_time, extra,
                    character_length(extra)
                      - character_length(regexp_replace(extra, 'c', '', 'g')) AS c_counts
             FROM (SELECT *, (CAST(date_time AS BIGINT) / 3600000) % 24 AS h FROM bid)
             WHERE 0.908 * price > 1000000 AND 0.908 * price < 50000000"
        }
        "q15" => {
            "SELECT d AS day, COUNT(*) AS total_bids,
                    COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
                    COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                    COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                    COUNT(DISTINCT bidder) AS total_bidders,
                    COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
                    COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000)
                        AS rank2_bidders,
                    COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
                    COUNT(DISTINCT auction) AS total_auctions,
                    COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
                    COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000)
                        AS rank2_auctions,
                    COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
             FROM (SELECT *, CAST(date_time AS BIGINT) - CAST(date_time AS BIGINT) % 86400000 AS d
                   FROM bid)
             GROUP BY d"
        }
        "q16" => {
            "SELECT channel, d AS day, MAX(to_char(date_time, '%H:%M')) AS minute,
                    COUNT(*) AS total_bids,
                    COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
                    COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                    COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                    COUNT(DISTINCT bidder) AS total_bidders,
                    COUNT(DISTINCT bidder) FILTER (WHERE price < 10000) AS rank1_bidders,
                    COUNT(DISTINCT bidder) FILTER (WHERE price >= 10000 AND price < 1000000)
                        AS rank2_bidders,
                    COUNT(DISTINCT bidder) FILTER (WHERE price >= 1000000) AS rank3_bidders,
                    COUNT(DISTINCT auction) AS total_auctions,
                    COUNT(DISTINCT auction) FILTER (WHERE price < 10000) AS rank1_auctions,
                    COUNT(DISTINCT auction) FILTER (WHERE price >= 10000 AND price < 1000000)
                        AS rank2_auctions,
                    COUNT(DISTINCT auction) FILTER (WHERE price >= 1000000) AS rank3_auctions
             FROM (SELECT *, CAST(date_time AS BIGINT) - CAST(date_time AS BIGINT) % 86400000 AS d
                   FROM bid)
             GROUP BY channel, d"
        }
        "q17" => {
            "SELECT auction, d AS day, COUNT(*) AS total_bids,
                    COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,
                    COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,
                    COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,
                    MIN(price) AS min_price, MAX(price) AS max_price,
                    AVG(price) AS avg_price, SUM(price) AS sum_price
             FROM (SELECT *, CAST(date_time AS BIGINT) - CAST(date_time AS BIGINT) % 86400000 AS d
                   FROM bid)
             GROUP BY auction, d"
        }
        // Ties on time (q18) or price (q19) go by the whole row, ascending,
        // as Sluice's top-N orders them.
        "q18" => {
            "SELECT auction, bidder, price, channel, url, date_time, extra
             FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY bidder, auction
                       ORDER BY date_time DESC, price ASC, channel ASC, url ASC, extra ASC) AS rn
                   FROM bid)
             WHERE rn = 1"
        }
        "q19" => {
            "SELECT *
             FROM (SELECT auction, bidder, price, channel, url, date_time, extra,
                          ROW_NUMBER() OVER (PARTITION BY auction ORDER BY price DESC,
                              bidder ASC, channel ASC, url ASC, date_time ASC, extra ASC)
                              AS rank_number
                   FROM bid)
             WHERE rank_number <= 10"
        }
        "q20" => {
            "SELECT B.auction, B.bidder, B.price, B.channel, B.url, B.date_time, B.extra,
                    A.item_name, A.description, A.initial_bid, A.reserve,
                    A.date_time AS auction_date_time, A.expires, A.seller, A.category,
                    A.extra AS auction_extra
             FROM bid AS B JOIN auction AS A ON B.auction = A.id
             WHERE A.category = 10"
        }
        // The published query's regular expression, not split_part.
        "q21" => {
            "SELECT auction, bidder, price, channel,
                    CASE WHEN lower(channel) = 'apple' THEN '0'
                         WHEN lower(channel) = 'google' THEN '1'
                         WHEN lower(channel) = 'facebook' THEN '2'
                         WHEN lower(channel) = 'baidu' THEN '3'
                         ELSE regexp_match(url, '(&|^)channel_id=([^&]*)')[2] END AS channel_id
             FROM bid
             WHERE regexp_match(url, '(&|^)channel_id=([^&]*)')[2] IS NOT NULL
                OR lower(channel) IN ('apple', 'google', 'facebook', 'baidu')"
        }
        "q22" => {
            "SELECT auction, bidder, price, channel,
                    string_to_array(url, '/')[4] AS dir1,
                    string_to_array(url, '/')[5] AS dir2,
                    string_to_array(url, '/')[6] AS dir3
             FROM bid"
        }
        other => panic!("no oracle for {other}"),
    }
}

/// Enough events for several windows of every windowed query (event time
/// advances 1 s per 10,000 events), few for the stateless ones and for the
/// ones added with q6-q22 (the whole file stays under a minute in debug).
fn events(query: &str) -> u64 {
    match query {
        "q0" | "q1" | "q2" | "q10" | "q21" | "q22" => 5_000,
        "q14" => 20_000,
        "q3" => 100_000,
        "q9" | "q11" | "q12" | "q13" | "q15" | "q16" | "q17" | "q18" | "q19" | "q20" => 50_000,
        _ => 250_000,
    }
}

/// Rows as sorted strings; timestamps as epoch milliseconds.
fn normalized(batches: &[RecordBatch]) -> (Vec<String>, Vec<String>) {
    let mut rows = Vec::new();
    let mut names = Vec::new();
    for b in batches {
        names = b
            .schema()
            .fields()
            .iter()
            .map(|f| f.name().clone())
            .collect();
        let cols: Vec<ArrayRef> = b
            .columns()
            .iter()
            .map(|c| match c.data_type() {
                DataType::Timestamp(_, _) => cast(c, &DataType::Int64).expect("cast"),
                _ => Arc::clone(c),
            })
            .collect();
        let opts = FormatOptions::default().with_null("NULL");
        let fmts: Vec<ArrayFormatter> = cols
            .iter()
            .map(|c| ArrayFormatter::try_new(c.as_ref(), &opts).expect("formatter"))
            .collect();
        for r in 0..b.num_rows() {
            let cells: Vec<String> = fmts.iter().map(|f| f.value(r).to_string()).collect();
            rows.push(cells.join("|"));
        }
    }
    rows.sort();
    (names, rows)
}

fn overrides(query: &str) -> Vec<(&'static str, String)> {
    vec![
        ("events", events(query).to_string()),
        ("seed", SEED.to_string()),
        ("out_of_order_ms", DISORDER_MS.to_string()),
    ]
}

async fn run_sluice(query: &str, text: &str) -> (Vec<RecordBatch>, u64) {
    let script = Script::parse(text).expect("script parses");
    let ovr = overrides(query);
    let ddl = script.render(|s| s.nexmark_ddl(&ovr)).expect("render");
    let db = Database::open_in_memory().await.expect("open");
    db.execute(&ddl).await.expect("script runs");
    let mut sub = db
        .subscribe(script.output().expect("output"))
        .await
        .expect("subscribe");
    // A changelog's retracted rows are removed from what it inserted.
    let consumer = tokio::spawn(async move {
        let mut out: Vec<RecordBatch> = Vec::new();
        let mut retracted: Vec<RecordBatch> = Vec::new();
        while let Some(b) = sub.next().await.expect("subscription") {
            let kinds: Vec<bool> = (0..b.data.num_rows())
                .map(|i| b.kind(i) == sluice::ChangeKind::Insert)
                .collect();
            let keep = datafusion::arrow::array::BooleanArray::from(kinds.clone());
            let drop: datafusion::arrow::array::BooleanArray =
                kinds.iter().map(|k| Some(!k)).collect();
            out.push(
                datafusion::arrow::compute::filter_record_batch(&b.data, &keep).expect("filter"),
            );
            retracted.push(
                datafusion::arrow::compute::filter_record_batch(&b.data, &drop).expect("filter"),
            );
        }
        (out, retracted)
    });
    let metrics = db.run_to_completion().await.expect("run");
    db.shutdown().await.expect("shutdown");
    let (inserted, retracted) = consumer.await.expect("consumer");
    (fold(&inserted, &retracted), metrics.late_rows())
}

/// Inserted rows minus retracted ones, compared as formatted rows.
fn fold(inserted: &[RecordBatch], retracted: &[RecordBatch]) -> Vec<RecordBatch> {
    let (_, gone) = normalized(retracted);
    if gone.is_empty() {
        return inserted.to_vec();
    }
    let mut gone: std::collections::HashMap<String, usize> =
        gone.into_iter().fold(Default::default(), |mut m, r| {
            *m.entry(r).or_default() += 1;
            m
        });
    let mut out = Vec::new();
    for b in inserted {
        let mut keep = Vec::with_capacity(b.num_rows());
        for i in 0..b.num_rows() {
            let (_, row) = normalized(&[b.slice(i, 1)]);
            let key = row.into_iter().next().unwrap_or_default();
            match gone.get_mut(&key) {
                Some(n) if *n > 0 => {
                    *n -= 1;
                    keep.push(false);
                }
                _ => keep.push(true),
            }
        }
        let mask = datafusion::arrow::array::BooleanArray::from(keep);
        out.push(datafusion::arrow::compute::filter_record_batch(b, &mask).expect("filter"));
    }
    assert!(
        gone.values().all(|n| *n == 0),
        "a retraction matched no inserted row"
    );
    out
}

async fn run_oracle(query: &str, text: &str) -> Vec<RecordBatch> {
    let script = Script::parse(text).expect("script parses");
    let ctx = SessionContext::new();
    for src in script
        .sources()
        .filter(|s| s.option("connector") == Some("nexmark"))
    {
        let cfg = src.nexmark_config(&overrides(query)).expect("config");
        let generated = generate(cfg).expect("generate");
        let schema = generated.batches[0].schema();
        let table = MemTable::try_new(schema, vec![generated.batches]).expect("table");
        ctx.register_table(src.name.as_str(), Arc::new(table))
            .expect("register");
    }
    ctx.sql(oracle(query))
        .await
        .expect("oracle plans")
        .collect()
        .await
        .expect("oracle runs")
}

async fn check(query: &str) {
    let text = QUERIES
        .iter()
        .chain(JOIN_QUERIES)
        .find(|(n, _)| *n == query)
        .map(|(_, t)| *t)
        .expect("query file");
    let (got, late) = tokio::time::timeout(TIMEOUT, run_sluice(query, text))
        .await
        .unwrap_or_else(|_| panic!("{query}: timed out"));
    let want = run_oracle(query, text).await;
    assert_eq!(
        late, 0,
        "{query}: disorder stays within the watermark delay"
    );
    let (got_names, got_rows) = normalized(&got);
    let (want_names, want_rows) = normalized(&want);
    assert!(
        !want_rows.is_empty(),
        "{query}: the oracle returned no rows"
    );
    assert_eq!(got_names, want_names, "{query}: column names");
    assert_eq!(got_rows.len(), want_rows.len(), "{query}: row count");
    for (g, w) in got_rows.iter().zip(&want_rows) {
        assert_eq!(g, w, "{query}: first differing row");
    }
}

#[tokio::test]
async fn q0_passthrough() {
    check("q0").await;
}

#[tokio::test]
async fn q1_currency_conversion() {
    check("q1").await;
}

#[tokio::test]
async fn q2_selection() {
    check("q2").await;
}

#[tokio::test]
async fn q5_hop_count_per_auction() {
    check("q5").await;
}

#[tokio::test]
async fn q7_tumble_max_price() {
    check("q7").await;
}

#[tokio::test]
async fn q5_full_hot_items() {
    check("q5_full").await;
}

#[tokio::test]
async fn q7_full_highest_bid() {
    check("q7_full").await;
}

#[tokio::test]
async fn tumble_count_per_auction() {
    check("tumble_count").await;
}

#[tokio::test]
async fn q3_local_item_suggestion() {
    check("q3").await;
}

#[tokio::test]
async fn q4_average_price_per_category() {
    check("q4").await;
}

#[tokio::test]
async fn q8_monitor_new_users() {
    check("q8").await;
}

#[tokio::test]
async fn q9_winning_bids() {
    check("q9").await;
}

#[tokio::test]
async fn q10_log_to_file_system() {
    check("q10").await;
}

#[tokio::test]
async fn q11_user_sessions() {
    check("q11").await;
}

#[tokio::test]
async fn q12_event_time_windows() {
    check("q12").await;
}

#[tokio::test]
async fn q13_side_input_join() {
    check("q13").await;
}

#[tokio::test]
async fn q14_calculation() {
    check("q14").await;
}

#[tokio::test]
async fn q15_bidding_statistics() {
    check("q15").await;
}

#[tokio::test]
async fn q16_channel_statistics() {
    check("q16").await;
}

#[tokio::test]
async fn q17_auction_statistics() {
    check("q17").await;
}

#[tokio::test]
async fn q18_find_last_bid() {
    check("q18").await;
}

#[tokio::test]
async fn q19_auction_top10_price() {
    check("q19").await;
}

#[tokio::test]
async fn q20_expand_bid_with_auction() {
    check("q20").await;
}

#[tokio::test]
async fn q21_add_channel_id() {
    check("q21").await;
}

#[tokio::test]
async fn q22_url_directories() {
    check("q22").await;
}

/// An OVER aggregation over a changelog (the per-auction maximum is an
/// updating aggregate): the folded changelog equals the query in batch.
#[tokio::test]
async fn q6_average_price_per_seller() {
    check("q6").await;
}

/// EXPLAIN of q6 and each query added with q9-q22 states what its state is
/// bounded by, or that it grows (as each file's header says).
#[tokio::test]
async fn explain_states_each_query_bound() {
    let cases: &[(&str, &[&str])] = &[
        (
            "q9",
            &[
                "q9 (append-only)",
                "limit=1, emit=once the partition is complete; state: 1 rows per partition, \
                 freed once the watermark passes the partition's latest a.expires",
                "left rows: until watermark - 0ms > a.expires; \
                 right rows: until watermark - 0ms > b.date_time",
            ],
        ),
        (
            "q6",
            &[
                "q6 (changelog)",
                "frame=ROWS BETWEEN 10 PRECEDING AND CURRENT ROW",
                "state: every live input row with its last output, per partition key; \
                 grows with the input's distinct keys (never freed)",
            ],
        ),
        ("q10", &["q10 (append-only)"]),
        (
            "q11",
            &["window=session(gap=10000ms) on bid.date_time, keys=[bid.bidder]"],
        ),
        (
            "q12",
            &["window=tumble(size=10000ms, offset=0ms) on bid.date_time, keys=[bid.bidder]"],
        ),
        (
            "q13",
            &["q13 (append-only)", "left rows: kept; right rows: kept"],
        ),
        ("q14", &["q14 (append-only)"]),
        (
            "q15",
            &["window=tumble(size=86400000ms, offset=0ms) on bid.date_time, keys=[]"],
        ),
        (
            "q16",
            &["window=tumble(size=86400000ms, offset=0ms) on bid.date_time, keys=[bid.channel]"],
        ),
        (
            "q17",
            &["window=tumble(size=86400000ms, offset=0ms) on bid.date_time, keys=[bid.auction]"],
        ),
        (
            "q18",
            &[
                "limit=1, emit=changes; state grows with distinct partition keys \
               (1 rows each, never freed)",
            ],
        ),
        (
            "q19",
            &[
                "limit=10, emit=changes; state grows with distinct partition keys \
               (10 rows each, never freed)",
            ],
        ),
        (
            "q20",
            &["q20 (append-only)", "left rows: kept; right rows: kept"],
        ),
        ("q21", &["q21 (append-only)"]),
        ("q22", &["q22 (append-only)"]),
    ];
    for (query, expected) in cases {
        let text = QUERIES
            .iter()
            .chain(JOIN_QUERIES)
            .find(|(n, _)| n == query)
            .map(|(_, t)| *t)
            .expect("query file");
        let script = Script::parse(text).expect("script parses");
        let ddl = script
            .render(|s| s.nexmark_ddl(&overrides(query)))
            .expect("render")
            .replace(
                &format!("CREATE STREAM {query} AS"),
                &format!("EXPLAIN CREATE STREAM {query} AS"),
            );
        let db = Database::open_in_memory().await.expect("open");
        let out = db.execute(&ddl).await.expect("explain");
        let (_, lines) = normalized(&out);
        let plan = lines.join("\n");
        for want in *expected {
            assert!(
                plan.contains(want),
                "{query}: EXPLAIN lacks {want:?}:\n{plan}"
            );
        }
    }
}

#[test]
fn every_query_file_has_an_oracle() {
    for (name, _) in QUERIES.iter().chain(JOIN_QUERIES) {
        let _ = oracle(name);
    }
}
