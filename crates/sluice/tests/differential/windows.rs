//! Windowed aggregation (tumble, hop, session) against the batch oracle, in
//! both emit modes, through subscriptions and materialized views.

use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

use crate::common::{
    appended, block_on, complete, config, drain, event_rows, fold, interval, late_rows, open_tuned,
    push_all, select, source_ddl, Event, Row,
};
use crate::gen::{crowded_stream, per_cycle, sessions, split_late, stream, Split, Stream};
use crate::oracle::{offsets, query, table};

/// Every aggregate compared; first_value/last_value are order-dependent and left out.
/// MIN/MAX over text run through Sluice's own accumulator
/// (`operators/min_max_bytes.rs`), with and without FILTER; the oracle's is
/// DataFusion's.
pub(crate) const AGGS: &str =
    "COUNT(*) AS n, SUM(value) AS s, MIN(value) AS mn, MAX(value) AS mx, \
                    AVG(value) AS av, COUNT(DISTINCT value) AS nd, \
                    COUNT(DISTINCT CASE WHEN value > 10 THEN value END) AS nd_big, \
                    COUNT(DISTINCT value) FILTER (WHERE value % 2 = 0) AS nd_even, \
                    SUM(value) FILTER (WHERE value % 2 = 0) AS even_sum, \
                    MIN(to_hex(value)) AS mn_text, \
                    MAX(to_hex(value)) FILTER (WHERE value % 3 = 0) AS mx_text";

/// A window definition, as Sluice SQL and as its oracle.
#[derive(Debug, Clone)]
pub enum Win {
    Tumble {
        size: i64,
        with_end: bool,
        keyed: bool,
    },
    TumbleOffset {
        size: i64,
        offset: i64,
        with_end: bool,
    },
    Hop {
        slide: i64,
        size: i64,
        with_end: bool,
    },
    Session {
        gap: i64,
        keyed: bool,
    },
}

/// (leading SELECT columns, GROUP BY list) for `key`, a window start `f` and
/// optionally its end function `end`, all over the same arguments.
fn keyed_window(f: &str, end: Option<&str>, args: String) -> (String, String) {
    let start = format!("{f}(ts, {args})");
    match end {
        Some(e) => {
            let end = format!("{e}(ts, {args})");
            (
                format!("key, {start} AS ws, {end} AS we"),
                format!("key, {start}, {end}"),
            )
        }
        None => (format!("key, {start} AS ws"), format!("key, {start}")),
    }
}

impl Win {
    /// (leading SELECT columns, GROUP BY list) of the streaming query.
    pub(crate) fn engine_sql(&self) -> (String, String) {
        match *self {
            Win::Tumble {
                size,
                with_end,
                keyed: true,
            } => keyed_window("tumble", with_end.then_some("tumble_end"), interval(size)),
            Win::Tumble { size, with_end, .. } => {
                // One global group per window; the end listed first.
                let w = format!("tumble(ts, {})", interval(size));
                let e = format!("tumble_end(ts, {})", interval(size));
                match with_end {
                    true => (format!("{e} AS we, {w} AS ws"), format!("{w}, {e}")),
                    false => (format!("{w} AS ws"), w),
                }
            }
            Win::TumbleOffset {
                size,
                offset,
                with_end,
            } => keyed_window(
                "tumble",
                with_end.then_some("tumble_end"),
                format!("{}, {}", interval(size), interval(offset)),
            ),
            Win::Hop {
                slide,
                size,
                with_end,
            } => keyed_window(
                "hop",
                with_end.then_some("hop_end"),
                format!("{}, {}", interval(slide), interval(size)),
            ),
            Win::Session { gap, keyed } => {
                let s = format!("session(ts, {})", interval(gap));
                match keyed {
                    // Window first: the output order differs from the GROUP BY order.
                    true => (format!("{s} AS ss, key"), format!("key, {s}")),
                    // Sessions over all rows together.
                    false => (format!("{s} AS ss"), s),
                }
            }
        }
    }

    /// The expected final rows, computed in batch from the on-time rows.
    pub(crate) async fn oracle(&self, on_time: &[Event]) -> Vec<Row> {
        match *self {
            Win::Tumble { .. } => {
                // The tumble UDF evaluated row by row in a batch query.
                let (cols, group) = self.engine_sql();
                let sql = format!("SELECT {cols}, {AGGS} FROM t GROUP BY {group}");
                query(&[("t", table(on_time, &[]))], &sql).await
            }
            Win::TumbleOffset {
                size,
                offset,
                with_end,
            } => {
                // Plain arithmetic on milliseconds: shift so the dividend is
                // positive (integer division then floors), then shift back.
                let shift = (offset.div_euclid(size) + 1) * size - offset;
                let end = match with_end {
                    true => format!(", ws + {size} AS we"),
                    false => String::new(),
                };
                let sql = format!(
                    "SELECT key, ws{end}, {AGGS} FROM \
                     (SELECT key, value, \
                      (ts_ms + {shift}) / {size} * {size} - {shift} AS ws FROM t) \
                     GROUP BY key, ws"
                );
                query(&[("t", table(on_time, &[]))], &sql).await
            }
            Win::Hop {
                slide,
                size,
                with_end,
            } => {
                // Each row joins the windows whose start is a multiple of
                // the slide in (ts - size, ts]: the ceil(size / slide)
                // latest multiples, less those that end at or before ts (a
                // size that is not a multiple of the slide puts some rows in
                // one window fewer; one smaller than the slide, in none).
                let end = match with_end {
                    true => format!(", ws + {size} AS we"),
                    false => String::new(),
                };
                let sql = format!(
                    "SELECT key, ws{end}, {AGGS} FROM \
                     (SELECT t.key, t.value, t.ts_ms, (t.ts_ms / {slide} - o.k) * {slide} AS ws \
                      FROM t CROSS JOIN o) \
                     WHERE ts_ms < ws + {size} \
                     GROUP BY key, ws"
                );
                let most = size / slide + i64::from(size % slide != 0);
                let tables = [("t", table(on_time, &[])), ("o", offsets(most))];
                query(&tables, &sql).await
            }
            Win::Session { gap, keyed } => {
                // Sessions assigned in Rust, aggregated by DataFusion.
                let mut rows = on_time.to_vec();
                if !keyed {
                    rows.iter_mut().for_each(|e| e.key = 0);
                }
                let assigned = sessions(&rows, gap);
                let events: Vec<_> = assigned.iter().map(|(e, _, _)| *e).collect();
                let starts = assigned.iter().map(|(_, s, _)| *s).collect();
                let t = table(&events, &[("ss", starts)]);
                let cols = if keyed { "ss, key" } else { "ss" };
                let sql = format!("SELECT {cols}, {AGGS} FROM t GROUP BY {cols}");
                query(&[("t", t)], &sql).await
            }
        }
    }
}

fn win_strategy() -> impl Strategy<Value = Win> {
    let size = prop_oneof![Just(5_000i64), Just(10_000), Just(30_000)];
    prop_oneof![
        (size.clone(), any::<bool>(), any::<bool>()).prop_map(|(size, with_end, keyed)| {
            Win::Tumble {
                size,
                with_end,
                keyed,
            }
        }),
        // Offsets may be negative or larger than the size.
        (size, -60i64..120, any::<bool>()).prop_map(|(size, step, with_end)| {
            Win::TumbleOffset {
                size,
                offset: size * step / 60,
                with_end,
            }
        }),
        (
            prop_oneof![Just(2_000i64), Just(5_000)],
            1i64..=4,
            any::<bool>()
        )
            .prop_map(|(slide, mult, with_end)| Win::Hop {
                slide,
                size: slide * mult,
                with_end,
            }),
        // Sizes that are not a multiple of the slide, below it too.
        (hop_slide(), hop_any_size(), any::<bool>()).prop_map(|(slide, size, with_end)| {
            Win::Hop {
                slide,
                size,
                with_end,
            }
        }),
        (
            prop_oneof![Just(1_000i64), Just(3_000), Just(8_000)],
            any::<bool>()
        )
            .prop_map(|(gap, keyed)| Win::Session { gap, keyed }),
    ]
}

/// Hop slides, ms.
fn hop_slide() -> impl Strategy<Value = i64> {
    prop_oneof![Just(2_000i64), Just(3_000), Just(5_000)]
}

/// Hop sizes of any multiple of 250 ms from 250 ms to 20 s: mostly not a
/// multiple of the slide, sometimes smaller than it.
fn hop_any_size() -> impl Strategy<Value = i64> {
    (1i64..=80).prop_map(|q| q * 250)
}

/// What Sluice produced for one case.
struct Outputs {
    on_close: Vec<Row>,
    on_close_view: Vec<Row>,
    changes: Vec<Row>,
    changes_view: Vec<Row>,
    late: Vec<Row>,
    late_count: u64,
}

async fn run_sluice(s: &Stream, w: &Win, per_cycle: usize) -> Result<Outputs, TestCaseError> {
    let (cols, group) = w.engine_sql();
    let q = format!("SELECT {cols}, {AGGS} FROM src GROUP BY {group}");
    let ddl = format!(
        "{}; \
         CREATE STREAM on_close AS {q} EMIT ON WINDOW CLOSE; \
         CREATE MATERIALIZED VIEW on_close_view AS {q}; \
         CREATE STREAM changes AS {q} EMIT CHANGES; \
         CREATE MATERIALIZED VIEW changes_view AS {q} EMIT CHANGES",
        source_ddl("src", s.delay_ms, "LATE DATA TO late_src")
    );
    let db = open_tuned(&ddl, per_cycle).await;
    let mut on_close = db.subscribe("on_close").await.expect("subscribe");
    let mut changes = db.subscribe("changes").await.expect("subscribe");
    let mut late = db.subscribe("late_src").await.expect("subscribe");
    push_all(&db, "src", &s.batches).await;
    let metrics = complete(&db).await;
    let on_close_view = select(&db, "SELECT * FROM on_close_view").await;
    let changes_view = select(&db, "SELECT * FROM changes_view").await;
    db.shutdown().await.expect("shutdown");
    let fail = TestCaseError::fail;
    Ok(Outputs {
        on_close: appended(&drain(&mut on_close).await).map_err(fail)?,
        on_close_view,
        changes: fold(&drain(&mut changes).await).map_err(fail)?,
        changes_view,
        late: appended(&drain(&mut late).await).map_err(fail)?,
        late_count: late_rows(&metrics, "src"),
    })
}

async fn check(s: &Stream, w: &Win, per_cycle: usize) -> Result<(), TestCaseError> {
    let Split { on_time, late } = split_late(s);
    let out = run_sluice(s, w, per_cycle).await?;
    let expected = w.oracle(&on_time).await;
    prop_assert_eq!(&out.late, &event_rows(&late), "late rows");
    prop_assert_eq!(out.late_count, late.len() as u64, "late_rows metric");
    prop_assert_eq!(
        &out.on_close,
        &expected,
        "EMIT ON WINDOW CLOSE subscription"
    );
    prop_assert_eq!(&out.on_close_view, &expected, "EMIT ON WINDOW CLOSE view");
    prop_assert_eq!(&out.changes, &expected, "folded EMIT CHANGES subscription");
    prop_assert_eq!(&out.changes_view, &expected, "EMIT CHANGES view");
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn tumble_matches_batch(s in stream(60), pc in per_cycle(), size in prop_oneof![Just(5_000i64), Just(10_000)], with_end in any::<bool>()) {
        block_on(check(&s, &Win::Tumble { size, with_end, keyed: true }, pc))?;
    }

    #[test]
    fn tumble_with_offset_matches_batch(s in stream(60), pc in per_cycle(), offset in -15_000i64..25_000, with_end in any::<bool>()) {
        block_on(check(&s, &Win::TumbleOffset { size: 10_000, offset, with_end }, pc))?;
    }

    #[test]
    fn hop_matches_batch(s in stream(60), pc in per_cycle(), slide in prop_oneof![Just(2_000i64), Just(5_000)], mult in 1i64..=4, with_end in any::<bool>()) {
        block_on(check(&s, &Win::Hop { slide, size: slide * mult, with_end }, pc))?;
    }

    /// A size that is not a multiple of the slide: windows still start at
    /// every multiple of the slide and last `size`.
    #[test]
    fn hop_with_a_size_not_a_multiple_of_the_slide_matches_batch(s in stream(60), pc in per_cycle(), slide in hop_slide(), size in hop_any_size(), with_end in any::<bool>()) {
        block_on(check(&s, &Win::Hop { slide, size, with_end }, pc))?;
    }

    #[test]
    fn session_matches_batch(s in stream(60), pc in per_cycle(), gap in prop_oneof![Just(1_000i64), Just(3_000), Just(8_000)]) {
        block_on(check(&s, &Win::Session { gap, keyed: true }, pc))?;
    }

    /// Sessions that later rows bridge: several open sessions of a key
    /// merge into one, in either emit mode.
    #[test]
    fn bridged_sessions_match_batch(s in crowded_stream(60), pc in per_cycle(), gap in prop_oneof![Just(300i64), Just(1_000)], keyed in any::<bool>()) {
        block_on(check(&s, &Win::Session { gap, keyed }, pc))?;
    }

    #[test]
    fn any_window_matches_batch(s in stream(40), pc in per_cycle(), w in win_strategy()) {
        block_on(check(&s, &w, pc))?;
    }
}
