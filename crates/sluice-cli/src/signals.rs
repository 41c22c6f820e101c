//! SIGINT and SIGTERM during `sluice run`.
//!
//! The first signal asks for a clean stop: the run stops intake and settles
//! its sinks as the delivery mode says (see [`crate::interrupt`]). That can
//! take a moment (a final checkpoint waits for every source's barrier), so
//! an operator who does not want to wait sends a second signal, which ends
//! the process at once. Either way the exit status is the one a shell
//! reports for a process the signal ended: 128 + the signal number.
//!
//! Installing the handlers replaces the default action of both signals
//! (which kills the process on the spot, leaving `.tmp-` files behind), so
//! they are installed first thing in `sluice run`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::watch;

use crate::error::CliError;
use crate::progress::ProgressSlot;

/// A signal that stops `sluice run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM (`kill`, service managers).
    Terminate,
}

impl Signal {
    /// The conventional name, as `kill -l` prints it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Interrupt => "SIGINT",
            Signal::Terminate => "SIGTERM",
        }
    }

    /// 128 + the signal number: the status a shell reports for a process
    /// the signal ended, so scripts can tell an interrupted run apart.
    pub fn exit_code(self) -> u8 {
        match self {
            Signal::Interrupt => 130,
            Signal::Terminate => 143,
        }
    }
}

/// Watches SIGINT and SIGTERM for the whole of `sluice run`.
pub struct Signals {
    first: watch::Receiver<Option<Signal>>,
    sinks: Arc<Mutex<Vec<PathBuf>>>,
    progress: ProgressSlot,
}

impl Signals {
    /// Take over SIGINT and SIGTERM. Must run inside the tokio runtime.
    pub fn install(progress: &ProgressSlot) -> Result<Signals, CliError> {
        let streams = Streams::new().map_err(|e| CliError::io("installing signal handlers", e))?;
        let (tx, rx) = watch::channel(None);
        let sinks = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(listen(streams, tx, Arc::clone(&sinks), progress.clone()));
        Ok(Signals {
            first: rx,
            sinks,
            progress: progress.clone(),
        })
    }

    /// Wait for the first signal (at once if it already came).
    pub async fn first(&self) -> Signal {
        let mut rx = self.first.clone();
        let got = match rx.wait_for(Option::is_some).await {
            Ok(s) => *s,
            Err(_) => None,
        };
        match got {
            Some(s) => s,
            // The listener only ends with the runtime; never resolve then.
            None => std::future::pending().await,
        }
    }

    /// The first signal, if one came.
    pub fn received(&self) -> Option<Signal> {
        *self.first.borrow()
    }

    /// The sink files whose temporary files an abort removes.
    pub fn watch_sinks(&self, paths: Vec<PathBuf>) {
        *self.sinks.lock().unwrap_or_else(PoisonError::into_inner) = paths;
    }

    /// Print one line to stderr, with the progress spinner out of the way.
    pub fn say(&self, line: &str) {
        say(&self.progress, line);
    }
}

fn say(progress: &ProgressSlot, line: &str) {
    let mut w = progress.log_writer();
    // Nothing sensible is left to do if stderr is gone.
    let _ = w.write_all(format!("sluice: {line}\n").as_bytes());
}

/// The first signal is published to the run; the second ends the process.
async fn listen(
    mut streams: Streams,
    tx: watch::Sender<Option<Signal>>,
    sinks: Arc<Mutex<Vec<PathBuf>>>,
    progress: ProgressSlot,
) {
    let Some(first) = streams.next().await else {
        return;
    };
    say(
        &progress,
        &format!(
            "received {}: stopping intake and shutting down (a second signal aborts at once)",
            first.name()
        ),
    );
    let _ = tx.send(Some(first));
    let Some(second) = streams.next().await else {
        return;
    };
    let paths = sinks.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let removed = remove_own_temp_files(&paths);
    say(
        &progress,
        &format!(
            "received {} while shutting down: aborted at once; sinks were not settled, \
             {removed} temporary sink file(s) removed; with --state-dir, a rerun resumes \
             from the last committed checkpoint",
            second.name()
        ),
    );
    std::process::exit(i32::from(second.exit_code()));
}

/// Remove the temporary files this process's sinks write before publishing
/// (`.<name>.tmp-<pid>-<n>` beside each final file), so an abort leaves
/// nothing half-written behind. Staged epoch files are kept: a checkpoint
/// that sealed them may still commit them on recovery. Returns how many
/// files were removed.
fn remove_own_temp_files(sinks: &[PathBuf]) -> usize {
    let pid = std::process::id();
    let mut removed = 0;
    for sink in sinks {
        let Some(name) = sink.file_name() else {
            continue;
        };
        let prefix = format!(".{}.tmp-{pid}-", name.to_string_lossy());
        let dir = match sink.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if !entry.file_name().to_string_lossy().starts_with(&prefix) {
                continue;
            }
            match std::fs::remove_file(entry.path()) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    file = %entry.path().display(),
                    error = %e,
                    "cannot remove a temporary sink file after the abort"
                ),
            }
        }
    }
    removed
}

/// The signal streams of this platform.
#[cfg(unix)]
struct Streams {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Streams {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// The next signal; None once the runtime shuts down.
    async fn next(&mut self) -> Option<Signal> {
        tokio::select! {
            s = self.interrupt.recv() => s.map(|()| Signal::Interrupt),
            s = self.terminate.recv() => s.map(|()| Signal::Terminate),
        }
    }
}

/// Elsewhere only Ctrl-C is caught.
#[cfg(not(unix))]
struct Streams;

#[cfg(not(unix))]
impl Streams {
    fn new() -> std::io::Result<Self> {
        Ok(Self)
    }

    async fn next(&mut self) -> Option<Signal> {
        tokio::signal::ctrl_c()
            .await
            .ok()
            .map(|()| Signal::Interrupt)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal_number() {
        for s in [Signal::Interrupt, Signal::Terminate] {
            let number = match s {
                Signal::Interrupt => libc::SIGINT,
                Signal::Terminate => libc::SIGTERM,
            };
            assert_eq!(i32::from(s.exit_code()), 128 + number, "{}", s.name());
        }
    }

    #[test]
    fn abort_removes_only_this_process_temp_files() {
        let dir = tempfile::tempdir().unwrap();
        let sink = dir.path().join("out.csv");
        let pid = std::process::id();
        let names = [
            format!(".out.csv.tmp-{pid}-0"),
            format!(".out.csv.tmp-{pid}-3"),
            format!(".out.csv.tmp-{}-0", pid + 1),
            ".out.csv.epoch-000000000001".to_string(),
            "out.csv".to_string(),
            format!(".other.csv.tmp-{pid}-0"),
        ];
        for n in &names {
            std::fs::write(dir.path().join(n), "x").unwrap();
        }
        assert_eq!(remove_own_temp_files(&[sink]), 2);
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        let mut want = names[2..].to_vec();
        want.sort();
        assert_eq!(left, want);
    }
}
