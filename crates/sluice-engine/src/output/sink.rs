//! Sinks at run time: an optional filter, then a connector writer.
//!
//! A sink writes in one of three modes. Without checkpoints its file is
//! published atomically at shutdown. With exactly-once delivery it is
//! transactional: rows go to epochs that become visible when the checkpoint
//! that seals them commits (the file itself appears with the first
//! committed rows). With at-least-once delivery rows are appended as they
//! come, so after a failure the file holds what was delivered so far.
//!
//! The filter runs on the compute thread; encoding and writing run on the
//! sink's writer thread ([`super::sink_writer`]), in order, behind a queue
//! bounded by `sink_queue_bytes`. Seal, commit, close and abort run after
//! every write queued before them, so epochs mean what they meant when
//! writes ran on the compute thread. A checkpoint seals without waiting
//! (the tail awaits the answer) and its tail commits ([`SinkCommitter`]),
//! so the compute thread never waits for a sink at a checkpoint.

use std::sync::Arc;

use sluice_connectors::{EpochFileSink, EpochRecord, FileSinkWriter};
use sluice_storage::SinkCheckpoint;

use super::epoch_ledger::{from_record, EpochLedger};
use super::sink_writer::{Answer, JobQueue, SinkWorker, Writer};

use crate::budget::Relief;
use crate::catalog::{SinkConnector, SinkDef};
use crate::error::{EngineError, Result};
use crate::operators::{CycleInputs, Operator};

/// How a sink makes its output visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkMode {
    /// One file, published at clean shutdown.
    Atomic,
    /// Two-phase epochs committed with checkpoints (exactly-once).
    Transactional,
    /// Appended as produced (at-least-once).
    Direct,
}

/// One sink.
pub struct SinkRuntime {
    def: SinkDef,
    from: Arc<str>,
    filter: Option<Operator>,
    /// The writer thread, once open.
    worker: Option<SinkWorker>,
    /// Whether the output has epochs (transactional or direct mode).
    epochs: bool,
    /// Bytes queued for the writer before source intake pauses (at 80%).
    queue_bytes: u64,
    /// Woken when the writer drains (shared with the coordinator).
    relief: Option<Arc<Relief>>,
}

/// A sink's epoch, sealed at a checkpoint's capture: the answer the
/// checkpoint tail awaits before its manifest.
pub struct SealedEpoch {
    /// The sink's name (the manifest's key).
    pub sink: String,
    answer: Answer<SinkCheckpoint>,
}

impl SealedEpoch {
    /// What the manifest records for the sink, once the writer sealed it
    /// (after every row queued before the barrier). A write of this epoch
    /// that failed fails the seal: nothing of it is ever sealed.
    pub async fn recorded(self) -> Result<SinkCheckpoint> {
        self.answer.wait().await
    }
}

/// Commits a sink's sealed epochs from a checkpoint tail, once the
/// checkpoint that recorded them is durable.
#[derive(Clone)]
pub struct SinkCommitter {
    name: String,
    queue: JobQueue,
}

impl SinkCommitter {
    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Make the sealed epochs visible; waits (without blocking a thread)
    /// for the writer to run every job queued before. An error names the
    /// sink; the epochs stay pending (recovery re-commits them).
    pub async fn commit(&self) -> Result<()> {
        let name = self.name.clone();
        self.queue
            .submit(move |w| {
                crate::fault::hit(crate::fault::FaultSite::SinkCommit, &name, 0)
                    .map_err(|e| sink_err(&name, e))?;
                match w {
                    Some(Writer::Epoch(l)) => l.commit().map_err(|e| sink_err(&name, e)),
                    _ => Ok(()),
                }
            })?
            .wait()
            .await
    }
}

/// `e`, naming sink `name`; its code (a connector's I/O or format code)
/// is kept.
fn sink_err(name: &str, e: impl Into<EngineError>) -> EngineError {
    e.into().context(format!("sink '{name}'"))
}

impl SinkRuntime {
    /// A sink that has not opened its output yet.
    pub fn new(def: &SinkDef) -> Result<Self> {
        Ok(Self {
            filter: def.filter.as_ref().map(Operator::compile).transpose()?,
            from: Arc::from(def.from.as_str()),
            def: def.clone(),
            worker: None,
            epochs: false,
            queue_bytes: 64 << 20,
            relief: None,
        })
    }

    /// Bound the writer queue to `bytes` (pressure from 80% on); before `begin`.
    pub fn with_queue_bytes(mut self, bytes: u64) -> Self {
        self.queue_bytes = bytes;
        self
    }

    /// Wake `relief` whenever the writer drains or fails; before `begin`.
    pub fn set_relief(&mut self, relief: Arc<Relief>) {
        self.relief = Some(relief);
    }

    fn worker(&self) -> Result<&SinkWorker> {
        self.worker
            .as_ref()
            .ok_or_else(|| self.err(EngineError::Internal("the sink is not open".into())))
    }

    /// `e`, naming this sink; its code (a connector's I/O or format code)
    /// is kept.
    fn err(&self, e: impl Into<EngineError>) -> EngineError {
        sink_err(&self.def.name, e)
    }

    /// Open the output in `mode`, resuming from `recovered` when given.
    pub fn begin(&mut self, mode: SinkMode, recovered: Option<&SinkCheckpoint>) -> Result<()> {
        let SinkConnector::File { path, format, .. } = &self.def.connector;
        let schema = Arc::clone(&self.def.schema);
        let writer = match (mode, recovered) {
            (SinkMode::Atomic, _) => Writer::Atomic(
                FileSinkWriter::create(path, *format, schema).map_err(|e| self.err(e))?,
            ),
            (m, None) => Writer::Epoch(EpochLedger::new(
                EpochFileSink::create(path, *format, schema, m == SinkMode::Direct)
                    .map_err(|e| self.err(e))?,
            )),
            (m, Some(cp)) => {
                let sealed: Vec<EpochRecord> = cp.epochs.iter().map(from_record).collect();
                Writer::Epoch(EpochLedger::new(
                    EpochFileSink::recover(
                        path,
                        *format,
                        schema,
                        m == SinkMode::Direct,
                        cp.committed_len,
                        &sealed,
                        cp.next_epoch,
                    )
                    .map_err(|e| self.err(e))?,
                ))
            }
        };
        self.epochs = matches!(writer, Writer::Epoch(_));
        self.worker = Some(SinkWorker::spawn(
            &self.def.name,
            writer,
            self.queue_bytes,
            self.relief.clone(),
        )?);
        Ok(())
    }

    /// Whether the output is open.
    pub fn is_open(&self) -> bool {
        self.worker.is_some()
    }

    /// Whether the writer queue holds 80% of its byte budget.
    pub fn is_full(&self) -> bool {
        self.worker.as_ref().is_some_and(SinkWorker::is_full)
    }

    /// Bytes queued for the writer.
    pub fn queued_bytes(&self) -> u64 {
        self.worker.as_ref().map_or(0, SinkWorker::queued_bytes)
    }

    /// A write that failed on the writer thread, once (the coordinator
    /// takes it to stop the pipeline); its message names the sink.
    pub fn take_failure(&self) -> Option<EngineError> {
        self.worker.as_ref().and_then(SinkWorker::take_failure)
    }

    /// Wait until every queued write ran.
    pub fn flush(&self) -> Result<()> {
        if let Some(w) = &self.worker {
            w.flush()?;
        }
        self.check_failure()
    }

    /// The failure of an earlier write, as every later call's error.
    fn check_failure(&self) -> Result<()> {
        match self.worker.as_ref().and_then(SinkWorker::failure) {
            Some(failure) => Err(EngineError::unshare(failure)),
            None => Ok(()),
        }
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.def.name
    }

    /// The stream or source it reads.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// Write this cycle's rows of its input.
    pub fn write(&mut self, results: &CycleInputs, watermark: i64) -> Result<u64> {
        let batches = match &mut self.filter {
            Some(f) => f.run(results, watermark).map_err(|e| self.err(e))?,
            None => results.get(&self.from).cloned().unwrap_or_default(),
        };
        if batches.is_empty() {
            return Ok(0);
        }
        let total: usize = batches.iter().map(|b| b.num_rows()).sum();
        self.check_failure()?;
        self.worker()?.write(batches, total as u64)?;
        Ok(total as u64)
    }

    /// Seal the open epoch for a checkpoint's capture, without waiting:
    /// the writer seals it after every row queued before, and the tail
    /// awaits what the manifest records. None for a sink without epochs.
    pub fn seal(&mut self) -> Result<Option<SealedEpoch>> {
        if !self.epochs {
            return Ok(None);
        }
        let name = self.def.name.clone();
        let answer = self.worker()?.queue().submit_unpoisoned(move |w| match w {
            Some(Writer::Epoch(l)) => l.seal().map_err(|e| sink_err(&name, e)),
            _ => Err(sink_err(
                &name,
                EngineError::Internal("the sink has no epochs to seal".into()),
            )),
        })?;
        Ok(Some(SealedEpoch {
            sink: self.def.name.clone(),
            answer,
        }))
    }

    /// What a checkpoint tail commits this sink's sealed epochs with;
    /// None for a sink without epochs (or not open).
    pub fn committer(&self) -> Option<SinkCommitter> {
        let worker = self.worker.as_ref().filter(|_| self.epochs)?;
        Some(SinkCommitter {
            name: self.def.name.clone(),
            queue: worker.queue().clone(),
        })
    }

    /// Whether sealed epochs await commit, or the open epoch holds rows.
    pub fn has_unsettled_epochs(&self) -> bool {
        if !self.epochs || self.worker.is_none() {
            return false;
        }
        let unsettled = self
            .worker()
            .and_then(|w| w.call(|w| Ok(matches!(w, Some(Writer::Epoch(l)) if l.is_unsettled()))));
        // A writer that cannot answer cannot be settled either.
        unsettled.unwrap_or(true)
    }

    /// Clean shutdown: publish an atomic file. Epoch sinks are settled by
    /// the shutdown checkpoint, so closing them only releases the file.
    /// A failed earlier write fails the close (an atomic file is then not
    /// published).
    pub fn close(&mut self) -> Result<u64> {
        let Some(mut worker) = self.worker.take() else {
            return Ok(0);
        };
        let name = self.def.name.clone();
        worker.flush()?;
        let failure = worker.failure();
        let poisoned = failure.is_some();
        let closed = worker.call(move |w| {
            let err = |e: sluice_connectors::ConnectorError| sink_err(&name, e);
            match w.take() {
                // Never publish an atomic file with a failed write in it.
                Some(Writer::Atomic(w)) if poisoned => w.abort().map(|()| 0).map_err(err),
                Some(Writer::Atomic(w)) => w.finish().map_err(err),
                Some(Writer::Epoch(w)) => w.close().map_err(err),
                None => Ok(0),
            }
        });
        worker.stop();
        match failure {
            Some(failure) => Err(EngineError::unshare(failure)),
            None => closed,
        }
    }

    /// The checkpoint that sealed the pending epochs will never become
    /// durable (its tail was cancelled before its manifest): remove their
    /// staged files, which no checkpoint refers to. Runs on the writer
    /// thread after every queued job (the seal included). Called before
    /// [`Self::abort`]; an epoch whose manifest may be durable is never
    /// discarded (recovery re-commits it).
    pub fn discard_sealed(&mut self) -> Result<()> {
        if !self.epochs || self.worker.is_none() {
            return Ok(());
        }
        let name = self.def.name.clone();
        self.worker()?.call(move |w| match w {
            Some(Writer::Epoch(l)) => l
                .discard()
                .map_err(|e| sink_err(&name, e).context("removing a staged epoch")),
            _ => Ok(()),
        })
    }

    /// The pipeline failed: nothing unpublished becomes visible. Runs after
    /// every queued write, so it rolls back exactly what was written.
    pub fn abort(&mut self) -> Result<()> {
        let Some(mut worker) = self.worker.take() else {
            return Ok(());
        };
        let name = self.def.name.clone();
        let aborted = worker.call(move |w| {
            let err = |e: sluice_connectors::ConnectorError| sink_err(&name, e);
            match w.take() {
                Some(Writer::Atomic(w)) => w.abort().map_err(err),
                Some(Writer::Epoch(mut w)) => w.rollback_open_epoch().map_err(err),
                None => Ok(()),
            }
        });
        worker.stop();
        aborted
    }
}
