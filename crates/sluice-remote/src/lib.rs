//! Remote process functions: handlers that run in their own process on the
//! database's host, reached over a versioned gRPC stream that carries
//! Arrow IPC payloads (`proto/process_worker.proto` is the protocol's
//! source of truth; `docs/remote-protocol.md` explains it).
//!
//! * [`worker`]: the library a worker binary uses to serve a
//!   [`NativeProcessFunction`](sluice_engine::process::NativeProcessFunction)
//!   (see `examples/remote_counter_worker.rs`).
//! * [`client`]: the engine's handler that forwards calls to a worker.
//! * [`endpoint`]: loopback TCP or Unix socket addresses, nothing else.
//! * [`codec`]: activations and results as bounded Arrow IPC.
//! * [`protocol`]: versions, bindings and limits of the handshake.
//! * [`python`]: supervised, sandboxed Python workers.

pub mod client;
pub mod codec;
pub mod endpoint;
pub mod error;
pub mod protocol;
pub mod python;
pub mod worker;

/// The generated protocol types and gRPC stubs.
#[allow(missing_docs, clippy::all)]
pub mod proto {
    tonic::include_proto!("sluice.process.v1");
}

pub use client::{probe, RemoteMetrics, RemoteProcessFunction, RemoteRuntime, WorkerHost};
pub use endpoint::RemoteEndpoint;
pub use error::{RemoteError, Result};
pub use protocol::RemoteLimits;
pub use python::{PythonDeployment, PythonWorker};
pub use worker::Worker;
