//! The engine's side: a handler that forwards each call to a worker.
//!
//! [`RemoteProcessFunction`] implements the engine's handler trait, so the
//! keyed processor drives it exactly like a native handler: it validates
//! the decoded response with the same rules, all or nothing, and a failed,
//! late or malformed response is an error that applies nothing.
//!
//! The compute thread is synchronous, so a call blocks it until the worker
//! answers or the deadline passes, as a native handler's own work would;
//! the session's I/O runs on a small runtime the client owns
//! ([`RemoteRuntime`]), never on the caller's.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sluice_engine::process::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessFunctionDescriptor,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::Streaming;

use crate::codec::results::{self, ResultBatches};
use crate::codec::{activations, ipc};
use crate::endpoint::RemoteEndpoint;
use crate::error::{RemoteError, Result};
use crate::proto::process_worker_client::ProcessWorkerClient;
use crate::proto::{engine_frame, worker_frame, Call, Complete, EngineFrame, Hello, WorkerFrame};
use crate::protocol::{self, RemoteLimits};

/// Session generations: unique in the process, so a response from an
/// earlier session (before a restart or recovery) can never be taken for
/// an answer to a later one.
static GENERATIONS: AtomicU64 = AtomicU64::new(1);

/// The tokio runtime that carries remote sessions. Dropping it never
/// blocks, so it may go away inside the engine's own async context.
pub struct RemoteRuntime {
    runtime: Option<tokio::runtime::Runtime>,
}

impl RemoteRuntime {
    /// A runtime with one worker thread.
    pub fn new() -> Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sluice-remote")
            .enable_all()
            .build()
            .map_err(RemoteError::Runtime)?;
        Ok(Arc::new(Self {
            runtime: Some(runtime),
        }))
    }

    /// Run `fut` on this runtime and wait for it from a synchronous caller
    /// (which may itself be inside another runtime).
    ///
    /// The answer comes back over a plain channel, not the task's
    /// `JoinHandle`: polling a `JoinHandle` from inside the caller's tokio
    /// task spends that task's cooperative budget, and once the budget is
    /// gone tokio defers the wake-up until the caller yields, which a
    /// blocked caller never does (the compute thread hung after a few
    /// hundred calls that way).
    fn block_on<T: Send + 'static>(
        &self,
        fut: impl Future<Output = Result<T>> + Send + 'static,
    ) -> Result<T> {
        let Some(rt) = &self.runtime else {
            return Err(RemoteError::Protocol(
                "the remote runtime is shut down".into(),
            ));
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv().unwrap_or_else(|_| {
            Err(RemoteError::Runtime(std::io::Error::other(
                "the remote call's task ended without an answer (the runtime shut down or the task panicked)",
            )))
        })
    }
}

impl Drop for RemoteRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

/// One open session with a worker.
struct Session {
    tx: mpsc::Sender<EngineFrame>,
    rx: Streaming<WorkerFrame>,
    generation: u64,
    /// The worker's own frame limit.
    worker_max_bytes: usize,
    next_call: u64,
}

impl Session {
    /// Connect and shake hands: the worker must speak a common version and
    /// serve exactly `binding`.
    async fn open(
        endpoint: RemoteEndpoint,
        binding: crate::proto::Binding,
        limits: RemoteLimits,
    ) -> Result<Self> {
        let channel = endpoint.connect().await?;
        // Frames sent are checked against the worker's announced limit
        // (below, per call), frames received against our own.
        let mut client = ProcessWorkerClient::new(channel)
            .max_decoding_message_size(limits.max_message_bytes)
            .max_encoding_message_size(usize::MAX);
        let generation = GENERATIONS.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel(limits.max_calls_in_flight as usize + 1);
        let hello = Hello {
            min_version: protocol::MIN_VERSION,
            max_version: protocol::MAX_VERSION,
            binding: Some(binding.clone()),
            limits: Some(limits.to_proto()),
            generation,
        };
        let lost = |source| RemoteError::SessionLost {
            endpoint: endpoint.to_string(),
            source,
        };
        tx.send(EngineFrame {
            kind: Some(engine_frame::Kind::Hello(hello)),
        })
        .await
        .map_err(|_| lost(None))?;
        let handshake = async {
            let mut rx = client
                .session(ReceiverStream::new(rx))
                .await
                .map_err(|s| lost(Some(s)))?
                .into_inner();
            let first = rx
                .message()
                .await
                .map_err(|s| lost(Some(s)))?
                .ok_or_else(|| lost(None))?;
            Ok::<_, RemoteError>((rx, first))
        };
        let (rx, first) = tokio::time::timeout(limits.call_deadline, handshake)
            .await
            .map_err(|_| RemoteError::Deadline {
                call_id: 0,
                deadline: limits.call_deadline,
            })??;
        let welcome = match first.kind {
            Some(worker_frame::Kind::Welcome(w)) => w,
            Some(worker_frame::Kind::Refusal(r)) => {
                return Err(RemoteError::Refused {
                    code: r.code,
                    message: r.message,
                })
            }
            _ => {
                return Err(RemoteError::Protocol(
                    "the worker's first frame must be Welcome or Refusal".into(),
                ))
            }
        };
        if welcome.version < protocol::MIN_VERSION || welcome.version > protocol::MAX_VERSION {
            return Err(RemoteError::Version {
                engine_min: protocol::MIN_VERSION,
                engine_max: protocol::MAX_VERSION,
                worker: format!("chose {}", welcome.version),
            });
        }
        protocol::check_binding(&binding, &welcome.binding.unwrap_or_default())?;
        let worker_max_bytes = welcome.limits.map_or(usize::MAX, |l| {
            usize::try_from(l.max_message_bytes).unwrap_or(usize::MAX)
        });
        Ok(Session {
            tx,
            rx,
            generation,
            worker_max_bytes,
            next_call: 1,
        })
    }

    /// Send one call and wait for its answer; frames of other calls or
    /// generations (answers that arrived after their deadline) are dropped.
    async fn call(
        &mut self,
        activations_ipc: Vec<u8>,
        count: u32,
        limits: RemoteLimits,
        endpoint: &str,
    ) -> Result<Complete> {
        let call_id = self.next_call;
        self.next_call += 1;
        let call = Call {
            call_id,
            generation: self.generation,
            deadline_ms: limits.deadline_ms(),
            activations: count,
            activations_ipc,
        };
        let frame = EngineFrame {
            kind: Some(engine_frame::Kind::Call(call)),
        };
        let size = prost::Message::encoded_len(&frame);
        if size > self.worker_max_bytes {
            return Err(RemoteError::limit(
                "the call (bytes)",
                size as u64,
                self.worker_max_bytes as u64,
            ));
        }
        let lost = |source| RemoteError::SessionLost {
            endpoint: endpoint.to_string(),
            source,
        };
        let exchange = async {
            self.tx.send(frame).await.map_err(|_| lost(None))?;
            loop {
                let f = self
                    .rx
                    .message()
                    .await
                    .map_err(|s| lost(Some(s)))?
                    .ok_or_else(|| lost(None))?;
                let (id, generation) = match &f.kind {
                    Some(worker_frame::Kind::Complete(c)) => (c.call_id, c.generation),
                    Some(worker_frame::Kind::Failure(x)) => (x.call_id, x.generation),
                    _ => {
                        return Err(RemoteError::Protocol(
                            "a frame other than Complete or Failure after the handshake".into(),
                        ))
                    }
                };
                if id != call_id || generation != self.generation {
                    tracing::warn!(
                        call = id,
                        generation,
                        expected = call_id,
                        "dropping a stale remote response"
                    );
                    continue;
                }
                return match f.kind {
                    Some(worker_frame::Kind::Complete(c)) => Ok(c),
                    Some(worker_frame::Kind::Failure(x)) => Err(RemoteError::Worker {
                        call_id,
                        code: x.code,
                        message: x.message,
                    }),
                    _ => Err(RemoteError::Protocol("unreachable frame kind".into())),
                };
            }
        };
        tokio::time::timeout(limits.call_deadline, exchange)
            .await
            .map_err(|_| RemoteError::Deadline {
                call_id,
                deadline: limits.call_deadline,
            })?
    }
}

/// Open a session with the worker at `endpoint` and close it again: what
/// declaring a remote function does, so a missing or mismatched worker is
/// reported at once, by name.
pub async fn probe(
    descriptor: &ProcessFunctionDescriptor,
    endpoint: &RemoteEndpoint,
    limits: RemoteLimits,
) -> Result<()> {
    Session::open(endpoint.clone(), protocol::binding(descriptor), limits)
        .await
        .map(drop)
}

/// What hosts a worker, for workers the engine runs itself (Python): the
/// client waits for it before opening a session and tells it when a call
/// failed.
pub trait WorkerHost: Send + Sync {
    /// Block until the worker can take a session, for at most `timeout`.
    /// `Err` says why it cannot (with the worker's last output).
    fn wait_ready(&self, timeout: std::time::Duration) -> Result<()>;

    /// A call failed with `error`; the host may kill and restart a worker
    /// that stopped answering. The return is nothing: the call has failed
    /// either way.
    fn call_failed(&self, error: &RemoteError);
}

/// Counters of one remote function, shared by its handlers.
#[derive(Debug, Default)]
pub struct RemoteMetrics {
    /// Calls answered.
    pub calls: AtomicU64,
    /// Calls that failed (any error).
    pub errors: AtomicU64,
    /// Sessions opened (the first, and one after each failure).
    pub sessions: AtomicU64,
    /// Total round-trip time of answered calls, in microseconds.
    pub call_micros: AtomicU64,
}

/// A handler that runs in a remote worker.
pub struct RemoteProcessFunction {
    descriptor: Arc<ProcessFunctionDescriptor>,
    endpoint: RemoteEndpoint,
    limits: RemoteLimits,
    runtime: Arc<RemoteRuntime>,
    metrics: Arc<RemoteMetrics>,
    session: Option<Session>,
    host: Option<Arc<dyn WorkerHost>>,
}

impl RemoteProcessFunction {
    /// A handler for `descriptor` served at `endpoint`; the session opens
    /// on the first call (and again after any failure).
    pub fn new(
        descriptor: Arc<ProcessFunctionDescriptor>,
        endpoint: RemoteEndpoint,
        limits: RemoteLimits,
        runtime: Arc<RemoteRuntime>,
        metrics: Arc<RemoteMetrics>,
    ) -> Self {
        Self {
            descriptor,
            endpoint,
            limits,
            runtime,
            metrics,
            session: None,
            host: None,
        }
    }

    /// The same, for a worker run by `host`.
    pub fn hosted(mut self, host: Arc<dyn WorkerHost>) -> Self {
        self.host = Some(host);
        self
    }

    fn call(&mut self, acts: &[ProcessActivation]) -> Result<Vec<ProcessActivationResult>> {
        let d = Arc::clone(&self.descriptor);
        let wire = activations::encode(&d.input_schema, acts)?;
        let payload = ipc::encode("activations", &wire)?;
        let count = u32::try_from(acts.len()).map_err(|_| {
            RemoteError::limit(
                "activations in one call",
                acts.len() as u64,
                u64::from(u32::MAX),
            )
        })?;
        let (endpoint, limits) = (self.endpoint.clone(), self.limits);
        let session = self.session.take();
        if session.is_none() {
            if let Some(host) = &self.host {
                host.wait_ready(limits.call_deadline)?;
            }
        }
        let metrics = Arc::clone(&self.metrics);
        let started = Instant::now();
        let (session, complete) = self.runtime.block_on(async move {
            let mut session = match session {
                Some(s) => s,
                None => {
                    metrics.sessions.fetch_add(1, Ordering::Relaxed);
                    Session::open(endpoint.clone(), protocol::binding(&d), limits).await?
                }
            };
            let complete = session
                .call(payload, count, limits, &endpoint.to_string())
                .await?;
            Ok((session, complete))
        })?;
        let results = decode_complete(&self.descriptor, acts.len(), &complete)?;
        // Only a whole, well-formed answer keeps the session; any error
        // above dropped it, so a late answer can never reach another call.
        self.session = Some(session);
        self.metrics
            .call_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        Ok(results)
    }
}

/// Check a `Complete`'s declared counts against the call and the
/// function's limits before decoding any payload, then decode.
fn decode_complete(
    d: &ProcessFunctionDescriptor,
    activations: usize,
    c: &Complete,
) -> Result<Vec<ProcessActivationResult>> {
    if c.results as usize != activations {
        return Err(RemoteError::malformed(
            "response",
            format!(
                "it declares {} results for {activations} activations",
                c.results
            ),
        ));
    }
    let max_rows = d.limits.max_output_rows_per_call;
    if c.output_rows as usize > max_rows {
        return Err(RemoteError::limit(
            "output rows in one call (max_output_rows_per_call)",
            u64::from(c.output_rows),
            max_rows as u64,
        ));
    }
    let per = |n: usize| activations.saturating_mul(n.max(1));
    let batches = ResultBatches {
        // Results and output are bounded by the function's limits; a
        // payload carrying other counts than declared is malformed, below.
        results: ipc::decode(
            "results",
            &c.results_ipc,
            &results::results_schema(),
            activations.max(d.limits.max_activations_per_call),
        )?,
        mutations: ipc::decode(
            "mutations",
            &c.mutations_ipc,
            &results::mutations_schema(),
            per(d.limits.max_state_changes_per_activation),
        )?,
        timers: ipc::decode(
            "timers",
            &c.timers_ipc,
            &results::timers_schema(),
            per(2 * d.limits.max_timers_per_key),
        )?,
        output: ipc::decode(
            "output",
            &c.output_ipc,
            &results::output_schema(&d.output_schema),
            max_rows,
        )?,
    };
    if batches.output.num_rows() != c.output_rows as usize
        || batches.results.num_rows() != activations
    {
        return Err(RemoteError::malformed(
            "response",
            format!(
                "it declares {} results and {} output rows but carries {} and {}",
                c.results,
                c.output_rows,
                batches.results.num_rows(),
                batches.output.num_rows()
            ),
        ));
    }
    results::decode(&d.output_schema, &batches)
}

impl NativeProcessFunction for RemoteProcessFunction {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> std::result::Result<Vec<ProcessActivationResult>, String> {
        match self.call(activations) {
            Ok(r) => {
                self.metrics.calls.fetch_add(1, Ordering::Relaxed);
                Ok(r)
            }
            Err(e) => {
                self.metrics.errors.fetch_add(1, Ordering::Relaxed);
                if let Some(host) = &self.host {
                    host.call_failed(&e);
                }
                tracing::warn!(function = %self.descriptor.name, endpoint = %self.endpoint, error = %e.render(), "remote call failed");
                Err(format!(
                    "remote worker at {}: {}",
                    self.endpoint,
                    e.render()
                ))
            }
        }
    }
}
