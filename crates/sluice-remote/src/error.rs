//! Errors of the remote protocol, each with a stable code.
//!
//! A [`RemoteError`] keeps its source (an I/O, transport, gRPC or Arrow
//! error) so the cause survives every boundary; the engine's handler trait
//! takes errors as text, so the client renders `code: message: source`
//! only there, at the last moment.

use std::time::Duration;

/// Anything that can go wrong between the engine and a worker.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The endpoint text is not one Sluice accepts.
    #[error("invalid remote endpoint '{endpoint}': {reason}")]
    InvalidEndpoint {
        /// What was given.
        endpoint: String,
        /// Why it is refused.
        reason: String,
    },
    /// A TCP endpoint (or a connection's peer) is not a loopback address.
    #[error("remote endpoint '{endpoint}' is not a loopback address; remote workers must run on the same host (use 127.0.0.1, ::1 or a unix: socket path)")]
    NotLoopback {
        /// The endpoint or peer address.
        endpoint: String,
    },
    /// Connecting to the worker failed.
    #[error("cannot reach the worker at {endpoint}")]
    Connect {
        /// Where it should be.
        endpoint: String,
        /// The transport's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The two sides speak no common protocol version.
    #[error("protocol versions do not overlap: the engine speaks {engine_min}..={engine_max}, the worker {worker}")]
    Version {
        /// Lowest engine version.
        engine_min: u32,
        /// Highest engine version.
        engine_max: u32,
        /// What the worker speaks or chose.
        worker: String,
    },
    /// The worker serves another function or another version of it.
    #[error("binding mismatch: the engine expects {engine}, the worker serves {worker}")]
    Binding {
        /// The engine's binding.
        engine: String,
        /// The worker's binding.
        worker: String,
    },
    /// The peer refused the session.
    #[error("the worker refused the session ({code}): {message}")]
    Refused {
        /// Its code.
        code: String,
        /// Its message.
        message: String,
    },
    /// A frame or payload broke a limit.
    #[error("{what} is {actual}, over the limit of {limit}")]
    Limit {
        /// What was measured.
        what: String,
        /// Its size or count.
        actual: u64,
        /// The bound.
        limit: u64,
    },
    /// No answer within the call's deadline.
    #[error("call {call_id} got no answer within its deadline of {}ms", deadline.as_millis())]
    Deadline {
        /// The call.
        call_id: u64,
        /// Its deadline.
        deadline: Duration,
    },
    /// A payload could not be decoded or does not match its declaration.
    #[error("malformed {what}: {reason}")]
    Malformed {
        /// Which payload.
        what: String,
        /// What is wrong.
        reason: String,
    },
    /// An Arrow IPC payload failed to encode or decode.
    #[error("Arrow IPC {what}")]
    Ipc {
        /// Which payload.
        what: String,
        /// Arrow's error.
        #[source]
        source: arrow::error::ArrowError,
    },
    /// The handler returned an error or panicked (in the worker).
    #[error("{0}")]
    Handler(String),
    /// The worker answered a call with a failure; its code is the
    /// worker's (a deadline the worker enforced is `SLC-RMT-008` here too).
    #[error("the worker failed call {call_id}: {message}")]
    Worker {
        /// The call.
        call_id: u64,
        /// The worker's code.
        code: String,
        /// Its message.
        message: String,
    },
    /// The worker's stream ended or broke.
    #[error("the session with the worker at {endpoint} ended")]
    SessionLost {
        /// Where the worker was.
        endpoint: String,
        /// The transport's error, if there was one.
        #[source]
        source: Option<tonic::Status>,
    },
    /// A frame that the protocol does not allow at this point.
    #[error("protocol violation: {0}")]
    Protocol(String),
    /// A Python deployment cannot be used: its package directory, its
    /// interpreter or the worker SDK.
    #[error("python deployment '{path}': {reason}")]
    PythonEnvironment {
        /// The package directory or interpreter concerned.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The sandbox a Python worker must run in cannot be set up on this
    /// host; the worker is never started without it.
    #[error("cannot sandbox the python worker: {reason}")]
    Sandbox {
        /// What is missing.
        reason: String,
    },
    /// A supervised worker did not become ready.
    #[error("the python worker for '{function}' did not start: {reason}")]
    WorkerStart {
        /// The function.
        function: String,
        /// Why, with the end of the worker's own output.
        reason: String,
    },
    /// Starting or running the client's or worker's own machinery.
    #[error("remote runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl RemoteError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            RemoteError::InvalidEndpoint { .. } => "SLC-RMT-001",
            RemoteError::NotLoopback { .. } => "SLC-RMT-002",
            RemoteError::Connect { .. } => "SLC-RMT-003",
            RemoteError::Version { .. } => "SLC-RMT-004",
            RemoteError::Binding { .. } => "SLC-RMT-005",
            RemoteError::Refused { .. } => "SLC-RMT-006",
            RemoteError::Limit { .. } => "SLC-RMT-007",
            RemoteError::Deadline { .. } => "SLC-RMT-008",
            RemoteError::Malformed { .. } => "SLC-RMT-009",
            RemoteError::Ipc { .. } => "SLC-RMT-010",
            RemoteError::Handler(_) => "SLC-RMT-011",
            RemoteError::Worker { code, .. } => CODES
                .iter()
                .copied()
                .find(|c| c == code)
                .unwrap_or("SLC-RMT-011"),
            RemoteError::SessionLost { .. } => "SLC-RMT-012",
            RemoteError::Protocol(_) => "SLC-RMT-013",
            RemoteError::Runtime(_) => "SLC-RMT-014",
            RemoteError::PythonEnvironment { .. } => "SLC-RMT-015",
            RemoteError::Sandbox { .. } => "SLC-RMT-016",
            RemoteError::WorkerStart { .. } => "SLC-RMT-017",
        }
    }

    /// `code: message: cause: cause...`, for interfaces that take text.
    pub fn render(&self) -> String {
        format!("{}: {}", self.code(), self.describe())
    }

    /// `message: cause: cause...`.
    pub fn describe(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    pub(crate) fn limit(what: impl Into<String>, actual: u64, limit: u64) -> Self {
        RemoteError::Limit {
            what: what.into(),
            actual,
            limit,
        }
    }

    pub(crate) fn package(path: &std::path::Path, reason: impl Into<String>) -> Self {
        RemoteError::PythonEnvironment {
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, e: std::io::Error) -> Self {
        Self::package(path, e.to_string())
    }

    pub(crate) fn malformed(what: impl Into<String>, reason: impl Into<String>) -> Self {
        RemoteError::Malformed {
            what: what.into(),
            reason: reason.into(),
        }
    }
}

/// Every code a [`RemoteError`] can have.
pub const CODES: [&str; 17] = [
    "SLC-RMT-001",
    "SLC-RMT-002",
    "SLC-RMT-003",
    "SLC-RMT-004",
    "SLC-RMT-005",
    "SLC-RMT-006",
    "SLC-RMT-007",
    "SLC-RMT-008",
    "SLC-RMT-009",
    "SLC-RMT-010",
    "SLC-RMT-011",
    "SLC-RMT-012",
    "SLC-RMT-013",
    "SLC-RMT-014",
    "SLC-RMT-015",
    "SLC-RMT-016",
    "SLC-RMT-017",
];

/// Results of this crate.
pub type Result<T, E = RemoteError> = std::result::Result<T, E>;
