use std::time::Instant;

use arrow::array::{AsArray, Int64Array};
use arrow::compute::concat_batches;
use arrow::datatypes::{Int64Type, TimestampMillisecondType};

use super::*;
use crate::reader::BatchReader;

pub(super) fn config(stream: NexmarkStream, events: u64) -> NexmarkConfig {
    let mut c = NexmarkConfig::full(stream);
    c.events = Some(events);
    c.batch_size = 97;
    c
}

pub(super) fn drain(mut r: NexmarkReader) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    while let Some(b) = r.next_batch().expect("generation") {
        assert!(b.num_rows() > 0 && b.num_rows() <= 97);
        out.push(b);
    }
    out
}

fn all(batches: &[RecordBatch]) -> RecordBatch {
    concat_batches(&batches[0].schema(), batches).expect("concat")
}

use arrow::record_batch::RecordBatch;

#[test]
fn streams_split_the_mix_1_3_46() {
    for (stream, rows) in [
        (NexmarkStream::Person, 20),
        (NexmarkStream::Auction, 60),
        (NexmarkStream::Bid, 920),
    ] {
        let got: usize = drain(NexmarkReader::open(config(stream, 1000)).expect("open"))
            .iter()
            .map(RecordBatch::num_rows)
            .sum();
        assert_eq!(got as u64, rows, "{stream}");
        assert_eq!(stream.rows_in(1000), rows);
    }
    // A partial cycle: events 0..7 are 1 person, 3 auctions, 3 bids.
    assert_eq!(NexmarkStream::Person.rows_in(7), 1);
    assert_eq!(NexmarkStream::Auction.rows_in(7), 3);
    assert_eq!(NexmarkStream::Bid.rows_in(7), 3);
    assert_eq!(NexmarkStream::Bid.global_event(0), 4);
    assert_eq!(NexmarkStream::Bid.global_event(46), 54);
    assert_eq!(NexmarkStream::Auction.global_event(4), 52);
}

#[test]
fn same_seed_same_rows_other_seed_other_rows() {
    let a = all(&drain(
        NexmarkReader::open(config(NexmarkStream::Bid, 500)).expect("open"),
    ));
    let b = all(&drain(
        NexmarkReader::open(config(NexmarkStream::Bid, 500)).expect("open"),
    ));
    assert_eq!(a, b);
    let mut c = config(NexmarkStream::Bid, 500);
    c.seed = 7;
    let c = all(&drain(NexmarkReader::open(c).expect("open")));
    assert_eq!(a.num_rows(), c.num_rows());
    assert_ne!(a.column(2), c.column(2), "prices differ with the seed");
    let auctions = c.column(0).as_primitive::<Int64Type>();
    let offset = 3 * 7 * (1i64 << 32);
    assert!(
        auctions
            .values()
            .iter()
            .all(|a| (offset - 100..offset + 2000).contains(a)),
        "auction ids of seed 7 start near 3 x 7 x 2^32"
    );
    assert_eq!(
        a.column(5),
        c.column(5),
        "event times do not depend on the seed"
    );
}

#[test]
fn reopening_at_an_offset_regenerates_the_continuation() {
    let mut cfg = config(NexmarkStream::Bid, 2000);
    cfg.out_of_order_ms = 300;
    cfg.seed = 3;
    let whole = all(&drain(NexmarkReader::open(cfg.clone()).expect("open")));
    let mut first = NexmarkReader::open(cfg.clone()).expect("open");
    let mut head = Vec::new();
    for _ in 0..5 {
        head.push(first.next_batch().expect("gen").expect("batch"));
    }
    let offset = first.offset().expect("offset");
    assert!(offset.contains("\"produced\":485"), "{offset}");
    let rest = drain(NexmarkReader::open_at_offset(cfg.clone(), &offset).expect("reopen"));
    head.extend(rest);
    assert_eq!(all(&head), whole);

    let mut other = cfg.clone();
    other.seed = 4;
    let e = NexmarkReader::open_at_offset(other, &offset).expect_err("seed mismatch");
    assert!(e.to_string().contains("seed 3"), "{e}");
    assert!(NexmarkReader::open_at_offset(cfg, "garbage").is_err());
}

#[test]
fn event_times_are_bounded_out_of_order() {
    let mut cfg = config(NexmarkStream::Bid, 20_000);
    cfg.out_of_order_ms = 250;
    let b = all(&drain(NexmarkReader::open(cfg.clone()).expect("open")));
    let times = b.column(5).as_primitive::<TimestampMillisecondType>();
    let mut max = i64::MIN;
    let mut disordered = 0;
    for t in times.values().iter() {
        assert!(*t >= BASE_TIME_MS - 250);
        if *t < max {
            disordered += 1;
            assert!(max - *t <= 250, "disorder {} beyond the bound", max - *t);
        }
        max = max.max(*t);
    }
    assert!(disordered > 1000, "only {disordered} rows out of order");
    // 20,000 events at 100 µs each span two seconds of event time.
    assert!(
        (BASE_TIME_MS + 1990..=BASE_TIME_MS + 2000).contains(&max),
        "{max}"
    );
    cfg.out_of_order_ms = 0;
    let b = all(&drain(NexmarkReader::open(cfg).expect("open")));
    let t = b.column(5).as_primitive::<TimestampMillisecondType>();
    assert!(t.values().windows(2).all(|w| w[0] <= w[1]));
}

/// `event_time_rate` stretches the same events over more event time: the
/// rows are the same but for their times, which scale, and each auction
/// keeps its length relative to the event-time density.
#[test]
fn event_time_rate_scales_event_time_and_nothing_else() {
    let fast = config(NexmarkStream::Auction, 20_000);
    let mut slow = fast.clone();
    slow.event_time_rate = 10;
    let a = all(&drain(NexmarkReader::open(fast).expect("open")));
    let b = all(&drain(NexmarkReader::open(slow).expect("open")));
    assert_eq!(a.num_rows(), b.num_rows());
    for c in 0..a.num_columns() {
        let name = a.schema().field(c).name().clone();
        if name == "date_time" || name == "expires" {
            continue;
        }
        assert_eq!(a.column(c), b.column(c), "column {name} does not change");
    }
    let index = |name: &str| a.schema().index_of(name).expect(name);
    let (dt, ex) = (index("date_time"), index("expires"));
    let times = |r: &RecordBatch, c: usize| {
        r.column(c)
            .as_primitive::<TimestampMillisecondType>()
            .values()
            .to_vec()
    };
    // At 10 events a second, 1,000 times slower: event g at g × 100 ms.
    for (fast, slow) in times(&a, dt).iter().zip(times(&b, dt)) {
        assert_eq!(
            (slow - BASE_TIME_MS) / 1000,
            (fast - BASE_TIME_MS),
            "{fast} {slow}"
        );
    }
    // Lengths scale too.
    let length = |r: &RecordBatch| -> Vec<i64> {
        times(r, ex)
            .iter()
            .zip(times(r, dt))
            .map(|(e, d)| e - d)
            .collect()
    };
    let (fast_len, slow_len) = (length(&a), length(&b));
    for (fast, slow) in fast_len.iter().zip(&slow_len) {
        assert_eq!(*slow, fast * 1000, "auction lengths scale by 1,000");
    }
    let last = times(&b, dt).into_iter().max().unwrap_or(0);
    assert!(
        (BASE_TIME_MS + 1_990_000..=BASE_TIME_MS + 2_000_000).contains(&last),
        "20,000 events at 10 a second span 2,000 s: {last}"
    );
}

#[test]
fn bids_refer_to_existing_auctions_and_people() {
    let bids = all(&drain(
        NexmarkReader::open(config(NexmarkStream::Bid, 5000)).expect("open"),
    ));
    let auction = bids.column(0).as_primitive::<Int64Type>();
    assert!(auction
        .values()
        .iter()
        .all(|a| (1000..1000 + 300 + 20).contains(a)));
    let price: &Int64Array = bids.column(2).as_primitive();
    assert!(price.values().iter().all(|p| *p > 0));
}

#[test]
fn declared_columns_are_projected_and_checked_by_name() {
    let declared = Arc::new(Schema::new(vec![
        Field::new(
            "date_time",
            DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into())),
            true,
        ),
        Field::new("price", DataType::Int64, true),
    ]));
    let mut cfg = NexmarkConfig::new(NexmarkStream::Bid, declared).expect("subset");
    cfg.events = Some(100);
    let b = NexmarkReader::open(cfg)
        .expect("open")
        .next_batch()
        .expect("gen")
        .expect("batch");
    assert_eq!(b.num_columns(), 2);
    assert_eq!(b.schema().field(1).name(), "price");

    let wrong = Arc::new(Schema::new(vec![Field::new(
        "price",
        DataType::Int32,
        true,
    )]));
    let e = NexmarkConfig::new(NexmarkStream::Bid, wrong).expect_err("type");
    assert!(
        e.to_string().contains("column 'price'") && e.to_string().contains("BIGINT"),
        "{e}"
    );
    let unknown = Arc::new(Schema::new(vec![Field::new(
        "bid_price",
        DataType::Int64,
        true,
    )]));
    let e = NexmarkConfig::new(NexmarkStream::Bid, unknown).expect_err("name");
    assert!(e.to_string().contains("column 'bid_price'"), "{e}");
    assert!(e.to_string().contains("auction, bidder, price"), "{e}");
}

#[test]
fn options_are_parsed_or_refused() {
    let mut c = NexmarkConfig::full(NexmarkStream::Person);
    c.set("events", "10").expect("events");
    c.set("rate", "0").expect("rate");
    c.set("seed", "12").expect("seed");
    assert!(c.set("events", "0").is_err());
    assert!(c.set("rate", "-1").is_err());
    assert!(c.set("seed", "99999999999").is_err());
    assert!(c.set("batch_size", "0").is_err());
    assert!(c
        .set("speed", "1")
        .expect_err("unknown")
        .to_string()
        .contains("known: events"));
    assert!("bids".parse::<NexmarkStream>().is_err());
    assert_eq!(
        "Bid".parse::<NexmarkStream>().ok(),
        Some(NexmarkStream::Bid)
    );
    assert!(c
        .describe()
        .contains("nexmark person (10 events, unthrottled"));
}

/// Every option: its bounds are accepted, one past them (and text that is
/// no integer) refused with the range in the error; a setting assigned
/// directly (as the engine does with `batch_size`) is checked on open.
#[test]
fn every_option_is_range_checked() {
    let expected = [
        ("events", 1, 1_000_000_000_000_000),
        ("rate", 0, 1_000_000_000),
        ("event_time_rate", 1, 1_000_000_000),
        ("out_of_order_ms", 0, 86_400_000),
        ("seed", 0, (1 << 20) - 1),
        ("batch_size", 1, 1 << 20),
    ];
    assert_eq!(
        expected.iter().map(|e| e.0).collect::<Vec<_>>(),
        NEXMARK_OPTIONS
    );
    for (name, min, max) in expected {
        assert_eq!(nexmark_option_range(name), Some((min, max)));
        let mut c = NexmarkConfig::full(NexmarkStream::Bid);
        for ok in [min, max] {
            c.set(name, &ok.to_string()).expect(name);
            c.validate().expect(name);
        }
        let hint = if name == "events" {
            " (omit the option for an unbounded stream)"
        } else {
            ""
        };
        let mut bad = vec![(max + 1).to_string(), "x".into(), "-1".into(), "1.5".into()];
        if min > 0 {
            bad.push((min - 1).to_string());
        }
        for value in bad {
            let e = c.set(name, &value).expect_err(name);
            assert_eq!(e.code(), "SLC-CONN-004");
            assert_eq!(
                e.to_string(),
                format!(
                    "invalid value for option '{name}': '{value}' is not an integer from {min} \
                     to {max}{hint}"
                )
            );
        }
    }
    assert_eq!(nexmark_option_range("speed"), None);
    for (field, value) in [
        ("batch_size", usize::MAX as u64),
        ("out_of_order_ms", u64::MAX),
    ] {
        let mut c = NexmarkConfig::full(NexmarkStream::Bid);
        match field {
            "batch_size" => c.batch_size = usize::MAX,
            _ => c.out_of_order_ms = u64::MAX,
        }
        let e = NexmarkReader::open(c.clone()).expect_err(field);
        assert!(
            e.to_string().starts_with(&format!(
                "invalid value for option '{field}': '{value}' is not"
            )),
            "{e}"
        );
        let e = NexmarkReader::open_at_offset(c, "{}").expect_err(field);
        assert_eq!(e.code(), "SLC-CONN-004");
    }
}

#[test]
fn rate_paces_emission_in_wall_clock_time() {
    let mut cfg = config(NexmarkStream::Bid, 1000);
    cfg.rate = 10_000;
    let started = Instant::now();
    let rows: usize = drain(NexmarkReader::open(cfg).expect("open"))
        .iter()
        .map(RecordBatch::num_rows)
        .sum();
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(rows, 920);
    // 1,000 events at 10,000 events/s: about 0.1 s.
    assert!((0.08..2.0).contains(&secs), "{secs}");
}

/// The block number of a partition key (`bid/17` is 17).
pub(super) fn block_of(key: &str) -> u64 {
    key.rsplit('/')
        .next()
        .and_then(|b| b.parse().ok())
        .expect("block")
}

/// A share of the partitions whose block number is `part` modulo `of`.
fn share_of(part: u64, of: u64) -> FileShare {
    FileShare::new(
        format!("{part} of {of}"),
        format!("part {part}"),
        move |key| block_of(key) % of == part,
    )
}

/// Every row as (global event number, row): which node generated it
/// does not change it.
pub(super) fn keyed_rows(batches: &[RecordBatch]) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    for b in batches {
        let times = b.column(5).as_primitive::<TimestampMillisecondType>();
        let auction = b.column(0).as_primitive::<Int64Type>();
        let bidder = b.column(1).as_primitive::<Int64Type>();
        let price = b.column(2).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            out.push((
                times.value(i),
                format!(
                    "{} {} {}",
                    auction.value(i),
                    bidder.value(i),
                    price.value(i)
                ),
            ));
        }
    }
    out
}

#[test]
fn shares_of_the_partitions_generate_every_row_once() {
    let events = 5 * PARTITION_ROWS + 300;
    let whole = keyed_rows(&drain(
        NexmarkReader::open(config(NexmarkStream::Bid, events)).expect("open"),
    ));
    for of in [1, 2, 3, 7] {
        let mut union = Vec::new();
        for part in 0..of {
            let mut cfg = config(NexmarkStream::Bid, events);
            cfg.share = Some(share_of(part, of));
            union.extend(keyed_rows(&drain(NexmarkReader::open(cfg).expect("open"))));
        }
        assert_eq!(union.len(), whole.len(), "{of} shares");
        let mut sorted = union.clone();
        sorted.sort();
        let mut expected = whole.clone();
        expected.sort();
        assert_eq!(sorted, expected, "{of} shares");
    }
}

#[test]
fn a_share_resumes_where_it_stopped_and_only_under_itself() {
    let events = 4 * PARTITION_ROWS;
    let mut cfg = config(NexmarkStream::Bid, events);
    cfg.share = Some(share_of(1, 2));
    let whole = keyed_rows(&drain(NexmarkReader::open(cfg.clone()).expect("open")));
    let mut reader = NexmarkReader::open(cfg.clone()).expect("open");
    let mut head = Vec::new();
    for _ in 0..5 {
        head.push(reader.next_batch().expect("batch").expect("rows"));
    }
    let offset = reader.offset().expect("offset");
    let rest = drain(NexmarkReader::open_at_offset(cfg.clone(), &offset).expect("reopen"));
    let mut resumed = keyed_rows(&head);
    resumed.extend(keyed_rows(&rest));
    assert_eq!(resumed, whole);
    // Under another share, or the whole stream, the offset means nothing.
    let mut other = cfg.clone();
    other.share = Some(share_of(0, 2));
    let e = NexmarkReader::open_at_offset(other, &offset).expect_err("other share");
    assert!(e.to_string().contains("share '1 of 2'"), "{e}");
    cfg.share = None;
    let e = NexmarkReader::open_at_offset(cfg, &offset).expect_err("whole stream");
    assert!(
        e.to_string()
            .contains("the source now reads the whole stream"),
        "{e}"
    );
}

#[test]
fn a_share_holding_no_partition_ends_an_unbounded_stream() {
    let mut cfg = config(NexmarkStream::Bid, 1);
    cfg.events = None;
    cfg.share = Some(FileShare::new("none", "no vnodes", |_| false));
    let mut reader = NexmarkReader::open(cfg).expect("open");
    assert!(reader.next_batch().expect("no error").is_none());
}
