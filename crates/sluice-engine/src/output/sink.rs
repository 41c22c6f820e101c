//! Sinks at run time: an optional filter, then a connector writer.

use std::path::PathBuf;
use std::sync::Arc;

use sluice_connectors::FileSinkWriter;

use crate::catalog::{SinkConnector, SinkDef};
use crate::error::{EngineError, Result};
use crate::operators::{CycleInputs, Operator};

/// One open sink.
pub struct SinkRuntime {
    name: String,
    from: Arc<str>,
    filter: Option<Operator>,
    writer: Option<FileSinkWriter>,
    path: PathBuf,
}

impl SinkRuntime {
    /// Open the sink's writer (a temp file until the sink is closed).
    pub fn open(def: &SinkDef) -> Result<Self> {
        let filter = def.filter.as_ref().map(Operator::compile).transpose()?;
        match &def.connector {
            SinkConnector::File { path, format } => {
                let writer = FileSinkWriter::create(path, *format, Arc::clone(&def.schema))
                    .map_err(|e| EngineError::Catalog(format!("sink '{}': {e}", def.name)))?;
                Ok(Self {
                    name: def.name.clone(),
                    from: Arc::from(def.from.as_str()),
                    filter,
                    writer: Some(writer),
                    path: path.clone(),
                })
            }
        }
    }

    /// The sink's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The stream or source it reads.
    pub fn from(&self) -> &str {
        &self.from
    }

    /// Write this cycle's rows of its input.
    pub fn write(&mut self, results: &CycleInputs, watermark: i64) -> Result<u64> {
        let batches = match &mut self.filter {
            Some(f) => f.run(results, watermark)?,
            None => results.get(&self.from).cloned().unwrap_or_default(),
        };
        let Some(writer) = self.writer.as_mut() else {
            return Err(EngineError::Internal(format!(
                "sink '{}' is closed",
                self.name
            )));
        };
        let mut rows = 0;
        for b in &batches {
            writer
                .write(b)
                .map_err(|e| EngineError::Catalog(format!("sink '{}': {e}", self.name)))?;
            rows += b.num_rows() as u64;
        }
        Ok(rows)
    }

    /// Make the output visible under its final path.
    pub fn close(&mut self) -> Result<u64> {
        match self.writer.take() {
            Some(w) => w.finish().map_err(|e| {
                EngineError::Catalog(format!(
                    "sink '{}' ({}): {e}",
                    self.name,
                    self.path.display()
                ))
            }),
            None => Ok(0),
        }
    }

    /// Discard the output (the pipeline failed): nothing appears under the final path.
    pub fn abort(&mut self) -> Result<()> {
        match self.writer.take() {
            Some(w) => w
                .abort()
                .map_err(|e| EngineError::Catalog(format!("sink '{}': {e}", self.name))),
            None => Ok(()),
        }
    }
}
