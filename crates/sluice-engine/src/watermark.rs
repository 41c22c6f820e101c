//! Per-source watermarks, idleness, and their combination.
//!
//! Each source's watermark trails the largest event time it has delivered by
//! its declared delay (bounded out-of-orderness), or is advanced by hand. The
//! pipeline watermark is the minimum over active sources: a source idle for
//! longer than its `idle_timeout` stops holding it back until it delivers
//! again, and a finished source no longer counts. The pipeline watermark
//! never moves backwards.

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
}
