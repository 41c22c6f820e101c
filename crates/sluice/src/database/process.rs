//! Registering process functions (native, or served by a remote worker)
//! and binding them to streams (the pipeline checks and installs them; see
//! `sluice_engine::pipeline`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use sluice_engine::pipeline::HandlerFactory;
use sluice_engine::process::{
    NativeProcessFunction, ProcessFunctionDescriptor, ProcessFunctionInfo,
};
use sluice_remote::{
    PythonDeployment, PythonWorker, RemoteEndpoint, RemoteError, RemoteLimits, RemoteMetrics,
    RemoteProcessFunction, RemoteRuntime, WorkerHost,
};
use sluice_sql::CreateProcessStream;

use super::Database;
use crate::Result;

/// A function served by a worker: its call counters, and the Python
/// worker when this database runs it.
pub(crate) struct WorkerEntry {
    metrics: Arc<RemoteMetrics>,
    python: Option<Arc<PythonWorker>>,
}

/// Counters of a process function served by a worker (remote Rust or
/// Python), from [`Database::process_worker_stats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessWorkerStats {
    /// Calls answered.
    pub calls: u64,
    /// Calls that failed.
    pub errors: u64,
    /// Sessions opened with the worker.
    pub sessions: u64,
    /// Total round-trip time of answered calls, in microseconds.
    pub call_micros: u64,
    /// Python: worker processes started.
    pub starts: u64,
    /// Python: starts after the first.
    pub restarts: u64,
    /// Python: workers that exited while they should have been running.
    pub crashes: u64,
    /// Python: workers killed (a call passed its deadline, or health
    /// checks failed).
    pub kills: u64,
    /// Python: failed health checks.
    pub health_failures: u64,
}

fn worker_error(e: RemoteError) -> crate::Error {
    crate::Error::Worker {
        code: e.code(),
        source: Box::new(e),
    }
}

impl Database {
    /// Register a native process function under its descriptor's name.
    /// `factory` makes one handler per binding. Bind it to an input with
    /// `CREATE STREAM out AS PROCESS name FROM input` or
    /// [`Database::bind_process_function`].
    pub async fn register_process_function<F, H>(
        &self,
        descriptor: ProcessFunctionDescriptor,
        factory: F,
    ) -> Result<()>
    where
        F: Fn() -> H + Send + Sync + 'static,
        H: NativeProcessFunction + 'static,
    {
        let factory: HandlerFactory = Arc::new(move || Box::new(factory()));
        self.inner
            .pipeline
            .lock()
            .await
            .register_function(descriptor, factory)
    }

    /// Register a function served by a remote Rust worker listening on
    /// `endpoint` (`unix:/path/to.sock`, or `tcp://127.0.0.1:PORT`; any
    /// address that is not loopback is refused). The descriptor's runtime
    /// must be [`ProcessRuntime::RemoteRust`](crate::process::ProcessRuntime).
    ///
    /// The worker is contacted at once: an unreachable worker, one that
    /// speaks no common protocol version, or one serving another binding
    /// is an error here, naming both sides. Each binding of the function
    /// then opens its own session on its first call.
    pub async fn register_remote_process_function(
        &self,
        descriptor: ProcessFunctionDescriptor,
        endpoint: &str,
    ) -> Result<()> {
        self.register_remote_process_function_with(descriptor, endpoint, RemoteLimits::default())
            .await
    }

    /// [`Self::register_remote_process_function`] with explicit limits
    /// (frame size, calls in flight, per-call deadline).
    pub async fn register_remote_process_function_with(
        &self,
        descriptor: ProcessFunctionDescriptor,
        endpoint: &str,
        limits: RemoteLimits,
    ) -> Result<()> {
        let remote = worker_error;
        if descriptor.runtime != crate::process::ProcessRuntime::RemoteRust {
            return Err(crate::Error::Catalog(format!(
                "process function '{}' v{}: a remote worker serves runtime RemoteRust, but the descriptor declares {}",
                descriptor.name,
                descriptor.version,
                sluice_engine::catalog::runtime_name(&descriptor.runtime)
            )));
        }
        let endpoint: RemoteEndpoint = endpoint.parse().map_err(remote)?;
        sluice_remote::probe(&descriptor, &endpoint, limits)
            .await
            .map_err(remote)?;
        self.register_worker(descriptor, endpoint, limits, None)
            .await
    }

    /// Register a function whose handler is written in Python: the class
    /// `deployment.entry` (`module:Class`, a `sluice_worker.Handler`) in
    /// the package directory `deployment.path`. The descriptor's runtime
    /// is set to `Python` with the deployment's environment binding (every
    /// file's SHA-256 by relative path, the interpreter, the SDK version
    /// and the entry point), so state is restored only under the same
    /// deployment.
    ///
    /// The database starts the worker itself, in a bubblewrap sandbox
    /// (unprivileged, read-only root holding only the interpreter and the
    /// package, no network), supervises it, and restarts it after a crash
    /// with bounded backoff. Declaring fails, naming what is missing, when
    /// the interpreter, the `sluice_worker` SDK or the sandbox is not
    /// available, or when the worker does not start.
    pub async fn register_python_process_function(
        &self,
        descriptor: ProcessFunctionDescriptor,
        deployment: PythonDeployment,
    ) -> Result<()> {
        self.register_python_process_function_with(descriptor, deployment, RemoteLimits::default())
            .await
    }

    /// [`Self::register_python_process_function`] with explicit limits.
    pub async fn register_python_process_function_with(
        &self,
        descriptor: ProcessFunctionDescriptor,
        deployment: PythonDeployment,
        limits: RemoteLimits,
    ) -> Result<()> {
        if self.inner.workers.lock().contains_key(&descriptor.name) {
            return Err(crate::Error::Catalog(format!(
                "a process function named '{}' is already registered",
                descriptor.name
            )));
        }
        let launched = tokio::task::spawn_blocking(move || {
            let (descriptor, interpreter, sandbox) =
                sluice_remote::python::prepare(descriptor, &deployment)?;
            let worker =
                PythonWorker::launch(&descriptor, &deployment, interpreter, sandbox, limits)?;
            Ok::<_, RemoteError>((descriptor, worker))
        })
        .await
        .map_err(|e| crate::Error::Internal(format!("starting the python worker: {e}")))?;
        let (descriptor, worker) = launched.map_err(worker_error)?;
        let endpoint = worker.endpoint().clone();
        sluice_remote::probe(&descriptor, &endpoint, limits)
            .await
            .map_err(worker_error)?;
        self.register_worker(descriptor, endpoint, limits, Some(worker))
            .await
    }

    async fn register_worker(
        &self,
        descriptor: ProcessFunctionDescriptor,
        endpoint: RemoteEndpoint,
        limits: RemoteLimits,
        python: Option<Arc<PythonWorker>>,
    ) -> Result<()> {
        let runtime = RemoteRuntime::new().map_err(worker_error)?;
        let metrics = Arc::new(RemoteMetrics::default());
        let shared = Arc::new(descriptor.clone());
        let host: Option<Arc<dyn WorkerHost>> = python.clone().map(|w| w as Arc<dyn WorkerHost>);
        let counters = Arc::clone(&metrics);
        let factory: HandlerFactory = Arc::new(move || {
            let handler = RemoteProcessFunction::new(
                Arc::clone(&shared),
                endpoint.clone(),
                limits,
                Arc::clone(&runtime),
                Arc::clone(&counters),
            );
            Box::new(match &host {
                Some(h) => handler.hosted(Arc::clone(h)),
                None => handler,
            })
        });
        let name = descriptor.name.clone();
        self.inner
            .pipeline
            .lock()
            .await
            .register_worker_function(descriptor, factory)?;
        self.inner
            .workers
            .lock()
            .insert(name, WorkerEntry { metrics, python });
        Ok(())
    }

    /// Counters of a process function served by a worker, if `name` is one.
    pub fn process_worker_stats(&self, name: &str) -> Option<ProcessWorkerStats> {
        let workers = self.inner.workers.lock();
        let entry = workers.get(name)?;
        let m = &entry.metrics;
        let mut stats = ProcessWorkerStats {
            calls: m.calls.load(Ordering::Relaxed),
            errors: m.errors.load(Ordering::Relaxed),
            sessions: m.sessions.load(Ordering::Relaxed),
            call_micros: m.call_micros.load(Ordering::Relaxed),
            ..ProcessWorkerStats::default()
        };
        if let Some(p) = &entry.python {
            let s = p.metrics();
            stats.starts = s.starts.load(Ordering::Relaxed);
            stats.restarts = s.restarts.load(Ordering::Relaxed);
            stats.crashes = s.crashes.load(Ordering::Relaxed);
            stats.kills = s.kills.load(Ordering::Relaxed);
            stats.health_failures = s.health_failures.load(Ordering::Relaxed);
        }
        Some(stats)
    }

    /// The last `lines` lines a Python function's worker wrote (its own
    /// errors and tracebacks), if `name` is one.
    pub fn python_worker_log(&self, name: &str, lines: usize) -> Option<String> {
        let workers = self.inner.workers.lock();
        workers
            .get(name)?
            .python
            .as_ref()
            .map(|p| p.log_tail(lines))
    }

    /// Bind a registered function to `input` (a source or stream); its
    /// output becomes the stream `output`.
    pub async fn bind_process_function(
        &self,
        function: &str,
        input: &str,
        output: &str,
    ) -> Result<ProcessFunctionInfo> {
        self.inner
            .pipeline
            .lock()
            .await
            .bind(CreateProcessStream {
                name: output.into(),
                materialized: false,
                function: function.into(),
                version: None,
                input: input.into(),
            })
            .await
    }

    /// Every binding of a process function, in creation order.
    pub async fn process_functions(&self) -> Vec<ProcessFunctionInfo> {
        self.inner.pipeline.lock().await.process_functions()
    }
}
