//! Pacing the checkpoint tail, so that a busy pipeline keeps its throughput.
//!
//! A checkpoint tail builds, encodes and writes the whole state off the
//! compute thread (see `coordinator::tails`). At a gigabyte that is seconds
//! of copying, and while it runs the compute thread's hash probes wait on
//! memory the tail keeps busy: on two cores, with the tail at a lower CPU
//! priority and the compute thread alone on its core, a pipeline fed as
//! fast as it goes lost about a quarter of its throughput to back-to-back
//! tails. CPU priority cannot fix that, since the two threads do not share
//! a core; the tail has to do less per second.
//!
//! So the tail works in short units and, after each one, rests in
//! proportion to it whenever the compute thread was busy during that unit:
//! with a share of 25% it rests three times as long as it worked. When the
//! pipeline is idle the tail runs at full speed. A busy pipeline therefore
//! trades checkpoint frequency (a gigabyte takes several times longer to
//! become durable) for throughput, like a rate-limited background
//! compaction.
//!
//! The pacer is per thread: the tail's worker installs one for the length
//! of a tail, and code that the tail shares with the compute thread (the
//! encoder, the merge of an aggregation's base) calls [`point`] between
//! units of work. On any other thread [`point`] does nothing.
//!
//! ```text
//!  tail thread:   [work ][rest  rest  rest ][work ][rest ...
//!  compute:       busy throughout: it gets the memory bandwidth 3/4 of the time
//! ```

use std::cell::RefCell;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The pipeline a tail yields to.
pub trait PaceHost: Send + Sync {
    /// The compute thread's time in cycles so far, in nanoseconds. Only
    /// grows; a tail compares it with the wall time of its own unit of work
    /// to tell whether the pipeline was busy meanwhile.
    fn busy_ns(&self) -> u64;

    /// The tail has just rested `rest` (for metrics); nothing is expected
    /// back.
    fn rested(&self, rest: Duration);

    /// A tail has ended; `longest` was its longest unit of work between two
    /// points (rests excluded), for metrics.
    fn tail_done(&self, longest: Duration);

    /// A point was passed, on the tail's thread (before any rest). Nothing
    /// is expected back; by default nothing happens. Tests use it to see
    /// how much work each step between two points did.
    fn point_passed(&self) {}
}

/// A host that is never busy: a pacer over it never rests.
struct Idle;

impl PaceHost for Idle {
    fn busy_ns(&self) -> u64 {
        0
    }

    fn rested(&self, _: Duration) {}

    fn tail_done(&self, _: Duration) {}
}

/// Work shorter than this is not a unit yet: busy fractions over shorter
/// spans are noise (a cycle is counted when it ends).
const MIN_UNIT: Duration = Duration::from_millis(10);

/// The compute thread counts as busy when it was in cycles at least this
/// fraction of a unit.
const BUSY_FRACTION: f64 = 0.5;

/// The longest single rest, so a unit that took long (one large copy)
/// cannot park the tail for minutes.
const MAX_REST: Duration = Duration::from_secs(2);

/// How a tail paces itself; see the module docs.
pub struct Pacer {
    /// Fraction of the time the tail may work while the pipeline is busy,
    /// in (0, 1]; 1 means never rest.
    share: f64,
    host: Arc<dyn PaceHost>,
    unit_start: Instant,
    busy_at_start: u64,
    rested: Duration,
    /// When the last point was passed (or the tail began), after any rest.
    last_point: Instant,
    /// The longest time between two points (or from the tail's start to
    /// the first, or from the last to its end), rests excluded: the
    /// longest step that ran unpaced.
    longest: Duration,
    /// Points passed.
    points: u64,
}

impl Pacer {
    /// A pacer that lets the tail work `share_percent` of the time (1 to
    /// 100) while `host` is busy.
    pub fn new(share_percent: u8, host: Arc<dyn PaceHost>) -> Self {
        let share = f64::from(share_percent.clamp(1, 100)) / 100.0;
        let busy_at_start = host.busy_ns();
        let now = Instant::now();
        Self {
            share,
            host,
            unit_start: now,
            busy_at_start,
            rested: Duration::ZERO,
            last_point: now,
            longest: Duration::ZERO,
            points: 0,
        }
    }

    /// The tail begins its work now (it was made when the checkpoint was
    /// captured, and may have waited since).
    pub fn begin(&mut self) {
        let now = Instant::now();
        self.unit_start = now;
        self.last_point = now;
        self.busy_at_start = self.host.busy_ns();
    }

    /// The tail's work has ended: its last step is counted, and its longest
    /// reported to the host.
    pub fn end(&mut self) {
        self.longest = self.longest.max(self.last_point.elapsed());
        self.host.tail_done(self.longest);
    }

    /// The longest step between two points so far (see [`Self::end`]).
    pub fn longest_unit(&self) -> Duration {
        self.longest
    }

    /// Points passed so far.
    pub fn points(&self) -> u64 {
        self.points
    }

    /// How long to rest after a unit that took `worked` while the compute
    /// thread was in cycles for `busy` of it.
    fn rest_after(&self, worked: Duration, busy: Duration) -> Duration {
        if self.share >= 1.0 || worked.is_zero() {
            return Duration::ZERO;
        }
        if busy.as_secs_f64() < worked.as_secs_f64() * BUSY_FRACTION {
            return Duration::ZERO;
        }
        worked
            .mul_f64((1.0 - self.share) / self.share)
            .min(MAX_REST)
    }

    /// A boundary between units of work: what [`point`] does on the
    /// thread this pacer is installed on, for code that holds the pacer
    /// itself (the blob write, across `await`s).
    pub fn point(&mut self) {
        self.points += 1;
        self.host.point_passed();
        self.longest = self.longest.max(self.last_point.elapsed());
        self.last_point = Instant::now();
        let worked = self.unit_start.elapsed();
        if worked < MIN_UNIT {
            return;
        }
        let busy_now = self.host.busy_ns();
        let busy = Duration::from_nanos(busy_now.saturating_sub(self.busy_at_start));
        let rest = self.rest_after(worked, busy);
        if !rest.is_zero() {
            std::thread::sleep(rest);
            self.rested += rest;
            self.host.rested(rest);
        }
        self.unit_start = Instant::now();
        self.last_point = self.unit_start;
        self.busy_at_start = self.host.busy_ns();
    }
}

thread_local! {
    static PACER: RefCell<Option<Pacer>> = const { RefCell::new(None) };
}

/// Run `work` on this thread with `pacer` installed, and return what it
/// returned and how long it rested. The pacer is handed back afterwards
/// (also if `work` panics), so one pacer spans a whole tail and its units
/// run on across parts.
pub fn paced<T>(pacer: &mut Pacer, work: impl FnOnce() -> T) -> (T, Duration) {
    /// Takes the pacer back out of the thread when dropped.
    struct Installed<'a>(&'a mut Pacer);
    impl Drop for Installed<'_> {
        fn drop(&mut self) {
            if let Some(p) = PACER.with(|p| p.borrow_mut().take()) {
                *self.0 = p;
            }
        }
    }
    let placeholder = Pacer::new(100, Arc::new(Idle));
    PACER.with(|p| *p.borrow_mut() = Some(std::mem::replace(pacer, placeholder)));
    let installed = Installed(pacer);
    let rested_before = PACER.with(|p| p.borrow().as_ref().map_or(Duration::ZERO, |p| p.rested));
    let out = work();
    drop(installed);
    (out, pacer.rested.saturating_sub(rested_before))
}

/// A boundary between units of tail work: rest here if the unit that just
/// ended was long enough and the pipeline was busy (see the module docs).
/// Does nothing on a thread without a pacer.
pub fn point() {
    PACER.with(|p| {
        if let Ok(mut p) = p.try_borrow_mut() {
            if let Some(p) = p.as_mut() {
                p.point();
            }
        }
    });
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    fn pacer(share: u8) -> Pacer {
        Pacer::new(share, Arc::new(Idle))
    }

    /// A host whose busy time the test sets, counting rests.
    #[derive(Default)]
    struct Host {
        busy: AtomicU64,
        rested: AtomicU64,
    }

    impl PaceHost for Host {
        fn busy_ns(&self) -> u64 {
            self.busy.load(Ordering::Relaxed)
        }

        fn rested(&self, rest: Duration) {
            self.rested
                .fetch_add(rest.as_nanos() as u64, Ordering::Relaxed);
        }

        fn tail_done(&self, _: Duration) {}
    }

    #[test]
    fn rests_in_proportion_to_the_share_only_while_the_pipeline_is_busy() {
        let ms = Duration::from_millis;
        // 25%: three times the work.
        assert_eq!(pacer(25).rest_after(ms(100), ms(100)), ms(300));
        assert_eq!(pacer(50).rest_after(ms(100), ms(60)), ms(100));
        // An idle pipeline (busy under half the unit): no rest.
        assert_eq!(pacer(25).rest_after(ms(100), ms(49)), Duration::ZERO);
        // 100%: never.
        assert_eq!(pacer(100).rest_after(ms(100), ms(100)), Duration::ZERO);
        // A long unit: capped.
        assert_eq!(pacer(1).rest_after(ms(1000), ms(1000)), MAX_REST);
    }

    #[test]
    fn a_point_rests_on_the_thread_that_installed_a_pacer_and_nowhere_else() {
        let host = Arc::new(Host::default());
        let mut pacer = Pacer::new(50, Arc::clone(&host) as Arc<dyn PaceHost>);
        let ((), rested) = paced(&mut pacer, || {
            // A busy unit of 20 ms: the compute thread was in cycles throughout.
            let started = Instant::now();
            std::thread::sleep(Duration::from_millis(20));
            host.busy
                .store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
            point();
        });
        assert!(rested >= Duration::from_millis(20), "rested {rested:?}");
        assert_eq!(
            host.rested.load(Ordering::Relaxed),
            rested.as_nanos() as u64
        );
        // The pacer came back with its units: an idle unit rests nothing.
        let ((), idle) = paced(&mut pacer, || {
            std::thread::sleep(Duration::from_millis(20));
            point();
        });
        assert_eq!(idle, Duration::ZERO);
        assert_eq!(pacer.rested, rested);
        // Another thread has no pacer: its points neither count nor rest
        // (a rest would reach the host). Judged by the counts, not by the
        // clock, so a preempted test thread cannot fail it.
        let points = pacer.points();
        let host_rested = || host.rested.load(Ordering::Relaxed);
        let rested_before = host_rested();
        host.busy.fetch_add(1_000_000_000, Ordering::Relaxed);
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(20));
            point();
        })
        .join()
        .unwrap();
        assert_eq!((pacer.points(), host_rested()), (points, rested_before));
        // Nor has this one, outside `paced`.
        std::thread::sleep(Duration::from_millis(20));
        host.busy.fetch_add(1_000_000_000, Ordering::Relaxed);
        point();
        assert_eq!(
            (pacer.points(), host_rested()),
            (points, rested_before),
            "uninstalled"
        );
    }

    #[test]
    fn the_pacer_comes_back_when_the_work_panics() {
        let mut pacer = Pacer::new(40, Arc::new(Idle));
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            paced(&mut pacer, || panic!("in a tail"))
        }));
        assert!(caught.is_err());
        assert!((pacer.share - 0.4).abs() < 1e-9, "the real pacer is back");
        PACER.with(|p| assert!(p.borrow().is_none()));
    }
}
