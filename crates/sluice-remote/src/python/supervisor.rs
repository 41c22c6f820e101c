//! Supervision of one Python worker process.
//!
//! # Architecture
//!
//! One monitor thread per worker owns the child process for its whole life
//! (bubblewrap ties the sandbox's death to the thread that started it):
//!
//! ```text
//!   spawn ──> wait for "ready" ──> ready ──> child exits / kill requested
//!     ^         (startup timeout)     │              │
//!     │                               └──────────────┤
//!     └──── backoff: 100 ms doubling to max_backoff <┘  (reset after 30 s healthy)
//! ```
//!
//! Callers see only [`Supervisor::wait_ready`] (block until a worker is
//! listening, or fail with why not) and [`Supervisor::kill`] (a call
//! passed its deadline: the worker may be stuck in the handler, so it is
//! killed and started again). The worker's stdout and stderr go to the
//! log (`tracing`, target `sluice::python`), and the last lines are kept
//! for error messages, so a handler's own traceback reaches the engine.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::RemoteError;

/// Lines of worker output kept for error messages.
const LOG_LINES: usize = 200;
/// A worker that ran this long resets the backoff.
const HEALTHY: Duration = Duration::from_secs(30);
/// The first pause before a restart.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Counters of one supervised worker.
#[derive(Debug, Default)]
pub struct SupervisorMetrics {
    /// Processes started.
    pub starts: AtomicU64,
    /// Starts after the first (after a crash, a kill or a failed start).
    pub restarts: AtomicU64,
    /// Workers that exited while they should have been running.
    pub crashes: AtomicU64,
    /// Workers killed: a call passed its deadline, or health checks failed.
    pub kills: AtomicU64,
    /// Health checks that failed ([`super::health`]).
    pub health_failures: AtomicU64,
}

#[derive(Default)]
struct State {
    ready: bool,
    stop: bool,
    kill: bool,
    last_error: Option<String>,
    /// Starts that failed (never ready) so far.
    failed_starts: u64,
}

struct Shared {
    function: String,
    state: Mutex<State>,
    changed: Condvar,
    log: Mutex<VecDeque<String>>,
    metrics: Arc<SupervisorMetrics>,
}

impl Shared {
    fn note_line(&self, stream: &str, line: String) {
        tracing::warn!(target: "sluice::python", function = %self.function, stream, "{line}");
        let mut log = self.log.lock();
        if log.len() == LOG_LINES {
            log.pop_front();
        }
        log.push_back(line);
    }

    fn tail(&self, n: usize) -> String {
        let log = self.log.lock();
        let skip = log.len().saturating_sub(n);
        log.iter()
            .skip(skip)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// How to start the worker, and how patient to be.
pub struct SupervisorConfig {
    /// The function (for logs and errors).
    pub function: String,
    /// Makes the command that starts one worker process.
    pub launch: Box<dyn Fn() -> Command + Send>,
    /// How long a worker may take to print `ready`.
    pub startup_timeout: Duration,
    /// The longest pause between restarts.
    pub max_backoff: Duration,
}

/// One supervised worker; dropping it stops the worker.
pub struct Supervisor {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Supervisor {
    /// Start supervising: the first worker starts at once.
    pub fn start(config: SupervisorConfig) -> Result<Self, RemoteError> {
        let shared = Arc::new(Shared {
            function: config.function.clone(),
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            log: Mutex::new(VecDeque::new()),
            metrics: Arc::default(),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("sluice-python-{}", config.function))
            .spawn(move || monitor(&s, &config))
            .map_err(RemoteError::Runtime)?;
        Ok(Self {
            shared,
            thread: Some(thread),
        })
    }

    /// The worker's counters.
    pub fn metrics(&self) -> Arc<SupervisorMetrics> {
        Arc::clone(&self.shared.metrics)
    }

    /// The last `n` lines the worker wrote.
    pub fn log_tail(&self, n: usize) -> String {
        self.shared.tail(n)
    }

    /// Block until a worker is listening, for at most `timeout`; a start
    /// that fails meanwhile ends the wait at once with its reason.
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), RemoteError> {
        let until = Instant::now() + timeout;
        let mut state = self.shared.state.lock();
        let failed = state.failed_starts;
        while !state.ready && !state.stop && state.failed_starts == failed {
            if self
                .shared
                .changed
                .wait_until(&mut state, until)
                .timed_out()
            {
                break;
            }
        }
        if state.ready {
            return Ok(());
        }
        let why = state
            .last_error
            .clone()
            .unwrap_or_else(|| format!("not ready within {}ms", timeout.as_millis()));
        drop(state);
        let tail = self.shared.tail(20);
        Err(RemoteError::WorkerStart {
            function: self.shared.function.clone(),
            reason: if tail.is_empty() {
                why
            } else {
                format!("{why}; its last output:\n{tail}")
            },
        })
    }

    /// Whether a worker is running and answered its start.
    pub fn is_ready(&self) -> bool {
        self.shared.state.lock().ready
    }

    /// Kill the running worker (it is started again after the backoff).
    pub fn kill(&self) {
        let mut state = self.shared.state.lock();
        state.kill = true;
        state.ready = false;
        self.shared.changed.notify_all();
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        {
            let mut state = self.shared.state.lock();
            state.stop = true;
            self.shared.changed.notify_all();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn forward(
    shared: &Arc<Shared>,
    stream: &'static str,
    pipe: impl std::io::Read + Send + 'static,
    ready: Option<std::sync::mpsc::Sender<()>>,
) {
    let shared = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("sluice-python-log".into())
        .spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                if line == "ready" {
                    if let Some(r) = &ready {
                        let _ = r.send(());
                        continue;
                    }
                }
                shared.note_line(stream, line);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot forward the python worker's output");
    }
}

/// Wait for the child to exit or a stop or kill request; returns whether
/// it exited by itself (and its status).
fn watch(shared: &Shared, child: &mut Child) -> Option<std::process::ExitStatus> {
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        let mut state = shared.state.lock();
        if state.stop || state.kill {
            state.kill = false;
            drop(state);
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        shared
            .changed
            .wait_for(&mut state, Duration::from_millis(20));
    }
}

fn monitor(shared: &Arc<Shared>, config: &SupervisorConfig) {
    let mut failures: u32 = 0;
    let mut first = true;
    loop {
        if shared.state.lock().stop {
            return;
        }
        let m = &shared.metrics;
        m.starts.fetch_add(1, Ordering::Relaxed);
        if !first {
            m.restarts.fetch_add(1, Ordering::Relaxed);
        }
        first = false;
        let started = Instant::now();
        let mut command = (config.launch)();
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match command.spawn() {
            Err(e) => {
                let mut state = shared.state.lock();
                state.last_error = Some(format!("cannot start the worker: {e}"));
                state.failed_starts += 1;
                drop(state);
                shared.changed.notify_all();
                failures += 1;
            }
            Ok(mut child) => {
                let (ready_tx, ready_rx) = std::sync::mpsc::channel();
                if let Some(out) = child.stdout.take() {
                    forward(shared, "stdout", out, Some(ready_tx));
                }
                if let Some(err) = child.stderr.take() {
                    forward(shared, "stderr", err, None);
                }
                let became_ready =
                    wait_for_ready(shared, &mut child, &ready_rx, config.startup_timeout);
                match became_ready {
                    Err(why) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        tracing::error!(function = %config.function, "python worker did not start: {why}");
                        let mut state = shared.state.lock();
                        state.last_error = Some(why);
                        state.failed_starts += 1;
                        drop(state);
                        shared.changed.notify_all();
                        failures += 1;
                    }
                    Ok(()) => {
                        {
                            let mut state = shared.state.lock();
                            state.ready = true;
                            state.last_error = None;
                            shared.changed.notify_all();
                        }
                        tracing::info!(function = %config.function, "python worker ready");
                        let exited = watch(shared, &mut child);
                        let mut state = shared.state.lock();
                        state.ready = false;
                        if state.stop {
                            return;
                        }
                        match exited {
                            Some(status) => {
                                m.crashes.fetch_add(1, Ordering::Relaxed);
                                let why = format!("the worker exited ({status})");
                                tracing::error!(function = %config.function, "python {why}; restarting");
                                state.last_error = Some(why);
                            }
                            None => {
                                m.kills.fetch_add(1, Ordering::Relaxed);
                                tracing::warn!(function = %config.function, "python worker killed; restarting");
                            }
                        }
                        failures = if started.elapsed() > HEALTHY {
                            0
                        } else {
                            failures + 1
                        };
                    }
                }
            }
        }
        let backoff = FIRST_BACKOFF
            .saturating_mul(1u32 << failures.saturating_sub(1).min(16))
            .min(config.max_backoff);
        let mut state = shared.state.lock();
        if !state.stop {
            shared.changed.wait_for(&mut state, backoff);
        }
    }
}

fn wait_for_ready(
    shared: &Shared,
    child: &mut Child,
    ready: &std::sync::mpsc::Receiver<()>,
    timeout: Duration,
) -> Result<(), String> {
    let until = Instant::now() + timeout;
    loop {
        if ready.recv_timeout(Duration::from_millis(20)).is_ok() {
            return Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the worker exited before it was ready ({status})"));
        }
        if shared.state.lock().stop {
            return Err("stopped".into());
        }
        if Instant::now() >= until {
            return Err(format!(
                "the worker was not ready within {}ms",
                timeout.as_millis()
            ));
        }
    }
}
