//! The worker library: serve a handler to Sluice engines over the remote
//! protocol.
//!
//! A worker implements the same [`NativeProcessFunction`] trait as an
//! in-process handler and serves it with [`Worker::serve`] on a Unix
//! socket or a loopback TCP address. Each engine-side handler opens one
//! session; the worker makes one handler per session with its factory, so
//! a session behaves exactly like a native handler of the same function.
//!
//! Per session the worker checks the handshake (protocol version range and
//! binding), then answers each call with one `Complete` or `Failure`:
//! calls beyond `max_calls_in_flight` fail at once with a limit error (no
//! unbounded queue), a call past its deadline fails with a deadline error
//! (the handler is not interrupted, but its late answer is dropped), and
//! a response larger than the engine's frame limit is replaced by a
//! limit error rather than sent.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use futures::StreamExt;
use sluice_engine::process::{NativeProcessFunction, ProcessFunctionDescriptor};
use tokio::sync::{mpsc, Semaphore};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::codec::{activations, ipc, results};
use crate::endpoint::RemoteEndpoint;
use crate::error::{RemoteError, Result};
use crate::proto::process_worker_server::{ProcessWorker, ProcessWorkerServer};
use crate::proto::{
    engine_frame, worker_frame, Call, Complete, EngineFrame, Failure, Refusal, Welcome, WorkerFrame,
};
use crate::protocol::{self, RemoteLimits};

/// Makes one handler per session.
pub type WorkerFactory = Arc<dyn Fn() -> Box<dyn NativeProcessFunction> + Send + Sync>;

/// A handler served over the remote protocol.
pub struct Worker {
    descriptor: Arc<ProcessFunctionDescriptor>,
    factory: WorkerFactory,
    limits: RemoteLimits,
}

impl Worker {
    /// Serve handlers made by `factory` for `descriptor` (whose runtime
    /// must be `RemoteRust`: the engine checks the binding, runtime
    /// included, at every handshake).
    pub fn new<F, H>(descriptor: ProcessFunctionDescriptor, factory: F) -> Self
    where
        F: Fn() -> H + Send + Sync + 'static,
        H: NativeProcessFunction + 'static,
    {
        Self {
            descriptor: Arc::new(descriptor),
            factory: Arc::new(move || Box::new(factory())),
            limits: RemoteLimits::default(),
        }
    }

    /// Replace the worker's limits (frame size it accepts, calls in
    /// flight per session, and the longest deadline it grants a call).
    pub fn limits(mut self, limits: RemoteLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Serve on `endpoint` until the process ends or the listener fails.
    pub async fn serve(self, endpoint: &RemoteEndpoint) -> Result<()> {
        self.serve_until(endpoint, std::future::pending()).await
    }

    /// Serve on `endpoint` until `shutdown` completes. A Unix socket file
    /// is created with mode 0600 (only this user may connect) and removed
    /// afterwards; a stale socket file left by a dead worker is replaced.
    pub async fn serve_until(
        self,
        endpoint: &RemoteEndpoint,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<()> {
        let max = self.limits.max_message_bytes;
        let service = ProcessWorkerServer::new(Service {
            worker: Arc::new(self),
        })
        .max_decoding_message_size(max)
        // Answers are checked against the engine's announced limit.
        .max_encoding_message_size(usize::MAX);
        let router = tonic::transport::Server::builder().add_service(service);
        let serving = match endpoint {
            RemoteEndpoint::Tcp(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(RemoteError::Runtime)?;
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await
            }
            RemoteEndpoint::Unix(path) => {
                remove_stale_socket(path)?;
                let listener =
                    tokio::net::UnixListener::bind(path).map_err(RemoteError::Runtime)?;
                restrict_to_owner(path)?;
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                let served = router
                    .serve_with_incoming_shutdown(incoming, shutdown)
                    .await;
                let _ = std::fs::remove_file(path);
                served
            }
        };
        serving.map_err(|e| RemoteError::Runtime(std::io::Error::other(e)))
    }
}

fn remove_stale_socket(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).map_err(RemoteError::Runtime)
        }
        Ok(_) => Err(RemoteError::InvalidEndpoint {
            endpoint: format!("unix:{}", path.display()),
            reason: "the path exists and is not a socket".into(),
        }),
        Err(_) => Ok(()),
    }
}

fn restrict_to_owner(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(RemoteError::Runtime)
}

struct Service {
    worker: Arc<Worker>,
}

type FrameStream =
    Pin<Box<dyn futures::Stream<Item = std::result::Result<WorkerFrame, Status>> + Send>>;

#[tonic::async_trait]
impl ProcessWorker for Service {
    type SessionStream = FrameStream;

    async fn session(
        &self,
        request: Request<Streaming<EngineFrame>>,
    ) -> std::result::Result<Response<Self::SessionStream>, Status> {
        let inbound = request.into_inner();
        let worker = Arc::clone(&self.worker);
        let (tx, rx) = mpsc::channel(worker.limits.max_calls_in_flight as usize + 2);
        tokio::spawn(async move {
            if let Err(e) = run_session(&worker, inbound, &tx).await {
                tracing::warn!(error = %e.render(), "remote session ended");
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map(Ok))))
    }
}

fn frame(kind: worker_frame::Kind) -> WorkerFrame {
    WorkerFrame { kind: Some(kind) }
}

async fn run_session(
    worker: &Arc<Worker>,
    mut inbound: Streaming<EngineFrame>,
    tx: &mpsc::Sender<WorkerFrame>,
) -> Result<()> {
    let lost = |source| RemoteError::SessionLost {
        endpoint: "the engine".into(),
        source,
    };
    let first = inbound
        .message()
        .await
        .map_err(|s| lost(Some(s)))?
        .ok_or_else(|| lost(None))?;
    let hello = match first.kind {
        Some(engine_frame::Kind::Hello(h)) => h,
        _ => {
            let e = RemoteError::Protocol("the first frame of a session must be Hello".into());
            refuse(tx, &e).await;
            return Err(e);
        }
    };
    let ours = protocol::binding(&worker.descriptor);
    let agreed = protocol::negotiate(hello.min_version, hello.max_version).and_then(|v| {
        let theirs = hello.binding.clone().unwrap_or_default();
        protocol::check_binding(&theirs, &ours).map(|()| v)
    });
    let version = match agreed {
        Ok(v) => v,
        Err(e) => {
            refuse(tx, &e).await;
            return Err(e);
        }
    };
    let engine_max_bytes = hello.limits.map_or(usize::MAX, |l| {
        usize::try_from(l.max_message_bytes).unwrap_or(usize::MAX)
    });
    let welcome = Welcome {
        version,
        binding: Some(ours),
        limits: Some(worker.limits.to_proto()),
    };
    if tx
        .send(frame(worker_frame::Kind::Welcome(welcome)))
        .await
        .is_err()
    {
        return Ok(());
    }
    let session = Arc::new(Session {
        worker: Arc::clone(worker),
        handler: Arc::new(parking_lot::Mutex::new((worker.factory)())),
        generation: hello.generation,
        engine_max_bytes,
        input: Arc::clone(&worker.descriptor.input_schema),
        output: Arc::clone(&worker.descriptor.output_schema),
    });
    let permits = Arc::new(Semaphore::new(worker.limits.max_calls_in_flight as usize));
    while let Some(f) = inbound.message().await.map_err(|s| lost(Some(s)))? {
        let call = match f.kind {
            Some(engine_frame::Kind::Call(c)) => c,
            _ => {
                let e = RemoteError::Protocol("only Call frames may follow the handshake".into());
                refuse(tx, &e).await;
                return Err(e);
            }
        };
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            let limit = worker.limits.max_calls_in_flight;
            let e = RemoteError::limit(
                "calls in flight on this session",
                u64::from(limit) + 1,
                u64::from(limit),
            );
            let _ = tx.send(failure(call.call_id, call.generation, &e)).await;
            continue;
        };
        let session = Arc::clone(&session);
        let tx = tx.clone();
        tokio::spawn(async move {
            let answer = session.answer(call).await;
            drop(permit);
            let _ = tx.send(answer).await;
        });
    }
    Ok(())
}

async fn refuse(tx: &mpsc::Sender<WorkerFrame>, e: &RemoteError) {
    let refusal = Refusal {
        code: e.code().to_string(),
        message: e.to_string(),
    };
    let _ = tx.send(frame(worker_frame::Kind::Refusal(refusal))).await;
}

fn failure(call_id: u64, generation: u64, e: &RemoteError) -> WorkerFrame {
    frame(worker_frame::Kind::Failure(Failure {
        call_id,
        generation,
        code: e.code().to_string(),
        message: e.describe(),
    }))
}

struct Session {
    worker: Arc<Worker>,
    handler: Arc<parking_lot::Mutex<Box<dyn NativeProcessFunction>>>,
    generation: u64,
    engine_max_bytes: usize,
    input: SchemaRef,
    output: SchemaRef,
}

impl Session {
    async fn answer(&self, call: Call) -> WorkerFrame {
        let (id, generation) = (call.call_id, call.generation);
        match self.complete(call).await {
            Ok(f) => f,
            Err(e) => failure(id, generation, &e),
        }
    }

    async fn complete(&self, call: Call) -> Result<WorkerFrame> {
        if call.generation != self.generation {
            return Err(RemoteError::Protocol(format!(
                "call {} carries generation {}, the session's is {}",
                call.call_id, call.generation, self.generation
            )));
        }
        let max = self.worker.descriptor.limits.max_activations_per_call;
        if call.activations as usize > max {
            return Err(RemoteError::limit(
                "activations in one call",
                u64::from(call.activations),
                max as u64,
            ));
        }
        let wire = activations::schema(&self.input);
        // Bounded by the function's limit: a payload that carries more
        // rows than declared (but within the limit) is malformed, below.
        let batch = ipc::decode("activations", &call.activations_ipc, &wire, max)?;
        if batch.num_rows() != call.activations as usize {
            return Err(RemoteError::malformed(
                "activations",
                format!(
                    "the call declares {} activations but carries {}",
                    call.activations,
                    batch.num_rows()
                ),
            ));
        }
        let acts = activations::decode(&self.input, &batch)?;
        // The worker grants at most its own deadline, whatever the engine asks.
        let deadline = Duration::from_millis(u64::from(call.deadline_ms))
            .min(self.worker.limits.call_deadline);
        let handler = Arc::clone(&self.handler);
        let run = tokio::task::spawn_blocking(move || {
            let mut h = handler.lock();
            let out = std::panic::catch_unwind(AssertUnwindSafe(|| h.process(&acts)));
            out.map_err(|p| sluice_engine::panic::panic_message(&*p))
        });
        let results = match tokio::time::timeout(deadline, run).await {
            Err(_) => {
                return Err(RemoteError::Deadline {
                    call_id: call.call_id,
                    deadline,
                })
            }
            Ok(Err(join)) => return Err(RemoteError::Runtime(std::io::Error::other(join))),
            Ok(Ok(Err(panic))) => {
                return Err(RemoteError::Handler(format!("handler panicked: {panic}")))
            }
            Ok(Ok(Ok(Err(e)))) => return Err(RemoteError::Handler(format!("handler error: {e}"))),
            Ok(Ok(Ok(Ok(r)))) => r,
        };
        let b = results::encode(&self.output, &results)?;
        let complete = Complete {
            call_id: call.call_id,
            generation: call.generation,
            results: count(b.results.num_rows())?,
            output_rows: count(b.output.num_rows())?,
            results_ipc: ipc::encode("results", &b.results)?,
            mutations_ipc: ipc::encode("mutations", &b.mutations)?,
            timers_ipc: ipc::encode("timers", &b.timers)?,
            output_ipc: ipc::encode("output", &b.output)?,
        };
        let answer = frame(worker_frame::Kind::Complete(complete));
        let size = prost::Message::encoded_len(&answer);
        if size > self.engine_max_bytes {
            return Err(RemoteError::limit(
                "the response (bytes)",
                size as u64,
                self.engine_max_bytes as u64,
            ));
        }
        Ok(answer)
    }
}

fn count(n: usize) -> Result<u32> {
    u32::try_from(n)
        .map_err(|_| RemoteError::limit("rows in one payload", n as u64, u64::from(u32::MAX)))
}
