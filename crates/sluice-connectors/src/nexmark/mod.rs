//! The Nexmark source: the person, auction and bid streams of the Nexmark
//! benchmark, generated deterministically.
//!
//! Event contents come from the [`nexmark`] crate (the Rust port of the
//! Beam/Flink Nexmark generator): every event is a pure function of its
//! event number, so a stream can be regenerated from any position. On top of
//! it this module adds what a replayable streaming source needs:
//!
//! * **Event time from the event number, never the wall clock.** Global
//!   event `g` happens at [`BASE_TIME_MS`] + `g` / `event_time_rate`
//!   seconds (by default 10,000 events per second of event time, Nexmark's
//!   default: 100 µs apart), minus a seeded disorder of at most
//!   `out_of_order_ms`, so event times are out of order by at most that
//!   bound. `rate` only paces emission in wall-clock time; it never changes
//!   the data, so a replay at another rate produces identical rows. A lower
//!   `event_time_rate` stretches the same events over more event time (at
//!   10 events per second, 10 million events span 11.6 days), which lets a
//!   benchmark close day-long windows.
//! * **A seed.** The crate seeds each event's random draws with its event
//!   id; seed `s` starts the id space at `s` × [`SEED_STRIDE`], which reseeds
//!   every draw. Seed 0 is the reference Nexmark stream (ids from 1000); with
//!   another seed, person ids are offset by `s` × 2³² and auction ids by 3`s` × 2³².
//! * **The 1:3:46 mix.** `events` counts events of the whole generator;
//!   each stream emits only its share (the bid stream of 1,000 events has
//!   920 rows), and the three streams of one seed are mutually consistent
//!   (bids refer to auctions and persons of the same seed).
//! * **Replay.** [`BatchReader::offset`](crate::BatchReader::offset) is the
//!   number of rows of the stream already emitted; reopening there
//!   regenerates the identical continuation.
//! * **Partitions.** A stream's natural partitions are blocks of
//!   [`PARTITION_ROWS`] consecutive rows, block `b` of stream `bid` named by
//!   the partition key `bid/b`. A node of a split reads only the blocks its
//!   share holds ([`NexmarkConfig::share`], the same kind of share a file
//!   source has, asked per key), skipping the others; the nodes' shares
//!   together read every row once, each row with the same contents and
//!   event time as on one node. Its offset is then the row it reached in
//!   the whole stream, and records the share: resuming under another share
//!   is refused, since the skipped blocks were some other node's. When
//!   vnodes move, [`handover::handover`] starts a share from the positions of the
//!   shares that held its blocks before.

mod columns;
pub mod handover;
mod reader;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::error::{ConnectorError, Result};
use crate::FileShare;

pub use handover::{handover as nexmark_handover, PreviousNexmarkShare};
pub use reader::NexmarkReader;

/// Event time of global event 0: 2024-01-01T00:00:00Z, in ms since the epoch.
pub const BASE_TIME_MS: i64 = 1_704_067_200_000;

/// Distance between the event-id spaces of consecutive seeds.
pub const SEED_STRIDE: u64 = 50 << 32;

/// Largest accepted seed (keeps every id within BIGINT).
pub const MAX_SEED: u64 = (1 << 20) - 1;

/// Events per cycle of the generator's mix (1 person, 3 auctions, 46 bids).
const MIX: u64 = 50;

/// Rows of one stream per partition (see the module docs): large enough
/// that a node's batches stay long, small enough that a few hundred
/// thousand events spread over every node of a split.
pub const PARTITION_ROWS: u64 = 1024;

/// The partition key of row `row` of `stream` (see the module docs).
pub fn partition_key(stream: NexmarkStream, row: u64) -> String {
    format!("{}/{}", stream.name(), row / PARTITION_ROWS)
}

/// One of the three Nexmark streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NexmarkStream {
    /// New people (1 in 50 events).
    Person,
    /// New auctions (3 in 50 events).
    Auction,
    /// Bids (46 in 50 events).
    Bid,
}

impl NexmarkStream {
    /// Every stream.
    pub const ALL: [NexmarkStream; 3] = [
        NexmarkStream::Person,
        NexmarkStream::Auction,
        NexmarkStream::Bid,
    ];

    /// Name as written in `stream = '...'`.
    pub fn name(self) -> &'static str {
        match self {
            NexmarkStream::Person => "person",
            NexmarkStream::Auction => "auction",
            NexmarkStream::Bid => "bid",
        }
    }

    /// (events of this stream per 50, position of its first event in the 50).
    fn share(self) -> (u64, u64) {
        match self {
            NexmarkStream::Person => (1, 0),
            NexmarkStream::Auction => (3, 1),
            NexmarkStream::Bid => (46, 4),
        }
    }

    /// Global event number of this stream's `k`-th event (0-based).
    pub fn global_event(self, k: u64) -> u64 {
        let (share, first) = self.share();
        (k / share) * MIX + first + k % share
    }

    /// How many of the first `total` global events belong to this stream.
    pub fn rows_in(self, total: u64) -> u64 {
        let (share, first) = self.share();
        (total / MIX) * share + (total % MIX).saturating_sub(first).min(share)
    }

    /// Every column the stream produces, with the standard Nexmark names.
    pub fn schema(self) -> SchemaRef {
        let big = |n: &str| Field::new(n, DataType::Int64, false);
        let text = |n: &str| Field::new(n, DataType::Utf8, false);
        let time = |n: &str| Field::new(n, DataType::Timestamp(TimeUnit::Millisecond, None), false);
        Arc::new(Schema::new(match self {
            NexmarkStream::Person => vec![
                big("id"),
                text("name"),
                text("email_address"),
                text("credit_card"),
                text("city"),
                text("state"),
                time("date_time"),
                text("extra"),
            ],
            NexmarkStream::Auction => vec![
                big("id"),
                text("item_name"),
                text("description"),
                big("initial_bid"),
                big("reserve"),
                time("date_time"),
                time("expires"),
                big("seller"),
                big("category"),
                text("extra"),
            ],
            NexmarkStream::Bid => vec![
                big("auction"),
                big("bidder"),
                big("price"),
                text("channel"),
                text("url"),
                time("date_time"),
                text("extra"),
            ],
        }))
    }

    fn event_type(self) -> nexmark::event::EventType {
        match self {
            NexmarkStream::Person => nexmark::event::EventType::Person,
            NexmarkStream::Auction => nexmark::event::EventType::Auction,
            NexmarkStream::Bid => nexmark::event::EventType::Bid,
        }
    }
}

impl fmt::Display for NexmarkStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for NexmarkStream {
    type Err = ConnectorError;

    fn from_str(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "person" => Ok(NexmarkStream::Person),
            "auction" => Ok(NexmarkStream::Auction),
            "bid" => Ok(NexmarkStream::Bid),
            _ => Err(ConnectorError::invalid_option(
                "stream",
                format!(
                    "unknown Nexmark stream '{}' (accepted: person, auction, bid)",
                    crate::quote::bounded(s)
                ),
            )),
        }
    }
}

/// Everything needed to generate one Nexmark stream.
#[derive(Debug, Clone)]
pub struct NexmarkConfig {
    /// Which stream.
    pub stream: NexmarkStream,
    /// Events of the whole generator (all three streams); `None` = unbounded.
    pub events: Option<u64>,
    /// Global events per second of wall-clock time; 0 = as fast as possible.
    pub rate: u64,
    /// Global events per second of event time (Nexmark's default 10,000).
    pub event_time_rate: u64,
    /// Bound of the event-time disorder, in milliseconds.
    pub out_of_order_ms: u64,
    /// Selects one of many reproducible streams (0 = reference Nexmark).
    pub seed: u64,
    /// Maximum rows per batch.
    pub batch_size: usize,
    /// Declared columns: any of the stream's columns, by name, in any order.
    pub schema: SchemaRef,
    /// Index of each declared column in [`NexmarkStream::schema`].
    projection: Vec<usize>,
    /// On a node of a split: the partitions it reads (`None`: all).
    pub share: Option<FileShare>,
}

/// Option names [`NexmarkConfig::set`] accepts.
pub const NEXMARK_OPTIONS: &[&str] = &[
    "events",
    "rate",
    "event_time_rate",
    "out_of_order_ms",
    "seed",
    "batch_size",
];

/// Nexmark's default density of event time: 10,000 events per second.
pub const DEFAULT_EVENT_TIME_RATE: u64 = 10_000;

/// Most events a bounded stream may have (10^15: 3 years of event time).
pub const MAX_EVENTS: u64 = 1_000_000_000_000_000;

/// Fastest accepted pacing, in global events per second.
pub const MAX_RATE: u64 = 1_000_000_000;

/// Largest accepted event-time disorder: one day, in milliseconds.
pub const MAX_OUT_OF_ORDER_MS: u64 = 86_400_000;

/// The allowed values of each of [`NEXMARK_OPTIONS`], inclusive; `None`
/// for a name that is not a Nexmark option.
pub fn nexmark_option_range(name: &str) -> Option<(u64, u64)> {
    Some(match name {
        "events" => (1, MAX_EVENTS),
        "rate" => (0, MAX_RATE),
        "event_time_rate" => (1, MAX_RATE),
        "out_of_order_ms" => (0, MAX_OUT_OF_ORDER_MS),
        "seed" => (0, MAX_SEED),
        "batch_size" => (1, crate::MAX_BATCH_SIZE as u64),
        _ => return None,
    })
}

impl NexmarkConfig {
    /// A configuration for `stream` producing the declared `schema`:
    /// unbounded, unthrottled, in order, seed 0, batches of 8192 rows.
    ///
    /// Every declared column must be a column of the stream with the same
    /// type; the error names the first one that is not.
    pub fn new(stream: NexmarkStream, schema: SchemaRef) -> Result<Self> {
        let projection = project(stream, &schema)?;
        Ok(Self {
            stream,
            events: None,
            rate: 0,
            event_time_rate: DEFAULT_EVENT_TIME_RATE,
            out_of_order_ms: 0,
            seed: 0,
            batch_size: 8192,
            schema,
            projection,
            share: None,
        })
    }

    /// A configuration producing every column of `stream`.
    pub fn full(stream: NexmarkStream) -> Self {
        let schema = stream.schema();
        Self {
            projection: (0..schema.fields().len()).collect(),
            stream,
            events: None,
            rate: 0,
            event_time_rate: DEFAULT_EVENT_TIME_RATE,
            out_of_order_ms: 0,
            seed: 0,
            batch_size: 8192,
            schema,
            share: None,
        }
    }

    /// Set an option from its SQL text (see [`NEXMARK_OPTIONS`]); a value
    /// outside the option's range (see [`nexmark_option_range`]) is refused
    /// with the range in the error.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        let Some((min, max)) = nexmark_option_range(name) else {
            return Err(ConnectorError::invalid_option(
                name,
                format!(
                    "not a Nexmark option (known: {})",
                    NEXMARK_OPTIONS.join(", ")
                ),
            ));
        };
        let n = value
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| (min..=max).contains(n))
            .ok_or_else(|| out_of_range(name, value, min, max))?;
        match name {
            "events" => self.events = Some(n),
            "rate" => self.rate = n,
            "event_time_rate" => self.event_time_rate = n,
            "out_of_order_ms" => self.out_of_order_ms = n,
            "seed" => self.seed = n,
            _ => {
                self.batch_size =
                    usize::try_from(n).map_err(|_| out_of_range(name, value, min, max))?
            }
        }
        Ok(())
    }

    /// Check every setting against its range, including those assigned
    /// directly (the engine sets `batch_size` from its own option), so a
    /// reader never allocates for a batch of billions of rows or overflows
    /// the disorder arithmetic.
    pub fn validate(&self) -> Result<()> {
        let settings = [
            ("events", self.events),
            ("rate", Some(self.rate)),
            ("event_time_rate", Some(self.event_time_rate)),
            ("out_of_order_ms", Some(self.out_of_order_ms)),
            ("seed", Some(self.seed)),
            (
                "batch_size",
                u64::try_from(self.batch_size).ok().or(Some(u64::MAX)),
            ),
        ];
        for (name, value) in settings {
            let (Some(v), Some((min, max))) = (value, nexmark_option_range(name)) else {
                continue;
            };
            if !(min..=max).contains(&v) {
                return Err(out_of_range(name, &v.to_string(), min, max));
            }
        }
        Ok(())
    }

    /// Rows this stream emits in total (`None` when unbounded).
    pub fn total_rows(&self) -> Option<u64> {
        self.events.map(|e| self.stream.rows_in(e))
    }

    /// Index of each declared column in the stream's full schema.
    pub fn projection(&self) -> &[usize] {
        &self.projection
    }

    /// One-line description for `SHOW SOURCES`.
    pub fn describe(&self) -> String {
        let events = match self.events {
            Some(n) => format!("{n} events"),
            None => "unbounded".to_string(),
        };
        let rate = match self.rate {
            0 => "unthrottled".to_string(),
            r => format!("{r} events/s"),
        };
        let density = match self.event_time_rate {
            DEFAULT_EVENT_TIME_RATE => String::new(),
            r => format!(", event_time_rate {r}"),
        };
        let share = match &self.share {
            Some(share) => format!(", {}", share.describe()),
            None => String::new(),
        };
        format!(
            "nexmark {} ({events}, {rate}{density}, out_of_order_ms {}, seed {}{share})",
            self.stream, self.out_of_order_ms, self.seed
        )
    }
}

/// The error for a value of `name` that is not an integer in `min..=max`.
fn out_of_range(name: &str, value: &str, min: u64, max: u64) -> ConnectorError {
    let hint = if name == "events" {
        " (omit the option for an unbounded stream)"
    } else {
        ""
    };
    ConnectorError::invalid_option(
        name,
        format!(
            "'{}' is not an integer from {min} to {max}{hint}",
            crate::quote::bounded(value)
        ),
    )
}

/// Map declared columns onto the stream's columns by name.
fn project(stream: NexmarkStream, declared: &Schema) -> Result<Vec<usize>> {
    let full = stream.schema();
    let what = format!("nexmark {stream} stream");
    declared
        .fields()
        .iter()
        .map(|f| {
            let (idx, have) = full.column_with_name(f.name()).ok_or_else(|| {
                let names: Vec<&str> = full.fields().iter().map(|f| f.name().as_str()).collect();
                ConnectorError::schema(
                    &what,
                    format!(
                        "column '{}' is not a column of the Nexmark {stream} stream (its columns: {})",
                        f.name(),
                        names.join(", ")
                    ),
                )
            })?;
            let compatible = match (have.data_type(), f.data_type()) {
                (
                    DataType::Timestamp(TimeUnit::Millisecond, None),
                    DataType::Timestamp(TimeUnit::Millisecond, _),
                ) => true,
                (a, b) => a == b,
            };
            if !compatible {
                return Err(ConnectorError::schema(
                    &what,
                    format!(
                        "column '{}' is declared {} but the Nexmark {stream} stream produces {} (declare it {})",
                        f.name(),
                        f.data_type(),
                        have.data_type(),
                        sql_type(have.data_type())
                    ),
                ));
            }
            Ok(idx)
        })
        .collect()
}

fn sql_type(t: &DataType) -> &'static str {
    match t {
        DataType::Int64 => "BIGINT",
        DataType::Utf8 => "VARCHAR",
        _ => "TIMESTAMP",
    }
}

#[cfg(test)]
mod handover_tests;
#[cfg(test)]
mod tests;
