//! Health checks of a running Python worker.
//!
//! A worker that exits is seen at once by its supervisor, and one stuck in
//! a call is killed when the call passes its deadline. What neither sees is
//! a worker that is alive but no longer answers while no call is running
//! (stopped, wedged in a native extension, its server threads dead). So
//! while the supervisor says the worker is ready, a checker thread opens a
//! session with it every `interval` (the protocol's own handshake, on its
//! own connection, so it tests what a call needs: the process, its gRPC
//! server and the binding). After [`FAILURES_TO_KILL`] failed checks in a
//! row, it has the supervisor kill the worker, which restarts it with the
//! usual backoff; each failure is logged with its cause and counted.

use std::sync::atomic::Ordering;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Weak};
use std::time::Duration;

use sluice_engine::process::ProcessFunctionDescriptor;

use super::supervisor::{Supervisor, SupervisorMetrics};
use crate::endpoint::RemoteEndpoint;
use crate::protocol::RemoteLimits;

/// Consecutive failed checks that get a worker killed: one slow answer
/// on a busy host is not a dead worker.
pub const FAILURES_TO_KILL: u32 = 3;

/// What a checker needs.
pub struct HealthCheck {
    /// The binding to handshake with.
    pub descriptor: ProcessFunctionDescriptor,
    /// Where the worker listens.
    pub endpoint: RemoteEndpoint,
    /// Limits for the handshake's session.
    pub limits: RemoteLimits,
    /// Time between checks.
    pub interval: Duration,
    /// How long one check may take.
    pub timeout: Duration,
    /// Where failed checks are counted (`health_failures`).
    pub metrics: Arc<SupervisorMetrics>,
}

/// Run checks until `stop` is dropped or the supervisor is gone.
pub fn spawn(
    check: HealthCheck,
    supervisor: Weak<Supervisor>,
    stop: Receiver<()>,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name(format!("sluice-python-health-{}", check.descriptor.name))
        .spawn(move || run(&check, &supervisor, &stop))
        .map(drop)
}

fn run(check: &HealthCheck, supervisor: &Weak<Supervisor>, stop: &Receiver<()>) {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(function = %check.descriptor.name, error = %e, "python health checks cannot start");
            return;
        }
    };
    let mut failed_in_row = 0u32;
    loop {
        match stop.recv_timeout(check.interval) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let Some(supervisor) = supervisor.upgrade() else {
            return;
        };
        if !supervisor.is_ready() {
            // Starting, restarting or stopping: the supervisor has it.
            failed_in_row = 0;
            continue;
        }
        let answered = rt.block_on(async {
            tokio::time::timeout(
                check.timeout,
                crate::client::probe(&check.descriptor, &check.endpoint, check.limits),
            )
            .await
        });
        let why = match answered {
            Ok(Ok(())) => {
                failed_in_row = 0;
                continue;
            }
            Ok(Err(e)) => e.render(),
            Err(_) => format!("no handshake within {}ms", check.timeout.as_millis()),
        };
        check
            .metrics
            .health_failures
            .fetch_add(1, Ordering::Relaxed);
        failed_in_row += 1;
        tracing::warn!(function = %check.descriptor.name, failed_in_row, "python worker health check failed: {why}");
        if failed_in_row >= FAILURES_TO_KILL {
            tracing::error!(function = %check.descriptor.name, "python worker failed {failed_in_row} health checks in a row; killing it");
            supervisor.kill();
            failed_in_row = 0;
        }
    }
}
