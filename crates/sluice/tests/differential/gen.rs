//! Generated event streams and the lateness rule the oracle applies.

use proptest::prelude::*;

use crate::common::{Event, BASE};

/// A source's input: its watermark delay and the batches pushed, in order.
#[derive(Debug, Clone)]
pub struct Stream {
    pub delay_ms: i64,
    pub batches: Vec<Vec<Event>>,
}

impl Stream {
    /// Every row, in push order.
    pub fn all(&self) -> Vec<Event> {
        self.batches.iter().flatten().copied().collect()
    }
}

/// One generated row before times are assigned.
#[derive(Debug, Clone)]
struct RawRow {
    key: i64,
    /// How far the source's clock moves before this row.
    step_ms: i64,
    /// Disorder as a percentage of the watermark delay (always on time).
    jitter_pct: i64,
    /// If set, the row is this much older than the delay allows (probably late).
    too_old_ms: Option<i64>,
    value: Option<i64>,
    /// Whether the batch ends after this row.
    cut: bool,
}

fn raw_row() -> impl Strategy<Value = RawRow> {
    // Biased toward the edges: no clock movement, disorder of exactly the
    // delay (a row at the watermark) and rows 1-2 ms behind it.
    let step = prop_oneof![1 => Just(0i64), 4 => 0i64..5_000];
    raw_row_of(0..5, step, 0.3)
}

/// Rows of keys in `keys`, the clock moving by `step` before each, a batch
/// ending after a row with probability `cut`.
fn raw_row_of(
    keys: std::ops::Range<i64>,
    step: impl Strategy<Value = i64>,
    cut: f64,
) -> impl Strategy<Value = RawRow> {
    let jitter = prop_oneof![1 => Just(100i64), 1 => Just(0), 3 => 0i64..=100];
    let too_old = prop_oneof![1 => 1i64..=2, 2 => 1i64..30_000];
    (
        keys,
        step,
        jitter,
        prop::option::weighted(0.12, too_old),
        prop::option::weighted(0.85, -10i64..40),
        prop::bool::weighted(cut),
    )
        .prop_map(
            |(key, step_ms, jitter_pct, too_old_ms, value, cut)| RawRow {
                key,
                step_ms,
                jitter_pct,
                too_old_ms,
                value,
                cut,
            },
        )
}

fn delay() -> impl Strategy<Value = i64> {
    prop_oneof![Just(0i64), Just(1_000), Just(2_500), Just(5_000)]
}

/// Streams of 1..`max_rows` rows over a few minutes, with bounded disorder,
/// some rows older than the watermark delay allows, and random batch sizes.
pub fn stream(max_rows: usize) -> impl Strategy<Value = Stream> {
    stream_of(delay(), raw_row(), max_rows)
}

/// Streams where a key's rows crowd together and arrive far out of order:
/// two keys, the clock moving under 800 ms per row, a 5 s watermark delay
/// and short batches. A later batch often fills the gap between two of a
/// key's sessions, so sessions merge across batches (a bridge).
pub fn crowded_stream(max_rows: usize) -> impl Strategy<Value = Stream> {
    stream_of(Just(5_000i64), raw_row_of(0..2, 0i64..800, 0.4), max_rows)
}

fn stream_of(
    delay: impl Strategy<Value = i64>,
    row: impl Strategy<Value = RawRow>,
    max_rows: usize,
) -> impl Strategy<Value = Stream> {
    (delay, prop::collection::vec(row, 1..max_rows)).prop_map(|(delay_ms, raws)| {
        let mut clock = BASE;
        let mut batches = Vec::new();
        let mut current = Vec::new();
        let n = raws.len();
        for (i, r) in raws.into_iter().enumerate() {
            clock += r.step_ms;
            let ts = match r.too_old_ms {
                Some(extra) => clock - delay_ms - extra,
                None => clock - delay_ms * r.jitter_pct / 100,
            };
            current.push(Event {
                key: r.key,
                ts: Some(ts),
                value: r.value,
            });
            if r.cut || i + 1 == n {
                batches.push(std::mem::take(&mut current));
            }
        }
        Stream { delay_ms, batches }
    })
}

/// Source batches folded into one execution cycle (`max_batches_per_cycle`).
pub fn per_cycle() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1usize), Just(4), Just(64)]
}

/// Rows split by the lateness rule.
#[derive(Debug, Clone, Default)]
pub struct Split {
    pub on_time: Vec<Event>,
    pub late: Vec<Event>,
}

/// Apply the rule: a row is late if its time is null or below the source
/// watermark as it was before its batch; after each batch the watermark
/// becomes max(previous, largest on-time event time - delay).
pub fn split_late(s: &Stream) -> Split {
    let mut wm: Option<i64> = None;
    let mut out = Split::default();
    for batch in &s.batches {
        let mut max: Option<i64> = None;
        for e in batch {
            let on_time = match (e.ts, wm) {
                (None, _) => false,
                (Some(_), None) => true,
                (Some(t), Some(w)) => t >= w,
            };
            if on_time {
                max = max.max(e.ts);
                out.on_time.push(*e);
            } else {
                out.late.push(*e);
            }
        }
        if let Some(m) = max {
            let candidate = m - s.delay_ms;
            wm = Some(wm.map_or(candidate, |w| w.max(candidate)));
        }
    }
    out
}

/// Session (start, end) of every event: per key, sorted by time, an event
/// joins the previous one's session when it is less than `gap_ms` after it.
pub fn sessions(events: &[Event], gap_ms: i64) -> Vec<(Event, i64, i64)> {
    let mut by_key: std::collections::BTreeMap<i64, Vec<Event>> = Default::default();
    for e in events {
        by_key.entry(e.key).or_default().push(*e);
    }
    let mut out = Vec::new();
    for (_, mut evs) in by_key {
        evs.sort_by_key(|e| e.ts);
        let mut i = 0;
        while i < evs.len() {
            let mut j = i + 1;
            while j < evs.len() && time(&evs[j]) - time(&evs[j - 1]) < gap_ms {
                j += 1;
            }
            let (start, end) = (time(&evs[i]), time(&evs[j - 1]) + gap_ms);
            out.extend(evs[i..j].iter().map(|e| (*e, start, end)));
            i = j;
        }
    }
    out
}

fn time(e: &Event) -> i64 {
    e.ts.expect("generated events have a time")
}

#[test]
fn lateness_rule_examples() {
    use crate::common::ev;
    let s = Stream {
        delay_ms: 1_000,
        batches: vec![
            vec![ev(0, 10_000, None), ev(0, 2_000, None)],
            vec![ev(0, 8_999, None), ev(0, 9_000, None), ev(0, 12_000, None)],
            vec![ev(0, 10_999, None)],
        ],
    };
    let split = split_late(&s);
    assert_eq!(split.late, vec![ev(0, 8_999, None), ev(0, 10_999, None)]);
    assert_eq!(split.on_time.len(), 4);
}

#[test]
fn session_examples() {
    use crate::common::ev;
    let evs = [
        ev(1, 0, None),
        ev(1, 9, None),
        ev(1, 19, None),
        ev(2, 5, None),
    ];
    let s: Vec<(i64, i64)> = sessions(&evs, 10)
        .iter()
        .map(|(_, s, e)| (*s, *e))
        .collect();
    assert_eq!(s, vec![(0, 19), (0, 19), (19, 29), (5, 15)]);
}

/// Guard against the generator losing its teeth: late rows and several
/// batches do occur.
#[test]
fn generator_produces_late_rows_and_batches() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut late, mut multi) = (0, 0);
    for _ in 0..64 {
        let s = stream(60).new_tree(&mut runner).expect("tree").current();
        late += usize::from(!split_late(&s).late.is_empty());
        multi += usize::from(s.batches.len() > 1);
        let rows = s.all();
        assert!(rows.iter().all(|e| e.ts.is_some()));
    }
    assert!(late >= 16, "only {late} of 64 streams had late rows");
    assert!(
        multi >= 48,
        "only {multi} of 64 streams had several batches"
    );
}
