//! Per-source watermarks, idleness, and their combination.
//!
//! Each source's watermark trails the largest event time it has delivered by
//! its declared delay (bounded out-of-orderness), or is advanced by hand. The
//! pipeline watermark is the minimum over active sources: a source idle for
//! longer than its `idle_timeout` stops holding it back until it delivers
//! again, and a finished source no longer counts. The pipeline watermark
//! never moves backwards.
//!
//! **Alignment.** Sources are read as fast as each can go, so in a replay
//! one source can run far ahead of another in event time (Nexmark's
//! auction stream covers 15 times the event time per row of the bid
//! stream). Whatever joins or windows them must keep the fast side's rows
//! until the slow side's watermark catches up, so state grows with the
//! skew, not with the query's bounds. With `watermark_max_drift` set,
//! [`Alignment`] names the sources more than that far ahead of the slowest
//! other active source, and the coordinator holds their readers until the
//! others catch up (what Flink calls watermark alignment). Idle and
//! finished sources do not hold anyone back, so a source that has nothing
//! to say never stalls the rest for longer than its `idle_timeout`.

use std::time::{Duration, Instant};

/// One source's event-time progress.
#[derive(Debug, Clone)]
pub struct SourceWatermark {
    delay_ms: Option<i64>,
    watermark: i64,
    manual: bool,
    idle_timeout: Duration,
    last_activity: Instant,
    idle: bool,
    finished: bool,
}

impl SourceWatermark {
    /// A source with an optional bounded-disorder delay (None: no event time).
    pub fn new(delay_ms: Option<i64>, idle_timeout: Duration, now: Instant) -> Self {
        Self {
            delay_ms,
            watermark: i64::MIN,
            manual: false,
            idle_timeout,
            last_activity: now,
            idle: false,
            finished: false,
        }
    }

    /// The source's current watermark.
    pub fn watermark(&self) -> i64 {
        self.watermark
    }

    /// Whether the source currently holds the pipeline watermark.
    pub fn is_active(&self) -> bool {
        (self.delay_ms.is_some() || self.manual) && !self.idle && !self.finished
    }

    /// Whether the source has event time at all (a declared watermark, or
    /// one advanced by hand).
    pub fn has_event_time(&self) -> bool {
        self.delay_ms.is_some() || self.manual
    }

    /// Whether the source is idle.
    pub fn is_idle(&self) -> bool {
        self.idle
    }

    /// Whether the source has finished.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Data arrived: the source is active again and its watermark follows
    /// the largest event time (`max_event_ms`) minus the delay.
    pub fn observe(&mut self, max_event_ms: Option<i64>, floor: i64, now: Instant) {
        self.last_activity = now;
        self.idle = false;
        if let (Some(delay), Some(max)) = (self.delay_ms, max_event_ms) {
            self.watermark = self.watermark.max(max.saturating_sub(delay)).max(floor);
        }
    }

    /// Advance by hand (push sources).
    pub fn advance_to(&mut self, ts: i64, now: Instant) {
        self.manual = true;
        self.last_activity = now;
        self.idle = false;
        self.watermark = self.watermark.max(ts);
    }

    /// The source has no more data.
    pub fn finish(&mut self) {
        self.finished = true;
        self.watermark = i64::MAX;
    }

    /// Resume from a checkpoint's watermark.
    pub fn restore(&mut self, watermark: i64, finished: bool) {
        self.watermark = watermark;
        if finished {
            self.finish();
        }
    }

    /// Mark the source idle if it has been quiet past its timeout.
    /// Returns whether it just became idle.
    pub fn check_idle(&mut self, now: Instant) -> bool {
        if !self.idle
            && !self.finished
            && now.duration_since(self.last_activity) >= self.idle_timeout
        {
            self.idle = true;
            return true;
        }
        false
    }
}

/// Combine source watermarks into the pipeline watermark.
///
/// `previous` is the last pipeline watermark (it never regresses); `all_finished`
/// is true when every source has finished, which ends event time.
pub fn combine<'a>(sources: impl Iterator<Item = &'a SourceWatermark>, previous: i64) -> i64 {
    let mut min_active: Option<i64> = None;
    let mut any = false;
    let mut all_finished = true;
    for s in sources {
        any = true;
        all_finished &= s.finished;
        if s.is_active() {
            min_active = Some(min_active.map_or(s.watermark, |m| m.min(s.watermark)));
        }
    }
    let candidate = match min_active {
        Some(m) => m,
        None if any && all_finished => i64::MAX,
        None => previous,
    };
    candidate.max(previous)
}

/// Watermark alignment over a set of sources: the two lowest watermarks
/// of the active ones, so each source's reference (the slowest *other*
/// active source) is known without a pass per source.
#[derive(Debug, Clone, Copy)]
pub struct Alignment {
    max_drift_ms: i64,
    /// The lowest active watermark and the index of its source.
    lowest: Option<(i64, usize)>,
    /// The lowest active watermark among the other sources.
    second: Option<i64>,
}

impl Alignment {
    /// Alignment of `sources` (in a fixed order: [`Self::is_ahead`] takes
    /// an index into it) with at most `max_drift_ms` of event time between
    /// a source and the slowest other active source.
    pub fn new<'a>(sources: impl Iterator<Item = &'a SourceWatermark>, max_drift_ms: i64) -> Self {
        let mut lowest: Option<(i64, usize)> = None;
        let mut second: Option<i64> = None;
        for (i, s) in sources.enumerate().filter(|(_, s)| s.is_active()) {
            let w = s.watermark;
            match lowest {
                Some((l, _)) if w >= l => second = Some(second.map_or(w, |x| x.min(w))),
                _ => {
                    second = lowest.map(|(l, _)| l);
                    lowest = Some((w, i));
                }
            }
        }
        Self {
            max_drift_ms,
            lowest,
            second,
        }
    }

    /// Whether `source` (at `index` in the order given to [`Self::new`])
    /// should be held: it has event time, has not finished, and its
    /// watermark is more than the drift ahead of the slowest other active
    /// source. With no other active source nobody is held.
    pub fn is_ahead(&self, index: usize, source: &SourceWatermark) -> bool {
        if !source.has_event_time() || source.finished {
            return false;
        }
        let reference = match self.lowest {
            Some((_, i)) if i == index => self.second,
            Some((l, _)) => Some(l),
            None => None,
        };
        reference.is_some_and(|r| source.watermark > r.saturating_add(self.max_drift_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(delay: i64, now: Instant) -> SourceWatermark {
        SourceWatermark::new(Some(delay), Duration::from_secs(5), now)
    }

    #[test]
    fn bounded_disorder_and_min_combination() {
        let now = Instant::now();
        let mut a = src(4, now);
        let mut b = src(0, now);
        a.observe(Some(100), i64::MIN, now);
        assert_eq!(a.watermark(), 96);
        a.observe(Some(50), i64::MIN, now);
        assert_eq!(a.watermark(), 96, "watermarks never regress");
        assert_eq!(
            combine([&a, &b].into_iter(), i64::MIN),
            i64::MIN,
            "b has no data yet"
        );
        b.observe(Some(90), i64::MIN, now);
        assert_eq!(combine([&a, &b].into_iter(), i64::MIN), 90);
        assert_eq!(
            combine([&a, &b].into_iter(), 95),
            95,
            "pipeline never regresses"
        );
    }

    #[test]
    fn idle_source_stops_holding_and_rejoins() {
        let t0 = Instant::now();
        let mut a = src(0, t0);
        let mut b = src(0, t0);
        a.observe(Some(1000), i64::MIN, t0);
        b.observe(Some(10), i64::MIN, t0);
        assert_eq!(combine([&a, &b].into_iter(), i64::MIN), 10);
        let later = t0 + Duration::from_secs(6);
        a.observe(Some(2000), i64::MIN, later);
        assert!(b.check_idle(later));
        assert!(!a.check_idle(later));
        assert_eq!(combine([&a, &b].into_iter(), 10), 2000);
        b.observe(Some(20), i64::MIN, later);
        assert!(b.is_active());
        assert_eq!(
            combine([&a, &b].into_iter(), 2000),
            2000,
            "rejoining source cannot pull it back"
        );
    }

    #[test]
    fn finished_sources_end_event_time() {
        let now = Instant::now();
        let mut a = src(0, now);
        let mut b = SourceWatermark::new(None, Duration::from_secs(5), now);
        a.observe(Some(5), i64::MIN, now);
        assert_eq!(
            combine([&a, &b].into_iter(), i64::MIN),
            5,
            "b has no event time"
        );
        a.finish();
        assert_eq!(combine([&a, &b].into_iter(), 5), 5, "b still running");
        b.finish();
        assert_eq!(combine([&a, &b].into_iter(), 5), i64::MAX);
    }

    /// A source in one of the states alignment distinguishes.
    fn source_in(state: u64, watermark: i64, now: Instant) -> SourceWatermark {
        let mut s = match state {
            // No event time at all.
            0 => SourceWatermark::new(None, Duration::from_secs(5), now),
            _ => src(0, now),
        };
        match state {
            1 => s.observe(Some(watermark), i64::MIN, now),
            2 => {
                s.observe(Some(watermark), i64::MIN, now);
                s.idle = true;
            }
            3 => s.finish(),
            4 => s.advance_to(watermark, now),
            // 5: declared but nothing delivered yet (watermark MIN).
            _ => {}
        }
        s
    }

    /// `Alignment::is_ahead` against its definition, computed the slow way,
    /// over random sets of sources in every state (with ties and extremes).
    #[test]
    fn alignment_holds_exactly_the_sources_ahead_of_the_slowest_other() {
        let now = Instant::now();
        let mut rng = crate::test_rng::Rng(0x9e37_79b9_7f4a_7c15);
        let marks = [i64::MIN, -5, 0, 3, 10, 11, 20, 1_000, i64::MAX - 1];
        for case in 0..20_000 {
            let n = 1 + rng.below(5) as usize;
            let drift = [0, 1, 7, 10, i64::MAX][rng.below(5) as usize];
            let sources: Vec<SourceWatermark> = (0..n)
                .map(|_| {
                    source_in(
                        rng.below(6),
                        marks[rng.below(marks.len() as u64) as usize],
                        now,
                    )
                })
                .collect();
            let alignment = Alignment::new(sources.iter(), drift);
            for (i, s) in sources.iter().enumerate() {
                let reference = sources
                    .iter()
                    .enumerate()
                    .filter(|(j, o)| *j != i && o.is_active())
                    .map(|(_, o)| o.watermark())
                    .min();
                let expected = s.has_event_time()
                    && !s.is_finished()
                    && reference.is_some_and(|r| s.watermark() > r.saturating_add(drift));
                assert_eq!(
                    alignment.is_ahead(i, s),
                    expected,
                    "case {case}, source {i} of {sources:?}, drift {drift}"
                );
            }
        }
    }

    #[test]
    fn alignment_releases_a_source_once_the_others_are_idle_or_finished() {
        let now = Instant::now();
        let mut fast = src(0, now);
        let mut slow = src(0, now);
        fast.observe(Some(10_000), i64::MIN, now);
        slow.observe(Some(100), i64::MIN, now);
        let ahead = |f: &SourceWatermark, s: &SourceWatermark| {
            Alignment::new([f, s].into_iter(), 1_000).is_ahead(0, f)
        };
        assert!(ahead(&fast, &slow));
        slow.observe(Some(9_000), i64::MIN, now);
        assert!(!ahead(&fast, &slow), "within the drift");
        slow.observe(Some(8_000), i64::MIN, now);
        fast.observe(Some(20_000), i64::MIN, now);
        assert!(ahead(&fast, &slow));
        assert!(slow.check_idle(now + Duration::from_secs(6)));
        assert!(!ahead(&fast, &slow), "an idle source holds nobody back");
        slow.observe(Some(9_500), i64::MIN, now);
        assert!(ahead(&fast, &slow), "it rejoins");
        slow.finish();
        assert!(!ahead(&fast, &slow), "a finished source holds nobody back");
    }
}
