//! A coordinator over the scripted callback, source messages, and bounded
//! waits and assertions on the call log.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_engine::coordinator::{CheckpointReport, CoordinatorConfig, CoordinatorHandle};
use sluice_engine::sources::{SourceEvent, SourceMessage};
use sluice_engine::EngineError;
use tokio::sync::mpsc;

use crate::scripted::*;

pub(crate) struct Harness {
    pub(crate) handle: CoordinatorHandle,
    pub(crate) tx: mpsc::Sender<SourceMessage>,
    pub(crate) log: Log,
    pub(crate) script: Arc<Mutex<Script>>,
}

/// A coordinator over a scripted callback; `setup` turns the knobs.
pub(crate) fn start(setup: impl FnOnce(&mut Script)) -> Harness {
    let mut script = Script::default();
    setup(&mut script);
    let idle_tick = script.idle_tick.unwrap_or(Duration::from_secs(3600));
    let (log, script) = (Log::default(), Arc::new(Mutex::new(script)));
    let callback = ScriptedCallback {
        log: Arc::clone(&log),
        script: Arc::clone(&script),
        next_id: 0,
        watermark: 0,
    };
    let (tx, rx) = mpsc::channel(256);
    // One message per cycle keeps the log deterministic; no idle ticks
    // unless the test asks for them.
    let config = CoordinatorConfig {
        max_batches_per_cycle: 1,
        idle_tick,
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
pub(crate) fn start_ab(setup: impl FnOnce(&mut Script)) -> Harness {
    start(|s| {
        s.pending = vec!["A", "B"];
        setup(s)
    })
}

pub(crate) fn msg(source: &str, event: SourceEvent) -> SourceMessage {
    SourceMessage::new(Arc::from(source), event)
}

pub(crate) fn batch(source: &str, v: i64) -> SourceMessage {
    let schema = Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]));
    let b = RecordBatch::try_new(schema, vec![Arc::new(Int64Array::from(vec![v]))]).unwrap();
    msg(source, SourceEvent::Batch(b))
}

pub(crate) fn barrier(source: &str, attempt: u64, offset: &str) -> SourceMessage {
    let offset = Some(offset.to_string());
    msg(source, SourceEvent::Barrier { attempt, offset })
}

/// Nothing may hang: every wait on the coordinator is bounded.
pub(crate) async fn bounded<T>(f: impl Future<Output = T>) -> T {
    let r = tokio::time::timeout(Duration::from_secs(20), f).await;
    r.expect("the coordinator hung")
}

impl Harness {
    pub(crate) async fn send(&self, messages: Vec<SourceMessage>) {
        for m in messages {
            self.tx.send(m).await.expect("intake stopped");
        }
    }
    /// Once `entry` is logged (a barrier was injected), send `messages`.
    pub(crate) async fn answer(&self, entry: &str, messages: Vec<SourceMessage>) {
        self.wait_for(entry).await;
        self.send(messages).await;
    }
    /// A manual checkpoint, while `driver` plays the sources.
    pub(crate) async fn checkpoint(
        &self,
        driver: impl Future<Output = ()>,
    ) -> Result<CheckpointReport, EngineError> {
        bounded(async { tokio::join!(self.handle.checkpoint(), driver).0 }).await
    }
    pub(crate) async fn finished(&self) -> Result<(), EngineError> {
        bounded(self.handle.wait_finished()).await
    }
    pub(crate) async fn shutdown(&mut self, discard: bool) -> Result<(), EngineError> {
        bounded(self.handle.shutdown(discard)).await
    }
    pub(crate) async fn shutdown_for_exit(&mut self, discard: bool) -> Result<(), EngineError> {
        bounded(self.handle.shutdown_for_exit(discard)).await
    }
    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
    /// The entries starting with one of `prefixes`, joined by " | ".
    pub(crate) fn only(&self, prefixes: &[&str]) -> String {
        let log = self.log().into_iter();
        let kept: Vec<String> = log
            .filter(|e| prefixes.iter().any(|p| e.starts_with(p)))
            .collect();
        kept.join(" | ")
    }
    pub(crate) fn count(&self, prefix: &str) -> usize {
        self.log().iter().filter(|e| e.starts_with(prefix)).count()
    }
    pub(crate) async fn wait_until(&self, what: &str, done: impl Fn(&[String]) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !done(&self.log()) {
            let log = self.log();
            assert!(Instant::now() < deadline, "never {what}; log: {log:#?}");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    pub(crate) async fn wait_for(&self, entry: &str) {
        self.wait_until(entry, |l| l.iter().any(|e| e == entry))
            .await
    }
    /// The whole log, entries joined by " | ", once it is that long and
    /// nothing more arrived for a moment.
    pub(crate) async fn expect_log(&self, expected: &str) {
        let n = expected.split(" | ").count();
        self.wait_until(&format!("{n} entries"), |l| l.len() >= n)
            .await;
        tokio::time::sleep(Duration::from_millis(30)).await;
        assert_eq!(self.log().join(" | "), expected);
    }
}

/// The reason a checkpoint was refused or failed with (the innermost
/// error's own words).
pub(crate) fn checkpoint_err(r: Result<CheckpointReport, EngineError>) -> String {
    match r {
        Err(e) => crate::scripted::checkpoint_reason(&e),
        other => panic!("expected a failed checkpoint, got {other:?}"),
    }
}

pub(crate) fn assert_halted(r: Result<(), EngineError>, reason: &str) {
    let ok = matches!(&r, Err(EngineError::Halted { cause }) if cause.to_string() == reason);
    assert!(ok, "{r:?}");
}

pub(crate) fn assert_fault(r: Result<(), EngineError>, reason: &str) {
    let ok = matches!(&r, Err(EngineError::Fault { cause }) if cause.to_string() == reason);
    assert!(ok, "{r:?}");
}
