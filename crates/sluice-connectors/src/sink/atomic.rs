//! Atomic file publication: write to a hidden temp file next to the target,
//! then fsync + rename + fsync the directory.
//!
//! Renaming within one directory is atomic on POSIX file systems, so readers
//! see either no file or the complete one. The temp file lives in the same
//! directory (not /tmp) because rename cannot cross file systems.

use std::fs::{self, File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{ConnectorError, Result};

/// Distinguishes several writers for the same target within one process.
static NEXT_TEMP_ID: AtomicU64 = AtomicU64::new(0);

/// A temp file that is deleted when dropped unless it was committed.
#[derive(Debug)]
pub(crate) struct TempFile {
    path: PathBuf,
    target: PathBuf,
    armed: bool,
}

impl TempFile {
    /// Create the parent directory if needed and open a fresh temp file for
    /// `target`, named `.<name>.tmp-<pid>-<n>` (hidden, so globs over the
    /// directory ignore it).
    pub fn create(target: &Path) -> Result<(TempFile, File)> {
        let name = target.file_name().ok_or_else(|| {
            ConnectorError::invalid_option(
                "path",
                format!("'{}' does not name a file", target.display()),
            )
        })?;
        let dir = parent_dir(target);
        fs::create_dir_all(dir).map_err(|e| ConnectorError::io(dir, e))?;
        remove_stale(dir, &name.to_string_lossy())?;
        let id = NEXT_TEMP_ID.fetch_add(1, Ordering::Relaxed);
        let temp_name = format!(
            ".{}.tmp-{}-{id}",
            name.to_string_lossy(),
            std::process::id()
        );
        let path = dir.join(temp_name);
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| ConnectorError::io(&path, e))?;
        Ok((
            TempFile {
                path,
                target: target.to_path_buf(),
                armed: true,
            },
            file,
        ))
    }

    /// Path of the temp file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Make the data durable and visible under the target name.
    pub fn commit(mut self, file: File) -> Result<()> {
        file.sync_all()
            .map_err(|e| ConnectorError::io(&self.path, e))?;
        drop(file);
        fs::rename(&self.path, &self.target).map_err(|e| ConnectorError::io(&self.target, e))?;
        self.armed = false;
        sync_dir(parent_dir(&self.target))
    }

    /// Delete the temp file now, reporting failure (unlike drop).
    pub fn discard(mut self) -> Result<()> {
        self.armed = false;
        match fs::remove_file(&self.path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(ConnectorError::io(&self.path, e)),
        }
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.armed {
            if let Err(e) = fs::remove_file(&self.path) {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(
                        file = %self.path.display(),
                        error = %e,
                        "could not remove abandoned sink temp file"
                    );
                }
            }
        }
    }
}

/// Remove the temp files of `name` in `dir` that earlier processes left
/// behind when they died (a kill, a crash, a power cut): their owner's pid
/// is in the name, and a file whose owner no longer runs can never be
/// committed. Files of live processes (this one included) are never
/// touched, so two programs writing next to each other are safe.
pub(crate) fn remove_stale(dir: &Path, name: &str) -> Result<usize> {
    let prefix = format!(".{name}.tmp-");
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => return Err(ConnectorError::io(dir, e)),
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let file = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = file
            .strip_prefix(&prefix)
            .and_then(|rest| rest.split_once('-'))
            .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || process_alive(pid) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => {
                removed += 1;
                tracing::info!(
                    file = %entry.path().display(),
                    pid,
                    "removed a sink temp file left by a process that no longer runs"
                );
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(ConnectorError::io(entry.path(), e)),
        }
    }
    Ok(removed)
}

/// Whether a process with this pid runs (Linux: it has a `/proc` entry).
#[cfg(target_os = "linux")]
fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Without `/proc` liveness is unknown: assume alive and never remove.
#[cfg(not(target_os = "linux"))]
fn process_alive(_pid: u32) -> bool {
    true
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// fsync a directory so a rename inside it survives a crash.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| ConnectorError::io(dir, e))
}

/// Directories cannot be opened for fsync on non-Unix platforms.
#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> Result<()> {
    Ok(())
}
