//! A sink's writer thread: encoding and file I/O off the compute thread.
//!
//! # Architecture
//!
//! ```text
//!  compute thread                         sluice-sink-<name> thread
//!  ─────────────                          ─────────────────────────
//!  write(batches) ── Job::Write + ticket ─►  fault hook, encode, append
//!  seal (checkpoint capture) ── submit ──►  seal the epoch ─────────┐
//!  checkpoint tail (awaits seal answer) ◄── answer (oneshot) ───────┘
//!  checkpoint tail, once durable ─ submit ►  commit sealed epochs ───┐
//!       ◄────────────────────────────────── answer (oneshot) ───────┘
//!  close / abort / discard ── call ──────►  run on the writer, reply ─┐
//!       ◄─────────────── blocking reply ──────────────────────────────┘
//! ```
//!
//! Jobs run strictly in the order they were sent, so every write of an
//! epoch is flushed before that epoch's seal, and an abort rolls back
//! exactly the writes sent before it: epoch semantics are those of writing
//! on the compute thread. Writes are fire-and-forget; a submitted job
//! (seal, commit) answers through a oneshot that the checkpoint tail
//! awaits, so neither a slow sink nor its queue of writes ever pauses the
//! compute thread at a checkpoint; calls (close, abort, discard, flush)
//! wait for their reply and are only made where the pipeline stops anyway.
//!
//! The queue's sending end has one owner, shared by the worker handle and
//! every [`JobQueue`] a checkpoint tail holds: [`SinkWorker::stop`] closes
//! it for all of them, so the writer thread ends when its handle stops,
//! whoever else still holds a queue (their later jobs fail as "gone").
//!
//! The queue is bounded by bytes, not by blocking: each write carries a
//! [`BudgetTicket`] for its batches, and the coordinator pauses source
//! intake while the queue holds 80% of `sink_queue_bytes` (see
//! [`crate::budget`]), so the compute thread never blocks behind a slow
//! sink except where it must wait for one (a close).
//!
//! A write that fails (or panics) poisons the writer: later writes are
//! dropped, every later write, seal and close fails with the same
//! message, and the coordinator takes it once ([`SinkWorker::take_failure`])
//! to stop the pipeline (a halt, or a fault with checkpoints) exactly as a
//! write failing on the compute thread did. Nothing of the failed epoch is
//! committed, because its seal fails.

use std::sync::mpsc as std_mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use sluice_connectors::FileSinkWriter;
use tokio::sync::oneshot;

use super::epoch_ledger::EpochLedger;
use crate::budget::{BudgetTicket, ByteBudget, Relief};
use crate::error::{EngineError, Result};

/// The open output of a sink.
pub(crate) enum Writer {
    Atomic(FileSinkWriter),
    Epoch(EpochLedger),
}

/// The answer of a submitted job; `Err` when the job failed, panicked, or
/// the writer was gone before it ran.
pub(crate) struct Answer<T> {
    name: String,
    rx: oneshot::Receiver<Result<T>>,
}

impl<T> Answer<T> {
    /// Wait for the job (without blocking a thread).
    pub(crate) async fn wait(self) -> Result<T> {
        match self.rx.await {
            Ok(r) => r,
            Err(_) => Err(gone(&self.name)),
        }
    }
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
    relief: Option<Arc<Relief>>,
}

fn gone(name: &str) -> EngineError {
    EngineError::Internal(format!("sink '{name}': the writer thread is gone"))
}

/// A handle that queues jobs on one sink's writer thread; cheap to clone
/// (a checkpoint tail holds one to commit the epochs it recorded).
#[derive(Clone)]
pub(crate) struct JobQueue {
    /// The only sending end; `None` once the worker stopped.
    jobs: Arc<Mutex<Option<std_mpsc::Sender<Job>>>>,
    shared: Arc<Shared>,
}

impl JobQueue {
    fn send(&self, job: Job) -> Result<()> {
        match &*self.jobs.lock() {
            Some(tx) => tx.send(job).map_err(|_| gone(&self.shared.name)),
            None => Err(gone(&self.shared.name)),
        }
    }

    /// Queue `f` to run on the writer after every job sent before it, and
    /// hand its result to `reply`. A panic in `f` is an error naming the sink.
    fn send_call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Option<Writer>) -> Result<T> + Send + 'static,
        reply: impl FnOnce(Result<T>) + Send + 'static,
    ) -> Result<()> {
        let name = self.shared.name.clone();
        self.send(Job::Call(Box::new(move |w| {
            let r = crate::panic::contain(|| format!("sink '{name}'"), || f(w)).and_then(|r| r);
            reply(r);
        })))
    }

    /// Queue `f` after every job sent before it; returns at once with the
    /// answer to await.
    pub(crate) fn submit<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Option<Writer>) -> Result<T> + Send + 'static,
    ) -> Result<Answer<T>> {
        let (tx, rx) = oneshot::channel();
        self.send_call(f, move |r| {
            let _ = tx.send(r);
        })?;
        Ok(Answer {
            name: self.shared.name.clone(),
            rx,
        })
    }

    /// Like [`Self::submit`], but a writer poisoned by an earlier failed
    /// write answers with that failure instead of running `f`.
    pub(crate) fn submit_unpoisoned<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Option<Writer>) -> Result<T> + Send + 'static,
    ) -> Result<Answer<T>> {
        let shared = Arc::clone(&self.shared);
        self.submit(move |w| match shared.failure.lock().clone() {
            Some(failure) => Err(EngineError::unshare(failure)),
            None => f(w),
        })
    }
}

/// The handle of one sink's writer thread.
pub struct SinkWorker {
    queue: JobQueue,
    budget: Arc<ByteBudget>,
    thread: Option<JoinHandle<()>>,
}

impl SinkWorker {
    /// Start the writer thread of sink `name` over `writer`.
    pub(crate) fn spawn(
        name: &str,
        writer: Writer,
        queue_bytes: u64,
        relief: Option<Arc<Relief>>,
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
            queue: JobQueue {
                jobs: Arc::new(Mutex::new(Some(tx))),
                shared,
            },
            budget: ByteBudget::with_relief(queue_bytes, relief),
            thread: Some(thread),
        })
    }

    /// A handle that queues jobs on this writer (closed by [`Self::stop`]).
    pub(crate) fn queue(&self) -> &JobQueue {
        &self.queue
    }

    /// Queue a cycle's batches; returns at once.
    pub fn write(&self, batches: Vec<RecordBatch>, rows: u64) -> Result<()> {
        let bytes: usize = batches.iter().map(|b| b.get_array_memory_size()).sum();
        let ticket = self.budget.charge(bytes as u64);
        self.queue.send(Job::Write {
            batches,
            rows,
            _ticket: ticket,
        })
    }

    /// Run `f` on the writer after every job sent before it; wait for its result.
    pub(crate) fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Option<Writer>) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (reply, answer) = std_mpsc::sync_channel(1);
        self.queue.send_call(f, move |r| {
            let _ = reply.send(r);
        })?;
        answer.recv().map_err(|_| gone(&self.queue.shared.name))?
    }

    /// Wait until every queued write ran.
    pub fn flush(&self) -> Result<()> {
        self.call(|_| Ok(()))
    }

    /// The failure of an earlier write, once: None if there is none or it
    /// was taken before.
    pub fn take_failure(&self) -> Option<EngineError> {
        let failure = self.queue.shared.failure.lock().clone()?;
        let taken = self
            .queue
            .shared
            .reported
            .swap(true, std::sync::atomic::Ordering::AcqRel);
        (!taken).then(|| EngineError::unshare(failure))
    }

    /// The failure of an earlier write, every time (it poisons the writer).
    pub fn failure(&self) -> Option<Arc<EngineError>> {
        self.queue.shared.failure.lock().clone()
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
    /// Every clone of [`Self::queue`] is closed too.
    pub fn stop(&mut self) {
        drop(self.queue.jobs.lock().take());
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                tracing::error!(sink = %self.queue.shared.name, "sink writer thread panicked");
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
                        r.notify();
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
