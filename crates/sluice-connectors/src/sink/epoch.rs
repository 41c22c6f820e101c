//! Transactional (two-phase) file sinks: rows are grouped into epochs and
//! become visible in the final file only when their epoch commits.
//!
//! Each epoch's rows are written to a hidden staged file beside the final
//! file. `pre_commit` seals the epoch (flush + fsync) and reports where the
//! final file stood before it; `commit` appends the staged bytes to the final
//! file and fsyncs it. Commit is idempotent: it first truncates the final
//! file to the epoch's recorded start, so re-committing after a crash in the
//! middle of an append gives the same bytes. Only appendable formats (CSV,
//! JSON lines) can be transactional.
//!
//! A transactional sink does not touch the final file until its first epoch
//! with rows commits: that epoch's staged file starts with the header, and
//! its commit (re)creates the final file from offset 0. So on any error
//! before then no file of this run appears under the final name (not even
//! a header-only one), and afterwards the final file holds exactly the
//! committed epochs. A clean close of a sink that never committed rows
//! publishes a header-only file, as an atomic sink does.
//!
//! The same type in `direct` mode appends rows to the final file at once
//! (at-least-once delivery: nothing is held back, a replay may repeat rows).
//!
//! A staged file's name carries its writer as well as its epoch
//! (`.out.csv.epoch-000000000007.<writer>`): two processes that write the
//! same sink file, such as a cluster leader that was paused past its lease
//! and the standby that took over from the same checkpoint, number their
//! epochs alike, and with the epoch alone the woken one would truncate and
//! write into the staged rows of the other. The checkpoint records each
//! staged file's whole path, so recovery finds it whoever wrote it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

use crate::error::{ConnectorError, Result};
use crate::format::FileFormat;

/// A sealed epoch: what a checkpoint records to commit it later.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRecord {
    /// Epoch number.
    pub epoch: u64,
    /// Staged file (None when the epoch had no rows).
    pub staged: Option<PathBuf>,
    /// Bytes staged.
    pub staged_len: u64,
    /// Final file length before this epoch.
    pub final_len_before: u64,
}

/// A file sink with epochs.
pub struct EpochFileSink {
    path: PathBuf,
    format: FileFormat,
    schema: SchemaRef,
    direct: bool,
    epoch: u64,
    staged: Option<(PathBuf, File, u64)>,
    /// Final length once every sealed epoch is committed.
    sealed_len: u64,
    rows: u64,
    /// This writer's part of its staged file names (see the module docs).
    writer: String,
}

/// A name part no other sink writer, in this process or another, uses:
/// the process id, the process start time and a per-process sequence.
fn writer_token() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static STARTED: OnceLock<u128> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let started = STARTED.get_or_init(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    });
    format!(
        "{:x}-{started:x}-{:x}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The epoch of a staged file name's tail (`000000000007` of an older
/// run's name, or `000000000007.<writer>`).
fn staged_epoch(tail: &str) -> Option<u64> {
    tail.split('.').next().and_then(|n| n.parse().ok())
}

fn io(path: &Path, e: std::io::Error) -> ConnectorError {
    ConnectorError::io(path, e)
}

fn sync_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(dir, e))?;
    }
    Ok(())
}

impl EpochFileSink {
    fn check_format(path: &Path, format: FileFormat) -> Result<()> {
        match format {
            FileFormat::Csv | FileFormat::JsonLines => Ok(()),
            FileFormat::Parquet => Err(ConnectorError::InvalidOption {
                option: "format".into(),
                message: format!(
                    "{}: a parquet file cannot be appended to, so it cannot commit epochs; use csv or json with checkpointed delivery",
                    path.display()
                ),
            }),
        }
    }

    /// Start a fresh output. Direct: the final file is (re)created with
    /// just its header. Transactional: the final file is left alone until
    /// the first epoch with rows commits.
    pub fn create(
        path: &Path,
        format: FileFormat,
        schema: SchemaRef,
        direct: bool,
    ) -> Result<Self> {
        Self::check_format(path, format)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let mut sink = Self::blank(path, format, schema, direct, 0);
        if direct {
            let header = sink.header()?;
            let mut f = File::create(path).map_err(|e| io(path, e))?;
            f.write_all(&header).map_err(|e| io(path, e))?;
            f.sync_all().map_err(|e| io(path, e))?;
            sync_parent(path)?;
            sink.sealed_len = header.len() as u64;
        }
        sink.discard_orphans()?;
        Ok(sink)
    }

    fn header(&self) -> Result<Vec<u8>> {
        encode(
            self.format,
            &self.schema,
            &RecordBatch::new_empty(self.schema.clone()),
            true,
        )
    }

    /// Resume after recovery: commit the checkpoint's sealed epochs again
    /// (idempotently), cut the final file back to what those commits leave,
    /// and discard every other staged file (none can be committed).
    pub fn recover(
        path: &Path,
        format: FileFormat,
        schema: SchemaRef,
        direct: bool,
        committed_len: u64,
        sealed: &[EpochRecord],
        next_epoch: u64,
    ) -> Result<Self> {
        Self::check_format(path, format)?;
        let mut sink = Self::blank(path, format, schema, direct, next_epoch);
        // A transactional sink that committed nothing yet has no file.
        let nothing_committed = !direct && committed_len == 0;
        if !path.exists() && !nothing_committed {
            return Err(io(
                path,
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "the sink file of the recovered checkpoint is missing",
                ),
            ));
        }
        sink.sealed_len = committed_len;
        if !direct {
            for r in sealed {
                sink.commit_one(r)?;
            }
            let end = sealed
                .last()
                .map_or(committed_len, |r| r.final_len_before + r.staged_len);
            // Nothing committed: the file (if any) is not this run's yet.
            if end > 0 {
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| io(path, e))?;
                f.set_len(end).map_err(|e| io(path, e))?;
                f.sync_all().map_err(|e| io(path, e))?;
            }
            sink.sealed_len = end;
        } else {
            // Direct: rows written after the checkpoint are replayed, and a
            // crash may have torn the last of them mid-row. Cut the file
            // back to its length at the checkpoint (fsynced there, a batch
            // boundary) so a rerun never appends after half a row. The
            // checkpoint's own epoch record holds that length.
            let at_checkpoint = sealed
                .last()
                .map_or(committed_len, |r| r.final_len_before + r.staged_len);
            let len = std::fs::metadata(path).map_err(|e| io(path, e))?.len();
            if len > at_checkpoint {
                let f = OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| io(path, e))?;
                f.set_len(at_checkpoint).map_err(|e| io(path, e))?;
                f.sync_all().map_err(|e| io(path, e))?;
            }
            sink.sealed_len = len.min(at_checkpoint);
        }
        // Every staged file left now is litter: the sealed epochs were just
        // committed (which removes theirs), and any other was never
        // committed and never will be: of a later epoch than the
        // checkpoint's, or of any epoch by a writer that lost the pipeline
        // (a deposed leader that woke, staged an epoch and died).
        sink.discard_orphans()?;
        Ok(sink)
    }

    fn blank(path: &Path, format: FileFormat, schema: SchemaRef, direct: bool, epoch: u64) -> Self {
        Self {
            path: path.to_path_buf(),
            format,
            schema,
            direct,
            epoch,
            staged: None,
            sealed_len: 0,
            rows: 0,
            writer: writer_token(),
        }
    }

    fn staged_path(&self, epoch: u64) -> PathBuf {
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        self.path
            .with_file_name(format!(".{name}.epoch-{epoch:012}.{}", self.writer))
    }

    /// Remove every staged file of this sink (called once nothing staged
    /// can be committed any more), and temp files of this sink left by
    /// processes that died.
    fn discard_orphans(&self) -> Result<()> {
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = self
            .path
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default();
        // Temp files of dead processes (a header publication cut short).
        super::atomic::remove_stale(&dir, &name)?;
        let prefix = format!(".{name}.epoch-");
        let entries = std::fs::read_dir(&dir).map_err(|e| io(&dir, e))?;
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().to_string();
            if file.strip_prefix(&prefix).and_then(staged_epoch).is_some() {
                // Another process discarding at the same time may have
                // removed it first.
                remove_staged(&entry.path())?;
            }
        }
        Ok(())
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows written (staged or appended).
    pub fn rows_written(&self) -> u64 {
        self.rows
    }

    /// Whether the open epoch has staged rows not yet sealed.
    pub fn has_open_rows(&self) -> bool {
        self.staged.as_ref().is_some_and(|(_, _, len)| *len > 0)
    }

    /// The epoch now receiving rows.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Final-file length once every sealed epoch is committed.
    pub fn sealed_len(&self) -> u64 {
        self.sealed_len
    }

    /// Write rows into the current epoch (or straight to the final file in direct mode).
    pub fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let batch =
            RecordBatch::try_new(self.schema.clone(), batch.columns().to_vec()).map_err(|e| {
                ConnectorError::schema(
                    &self.path,
                    format!("batch does not match the sink schema: {e}"),
                )
            })?;
        let bytes = encode(self.format, &self.schema, &batch, false)?;
        self.rows += batch.num_rows() as u64;
        if self.direct {
            let mut f = OpenOptions::new()
                .append(true)
                .open(&self.path)
                .map_err(|e| io(&self.path, e))?;
            f.write_all(&bytes).map_err(|e| io(&self.path, e))?;
            self.sealed_len += bytes.len() as u64;
            return Ok(());
        }
        if self.staged.is_none() {
            let p = self.staged_path(self.epoch);
            // Never someone else's file: the name is this writer's own.
            let mut f = File::create_new(&p).map_err(|e| io(&p, e))?;
            // The first epoch with rows carries the header: its commit
            // creates the final file.
            let mut len = 0;
            if self.sealed_len == 0 {
                let header = self.header()?;
                f.write_all(&header).map_err(|e| io(&p, e))?;
                len = header.len() as u64;
            }
            self.staged = Some((p, f, len));
        }
        if let Some((p, f, len)) = self.staged.as_mut() {
            f.write_all(&bytes).map_err(|e| io(p, e))?;
            *len += bytes.len() as u64;
        }
        Ok(())
    }

    /// Seal the current epoch durably; later rows go to the next epoch.
    pub fn pre_commit(&mut self) -> Result<EpochRecord> {
        let before = self.sealed_len;
        let record = match self.staged.take() {
            Some((p, f, len)) => {
                f.sync_all().map_err(|e| io(&p, e))?;
                sync_parent(&p)?;
                EpochRecord {
                    epoch: self.epoch,
                    staged: Some(p),
                    staged_len: len,
                    final_len_before: before,
                }
            }
            None => {
                if self.direct {
                    let f = File::open(&self.path).map_err(|e| io(&self.path, e))?;
                    f.sync_all().map_err(|e| io(&self.path, e))?;
                }
                EpochRecord {
                    epoch: self.epoch,
                    staged: None,
                    staged_len: 0,
                    final_len_before: before,
                }
            }
        };
        self.sealed_len = before + record.staged_len;
        self.epoch += 1;
        Ok(record)
    }

    /// Make sealed epochs visible in the final file. Idempotent.
    pub fn commit(&mut self, records: &[EpochRecord]) -> Result<()> {
        for r in records {
            self.commit_one(r)?;
        }
        Ok(())
    }

    fn commit_one(&self, r: &EpochRecord) -> Result<()> {
        let Some(staged) = &r.staged else {
            return Ok(());
        };
        let mut data = Vec::with_capacity(r.staged_len as usize);
        match File::open(staged) {
            Ok(mut s) => {
                s.read_to_end(&mut data).map_err(|e| io(staged, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let len = match std::fs::metadata(&self.path) {
                    Ok(m) => m.len(),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => 0,
                    Err(e) => return Err(io(&self.path, e)),
                };
                // Already committed and cleaned up, unless the final file is short.
                if len >= r.final_len_before + r.staged_len {
                    return Ok(());
                }
                return Err(io(staged, std::io::Error::other(format!(
                    "staged rows of epoch {} are gone but the final file has only {len} of {} bytes",
                    r.epoch,
                    r.final_len_before + r.staged_len
                ))));
            }
            Err(e) => return Err(io(staged, e)),
        }
        if data.len() as u64 != r.staged_len {
            return Err(io(
                staged,
                std::io::Error::other(format!(
                    "staged file of epoch {} has {} bytes, the checkpoint recorded {}",
                    r.epoch,
                    data.len(),
                    r.staged_len
                )),
            ));
        }
        if self.already_appended(r, &data)? {
            return remove_staged(staged);
        }
        // The epoch that starts the file (re)creates it; any other needs it.
        let first = r.final_len_before == 0;
        let mut final_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(first)
            .open(&self.path)
            .map_err(|e| io(&self.path, e))?;
        final_file
            .set_len(r.final_len_before)
            .map_err(|e| io(&self.path, e))?;
        final_file
            .seek(SeekFrom::End(0))
            .map_err(|e| io(&self.path, e))?;
        final_file.write_all(&data).map_err(|e| io(&self.path, e))?;
        final_file.sync_all().map_err(|e| io(&self.path, e))?;
        if first {
            sync_parent(&self.path)?;
        }
        remove_staged(staged)
    }

    /// Whether the final file already holds epoch `r`'s bytes (`data`) at
    /// its place, with or without later epochs after them. Then a commit
    /// must not truncate: the epoch was appended before a crash, or by the
    /// writer that took this sink over (a cluster leader that replaced a
    /// paused one), which may have committed later epochs since.
    fn already_appended(&self, r: &EpochRecord, data: &[u8]) -> Result<bool> {
        let len = match std::fs::metadata(&self.path) {
            Ok(m) => m.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(&self.path, e)),
        };
        // The usual commit finds the file exactly where the epoch starts.
        if data.is_empty() || len < r.final_len_before + r.staged_len {
            return Ok(false);
        }
        let mut f = File::open(&self.path).map_err(|e| io(&self.path, e))?;
        f.seek(SeekFrom::Start(r.final_len_before))
            .map_err(|e| io(&self.path, e))?;
        let mut there = vec![0; data.len()];
        f.read_exact(&mut there).map_err(|e| io(&self.path, e))?;
        Ok(there == data)
    }

    /// Clean end of a run: a transactional sink that never committed rows
    /// publishes a header-only file (atomically), so a run that succeeded
    /// always leaves its output file. Call after every epoch is settled.
    pub fn close(self) -> Result<u64> {
        if !self.direct && self.sealed_len == 0 {
            let (temp, mut file) = super::atomic::TempFile::create(&self.path)?;
            file.write_all(&self.header()?)
                .map_err(|e| io(temp.path(), e))?;
            temp.commit(file)?;
        }
        Ok(self.rows)
    }

    /// Throw away the open epoch's rows (its staged file).
    pub fn rollback_open_epoch(&mut self) -> Result<()> {
        if let Some((p, f, _)) = self.staged.take() {
            drop(f);
            std::fs::remove_file(&p).map_err(|e| io(&p, e))?;
        }
        Ok(())
    }
}

/// Remove a committed epoch's staged file; another writer committing the
/// same epoch may have removed it first.
fn remove_staged(staged: &Path) -> Result<()> {
    match std::fs::remove_file(staged) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io(staged, e)),
        _ => Ok(()),
    }
}

fn encode(
    format: FileFormat,
    schema: &SchemaRef,
    batch: &RecordBatch,
    header: bool,
) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let err = |e| ConnectorError::arrow("encoding sink rows".to_string(), e);
    match format {
        FileFormat::Csv => {
            let mut w = arrow::csv::WriterBuilder::new()
                .with_header(header)
                .build(&mut buf);
            if header {
                let empty = RecordBatch::new_empty(schema.clone());
                w.write(&empty).map_err(err)?;
            } else {
                w.write(batch).map_err(err)?;
            }
        }
        FileFormat::JsonLines => {
            if !header {
                let mut w = arrow::json::LineDelimitedWriter::new(&mut buf);
                w.write(batch).map_err(err)?;
                w.finish().map_err(err)?;
            }
        }
        FileFormat::Parquet => {}
    }
    Ok(buf)
}
