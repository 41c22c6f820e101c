//! Sinks at run time: an optional filter, then a connector writer.
//!
//! A sink writes in one of three modes. Without checkpoints its file is
//! published atomically at shutdown. With exactly-once delivery it is
//! transactional: rows go to epochs that become visible when the checkpoint
//! that seals them commits (the file itself appears with the first
//! committed rows). With at-least-once delivery rows are appended as they
//! come, so after a failure the file holds what was delivered so far.

use std::path::PathBuf;
use std::sync::Arc;

use sluice_connectors::{EpochFileSink, EpochRecord, FileSinkWriter};
use sluice_storage::{SinkCheckpoint, SinkEpochRecord};

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

enum Writer {
    Atomic(FileSinkWriter),
    Epoch(EpochFileSink),
}

/// One sink.
pub struct SinkRuntime {
    def: SinkDef,
    from: Arc<str>,
    filter: Option<Operator>,
    writer: Option<Writer>,
    /// Sealed epochs not yet committed.
    pending: Vec<EpochRecord>,
    /// Final length before the first pending epoch.
    committed_len: u64,
}

/// `e`, naming sink `name`; its code (a connector's I/O or format code)
/// is kept.
fn sink_err(name: &str, e: impl Into<EngineError>) -> EngineError {
    e.into().context(format!("sink '{name}'"))
}

fn to_record(r: &EpochRecord) -> SinkEpochRecord {
    SinkEpochRecord {
        epoch: r.epoch,
        staged: r.staged.as_ref().map(|p| p.display().to_string()),
        staged_len: r.staged_len,
        final_len_before: r.final_len_before,
    }
}

fn from_record(r: &SinkEpochRecord) -> EpochRecord {
    EpochRecord {
        epoch: r.epoch,
        staged: r.staged.as_ref().map(PathBuf::from),
        staged_len: r.staged_len,
        final_len_before: r.final_len_before,
    }
}

impl SinkRuntime {
    /// A sink that has not opened its output yet.
    pub fn new(def: &SinkDef) -> Result<Self> {
        Ok(Self {
            filter: def.filter.as_ref().map(Operator::compile).transpose()?,
            from: Arc::from(def.from.as_str()),
            def: def.clone(),
            writer: None,
            pending: Vec::new(),
            committed_len: 0,
        })
    }

    /// `e`, naming this sink; its code (a connector's I/O or format code)
    /// is kept.
    fn err(&self, e: impl Into<EngineError>) -> EngineError {
        sink_err(&self.def.name, e)
    }

    /// Open the output in `mode`, resuming from `recovered` when given.
    pub fn begin(&mut self, mode: SinkMode, recovered: Option<&SinkCheckpoint>) -> Result<()> {
        let SinkConnector::File { path, format } = &self.def.connector;
        let schema = Arc::clone(&self.def.schema);
        let writer = match (mode, recovered) {
            (SinkMode::Atomic, _) => Writer::Atomic(
                FileSinkWriter::create(path, *format, schema).map_err(|e| self.err(e))?,
            ),
            (m, None) => Writer::Epoch(
                EpochFileSink::create(path, *format, schema, m == SinkMode::Direct)
                    .map_err(|e| self.err(e))?,
            ),
            (m, Some(cp)) => {
                let sealed: Vec<EpochRecord> = cp.epochs.iter().map(from_record).collect();
                Writer::Epoch(
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
                )
            }
        };
        if let Writer::Epoch(e) = &writer {
            self.committed_len = e.sealed_len();
        }
        self.writer = Some(writer);
        Ok(())
    }

    /// Whether the output is open.
    pub fn is_open(&self) -> bool {
        self.writer.is_some()
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
        crate::fault::hit(
            crate::fault::FaultSite::SinkWrite,
            &self.def.name,
            total as u64,
        )
        .map_err(|e| self.err(e))?;
        let mut rows = 0;
        for b in &batches {
            let r = match self.writer.as_mut() {
                Some(Writer::Atomic(w)) => w.write(b),
                Some(Writer::Epoch(w)) => w.write(b),
                None => return Err(self.err(EngineError::Internal("the sink is not open".into()))),
            };
            r.map_err(|e| self.err(e))?;
            rows += b.num_rows() as u64;
        }
        Ok(rows)
    }

    /// Seal the open epoch for a checkpoint; the returned record goes into
    /// the manifest. None for a sink without epochs.
    pub fn pre_commit(&mut self) -> Result<Option<SinkCheckpoint>> {
        let Some(Writer::Epoch(w)) = self.writer.as_mut() else {
            return Ok(None);
        };
        let record = w.pre_commit().map_err(|e| sink_err(&self.def.name, e))?;
        let next_epoch = w.epoch();
        self.pending.push(record);
        Ok(Some(SinkCheckpoint {
            committed_len: self.committed_len,
            next_epoch,
            epochs: self.pending.iter().map(to_record).collect(),
        }))
    }

    /// The checkpoint is durable: make its sealed epochs visible.
    pub fn commit(&mut self) -> Result<()> {
        crate::fault::hit(crate::fault::FaultSite::SinkCommit, &self.def.name, 0)
            .map_err(|e| sink_err(&self.def.name, e))?;
        let Some(Writer::Epoch(w)) = self.writer.as_mut() else {
            return Ok(());
        };
        w.commit(&self.pending)
            .map_err(|e| sink_err(&self.def.name, e))?;
        self.committed_len = w.sealed_len();
        self.pending.clear();
        Ok(())
    }

    /// Whether sealed epochs await commit, or the open epoch holds rows.
    pub fn has_unsettled_epochs(&self) -> bool {
        match &self.writer {
            Some(Writer::Epoch(w)) => !self.pending.is_empty() || w.has_open_rows(),
            _ => false,
        }
    }

    /// Clean shutdown: publish an atomic file. Epoch sinks are settled by
    /// the shutdown checkpoint, so closing them only releases the file.
    pub fn close(&mut self) -> Result<u64> {
        match self.writer.take() {
            Some(Writer::Atomic(w)) => w.finish().map_err(|e| self.err(e)),
            Some(Writer::Epoch(w)) => w.close().map_err(|e| self.err(e)),
            None => Ok(0),
        }
    }

    /// The pipeline failed: nothing unpublished becomes visible.
    pub fn abort(&mut self) -> Result<()> {
        match self.writer.take() {
            Some(Writer::Atomic(w)) => w.abort().map_err(|e| self.err(e)),
            Some(Writer::Epoch(mut w)) => w.rollback_open_epoch().map_err(|e| self.err(e)),
            None => Ok(()),
        }
    }
}
