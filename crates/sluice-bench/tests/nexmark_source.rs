//! The `connector = 'nexmark'` source through SQL: options, schema checks,
//! SHOW SOURCES, and `sluice bench` end to end.

use sluice::Database;
use sluice_bench::{run_nexmark, BenchOptions};

const BID: &str = "auction BIGINT, bidder BIGINT, price BIGINT, channel VARCHAR, url VARCHAR,
                   date_time TIMESTAMP, extra VARCHAR";

async fn create(columns: &str, with: &str) -> Result<Database, String> {
    let db = Database::open_in_memory()
        .await
        .map_err(|e| e.to_string())?;
    db.execute(&format!(
        "CREATE SOURCE bid ({columns}) WITH (connector = 'nexmark', {with})"
    ))
    .await
    .map_err(|e| e.to_string())?;
    Ok(db)
}

#[tokio::test]
async fn options_are_validated() {
    let e = create(BID, "stream = 'bid', speed = '3'")
        .await
        .err()
        .unwrap_or_default();
    assert!(
        e.contains("unknown option 'speed'") && e.contains("out_of_order_ms"),
        "{e}"
    );
    let e = create(BID, "stream = 'bids'")
        .await
        .err()
        .unwrap_or_default();
    assert!(e.contains("unknown Nexmark stream 'bids'"), "{e}");
    let e = create(BID, "events = '10'").await.err().unwrap_or_default();
    assert!(e.contains("requires option 'stream'"), "{e}");
    let e = create(BID, "stream = 'bid', rate = 'fast'")
        .await
        .err()
        .unwrap_or_default();
    assert!(e.contains("'rate'") && e.contains("'fast'"), "{e}");
}

#[tokio::test]
async fn declared_columns_must_match_the_stream() {
    let e = create("auction BIGINT, price INT", "stream = 'bid'")
        .await
        .err()
        .unwrap_or_default();
    assert!(e.contains("column 'price'") && e.contains("BIGINT"), "{e}");
    let e = create("id BIGINT, nickname VARCHAR", "stream = 'person'")
        .await
        .err()
        .unwrap_or_default();
    assert!(e.contains("column 'nickname'"), "{e}");
    // A subset of the columns, in any order, is fine.
    let db = create(
        "price BIGINT, auction BIGINT",
        "stream = 'bid', events = '50'",
    )
    .await
    .expect("subset");
    let shown = db.execute("SHOW SOURCES").await.expect("show");
    let text = sluice::arrow::util::pretty::pretty_format_batches(&shown)
        .expect("format")
        .to_string();
    assert!(
        text.contains("nexmark bid (50 events, unthrottled"),
        "{text}"
    );
    db.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn all_three_streams_run_to_completion() {
    let db = Database::open_in_memory().await.expect("open");
    db.execute(
        "CREATE SOURCE person (id BIGINT, name VARCHAR, date_time TIMESTAMP,
             WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
           WITH (connector = 'nexmark', stream = 'person', events = '10000', seed = '9', batch_size = '64');
         CREATE SOURCE auction (id BIGINT, seller BIGINT, category BIGINT, date_time TIMESTAMP,
             expires TIMESTAMP, WATERMARK FOR date_time AS date_time - INTERVAL '1' SECOND)
           WITH (connector = 'nexmark', stream = 'auction', events = '10000', seed = '9');
         CREATE MATERIALIZED VIEW people AS SELECT COUNT(*) AS n FROM person;
         CREATE MATERIALIZED VIEW auctions AS SELECT category, COUNT(*) AS n FROM auction GROUP BY category;",
    )
    .await
    .expect("script");
    let m = db.run_to_completion().await.expect("run");
    assert_eq!(m.rows_in(), 200 + 600);
    let rows = db.execute("SELECT n FROM people").await.expect("select");
    let n = sluice::arrow::util::pretty::pretty_format_batches(&rows)
        .expect("format")
        .to_string();
    assert!(n.contains("200"), "{n}");
    db.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn bench_reports_throughput_and_latency() {
    let r = run_nexmark(&BenchOptions::new("q7", 20_000))
        .await
        .expect("bench q7");
    assert_eq!(r.input_rows, 18_400);
    // 20,000 events span two seconds of event time, and the first ones are
    // up to 2 s early: two windows.
    assert_eq!(r.output_rows, 2);
    assert!(r.processing.rows_per_sec > 0.0 && r.rate.is_none());
    assert!(r.to_text().contains("events/s"));

    let mut opts = BenchOptions::new("q0", 4_000);
    opts.rate = Some(20_000);
    let r = run_nexmark(&opts).await.expect("bench q0 paced");
    let rate = r.rate.as_ref().expect("rate section");
    let lat = rate.latency.as_ref().expect("latency");
    assert_eq!(lat.samples, 3_680, "every passthrough row is attributed");
    assert!(lat.p50_us > 0.0 && lat.p50_us <= lat.p99_us && lat.p99_us <= lat.p999_us);
    assert!(r.to_json().contains("\"p999_us\""));

    // A join over two streams: both generated, merged, pushed.
    let r = run_nexmark(&BenchOptions::new("q3", 20_000))
        .await
        .expect("bench q3");
    assert_eq!(r.stream, "person+auction");
    assert_eq!(
        r.input_rows, 1_600,
        "2% persons and 6% auctions of the events"
    );
    assert_eq!(r.late_rows, 0);
    let mut paced = BenchOptions::new("q3", 2_000);
    paced.rate = Some(1_000);
    let e = run_nexmark(&paced).await.err().map(|e| e.to_string());
    assert!(
        e.as_deref()
            .is_some_and(|e| e.contains("measured for single-stream queries only")),
        "{e:?}"
    );
}

/// Watermark alignment on a replay of two streams of unequal event-time
/// density: a row of the auction stream covers 15 times the event time of
/// a bid row, so read side by side the auction reader runs far ahead. With
/// `watermark_max_drift` its reader is held until the bids catch up, and the
/// join's answer is the same as without.
#[tokio::test]
async fn watermark_alignment_holds_the_fast_source_and_keeps_the_answer() {
    async fn run(drift: &str, checkpoints: &str) -> (String, u64, u64) {
        let db = Database::open_in_memory().await.expect("open");
        db.execute(&format!(
            "{checkpoints}
             SET watermark_max_drift = '{drift}';
             CREATE SOURCE auction (id BIGINT, date_time TIMESTAMP, expires TIMESTAMP,
                 WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND)
               WITH (connector = 'nexmark', stream = 'auction', events = '400000',
                     out_of_order_ms = '2000', batch_size = '256');
             CREATE SOURCE bid (auction BIGINT, price BIGINT, date_time TIMESTAMP,
                 WATERMARK FOR date_time AS date_time - INTERVAL '2' SECOND)
               WITH (connector = 'nexmark', stream = 'bid', events = '400000',
                     out_of_order_ms = '2000', batch_size = '256');
             CREATE MATERIALIZED VIEW won AS
               SELECT COUNT(*) AS n, SUM(b.price) AS total, COUNT(DISTINCT a.id) AS auctions
               FROM auction AS a JOIN bid AS b ON a.id = b.auction
               WHERE b.date_time BETWEEN a.date_time AND a.expires;"
        ))
        .await
        .expect("script");
        let m = db.run_to_completion().await.expect("run");
        if !checkpoints.is_empty() {
            // A held reader answers every barrier: none is abandoned.
            assert!(m.checkpoints > 0, "{m:?}");
            assert_eq!((m.checkpoints_abandoned, m.checkpoints_failed), (0, 0));
        }
        let holds = |s: &str| m.sources.get(s).map_or(0, |c| c.alignment_holds);
        let (auction, bid) = (holds("auction"), holds("bid"));
        let rows = db.execute("SELECT * FROM won").await.expect("select");
        let text = sluice::arrow::util::pretty::pretty_format_batches(&rows)
            .expect("format")
            .to_string();
        db.shutdown().await.expect("shutdown");
        (text, auction, bid)
    }
    let (free, free_auction, free_bid) = run("off", "").await;
    assert_eq!((free_auction, free_bid), (0, 0), "off: nobody is held");
    let (aligned, auction, bid) = run("1s", "").await;
    assert_eq!(aligned, free, "the same answer");
    // Checkpoints every 10 ms while readers are held: each barrier is
    // answered (with a 1 s alignment timeout, a held reader that did not
    // answer would abandon attempts), and the answer stays the same.
    let (checkpointed, held, _) = run(
        "1s",
        "SET checkpoint_store = 'memory:///';
         SET checkpoint_interval = '10ms';
         SET checkpoint_alignment_timeout = '1s';",
    )
    .await;
    assert_eq!(checkpointed, free, "the same answer with checkpoints");
    assert!(held > 10, "held with checkpoints too ({held})");
    assert!(
        auction > 10,
        "the auction reader, 15 times denser in event time, is held again and again ({auction})"
    );
    assert!(
        bid < auction,
        "the bid reader is the slow one ({bid} holds against {auction})"
    );
    assert!(free.contains("| n "), "{free}");
}
