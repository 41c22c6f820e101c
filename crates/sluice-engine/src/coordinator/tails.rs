//! Checkpoint tails: the durable half of a checkpoint, off the compute thread.
//!
//! # Architecture
//!
//! ```text
//!  compute thread (coordinator)     tail worker (own runtime)    sink writers
//!  ───────────────────────────      ─────────────────────────    ────────────
//!  barriers aligned
//!  capture: what changed since the
//!    last capture, as shared Arrow
//!    batches or deferred parts
//!    (state::layers); sink seals
//!    queued ─────────────────────────────────────────────────▶ seal after the
//!    (not awaited); manifest                                  queued writes
//!    drafted ─────────── spawn ──▶ build deferred parts,           │
//!  cycles keep running             encode parts (Arrow IPC)         │
//!    ⋮                             write blobs (fsync each)         │
//!    ⋮                             await the seals ◀── records ─────┘
//!    ⋮                             gate: cancelled? → stop here
//!    ⋮                             commit the manifest (durable)
//!    ⋮                             commit sink epochs ───────▶ publish sealed
//!    ⋮                                  ◀──────────── done ── epochs
//!    ⋮                             prune old checkpoints
//!  next_checkpoint_tail() ◀── durable ─┘
//!  subscription cut published;
//!  a failed sink commit faults
//! ```
//!
//! One tail is in flight at a time ([`MAX_IN_FLIGHT`]): a sink's `commit`
//! publishes every epoch it has sealed, so a second sealed epoch may only
//! exist once the first one's checkpoint is durable and committed. While
//! the slot is taken a periodic checkpoint is skipped (the next tick takes
//! it); a manual or shutdown checkpoint waits for the slot. The slot is
//! freed when the whole task (pruning included) has ended, so the store
//! only ever sees one writer: reservation, blob writes, the manifest and
//! pruning never overlap.
//!
//! The compute thread never waits for a sink at a checkpoint: a seal is a
//! job on the sink's writer that the tail awaits before the manifest (so
//! a slow sink delays the checkpoint, not the pipeline), and the epoch
//! commits run on the writers too, queued by the tail once the manifest
//! is durable. A checkpoint is reported done only after its sinks answered
//! their commits, so a manual `CHECKPOINT` still returns with the output
//! visible.
//!
//! Cancellation ([`CheckpointTails::cancel`]) is a fence at the manifest
//! ([`ManifestFence`], model-checked with loom in `sluice-sync`):
//! a tail that has not begun its manifest write never commits, and none
//! of its sink epochs are committed (the coordinator discards their staged
//! files). Only a fault (recovery takes over) or a discarding shutdown
//! cancels. A tail already past the fence, like any tail in flight at a
//! halt, is not cancelled: it finishes and is completed as usual (its sink
//! epochs commit) before the sinks are aborted, since its checkpoint was
//! captured before the failure (see the coordinator's
//! `finish_tails_before_stop`); no staged epoch is left for a later
//! recovery to find.

use std::sync::Arc;
use std::time::Instant;

use sluice_storage::{CheckpointStore, Manifest, StorageError};
use sluice_sync::ManifestFence;
use thiserror::Error;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::error::EngineError;
use crate::output::sink::{SealedEpoch, SinkCommitter};
use crate::state::pace::{self, Pacer};
use crate::state::StatePart;

/// Tails in flight at most; see the module docs for why it is one.
pub const MAX_IN_FLIGHT: usize = 1;

/// Why a checkpoint tail failed; the checkpoint did not become durable
/// (the previous one stays the newest).
#[derive(Debug, Error)]
pub enum TailError {
    /// A part of the captured state could not be encoded.
    #[error("encoding state '{name}': {source}")]
    Encode {
        /// The blob's logical name.
        name: String,
        /// Why.
        source: EngineError,
    },
    /// A state blob could not be written.
    #[error("writing state '{name}': {source}")]
    WriteBlob {
        /// The blob's logical name.
        name: String,
        /// The store's error.
        source: StorageError,
    },
    /// A sink could not seal its epoch (a write of it failed, or the
    /// seal's fsync did).
    #[error("sealing the epoch of sink '{sink}': {source}")]
    Seal {
        /// The sink.
        sink: String,
        /// Why (its message names the sink).
        source: EngineError,
    },
    /// The manifest could not be written.
    #[error("writing the manifest: {source}")]
    Manifest {
        /// The store's error.
        source: StorageError,
    },
    /// The tail's task panicked or its worker went away.
    #[error("the checkpoint tail stopped: {0}")]
    Stopped(String),
    /// The tail worker could not be started.
    #[error("cannot start the checkpoint worker: {0}")]
    Worker(#[source] std::io::Error),
    /// The manifest was not durable by the attempt's deadline
    /// (`checkpoint_timeout` after it started): a blob write or a sink's
    /// seal took too long. Nothing was committed.
    #[error("the checkpoint did not reach its manifest within checkpoint_timeout ({limit:?}): a state write or a sink's seal took longer")]
    TimedOut {
        /// The attempt's time limit.
        limit: std::time::Duration,
    },
    /// A tail was spawned while another was in flight (a bug).
    #[error("a checkpoint tail is already in flight")]
    Busy,
}

impl TailError {
    /// The stable code: the store's own for storage failures.
    pub fn code(&self) -> &'static str {
        match self {
            TailError::Encode { source, .. } | TailError::Seal { source, .. } => source.code(),
            TailError::WriteBlob { source, .. } | TailError::Manifest { source } => source.code(),
            TailError::Stopped(_)
            | TailError::Worker(_)
            | TailError::Busy
            | TailError::TimedOut { .. } => "SLC-ENG-009",
        }
    }

    /// The typed error that crosses the seam: the cause keeps its own code
    /// (a store's, an encoder's), with what the tail was doing as context;
    /// the tail's own failures are checkpoint failures (`SLC-ENG-009`).
    pub fn into_error(self) -> EngineError {
        match self {
            TailError::Encode { name, source } => {
                source.context(format!("encoding state '{name}'"))
            }
            TailError::Seal { source, .. } => source.context("sealing sink epochs"),
            TailError::WriteBlob { name, source } => {
                EngineError::from(source).context(format!("writing state '{name}'"))
            }
            TailError::Manifest { source } => {
                EngineError::from(source).context("writing the manifest")
            }
            e @ (TailError::Stopped(_)
            | TailError::Worker(_)
            | TailError::Busy
            | TailError::TimedOut { .. }) => EngineError::CheckpointFailed {
                source: Box::new(e),
            },
        }
    }
}

impl From<TailError> for EngineError {
    fn from(e: TailError) -> Self {
        e.into_error()
    }
}

/// How a tail ended, as far as durability goes.
#[derive(Debug)]
pub enum TailResult {
    /// The manifest is durable; `state_bytes` were written.
    Durable {
        /// Bytes of state in the checkpoint.
        state_bytes: u64,
        /// The manifest's creation time (ms since the epoch).
        created_ms: i64,
        /// The first sink that could not commit its sealed epochs (the
        /// later ones were not asked): the checkpoint stays committed, and
        /// the pipeline faults so that recovery re-commits them.
        sink_commit_failed: Option<EngineError>,
    },
    /// Nothing was committed.
    Failed(TailError),
    /// Cancelled before its manifest write: nothing was committed.
    Cancelled,
}

/// A tail whose durability is known, taken by the coordinator.
#[derive(Debug)]
pub struct FinishedTail {
    /// When its attempt started.
    pub started: Instant,
    /// What happened.
    pub result: TailResult,
    /// Cancelled by recovery (even if its manifest became durable): its
    /// sink epochs must not be committed by this pipeline generation.
    pub cancelled: bool,
}

/// What a tail writes: the state captured on the compute thread.
pub struct TailJob {
    /// The checkpoint id (reserved).
    pub id: u64,
    /// When the attempt started.
    pub started: Instant,
    /// The manifest must be durable by then, or the attempt fails.
    pub deadline: Instant,
    /// Where it goes.
    pub store: CheckpointStore,
    /// The manifest without its blob list (filled in by the tail).
    pub manifest: Manifest,
    /// Captured state, by blob name.
    pub parts: Vec<(String, StatePart)>,
    /// The sinks' epochs sealed at capture, awaited before the manifest.
    pub seals: Vec<SealedEpoch>,
    /// The sinks whose sealed epochs commit once the manifest is durable.
    pub committers: Vec<SinkCommitter>,
    /// Committed checkpoints to keep when pruning afterwards.
    pub retain: usize,
    /// How the tail paces its work while the pipeline is busy.
    pub pacer: Pacer,
    /// The attempt is the cluster leader's, followed here: a tail that
    /// ends before its manifest is acknowledged declines it, so the
    /// leader hears now rather than at its deadline.
    pub followed: bool,
}

/// What a tail reports once the manifest is durable.
struct Written {
    state_bytes: u64,
    created_ms: i64,
    sink_commit_failed: Option<EngineError>,
}

/// `Some` once the manifest is durable; `None` when cancelled before it.
type Durability = Result<Option<Written>, TailError>;

struct InFlight {
    id: u64,
    started: Instant,
    gate: Arc<ManifestFence>,
    cancelled: bool,
    /// Resolves once durability is known (before pruning).
    durable: Option<oneshot::Receiver<Durability>>,
    /// Durability received, not yet taken.
    result: Option<TailResult>,
    /// The whole task, pruning included.
    task: JoinHandle<()>,
}

/// The checkpoint tails of one pipeline and the worker they run on.
#[derive(Default)]
pub struct CheckpointTails {
    runtime: Option<tokio::runtime::Runtime>,
    in_flight: Option<InFlight>,
}

impl Drop for CheckpointTails {
    fn drop(&mut self) {
        // Dropped on the coordinator's runtime: a blocking shutdown would
        // panic there. Tails were settled or cancelled before teardown.
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// How much lower than the pipeline's the checkpoint worker's CPU
/// priority is (a nice increment). A tail builds and encodes the whole
/// state, seconds of CPU at a gigabyte; at normal priority it competes with
/// the compute thread for the same cores and the pipeline slows by up to
/// what the tail takes. Lower, it runs on what the pipeline leaves, so a
/// busy pipeline keeps its throughput and checkpoints come less often.
/// (At +10 the Linux scheduler gives a contending nice-0 thread about nine
/// times its share; the tail still makes progress.)
pub const TAIL_NICE: i32 = 10;

/// Lower the calling thread's CPU priority by [`TAIL_NICE`] (Linux: nice
/// is per thread). Best effort: on failure the tail runs at normal
/// priority, which is only slower for the pipeline.
fn yield_cpu_to_the_pipeline() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id; no
        // memory is shared with the kernel.
        let lowered = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            let current = libc::getpriority(libc::PRIO_PROCESS, tid);
            libc::setpriority(libc::PRIO_PROCESS, tid, current.saturating_add(TAIL_NICE))
        };
        if lowered != 0 {
            tracing::debug!("could not lower the checkpoint worker's priority");
        }
    }
}

impl CheckpointTails {
    fn runtime(&mut self) -> Result<&tokio::runtime::Runtime, TailError> {
        if self.runtime.is_none() {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("sluice-checkpoint")
                .on_thread_start(yield_cpu_to_the_pipeline)
                .enable_all()
                .build()
                .map_err(TailError::Worker)?;
            self.runtime = Some(rt);
        }
        self.runtime
            .as_ref()
            .ok_or_else(|| TailError::Stopped("no worker".into()))
    }

    /// Tails holding the slot (durability pending, or still pruning).
    pub fn in_flight(&mut self) -> usize {
        let done = self
            .in_flight
            .as_ref()
            .is_some_and(|t| t.durable.is_none() && t.result.is_none() && t.task.is_finished());
        if done {
            self.in_flight = None;
        }
        usize::from(self.in_flight.is_some())
    }

    /// Start the durable half of checkpoint `job.id`.
    pub fn spawn(&mut self, job: TailJob) -> Result<(), TailError> {
        if self.in_flight() >= MAX_IN_FLIGHT {
            return Err(TailError::Busy);
        }
        let gate = Arc::new(ManifestFence::new());
        let (tx, rx) = oneshot::channel();
        let (id, started) = (job.id, job.started);
        let task = self.runtime()?.spawn(run(job, Arc::clone(&gate), tx));
        self.in_flight = Some(InFlight {
            id,
            started,
            gate,
            cancelled: false,
            durable: Some(rx),
            result: None,
            task,
        });
        Ok(())
    }

    /// The id of the tail whose durability just became known; None at once
    /// when no tail awaits that. Cancel safe.
    pub async fn next_durable(&mut self) -> Option<u64> {
        let t = self.in_flight.as_mut()?;
        if t.result.is_some() {
            return Some(t.id);
        }
        let rx = t.durable.as_mut()?;
        let received = rx.await;
        t.durable = None;
        let result = match received {
            Ok(Ok(Some(w))) => TailResult::Durable {
                state_bytes: w.state_bytes,
                created_ms: w.created_ms,
                sink_commit_failed: w.sink_commit_failed,
            },
            Ok(Ok(None)) => TailResult::Cancelled,
            Ok(Err(e)) => TailResult::Failed(e),
            // The task ended without a word: it panicked.
            Err(_) => TailResult::Failed(TailError::Stopped(match (&mut t.task).await {
                Err(e) if e.is_panic() => crate::panic::panic_message(&*e.into_panic()),
                Err(e) => e.to_string(),
                Ok(()) => "ended without reporting".into(),
            })),
        };
        t.result = Some(result);
        Some(t.id)
    }

    /// Take the outcome of tail `id` once [`Self::next_durable`] reported it.
    pub fn take(&mut self, id: u64) -> Option<FinishedTail> {
        let t = self.in_flight.as_mut().filter(|t| t.id == id)?;
        let result = t.result.take()?;
        Some(FinishedTail {
            started: t.started,
            result,
            cancelled: t.cancelled,
        })
    }

    /// Wait until the slot is free (the task, pruning included, ended).
    pub async fn idle(&mut self) {
        if let Some(t) = self.in_flight.as_mut() {
            if t.durable.is_none() && t.result.is_none() {
                // A finished handle is never polled again.
                if !t.task.is_finished() {
                    let _ = (&mut t.task).await;
                }
                self.in_flight = None;
            }
        }
    }

    /// Recovery takes over: a tail that has not begun its manifest write
    /// never commits. Returns whether such a tail was stopped by this call.
    pub fn cancel(&mut self) -> bool {
        match self.in_flight.as_mut() {
            Some(t) => {
                // Past the fence the tail is not cancelled: it finishes,
                // and the coordinator completes it.
                let stopped = t.gate.cancel();
                t.cancelled |= stopped;
                stopped
            }
            None => false,
        }
    }
}

/// The tail itself: build and encode, write, await the sinks' seals,
/// commit the manifest, then the sinks' epochs, prune, report durability.
async fn run(job: TailJob, gate: Arc<ManifestFence>, durable: oneshot::Sender<Durability>) {
    let TailJob {
        id,
        started: attempt_started,
        deadline,
        store,
        mut manifest,
        parts,
        seals,
        committers,
        retain,
        mut pacer,
        followed,
        ..
    } = job;
    pacer.begin();
    let written = async {
        // Everything before the manifest, bounded by the attempt's deadline.
        let prepared = async {
            for (name, part) in parts {
                if gate.is_cancelled() {
                    return Ok(false);
                }
                let started = Instant::now();
                let (bytes, rested) = pace::paced(&mut pacer, || part.encode());
                let bytes = bytes.map_err(|source| TailError::Encode {
                    name: name.clone(),
                    source,
                })?;
                let encoded = started.elapsed();
                let size = bytes.len();
                let blob = store
                    .write_blob_paced(id, &name, bytes, &mut || pacer.point())
                    .await
                    .map_err(|source| TailError::WriteBlob {
                        name: name.clone(),
                        source,
                    })?;
                tracing::debug!(
                    checkpoint = id,
                    part = %name,
                    bytes = size,
                    encode_ms = encoded.as_millis() as u64,
                    rested_ms = rested.as_millis() as u64,
                    write_ms = (started.elapsed() - encoded).as_millis() as u64,
                    "checkpoint part written"
                );
                manifest.blobs.push(blob);
            }
            // Awaited last: a slow sink's queue drains while the state is written.
            for seal in seals {
                let sink = seal.sink.clone();
                match seal.recorded().await {
                    Ok(recorded) => manifest.sinks.insert(sink, recorded),
                    Err(source) => return Err(TailError::Seal { sink, source }),
                };
            }
            Ok(true)
        };
        match tokio::time::timeout_at(deadline.into(), prepared).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => return Ok(None),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                let limit = deadline.saturating_duration_since(attempt_started);
                return Err(TailError::TimedOut { limit });
            }
        }
        if !gate.begin_manifest() {
            return Ok(None);
        }
        store
            .commit(&manifest)
            .await
            .map_err(|source| TailError::Manifest { source })?;
        // Durable: the sinks' sealed epochs must become visible. A sink
        // that cannot commit stops the round (recovery re-commits them all).
        let mut sink_commit_failed = None;
        for c in &committers {
            if let Err(e) = c.commit().await {
                sink_commit_failed = Some(e.context("committing"));
                break;
            }
        }
        Ok(Some(Written {
            state_bytes: manifest.state_bytes(),
            created_ms: manifest.created_ms,
            sink_commit_failed,
        }))
    }
    .await;
    // Pruned before durability is reported, so that when a checkpoint is
    // reported done the store already keeps only `retain` of them (SHOW
    // CHECKPOINTS right after CHECKPOINT lists exactly those). A failed
    // prune only leaves extra checkpoints behind.
    if matches!(written, Ok(Some(_))) {
        if let Err(e) = store.prune(retain).await {
            tracing::warn!(checkpoint = id, error = %e, "pruning old checkpoints failed");
        }
    }
    pacer.end();
    if followed {
        decline_unanswered(&store, id, &written).await;
    }
    // The coordinator may be gone (shut down without settling): nothing
    // to tell then.
    let _ = durable.send(written);
}

/// A followed attempt's tail that did not reach a durable manifest
/// declines it. One that failed at its acknowledgement (refused, or the
/// leader aborted it) has answered already: the decline is refused, and
/// only logged.
async fn decline_unanswered(
    store: &CheckpointStore,
    id: u64,
    written: &Result<Option<Written>, TailError>,
) {
    let reason = match written {
        Ok(Some(_)) => return,
        Ok(None) => "the checkpoint was cancelled: recovery took over".to_string(),
        Err(e) => e.to_string(),
    };
    if let Some(authority) = store.authority() {
        if let Err(e) = authority.decline(id, &reason).await {
            tracing::debug!(checkpoint = id, error = %e, "declining a followed checkpoint after its tail failed");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn own_nice() -> i32 {
        // SAFETY: system calls on the calling thread's own id.
        unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::getpriority(libc::PRIO_PROCESS, tid)
        }
    }

    /// Tails run below the pipeline's priority, so a busy pipeline keeps
    /// its cores.
    #[test]
    fn the_checkpoint_worker_runs_at_a_lower_priority() {
        let base = own_nice();
        let mut tails = CheckpointTails::default();
        let worker = tails
            .runtime()
            .unwrap()
            .block_on(async { tokio::spawn(async { own_nice() }).await.unwrap() });
        assert_eq!(worker, (base + TAIL_NICE).min(19));
        assert_eq!(own_nice(), base, "the caller's priority is untouched");
    }
}
