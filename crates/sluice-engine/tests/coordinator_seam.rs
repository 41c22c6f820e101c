//! The streaming coordinator driven through its `PipelineCallback` seam by a
//! scripted test implementation that records every call, so the checkpoint
//! lifecycle (reserve, align, capture, commit, abandon, fail, fault, halt,
//! shutdown settlement) can be asserted call by call.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, Int64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use rustc_hash::FxHashMap;
use sluice_engine::coordinator::{
    BarrierOutcome, BatchMap, CheckpointAssignmentFence, CheckpointAttempt, CheckpointLifecycle,
    CheckpointReport, ControlMsg, CoordinatorConfig, CoordinatorHandle, CycleError, CycleExecution,
    CycleOutcome, OutputPublication, RuntimeControl, SourceIntake,
};
use sluice_engine::sources::{SourceEvent, SourceMessage};
use sluice_engine::EngineError;
use sluice_storage::SourceCheckpoint;
use tokio::sync::mpsc;

type Log = Arc<Mutex<Vec<String>>>;

/// What `checkpoint_with_barrier` does for one attempt (else: commit).
enum Capture {
    /// A sink pre-commit failed: before the manifest.
    Fail(String),
    /// The manifest is durable but committing a sink failed.
    ContinuationFault(String),
}

/// Knobs, shared with the test so they can change while the pipeline runs.
#[derive(Default)]
struct Script {
    fail_reserve: Option<String>,
    /// `reserve_subscription_cut` / `publish_barrier` fail with this.
    fail_cut: Option<String>,
    fail_publish: Option<String>,
    /// Sources `inject_source_barriers` reports as pending.
    pending: Vec<&'static str>,
    /// Outcomes of successive captures; they commit once it is exhausted.
    captures: VecDeque<Capture>,
    /// `record_checkpoint_failure` raises a fault (as exactly-once does).
    fault_on_checkpoint_failure: bool,
    /// A cycle holding this value fails.
    fail_cycle_on: Option<i64>,
    /// A cycle holding this value leaves a pending halt / fault behind.
    halt_on: Option<i64>,
    fault_on: Option<i64>,
    fault_on_cycle_error: bool,
    /// A cycle holding this value panics (outside any component's own
    /// containment: the coordinator loop must catch it).
    panic_cycle_on: Option<i64>,
    /// `abort_sinks` panics (escapes the loop: the thread dies).
    panic_on_abort: bool,
    cycle_delay: Duration,
    interval: Option<Duration>,
    /// Ten seconds when unset.
    alignment_timeout: Option<Duration>,
    settles: bool,
    halt: Option<String>,
    fault: Option<String>,
}

struct ScriptedCallback {
    log: Log,
    script: Arc<Mutex<Script>>,
    next_id: u64,
    watermark: i64,
}

impl ScriptedCallback {
    fn note(&self, entry: String) {
        self.log.lock().unwrap().push(entry);
    }
    fn script(&self) -> std::sync::MutexGuard<'_, Script> {
        self.script.lock().unwrap()
    }
}

fn values(batch: &RecordBatch) -> Vec<i64> {
    let col = batch.column(0).as_any().downcast_ref::<Int64Array>();
    col.map(|c| c.values().to_vec()).unwrap_or_default()
}

/// "A=[1,2] B=[10]", sources in name order.
fn describe(batches: &BatchMap) -> String {
    let mut parts: Vec<String> = batches
        .iter()
        .map(|(n, b)| format!(" {n}={:?}", b.iter().flat_map(values).collect::<Vec<_>>()))
        .collect();
    parts.sort();
    parts.concat().replace(", ", ",")
}

impl SourceIntake for ScriptedCallback {
    fn filter_late_rows(
        &self,
        _: &str,
        batch: &RecordBatch,
    ) -> Result<Option<RecordBatch>, CycleError> {
        Ok(Some(batch.clone()))
    }
    fn extract_watermark(
        &mut self,
        _: &str,
        batch: &RecordBatch,
        floor: i64,
    ) -> Result<(), CycleError> {
        let max = values(batch).into_iter().max().unwrap_or(i64::MIN);
        self.watermark = self.watermark.max(max).max(floor);
        Ok(())
    }
    fn advance_source_watermark(&mut self, _: &str, watermark: i64) {
        self.watermark = self.watermark.max(watermark);
    }
    fn finish_source(&mut self, source: &str, offset: Option<String>) {
        let offset = offset.unwrap_or_default();
        self.note(format!("finish {source} offset={offset}"));
    }
    fn all_sources_finished(&self) -> bool {
        false
    }
    fn current_watermark(&self) -> i64 {
        self.watermark
    }
}

impl CycleExecution for ScriptedCallback {
    async fn execute_cycle(
        &mut self,
        batches: &BatchMap,
        watermark: i64,
    ) -> Result<CycleOutcome, CycleError> {
        self.note(format!("cycle wm={watermark}{}", describe(batches)));
        let has = |v: Option<i64>| {
            v.is_some_and(|v| batches.values().flatten().any(|b| values(b).contains(&v)))
        };
        let delay = {
            let mut s = self.script();
            if has(s.halt_on) {
                s.halt = Some("halt requested".into());
            }
            if has(s.fault_on) {
                s.fault = Some("fault requested".into());
            }
            if has(s.fail_cycle_on) {
                return Err(CycleError::Execution("operator blew up".into()));
            }
            if has(s.panic_cycle_on) {
                drop(s);
                panic!("operator exploded");
            }
            s.cycle_delay
        };
        tokio::time::sleep(delay).await;
        let results = batches.clone();
        Ok(CycleOutcome { results })
    }
    fn record_cycle(&self, _: u64, _: u64, _: u64) {}
    fn note_cycle_error(&self) {
        self.note("cycle error noted".into());
    }
    fn fault_on_cycle_error(&self) -> bool {
        self.script().fault_on_cycle_error
    }
}

impl OutputPublication for ScriptedCallback {
    async fn write_to_sinks(&mut self, _: &BatchMap, _: Option<Instant>) -> Result<(), CycleError> {
        self.note("sinks.write".into());
        Ok(())
    }
    fn reserve_subscription_cut(&mut self, attempt: CheckpointAttempt) -> Result<(), String> {
        self.note(format!("cut {}", attempt.id));
        self.script().fail_cut.clone().map_or(Ok(()), Err)
    }
    fn abort_subscription_cut(&mut self, attempt: CheckpointAttempt) {
        self.note(format!("cut abort {}", attempt.id));
    }
    fn publish_barrier(&mut self, attempt: CheckpointAttempt) -> Result<(), String> {
        self.note(format!("publish {}", attempt.id));
        self.script().fail_publish.clone().map_or(Ok(()), Err)
    }
    fn invalidate_subscriptions(&self, reason: &str) {
        self.note(format!("invalidate: {reason}"));
    }
    async fn close_sinks(&mut self) -> Result<(), String> {
        self.note("sinks.close".into());
        Ok(())
    }
    fn abort_sinks(&mut self) -> Result<(), String> {
        self.note("sinks.abort".into());
        if self.script().panic_on_abort {
            panic!("abort exploded");
        }
        Ok(())
    }
}

impl RuntimeControl for ScriptedCallback {
    fn apply_control(&mut self, _: ControlMsg) {}
    fn take_pipeline_halt(&mut self) -> Option<String> {
        let halt = self.script().halt.take();
        halt.inspect(|h| self.note(format!("halt: {h}")))
    }
    fn take_pipeline_fault(&mut self) -> Option<String> {
        let fault = self.script().fault.take();
        fault.inspect(|f| self.note(format!("fault: {f}")))
    }
}

impl CheckpointLifecycle for ScriptedCallback {
    fn checkpoint_interval(&self) -> Option<Duration> {
        self.script().interval
    }
    fn alignment_timeout(&self) -> Duration {
        let timeout = self.script().alignment_timeout;
        timeout.unwrap_or(Duration::from_secs(10))
    }
    fn settles_on_shutdown(&self) -> bool {
        self.script().settles
    }
    async fn reserve_checkpoint_attempt(
        &mut self,
        _: Instant,
    ) -> Result<CheckpointAttempt, String> {
        if let Some(e) = self.script().fail_reserve.clone() {
            self.note(format!("reserve failed: {e}"));
            return Err(e);
        }
        self.next_id += 1;
        self.note(format!("reserve {}", self.next_id));
        Ok(CheckpointAttempt { id: self.next_id })
    }
    async fn publish_checkpoint_prepare(
        &mut self,
        attempt: CheckpointAttempt,
        _: Instant,
        _: Instant,
        flags: u64,
        _: Option<CheckpointAssignmentFence>,
    ) -> Result<(), String> {
        self.note(format!("prepare {} flags={flags}", attempt.id));
        Ok(())
    }
    fn inject_source_barriers(&mut self, attempt: CheckpointAttempt) -> Vec<Arc<str>> {
        let pending = self.script().pending.clone();
        self.note(format!("inject {} [{}]", attempt.id, pending.join(",")));
        pending.into_iter().map(Arc::from).collect()
    }
    async fn checkpoint_with_barrier(
        &mut self,
        offsets: FxHashMap<String, SourceCheckpoint>,
        attempt: CheckpointAttempt,
        started: Instant,
        _: Instant,
        flags: u64,
        _: Option<CheckpointAssignmentFence>,
    ) -> BarrierOutcome {
        let mut o: Vec<String> = offsets
            .iter()
            .map(|(k, v)| format!(" {k}={}", v.offset.as_deref().unwrap_or("-")))
            .collect();
        o.sort();
        let (id, o) = (attempt.id, o.concat());
        self.note(format!("capture {id} flags={flags}{o}"));
        let scripted = self.script().captures.pop_front();
        match scripted {
            Some(Capture::Fail(reason)) => return BarrierOutcome::Failed(reason),
            Some(Capture::ContinuationFault(reason)) => {
                self.record_checkpoint_continuation_fault(attempt, &reason)
            }
            None => {}
        }
        BarrierOutcome::Committed(CheckpointReport {
            id: attempt.id,
            duration: started.elapsed(),
            state_bytes: 0,
        })
    }
    async fn abandon_checkpoint_attempt(
        &mut self,
        attempt: CheckpointAttempt,
        reason: &str,
        flags: u64,
        _: Option<CheckpointAssignmentFence>,
    ) -> Result<(), String> {
        self.note(format!("abandon {} flags={flags}: {reason}", attempt.id));
        Ok(())
    }
    fn record_checkpoint_failure(&mut self, id: u64, reason: &str) {
        self.note(format!("checkpoint failed {id}: {reason}"));
        let mut s = self.script();
        if s.fault_on_checkpoint_failure {
            s.fault = Some(format!("checkpoint {id} failed: {reason}"));
        }
    }
    fn record_checkpoint_continuation_fault(&mut self, attempt: CheckpointAttempt, reason: &str) {
        self.note(format!("continuation fault {}: {reason}", attempt.id));
        let id = attempt.id;
        self.script().fault = Some(format!("after checkpoint {id} became durable: {reason}"));
    }
    fn record_checkpoint_admission_failure(&mut self, reason: &str) {
        self.note(format!("admission failure: {reason}"));
    }
}

// ---------------------------------------------------------------- harness

struct Harness {
    handle: CoordinatorHandle,
    tx: mpsc::Sender<SourceMessage>,
    log: Log,
    script: Arc<Mutex<Script>>,
}

/// A coordinator over a scripted callback; `setup` turns the knobs.
fn start(setup: impl FnOnce(&mut Script)) -> Harness {
    let mut script = Script::default();
    setup(&mut script);
    let (log, script) = (Log::default(), Arc::new(Mutex::new(script)));
    let callback = ScriptedCallback {
        log: Arc::clone(&log),
        script: Arc::clone(&script),
        next_id: 0,
        watermark: 0,
    };
    let (tx, rx) = mpsc::channel(256);
    // One message per cycle keeps the log deterministic; no idle ticks.
    let config = CoordinatorConfig {
        max_batches_per_cycle: 1,
        idle_tick: Duration::from_secs(3600),
    };
    let handle = CoordinatorHandle::spawn(callback, rx, config).expect("spawn");
    Harness {
        handle,
        tx,
        log,
        script,
    }
}

/// As `start`, with sources A and B pending at every barrier injection.
fn start_ab(setup: impl FnOnce(&mut Script)) -> Harness {
    start(|s| {
        s.pending = vec!["A", "B"];
        setup(s)
    })
}

fn msg(source: &str, event: SourceEvent) -> SourceMessage {
    SourceMessage {
        source: Arc::from(source),
        event,
    }
}

fn batch(source: &str, v: i64) -> SourceMessage {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let b = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![v]))]).unwrap();
    msg(source, SourceEvent::Batch(b))
}

fn barrier(source: &str, attempt: u64, offset: &str) -> SourceMessage {
    let offset = Some(offset.to_string());
    msg(source, SourceEvent::Barrier { attempt, offset })
}

/// Nothing may hang: every wait on the coordinator is bounded.
async fn bounded<T>(f: impl Future<Output = T>) -> T {
    let r = tokio::time::timeout(Duration::from_secs(20), f).await;
    r.expect("the coordinator hung")
}

impl Harness {
    async fn send(&self, messages: Vec<SourceMessage>) {
        for m in messages {
            self.tx.send(m).await.expect("intake stopped");
        }
    }
    /// Once `entry` is logged (a barrier was injected), send `messages`.
    async fn answer(&self, entry: &str, messages: Vec<SourceMessage>) {
        self.wait_for(entry).await;
        self.send(messages).await;
    }
    /// A manual checkpoint, while `driver` plays the sources.
    async fn checkpoint(
        &self,
        driver: impl Future<Output = ()>,
    ) -> Result<CheckpointReport, EngineError> {
        bounded(async { tokio::join!(self.handle.checkpoint(), driver).0 }).await
    }
    async fn finished(&self) -> Result<(), EngineError> {
        bounded(self.handle.wait_finished()).await
    }
    async fn shutdown(&mut self, discard: bool) -> Result<(), EngineError> {
        bounded(self.handle.shutdown(discard)).await
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    /// The entries starting with one of `prefixes`, joined by " | ".
    fn only(&self, prefixes: &[&str]) -> String {
        let log = self.log().into_iter();
        let kept: Vec<String> = log
            .filter(|e| prefixes.iter().any(|p| e.starts_with(p)))
            .collect();
        kept.join(" | ")
    }
    fn count(&self, prefix: &str) -> usize {
        self.log().iter().filter(|e| e.starts_with(prefix)).count()
    }
    async fn wait_until(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(&self.log()) {
            let log = self.log();
            assert!(Instant::now() < deadline, "never {what}; log: {log:#?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    async fn wait_for(&self, entry: &str) {
        self.wait_until(entry, |l| l.iter().any(|e| e == entry))
            .await
    }
    /// The whole log, entries joined by " | ", once it is that long and
    /// nothing more arrived for a moment.
    async fn expect_log(&self, expected: &str) {
        let n = expected.split(" | ").count();
        self.wait_until(&format!("{n} entries"), |l| l.len() >= n)
            .await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(self.log().join(" | "), expected);
    }
}

fn checkpoint_err(r: Result<CheckpointReport, EngineError>) -> String {
    match r {
        Err(EngineError::Checkpoint(e)) => e,
        other => panic!("expected a failed checkpoint, got {other:?}"),
    }
}

fn assert_halted(r: Result<(), EngineError>, reason: &str) {
    let ok = matches!(&r, Err(EngineError::Halted(h)) if h == reason);
    assert!(ok, "{r:?}");
}

fn assert_fault(r: Result<(), EngineError>, reason: &str) {
    let ok = matches!(&r, Err(EngineError::Fault(f)) if f == reason);
    assert!(ok, "{r:?}");
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn aligned_barrier_holds_post_barrier_input_until_capture() {
    let h = start_ab(|_| {});
    let feed = vec![
        batch("A", 1),
        barrier("A", 1, "a@1"),
        batch("A", 2),
        batch("A", 3),
        batch("B", 10),
        batch("B", 11),
        barrier("B", 1, "b@2"),
    ];
    let report = h.checkpoint(h.answer("inject 1 [A,B]", feed)).await;
    assert_eq!(report.expect("checkpoint").id, 1);
    h.expect_log(
        "reserve 1 | prepare 1 flags=1 | inject 1 [A,B] | cycle wm=1 A=[1] | sinks.write | \
         cycle wm=10 B=[10] | sinks.write | cycle wm=11 B=[11] | sinks.write | \
         cut 1 | capture 1 flags=1 A=a@1 B=b@2 | publish 1 | \
         cycle wm=11 A=[2] | sinks.write | cycle wm=11 A=[3] | sinks.write",
    )
    .await;
    assert_eq!(h.handle.status().cycles, 5);
}

#[tokio::test]
async fn finished_source_aligns_with_its_final_offset() {
    let h = start_ab(|_| {});
    let fin = msg(
        "B",
        SourceEvent::Finished {
            offset: Some("b@end".into()),
        },
    );
    let feed = vec![barrier("A", 1, "a@1"), batch("A", 5), batch("B", 3), fin];
    let report = h.checkpoint(h.answer("inject 1 [A,B]", feed)).await;
    assert_eq!(report.expect("checkpoint").id, 1);
    h.wait_for("cycle wm=5 A=[5]").await;
    assert_eq!(
        h.only(&["cycle", "finish", "capture"]),
        "cycle wm=3 B=[3] | finish B offset=b@end | cycle wm=3 | \
         capture 1 flags=1 A=a@1 B=b@end | cycle wm=5 A=[5]"
    );
}

#[tokio::test]
async fn alignment_timeout_abandons_replays_held_input_and_never_reuses_ids() {
    let h = start_ab(|s| s.alignment_timeout = Some(Duration::from_millis(200)));
    let started = Instant::now();
    let feed = vec![barrier("A", 1, "a@1"), batch("A", 2)];
    let e = checkpoint_err(h.checkpoint(h.answer("inject 1 [A,B]", feed)).await);
    assert!(e.contains("alignment timed out"), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    let abandoned = "abandon 1 flags=1: alignment timed out waiting for the barrier of B";
    h.expect_log(&format!(
        "reserve 1 | prepare 1 flags=1 | inject 1 [A,B] | {abandoned} | \
         cycle wm=2 A=[2] | sinks.write"
    ))
    .await;
    // The next attempt reserves a new id, and B's late barrier for attempt 1
    // does not align attempt 2.
    h.script.lock().unwrap().alignment_timeout = None;
    let driver = async {
        let (stale, a) = (barrier("B", 1, "b@stale"), barrier("A", 2, "a@2"));
        h.answer("inject 2 [A,B]", vec![stale, a, batch("B", 7)])
            .await;
        h.wait_for("cycle wm=7 B=[7]").await;
        assert_eq!(h.count("capture"), 0, "a stale barrier aligned B");
        h.send(vec![barrier("B", 2, "b@2")]).await;
    };
    assert_eq!(h.checkpoint(driver).await.expect("second checkpoint").id, 2);
    assert_eq!(
        h.only(&["reserve", "inject", "abandon", "capture"]),
        format!(
            "reserve 1 | inject 1 [A,B] | {abandoned} | \
             reserve 2 | inject 2 [A,B] | capture 2 flags=1 A=a@2 B=b@2"
        )
    );
}

#[tokio::test]
async fn reservation_failure_injects_nothing_and_keeps_processing() {
    let h = start_ab(|s| s.fail_reserve = Some("store unavailable".into()));
    assert_eq!(
        checkpoint_err(h.checkpoint(async {}).await),
        "store unavailable"
    );
    h.send(vec![batch("A", 4)]).await;
    h.expect_log(
        "reserve failed: store unavailable | admission failure: store unavailable | \
         cycle wm=4 A=[4] | sinks.write",
    )
    .await;
    let st = h.handle.status();
    assert_eq!((st.cycles, st.halted, st.fault), (1, None, None));
}

/// Over pending sources A and B: A's barrier, A's batch 9 (held), B's barrier.
fn held_feed() -> Vec<SourceMessage> {
    vec![
        barrier("A", 1, "a@1"),
        batch("A", 9),
        barrier("B", 1, "b@1"),
    ]
}

#[tokio::test]
async fn sink_precommit_failure_faults_under_exactly_once() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let h = start_ab(|s| (s.captures, s.fault_on_checkpoint_failure) = ([fail].into(), true));
    let r = h.checkpoint(h.answer("inject 1 [A,B]", held_feed())).await;
    assert_eq!(checkpoint_err(r), "sink pre-commit failed");
    let fault = "checkpoint 1 failed: sink pre-commit failed";
    assert_fault(h.finished().await, fault);
    assert_eq!(h.handle.status().halted, None);
    // Intake stopped, and the held batch 9 never ran.
    assert!(h.tx.send(batch("A", 10)).await.is_err());
    h.expect_log(&format!(
        "reserve 1 | prepare 1 flags=1 | inject 1 [A,B] | cut 1 | capture 1 flags=1 A=a@1 B=b@1 | \
         cut abort 1 | checkpoint failed 1: sink pre-commit failed | \
         fault: {fault} | invalidate: {fault} | sinks.abort"
    ))
    .await;
}

#[tokio::test]
async fn sink_precommit_failure_without_fault_replays_held_input() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let h = start_ab(|s| s.captures = [fail].into());
    let r = h.checkpoint(h.answer("inject 1 [A,B]", held_feed())).await;
    assert!(r.is_err());
    h.wait_for("cycle wm=9 A=[9]").await;
    assert_eq!(
        h.only(&["capture", "checkpoint failed", "cycle", "sinks.abort"]),
        "capture 1 flags=1 A=a@1 B=b@1 | checkpoint failed 1: sink pre-commit failed | \
         cycle wm=9 A=[9]"
    );
    let st = h.handle.status();
    assert_eq!((st.halted, st.fault), (None, None));
}

#[tokio::test]
async fn commit_failure_after_durable_manifest_faults() {
    let cont = Capture::ContinuationFault("committing sink out".into());
    let h = start_ab(|s| s.captures = [cont].into());
    let report = h.checkpoint(h.answer("inject 1 [A,B]", held_feed())).await;
    assert_eq!(report.expect("durable").id, 1);
    let fault = "after checkpoint 1 became durable: committing sink out";
    assert_fault(h.finished().await, fault);
    assert_eq!(h.handle.status().halted, None);
    assert!(h.tx.send(batch("A", 10)).await.is_err());
    h.expect_log(&format!(
        "reserve 1 | prepare 1 flags=1 | inject 1 [A,B] | cut 1 | capture 1 flags=1 A=a@1 B=b@1 | \
         continuation fault 1: committing sink out | publish 1 | \
         fault: {fault} | invalidate: {fault} | sinks.abort"
    ))
    .await;
}

#[tokio::test]
async fn publication_failure_after_commit_is_a_continuation_fault() {
    let h = start(|s| s.fail_publish = Some("subscriber log gone".into()));
    assert_eq!(
        checkpoint_err(h.checkpoint(async {}).await),
        "subscriber log gone"
    );
    let fault = "after checkpoint 1 became durable: subscriber log gone";
    assert_fault(h.finished().await, fault);
    // Durable: no failure is recorded and the cut is not aborted.
    h.expect_log(&format!(
        "reserve 1 | prepare 1 flags=1 | inject 1 [] | cut 1 | capture 1 flags=1 | publish 1 | \
         continuation fault 1: subscriber log gone | \
         fault: {fault} | invalidate: {fault} | sinks.abort"
    ))
    .await;
}

#[tokio::test]
async fn subscription_cut_failure_fails_the_checkpoint_before_capture() {
    let h = start(|s| s.fail_cut = Some("log full".into()));
    let want = "cutting subscription logs: log full";
    assert_eq!(checkpoint_err(h.checkpoint(async {}).await), want);
    h.send(vec![batch("A", 1)]).await;
    h.expect_log(&format!(
        "reserve 1 | prepare 1 flags=1 | inject 1 [] | cut 1 | cut abort 1 | \
         checkpoint failed 1: {want} | cycle wm=1 A=[1] | sinks.write"
    ))
    .await;
}

#[tokio::test]
async fn pending_halt_halts() {
    let h = start(|s| s.halt_on = Some(3));
    h.send(vec![batch("A", 3)]).await;
    assert_halted(h.finished().await, "halt requested");
    assert_eq!(h.handle.status().fault, None);
    assert!(h.tx.send(batch("A", 4)).await.is_err());
    h.expect_log(
        "cycle wm=3 A=[3] | sinks.write | halt: halt requested | \
         invalidate: halt requested | sinks.abort",
    )
    .await;
}

#[tokio::test]
async fn halt_takes_precedence_over_fault_in_the_same_step() {
    let h = start(|s| (s.halt_on, s.fault_on) = (Some(3), Some(3)));
    h.send(vec![batch("A", 3)]).await;
    assert_halted(h.finished().await, "halt requested");
    assert_eq!(h.handle.status().fault, None);
    assert_eq!(h.count("fault:"), 0, "the fault was taken too");
    assert_eq!(h.count("sinks.abort"), 1);
}

#[tokio::test]
async fn cycle_error_halts_by_default() {
    let h = start(|s| s.fail_cycle_on = Some(13));
    h.send(vec![batch("A", 13)]).await;
    assert_halted(h.finished().await, "operator blew up");
    h.expect_log(
        "cycle wm=13 A=[13] | cycle error noted | invalidate: operator blew up | sinks.abort",
    )
    .await;
    let st = h.handle.status();
    assert_eq!((st.cycles, st.fault), (0, None));
}

#[tokio::test]
async fn cycle_error_faults_when_asked() {
    let h = start(|s| (s.fail_cycle_on, s.fault_on_cycle_error) = (Some(13), true));
    h.send(vec![batch("A", 13)]).await;
    assert_fault(h.finished().await, "operator blew up");
    assert_eq!(h.handle.status().halted, None);
    h.expect_log(
        "cycle wm=13 A=[13] | cycle error noted | invalidate: operator blew up | sinks.abort",
    )
    .await;
}

/// No failed cycle is ever dropped: later input is not taken in.
#[tokio::test]
async fn a_failed_cycle_is_never_dropped_and_later_input_stays_out() {
    for fault in [false, true] {
        let h = start(|s| (s.fail_cycle_on, s.fault_on_cycle_error) = (Some(13), fault));
        h.send(vec![batch("A", 13)]).await;
        let r = h.finished().await;
        if fault {
            assert_fault(r, "operator blew up");
        } else {
            assert_halted(r, "operator blew up");
        }
        assert!(h.tx.send(batch("A", 14)).await.is_err(), "intake stopped");
        h.expect_log(
            "cycle wm=13 A=[13] | cycle error noted | invalidate: operator blew up | sinks.abort",
        )
        .await;
        let st = h.handle.status();
        assert_eq!(st.cycles, 0);
    }
}

/// A panic the components did not contain stops intake from the loop:
/// a halt without checkpoints, a fault with them; the coordinator still
/// answers and shuts down.
#[tokio::test]
async fn a_panic_in_a_cycle_halts_or_faults_and_the_coordinator_lives_on() {
    let reason = "the coordinator panicked: operator exploded";
    for fault in [false, true] {
        let mut h = start(|s| (s.panic_cycle_on, s.fault_on_cycle_error) = (Some(7), fault));
        h.send(vec![batch("A", 7)]).await;
        let r = h.finished().await;
        if fault {
            assert_fault(r, reason);
        } else {
            assert_halted(r, reason);
        }
        h.expect_log(&format!(
            "cycle wm=7 A=[7] | invalidate: {reason} | sinks.abort"
        ))
        .await;
        let again = bounded(h.handle.control(ControlMsg::Start)).await;
        assert!(again.is_ok(), "the coordinator still answers: {again:?}");
        let r = h.shutdown(true).await;
        assert!(
            matches!(&r, Err(e) if e.to_string().contains(reason)),
            "{r:?}"
        );
    }
}

/// When a panic escapes the loop too, the thread dies, and every later
/// call says that it panicked and why, never a bare "not running".
#[tokio::test]
async fn a_dead_coordinator_reports_its_panic_on_every_later_call() {
    let mut h = start(|s| (s.panic_cycle_on, s.panic_on_abort) = (Some(7), true));
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let push = sluice_engine::sources::PushSource::new(
        Arc::from("A"),
        Arc::clone(&schema),
        h.tx.clone(),
        Default::default(),
    )
    .watching(h.handle.death());
    h.send(vec![batch("A", 7)]).await;
    let dead = |r: Result<(), EngineError>| match r {
        Err(e @ EngineError::CoordinatorPanicked(_)) => {
            assert_eq!(e.code(), "SLC-ENG-014");
            assert!(e.to_string().contains("abort exploded"), "{e}");
        }
        other => panic!("expected the coordinator's panic, got {other:?}"),
    };
    dead(h.finished().await);
    assert_eq!(
        h.handle.status().panicked.as_deref(),
        Some("abort exploded")
    );
    dead(bounded(h.handle.control(ControlMsg::Start)).await);
    dead(bounded(h.handle.checkpoint()).await.map(|_| ()));
    let rows = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![8]))]).unwrap();
    dead(bounded(push.push(rows)).await);
    dead(h.shutdown(false).await);
}

#[tokio::test]
async fn shutdown_settles_with_a_checkpoint_before_closing_sinks() {
    let mut h = start(|s| s.settles = true);
    h.shutdown(false).await.expect("clean shutdown");
    assert!(h.handle.status().stopped);
    h.expect_log(
        "reserve 1 | prepare 1 flags=2 | inject 1 [] | cut 1 | capture 1 flags=2 | publish 1 | \
         sinks.close | invalidate: shutdown",
    )
    .await;
}

#[tokio::test]
async fn failed_shutdown_checkpoint_aborts_sinks() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let mut h = start(|s| (s.settles, s.captures) = (true, [fail].into()));
    let e = h.shutdown(false).await.expect_err("the settlement failed");
    let want = "shutdown checkpoint did not commit: sink pre-commit failed";
    assert!(e.to_string().contains(want), "{e}");
    h.expect_log(
        "reserve 1 | prepare 1 flags=2 | inject 1 [] | cut 1 | capture 1 flags=2 | cut abort 1 | \
         checkpoint failed 1: sink pre-commit failed | sinks.abort | invalidate: shutdown",
    )
    .await;
}

#[tokio::test]
async fn failed_shutdown_checkpoint_under_exactly_once_reports_the_fault() {
    let fail = Capture::Fail("sink pre-commit failed".into());
    let mut h = start(|s| {
        (s.settles, s.captures) = (true, [fail].into());
        s.fault_on_checkpoint_failure = true;
    });
    let r = h.shutdown(false).await;
    assert_fault(r, "checkpoint 1 failed: sink pre-commit failed");
    assert_eq!(h.count("sinks.close"), 0);
    assert!(h.count("sinks.abort") >= 1);
}

#[tokio::test]
async fn discarding_shutdown_aborts_sinks_without_a_checkpoint() {
    let mut h = start(|s| s.settles = true);
    h.shutdown(true).await.expect("discarding shutdown");
    h.expect_log("sinks.abort | invalidate: shutdown").await;
}

#[tokio::test]
async fn periodic_checkpoints_only_follow_new_cycles() {
    let pause = || tokio::time::sleep(Duration::from_millis(250));
    let h = start(|s| s.interval = Some(Duration::from_millis(50)));
    pause().await;
    assert_eq!(h.log(), Vec::<String>::new(), "no input, no checkpoint");
    h.send(vec![batch("A", 1)]).await;
    h.wait_for("capture 1 flags=0").await;
    pause().await;
    assert_eq!(h.count("reserve"), 1, "{:#?}", h.log());
    // A failed periodic checkpoint is retried without new input.
    let fail = Capture::Fail("disk full".into());
    h.script.lock().unwrap().captures.push_back(fail);
    h.send(vec![batch("A", 2)]).await;
    h.wait_for("publish 3").await;
    pause().await;
    h.expect_log(
        "cycle wm=1 A=[1] | sinks.write | \
         reserve 1 | prepare 1 flags=0 | inject 1 [] | cut 1 | capture 1 flags=0 | publish 1 | \
         cycle wm=2 A=[2] | sinks.write | \
         reserve 2 | prepare 2 flags=0 | inject 2 [] | cut 2 | capture 2 flags=0 | cut abort 2 | \
         checkpoint failed 2: disk full | \
         reserve 3 | prepare 3 flags=0 | inject 3 [] | cut 3 | capture 3 flags=0 | publish 3",
    )
    .await;
}

#[tokio::test]
async fn source_failure_during_alignment_abandons_the_attempt() {
    let h = start_ab(|_| {});
    let failed = msg("B", SourceEvent::Failed("disk gone".into()));
    let r = h
        .checkpoint(h.answer("inject 1 [A,B]", vec![barrier("A", 1, "a@1"), failed]))
        .await;
    checkpoint_err(r);
    assert_eq!(h.handle.status().halted.as_deref(), Some("disk gone"));
    // The reserved (and prepared) attempt must be given up explicitly.
    h.wait_for("abandon 1 flags=1: the pipeline stopped during alignment")
        .await;
}

#[tokio::test]
async fn alignment_timeout_is_enforced_while_input_keeps_coming() {
    let (timeout, delay) = (Duration::from_millis(100), Duration::from_millis(40));
    let h = start_ab(|s| (s.alignment_timeout, s.cycle_delay) = (Some(timeout), delay));
    let started = Instant::now();
    // B delivers slow batches (40ms cycles) but never its barrier.
    let feed = (0..15).map(|i| batch("B", i)).collect();
    let r = h.checkpoint(h.answer("inject 1 [A,B]", feed)).await;
    assert!(r.is_err());
    let took = started.elapsed();
    assert!(took < Duration::from_millis(300), "alignment ran {took:?}");
}
