//! Supervised Python process functions.
//!
//! A Python deployment is a package directory and an entry point
//! (`module:Class`, a subclass of `sluice_worker.Handler`). Declaring one:
//!
//! 1. asks the interpreter what it is and checks the `sluice_worker` SDK is
//!    installed for it ([`interpreter`]);
//! 2. checks that bubblewrap can build the sandbox here ([`sandbox`]); if
//!    it cannot, the declaration fails: a worker never runs unsandboxed;
//! 3. binds the deployment's identity: SHA-256 of every file by relative
//!    path, the interpreter, the SDK version and the entry point
//!    ([`tree`], `PythonEnvironmentBinding`), which is part of the
//!    function's binding hash, so state is never restored under another;
//! 4. starts the worker under a [`supervisor::Supervisor`] and waits until
//!    it answers a handshake.
//!
//! Calls then go over the same remote protocol as a remote Rust worker, on
//! a Unix socket in a private directory (mode 0700) that is the sandbox's
//! only way out.

pub mod health;
pub mod interpreter;
pub mod sandbox;
pub mod supervisor;
pub mod tree;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use sluice_engine::process::{ProcessFunctionDescriptor, ProcessRuntime, PythonEnvironmentBinding};

use crate::client::WorkerHost;
use crate::endpoint::RemoteEndpoint;
use crate::error::{RemoteError, Result};
use crate::protocol::RemoteLimits;
use interpreter::Interpreter;
use sandbox::Sandbox;
use supervisor::{Supervisor, SupervisorConfig, SupervisorMetrics};

/// Where a Python handler lives and how to run it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PythonDeployment {
    /// The package directory (mounted read-only in the sandbox).
    pub path: PathBuf,
    /// The handler class, as `module:Class` (the module is found in `path`).
    pub entry: String,
    /// Package name in the binding (default: the entry's module; never the
    /// directory's name, so a moved package keeps its identity).
    pub package: Option<String>,
    /// Package version in the binding (default: `0`).
    pub version: Option<String>,
    /// The interpreter (default: `SLUICE_PYTHON`, else `python3`).
    pub python: Option<PathBuf>,
    /// How long a worker may take to start.
    pub startup_timeout: Duration,
    /// The longest pause between restarts after crashes.
    pub max_backoff: Duration,
    /// Time between health checks of a ready worker (a handshake on its
    /// own connection; [`health`]).
    pub health_interval: Duration,
}

impl PythonDeployment {
    /// The deployment of `entry` in `path`, with default settings.
    pub fn new(path: impl Into<PathBuf>, entry: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            entry: entry.into(),
            package: None,
            version: None,
            python: None,
            startup_timeout: Duration::from_secs(30),
            max_backoff: Duration::from_secs(5),
            health_interval: Duration::from_secs(5),
        }
    }
}

/// Shortest and longest startup timeout, backoff and health interval.
const MIN_PERIOD: Duration = Duration::from_millis(10);
const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// Check a deployment and bind its identity into `descriptor` (whose
/// runtime becomes `Python`); returns what launching needs.
pub fn prepare(
    mut descriptor: ProcessFunctionDescriptor,
    deployment: &PythonDeployment,
) -> Result<(ProcessFunctionDescriptor, Interpreter, Sandbox)> {
    let entry = &deployment.entry;
    let valid_entry = entry
        .split_once(':')
        .is_some_and(|(m, c)| !m.is_empty() && !c.is_empty() && !c.contains(':'));
    if !valid_entry {
        return Err(RemoteError::package(
            &deployment.path,
            format!("entry '{entry}' must be module:Class"),
        ));
    }
    for (name, value) in [
        ("startup_timeout", deployment.startup_timeout),
        ("max_backoff", deployment.max_backoff),
        ("health_interval", deployment.health_interval),
    ] {
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&value) {
            return Err(RemoteError::package(
                &deployment.path,
                format!(
                    "{name} is {}ms; it must be from {}ms to one day",
                    value.as_millis(),
                    MIN_PERIOD.as_millis()
                ),
            ));
        }
    }
    let root = std::fs::canonicalize(&deployment.path)
        .map_err(|e| RemoteError::io(&deployment.path, e))?;
    if !root.is_dir() {
        return Err(RemoteError::package(
            &deployment.path,
            "it is not a directory",
        ));
    }
    let module = entry
        .split(':')
        .next()
        .unwrap_or_default()
        .replace('.', "/");
    if !root.join(format!("{module}.py")).is_file()
        && !root.join(&module).join("__init__.py").is_file()
    {
        return Err(RemoteError::package(
            &deployment.path,
            format!(
                "the entry's module is not in the package: no {module}.py or {module}/__init__.py"
            ),
        ));
    }
    let files = tree::digest_tree(&root)?;
    let interpreter = interpreter::probe(&interpreter::choose(deployment.python.as_deref()))?;
    let sandbox = Sandbox::locate(&interpreter)?;
    // Not the directory's name: a moved package keeps its identity.
    let package = deployment
        .package
        .clone()
        .unwrap_or_else(|| entry.split(':').next().unwrap_or_default().to_string());
    descriptor.runtime = ProcessRuntime::Python(PythonEnvironmentBinding {
        package,
        version: deployment.version.clone().unwrap_or_else(|| "0".into()),
        files,
        entry: entry.clone(),
        interpreter: interpreter.description.clone(),
        sdk: interpreter.sdk.clone(),
    });
    Ok((descriptor, interpreter, sandbox))
}

/// A running, supervised Python worker.
pub struct PythonWorker {
    // Dropped first: stops the health checks.
    _health_stop: std::sync::mpsc::Sender<()>,
    supervisor: Arc<Supervisor>,
    endpoint: RemoteEndpoint,
    // Dropped after the supervisor (fields drop in order): the socket's
    // directory outlives the worker.
    _run_dir: tempfile::TempDir,
}

impl PythonWorker {
    /// Start the worker for a prepared `descriptor` and wait until it is
    /// ready; a worker that never starts is an error with its last output.
    pub fn launch(
        descriptor: &ProcessFunctionDescriptor,
        deployment: &PythonDeployment,
        interpreter: Interpreter,
        sandbox: Sandbox,
        limits: RemoteLimits,
    ) -> Result<Arc<Self>> {
        let base = std::env::temp_dir();
        sweep_stale_run_dirs(&base);
        let run_dir = tempfile::Builder::new()
            .prefix(&format!("{RUN_DIR_PREFIX}{}-", std::process::id()))
            .tempdir_in(&base)
            .map_err(RemoteError::Runtime)?;
        restrict(run_dir.path())?;
        let socket = run_dir.path().join(sandbox::SOCKET);
        let endpoint = RemoteEndpoint::Unix(socket.clone());
        let env = worker_env(descriptor, limits)?;
        let package = std::fs::canonicalize(&deployment.path)
            .map_err(|e| RemoteError::io(&deployment.path, e))?;
        let run = run_dir.path().to_path_buf();
        let entry = deployment.entry.clone();
        let launch = move || {
            let _ = std::fs::remove_file(&socket);
            let mut c = sandbox.command(&interpreter, &package, &run, &env);
            c.args(["-I", "-m", "sluice_worker", "--socket"])
                .arg(format!("{}/{}", sandbox::RUN_DIR, sandbox::SOCKET))
                .args(["--package", sandbox::PACKAGE_DIR, "--entry", &entry]);
            c
        };
        let supervisor = Supervisor::start(SupervisorConfig {
            function: descriptor.name.clone(),
            launch: Box::new(launch),
            startup_timeout: deployment.startup_timeout,
            max_backoff: deployment.max_backoff,
        })?;
        supervisor.wait_ready(deployment.startup_timeout)?;
        let supervisor = Arc::new(supervisor);
        let (health_stop, stopped) = std::sync::mpsc::channel();
        health::spawn(
            health::HealthCheck {
                descriptor: descriptor.clone(),
                endpoint: endpoint.clone(),
                limits,
                interval: deployment.health_interval,
                timeout: deployment.health_interval.max(Duration::from_secs(1)),
                metrics: supervisor.metrics(),
            },
            Arc::downgrade(&supervisor),
            stopped,
        )
        .map_err(RemoteError::Runtime)?;
        Ok(Arc::new(Self {
            _health_stop: health_stop,
            supervisor,
            endpoint,
            _run_dir: run_dir,
        }))
    }

    /// Where the worker listens.
    pub fn endpoint(&self) -> &RemoteEndpoint {
        &self.endpoint
    }

    /// The supervisor's counters (starts, restarts, crashes, kills).
    pub fn metrics(&self) -> Arc<SupervisorMetrics> {
        self.supervisor.metrics()
    }

    /// The last `n` lines the worker wrote (its own errors included).
    pub fn log_tail(&self, n: usize) -> String {
        self.supervisor.log_tail(n)
    }
}

impl WorkerHost for PythonWorker {
    fn wait_ready(&self, timeout: Duration) -> Result<()> {
        self.supervisor.wait_ready(timeout)
    }

    fn call_failed(&self, error: &RemoteError) {
        // A worker past its deadline may be stuck in its handler: only a
        // new process gets the function answering again.
        if error.code() == "SLC-RMT-008" {
            self.supervisor.kill();
        }
    }
}

/// Run directories are named `sluice-python-<engine pid>-<random>`.
const RUN_DIR_PREFIX: &str = "sluice-python-";

/// Remove the run directories of engines that no longer run. An engine
/// killed with SIGKILL takes its workers with it (`--die-with-parent`) but
/// cannot remove their socket directories; the next engine on the host
/// does. A directory whose engine id is still a live process (even a
/// reused id) is left alone, so this never touches a running worker's.
pub fn sweep_stale_run_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(RUN_DIR_PREFIX))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                tracing::info!(dir = %entry.path().display(), "removed a dead engine's python run directory")
            }
            Err(e) => {
                tracing::debug!(dir = %entry.path().display(), error = %e, "could not remove a stale python run directory")
            }
        }
    }
}

fn restrict(dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(RemoteError::Runtime)
}

/// What the worker is told at launch: the binding it must serve, the
/// output schema (an Arrow IPC stream with no batches, in hex) and limits.
fn worker_env(
    d: &ProcessFunctionDescriptor,
    limits: RemoteLimits,
) -> Result<Vec<(String, String)>> {
    let b = crate::protocol::binding(d);
    let mut schema = Vec::new();
    {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut schema, &d.output_schema)
            .map_err(|source| RemoteError::Ipc {
                what: "encoding the output schema".into(),
                source,
            })?;
        w.finish().map_err(|source| RemoteError::Ipc {
            what: "encoding the output schema".into(),
            source,
        })?;
    }
    let hex: String = schema.iter().map(|b| format!("{b:02x}")).collect();
    Ok(vec![
        ("SLUICE_BINDING_NAME".into(), b.name),
        ("SLUICE_BINDING_VERSION".into(), b.version.to_string()),
        ("SLUICE_BINDING_HASH".into(), b.binding_hash),
        ("SLUICE_BINDING_RUNTIME".into(), b.runtime),
        ("SLUICE_OUTPUT_SCHEMA".into(), hex),
        (
            "SLUICE_MAX_ACTIVATIONS".into(),
            d.limits.max_activations_per_call.to_string(),
        ),
        (
            "SLUICE_MAX_MESSAGE_BYTES".into(),
            limits.max_message_bytes.to_string(),
        ),
    ])
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_dead_engines_run_dirs_are_swept() {
        let base = tempfile::tempdir().unwrap();
        let mine = format!("{RUN_DIR_PREFIX}{}-a", std::process::id());
        // Above the kernel's largest pid_max (2^22): never a live process.
        let dead = format!("{RUN_DIR_PREFIX}4194305-b");
        let init = format!("{RUN_DIR_PREFIX}1-c");
        let names = [mine.as_str(), &dead, &init, "sluice-python-x-d", "other"];
        for n in names {
            std::fs::create_dir(base.path().join(n)).unwrap();
            std::fs::write(base.path().join(n).join("worker.sock"), b"").unwrap();
        }
        sweep_stale_run_dirs(base.path());
        let mut left: Vec<String> = std::fs::read_dir(base.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        let mut want: Vec<String> = names
            .iter()
            .filter(|n| **n != dead)
            .map(|n| n.to_string())
            .collect();
        want.sort();
        assert_eq!(left, want);
    }
}
