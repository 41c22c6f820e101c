//! The interface a source thread drives, whatever the connector.

use arrow::record_batch::RecordBatch;

use crate::error::{ConnectorError, Result};
use crate::source::{FileSourceConfig, FileSourceReader, SourcePosition};

/// A producer of record batches of a declared schema.
///
/// The engine runs each reader on its own thread and calls [`next_batch`]
/// until it returns `None` (a bounded input ended) or an error. Replayable
/// readers report an [`offset`] after every batch; a checkpoint stores it and
/// recovery reopens the connector there, so the rows after it are read again
/// exactly once.
///
/// [`next_batch`]: BatchReader::next_batch
/// [`offset`]: BatchReader::offset
pub trait BatchReader: Send {
    /// The next batch, or `None` at the end of a bounded input.
    fn next_batch(&mut self) -> Result<Option<RecordBatch>>;

    /// Malformed rows skipped so far (`on_error = 'skip'`).
    fn skipped_rows(&self) -> u64 {
        0
    }

    /// Where to resume after the last returned batch, as a JSON document;
    /// `None` if the reader cannot replay.
    fn offset(&self) -> Option<String>;
}

impl BatchReader for FileSourceReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        FileSourceReader::next_batch(self)
    }

    fn skipped_rows(&self) -> u64 {
        FileSourceReader::skipped_rows(self)
    }

    fn offset(&self) -> Option<String> {
        serde_json::to_string(&self.position()).ok()
    }
}

impl FileSourceReader {
    /// Reopen at an offset produced by [`BatchReader::offset`].
    pub fn open_at_offset(config: FileSourceConfig, offset: &str) -> Result<Self> {
        FileSourceReader::open_at(config, &SourcePosition::from_offset(offset)?)
    }

    /// Check that the final offset of a source that had finished was read
    /// under `config`'s share: a finished source is not reopened, so
    /// without this a node whose share grew would never read the files it
    /// gained.
    pub fn check_finished_offset(config: &FileSourceConfig, offset: &str) -> Result<()> {
        let pos = SourcePosition::from_offset(offset)?;
        FileSourceReader::check_share(config, &pos)
    }
}

impl SourcePosition {
    /// The position an offset of [`BatchReader::offset`] names.
    pub fn from_offset(offset: &str) -> Result<Self> {
        serde_json::from_str(offset).map_err(|e| ConnectorError::InvalidOption {
            option: "offset".into(),
            message: format!(
                "checkpointed file offset '{}' is unreadable: {e}",
                crate::quote::bounded(offset)
            ),
        })
    }
}
