//! A sink's writer thread: encoding and file I/O off the compute thread.
//!
//! # Architecture
//!
//! ```text
//!  compute thread                         sluice-sink-<name> thread
//!  ─────────────                          ─────────────────────────
//!  write(batches) ── Job::Write + ticket ─►  fault hook, encode, append
//!  pre_commit / commit / close / abort ──►  run on the writer, reply ─┐
//!       ◄─────────────── blocking reply ──────────────────────────────┘
//! ```
//!
//! Jobs run strictly in the order they were sent, so every write of an
//! epoch is flushed before that epoch's pre-commit, and an abort rolls back
//! exactly the writes sent before it: epoch semantics are those of writing
//! on the compute thread. Writes are fire-and-forget; calls (pre-commit,
//! commit, close, abort, flush) wait for their reply.
//!
//! The queue is bounded by bytes, not by blocking: each write carries a
//! [`BudgetTicket`] for its batches, and the coordinator pauses source
//! intake while the queue holds 80% of `sink_queue_bytes` (see
//! [`crate::budget`]), so the compute thread never blocks behind a slow
//! sink except where it must wait for one (a checkpoint, a close).
//!
//! A write that fails (or panics) poisons the writer: later writes are
//! dropped, every later write, pre-commit and close fails with the same
//! message, and the coordinator takes it once ([`SinkWorker::take_failure`])
//! to stop the pipeline (a halt, or a fault with checkpoints) exactly as a
//! write failing on the compute thread did. Nothing of the failed epoch is
//! committed, because its pre-commit fails.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use sluice_connectors::{EpochFileSink, FileSinkWriter};
use tokio::sync::Notify;

use crate::budget::{BudgetTicket, ByteBudget};
use crate::error::{EngineError, Result};

/// The open output of a sink.
pub(crate) enum Writer {
    Atomic(FileSinkWriter),
    Epoch(EpochFileSink),
}

type Call = Box<dyn FnOnce(&mut Option<Writer>) + Send>;

enum Job {
    Write {
        batches: Vec<RecordBatch>,
        rows: u64,
        _ticket: BudgetTicket,
    },
    Call(Call),
}

/// State shared with the writer thread.
struct Shared {
    name: String,
    /// The first failure (it names the sink).
    failure: Mutex<Option<Arc<EngineError>>>,
    /// Whether the coordinator took the failure already.
    reported: std::sync::atomic::AtomicBool,
    relief: Option<Arc<Notify>>,
}

/// The handle of one sink's writer thread.
pub struct SinkWorker {
    jobs: Option<std_mpsc::Sender<Job>>,
    budget: Arc<ByteBudget>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl SinkWorker {
    /// Start the writer thread of sink `name` over `writer`.
    pub(crate) fn spawn(
        name: &str,
        writer: Writer,
        queue_bytes: u64,
        relief: Option<Arc<Notify>>,
    ) -> Result<Self> {
        let (tx, rx) = std_mpsc::channel::<Job>();
        let shared = Arc::new(Shared {
            name: name.to_string(),
            failure: Mutex::new(None),
            reported: Default::default(),
            relief: relief.clone(),
        });
        let worker_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("sluice-sink-{name}"))
            .spawn(move || run(rx, Some(writer), &worker_shared))
            .map_err(|e| {
                EngineError::Internal(format!("sink '{name}': cannot start writer: {e}"))
            })?;
        Ok(Self {
            jobs: Some(tx),
            budget: ByteBudget::with_relief(queue_bytes, relief),
            shared,
            thread: Some(thread),
        })
    }

    fn gone(&self) -> EngineError {
        EngineError::Internal(format!(
            "sink '{}': the writer thread is gone",
            self.shared.name
        ))
    }

    /// Queue a cycle's batches; returns at once.
    pub fn write(&self, batches: Vec<RecordBatch>, rows: u64) -> Result<()> {
        let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let ticket = self.budget.charge(bytes as u64);
        let jobs = self.jobs.as_ref().ok_or_else(|| self.gone())?;
        jobs.send(Job::Write {
            batches,
            rows,
            _ticket: ticket,
        })
        .map_err(|_| self.gone())
    }

    /// Run `f` on the writer after every job sent before it; wait for its result.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Option<Writer>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        let name = self.shared.name.clone();
        let job = Job::Call(Box::new(move |w| {
            let r = crate::panic::contain(|| format!("sink '{name}'"), || f(w)).and_then(|r| r);
            let _ = reply.send(r);
        }));
        let jobs = self.jobs.as_ref().ok_or_else(|| self.gone())?;
        jobs.send(job).map_err(|_| self.gone())?;
        answer.recv().map_err(|_| self.gone())?
    }

    /// Wait until every queued write ran.
    pub fn flush(&self) -> Result<()> {
        self.call(|_| Ok(()))
    }

    /// The failure of an earlier write, once: None if there is none or it
    /// was taken before.
    pub fn take_failure(&self) -> Option<EngineError> {
        let failure = self.shared.failure.lock().clone()?;
        let taken = self
            .shared
            .reported
            .swap(true, std::sync::atomic::Ordering::AcqRel);
        (!taken).then(|| EngineError::unshare(failure))
    }

    /// The failure of an earlier write, every time (it poisons the writer).
    pub fn failure(&self) -> Option<Arc<EngineError>> {
        self.shared.failure.lock().clone()
    }

    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> u64 {
        self.budget.queued()
    }

    /// Whether the queue holds 80% of its byte budget.
    pub fn is_full(&self) -> bool {
        self.budget.is_over_high_water()
    }

    /// Stop the thread after the jobs already sent, and wait for it.
    pub fn stop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(sink = %self.shared.name, "sink writer thread panicked");
            }
        }
    }
}

impl Drop for SinkWorker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The writer thread: jobs in order until the handle is dropped.
fn run(jobs: std_mpsc::Receiver<Job>, mut writer: Option<Writer>, shared: &Shared) {
    while let Ok(job) = jobs.recv() {
        match job {
            Job::Write { batches, rows, .. } => {
                if shared.failure.lock().is_some() {
                    continue;
                }
                let name = &shared.name;
                let written = crate::panic::contain(
                    || format!("sink '{name}'"),
                    || write_batches(name, writer.as_mut(), &batches, rows),
                );
                let failure = match written {
                    Ok(Ok(())) => None,
                    Ok(Err(e)) => Some(Arc::new(e)),
                    Err(panic) => Some(Arc::new(panic)),
                };
                if let Some(f) = failure {
                    tracing::error!(sink = %name, error = %f, "sink write failed");
                    *shared.failure.lock() = Some(f);
                    if let Some(r) = &shared.relief {
                        r.notify_one();
                    }
                }
            }
            Job::Call(f) => f(&mut writer),
        }
    }
}

fn write_batches(
    name: &str,
    writer: Option<&mut Writer>,
    batches: &[RecordBatch],
    rows: u64,
) -> Result<()> {
    let err = |e: EngineError| e.context(format!("sink '{name}'"));
    crate::fault::hit(crate::fault::FaultSite::SinkWrite, name, rows).map_err(err)?;
    let Some(writer) = writer else {
        return Err(err(EngineError::Internal("the sink is not open".into())));
    };
    for b in batches {
        match writer {
            Writer::Atomic(w) => w.write(b),
            Writer::Epoch(w) => w.write(b),
        }
        .map_err(|e| err(e.into()))?;
    }
    Ok(())
}
