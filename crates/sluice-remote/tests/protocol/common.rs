//! Shared fixtures: a descriptor and activations, a real worker or a fake
//! one on a Unix socket in a tempdir (each in its own thread and runtime),
//! a raw tonic client for the worker's side, and the engine's handler for
//! the engine's side.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, RecordBatch};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use sluice_engine::process::benchmark::{activation_log_descriptor, input_schema, ActivationLog};
use sluice_engine::process::{
    encode_key, NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessFunctionDescriptor, ProcessRuntime, ValueState,
};
use sluice_remote::codec::results::ResultBatches;
use sluice_remote::codec::{activations, ipc, results};
use sluice_remote::proto::process_worker_client::ProcessWorkerClient;
use sluice_remote::proto::process_worker_server::{ProcessWorker, ProcessWorkerServer};
use sluice_remote::proto::{
    engine_frame, worker_frame, Binding, Call, Complete, EngineFrame, Hello, Limits, Welcome,
    WorkerFrame,
};
use sluice_remote::{
    RemoteEndpoint, RemoteLimits, RemoteMetrics, RemoteProcessFunction, RemoteRuntime, Worker,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status, Streaming};

/// Longest any single wait in these tests may take before it fails.
pub const PATIENCE: Duration = Duration::from_secs(10);

/// The function every test serves: the activation log (output, state and
/// timers on every activation), remote, at most 4 activations per call and
/// 6 output rows per call.
pub fn descriptor() -> ProcessFunctionDescriptor {
    let mut d = activation_log_descriptor("remote_log");
    d.runtime = ProcessRuntime::RemoteRust;
    d.limits.max_activations_per_call = 4;
    d.limits.max_output_rows_per_call = 6;
    d
}

pub fn handler() -> ActivationLog {
    ActivationLog { window_ms: 1_000 }
}

pub fn binding() -> Binding {
    sluice_remote::protocol::binding(&descriptor())
}

/// `n` activations: inputs for keys 0.., every third one a timer.
pub fn acts(n: usize, first_id: u64) -> Vec<ProcessActivation> {
    (0..n)
        .map(|i| {
            let key = encode_key(&[Arc::new(Int64Array::from(vec![i as i64]))], 0).unwrap();
            let callback = if i % 3 == 2 {
                ProcessCallback::Timer {
                    name: "flush".into(),
                    at_ms: 5_000,
                }
            } else {
                ProcessCallback::Input(
                    RecordBatch::try_new(
                        input_schema(),
                        vec![
                            Arc::new(Int64Array::from(vec![i as i64])),
                            Arc::new(Int64Array::from(vec![10 * i as i64])),
                        ],
                    )
                    .unwrap(),
                )
            };
            ProcessActivation {
                id: first_id + i as u64,
                key,
                state: match i % 3 {
                    0 => ValueState::Absent,
                    1 => ValueState::Int64(i as i64),
                    _ => ValueState::Null,
                },
                watermark: 4_000,
                callback,
            }
        })
        .collect()
}

/// What the native handler answers.
pub fn expected(a: &[ProcessActivation]) -> Vec<ProcessActivationResult> {
    handler().process(a).unwrap()
}

/// The activations of `a` as a call's IPC payload.
pub fn payload(a: &[ProcessActivation]) -> Vec<u8> {
    let d = descriptor();
    ipc::encode(
        "activations",
        &activations::encode(&d.input_schema, a).unwrap(),
    )
    .unwrap()
}

pub fn hello(generation: u64) -> EngineFrame {
    EngineFrame {
        kind: Some(engine_frame::Kind::Hello(Hello {
            min_version: 1,
            max_version: 1,
            binding: Some(binding()),
            limits: Some(Limits {
                max_message_bytes: 1 << 20,
                max_calls_in_flight: 4,
            }),
            generation,
        })),
    }
}

pub fn call(call_id: u64, generation: u64, a: &[ProcessActivation]) -> EngineFrame {
    EngineFrame {
        kind: Some(engine_frame::Kind::Call(Call {
            call_id,
            generation,
            deadline_ms: 5_000,
            activations: a.len() as u32,
            activations_ipc: payload(a),
        })),
    }
}

/// A stable code and its message: what a test observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub code: String,
    pub message: String,
}

impl Outcome {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
        }
    }
}

/// A server on a Unix socket in a tempdir, in its own thread and runtime;
/// dropping it stops the server (every connection dropped at once).
pub struct Served {
    pub path: PathBuf,
    stop: Arc<tokio::sync::Notify>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

type Serve = Box<
    dyn FnOnce(
            PathBuf,
            Pin<Box<dyn Future<Output = ()> + Send>>,
        ) -> Pin<Box<dyn Future<Output = ()> + Send>>
        + Send,
>;

impl Served {
    fn start(serve: Serve) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("worker.sock");
        let stop = Arc::new(tokio::sync::Notify::new());
        let (p, s) = (path.clone(), Arc::clone(&stop));
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let stopped = Box::pin(async move { s.notified().await });
                serve(p, stopped).await;
            });
            rt.shutdown_background();
        });
        for _ in 0..1_000 {
            if path.exists() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(path.exists(), "the server listens on {}", path.display());
        Self {
            path,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// A real worker.
    pub fn worker(worker: Worker) -> Self {
        Self::start(Box::new(move |path, stopped| {
            Box::pin(async move {
                let endpoint = RemoteEndpoint::Unix(path);
                worker.serve_until(&endpoint, stopped).await.unwrap();
            })
        }))
    }

    /// A fake worker.
    pub fn fake(fake: Fake) -> Self {
        Self::start(Box::new(move |path, stopped| {
            Box::pin(async move {
                let listener = tokio::net::UnixListener::bind(&path).unwrap();
                let incoming = tokio_stream::wrappers::UnixListenerStream::new(listener);
                tonic::transport::Server::builder()
                    .add_service(ProcessWorkerServer::new(fake))
                    .serve_with_incoming_shutdown(incoming, stopped)
                    .await
                    .unwrap();
            })
        }))
    }

    pub fn endpoint(&self) -> RemoteEndpoint {
        RemoteEndpoint::Unix(self.path.clone())
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A raw session with a worker: frames in, frames out, nothing checked.
pub struct Raw {
    pub tx: mpsc::Sender<EngineFrame>,
    rx: Streaming<WorkerFrame>,
}

pub async fn channel(path: &Path) -> Channel {
    let path = path.to_path_buf();
    Endpoint::from_static("http://sluice-worker.invalid")
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(path).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .unwrap()
}

impl Raw {
    /// Open a session whose first frame is `first`.
    pub async fn open(path: &Path, first: EngineFrame) -> Self {
        let mut client = ProcessWorkerClient::new(channel(path).await);
        let (tx, rx) = mpsc::channel(16);
        tx.send(first).await.unwrap();
        let rx = tokio::time::timeout(PATIENCE, client.session(ReceiverStream::new(rx)))
            .await
            .expect("the worker accepts the stream")
            .unwrap()
            .into_inner();
        Self { tx, rx }
    }

    pub async fn send(&self, f: EngineFrame) {
        self.tx.send(f).await.unwrap();
    }

    /// The next frame (None: the stream ended), failing past [`PATIENCE`].
    pub async fn next(&mut self) -> Option<WorkerFrame> {
        tokio::time::timeout(PATIENCE, self.rx.message())
            .await
            .expect("the worker answers within the test's patience")
            .unwrap_or_else(|s| panic!("the stream broke: {s:?}"))
    }

    /// The next frame, which must be a Welcome.
    pub async fn welcome(&mut self) -> Welcome {
        match self.next().await.and_then(|f| f.kind) {
            Some(worker_frame::Kind::Welcome(w)) => w,
            other => panic!("expected Welcome, got {other:?}"),
        }
    }

    /// The next frame as an outcome: a Refusal or Failure (with its
    /// call_id and generation), which must then be the only answer.
    pub async fn refusal(&mut self) -> Outcome {
        let o = match self.next().await.and_then(|f| f.kind) {
            Some(worker_frame::Kind::Refusal(r)) => Outcome::new(&r.code, r.message),
            other => panic!("expected Refusal, got {other:?}"),
        };
        assert!(self.next().await.is_none(), "a refusal ends the stream");
        o
    }

    pub async fn failure(&mut self, call_id: u64, generation: u64) -> Outcome {
        match self.next().await.and_then(|f| f.kind) {
            Some(worker_frame::Kind::Failure(x)) => {
                assert_eq!((x.call_id, x.generation), (call_id, generation));
                Outcome::new(&x.code, x.message)
            }
            other => panic!("expected Failure, got {other:?}"),
        }
    }

    pub async fn complete(&mut self, call_id: u64, generation: u64) -> Complete {
        match self.next().await.and_then(|f| f.kind) {
            Some(worker_frame::Kind::Complete(c)) => {
                assert_eq!((c.call_id, c.generation), (call_id, generation));
                c
            }
            other => panic!("expected Complete, got {other:?}"),
        }
    }
}

/// The correct Complete for `call` (the activation log's results).
pub fn good_batches(call: &Call) -> ResultBatches {
    let d = descriptor();
    let batch = ipc::decode(
        "activations",
        &call.activations_ipc,
        &activations::schema(&d.input_schema),
        call.activations as usize,
    )
    .unwrap();
    let a = activations::decode(&d.input_schema, &batch).unwrap();
    results::encode(&d.output_schema, &expected(&a)).unwrap()
}

pub fn complete_of(call: &Call, b: &ResultBatches) -> Complete {
    Complete {
        call_id: call.call_id,
        generation: call.generation,
        results: b.results.num_rows() as u32,
        output_rows: b.output.num_rows() as u32,
        results_ipc: ipc::encode("results", &b.results).unwrap(),
        mutations_ipc: ipc::encode("mutations", &b.mutations).unwrap(),
        timers_ipc: ipc::encode("timers", &b.timers).unwrap(),
        output_ipc: ipc::encode("output", &b.output).unwrap(),
    }
}

pub fn wf(kind: worker_frame::Kind) -> WorkerFrame {
    WorkerFrame { kind: Some(kind) }
}

/// What a fake worker does with a call.
pub enum Act {
    Send(WorkerFrame),
    /// End the response stream (as a worker that exits cleanly mid-call).
    Close,
}

pub type OnHello = Arc<dyn Fn(&Hello) -> WorkerFrame + Send + Sync>;
/// Given the call and its correct answer.
pub type OnCall = Arc<dyn Fn(&Call, Complete) -> Vec<Act> + Send + Sync>;

/// A worker that misbehaves in its first session only (`bad_hello`,
/// `bad_call`) and serves the activation log correctly in every later one;
/// it counts sessions.
#[derive(Clone)]
pub struct Fake {
    pub sessions: Arc<AtomicUsize>,
    bad_hello: Option<OnHello>,
    bad_call: Option<OnCall>,
}

pub fn good_welcome(_: &Hello) -> WorkerFrame {
    wf(worker_frame::Kind::Welcome(Welcome {
        version: 1,
        binding: Some(binding()),
        limits: Some(Limits {
            max_message_bytes: 1 << 20,
            max_calls_in_flight: 1,
        }),
    }))
}

impl Fake {
    pub fn new(bad_hello: Option<OnHello>, bad_call: Option<OnCall>) -> Self {
        Self {
            sessions: Arc::new(AtomicUsize::new(0)),
            bad_hello,
            bad_call,
        }
    }
}

type FrameStream = Pin<Box<dyn futures::Stream<Item = Result<WorkerFrame, Status>> + Send>>;

#[tonic::async_trait]
impl ProcessWorker for Fake {
    type SessionStream = FrameStream;

    async fn session(
        &self,
        request: Request<Streaming<EngineFrame>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let mut inbound = request.into_inner();
        let n = self.sessions.fetch_add(1, Ordering::SeqCst) + 1;
        let first = n == 1;
        let on_hello = match (&self.bad_hello, first) {
            (Some(h), true) => Arc::clone(h),
            _ => Arc::new(good_welcome) as OnHello,
        };
        let on_call: OnCall = match (&self.bad_call, first) {
            (Some(c), true) => Arc::clone(c),
            _ => Arc::new(|_: &Call, good: Complete| {
                vec![Act::Send(wf(worker_frame::Kind::Complete(good)))]
            }),
        };
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            let Ok(Some(EngineFrame {
                kind: Some(engine_frame::Kind::Hello(h)),
            })) = inbound.message().await
            else {
                return;
            };
            let answer = on_hello(&h);
            let refused = matches!(answer.kind, Some(worker_frame::Kind::Refusal(_)));
            if tx.send(answer).await.is_err() || refused {
                return;
            }
            while let Ok(Some(f)) = inbound.message().await {
                let Some(engine_frame::Kind::Call(c)) = f.kind else {
                    return;
                };
                let good = complete_of(&c, &good_batches(&c));
                for act in on_call(&c, good) {
                    match act {
                        Act::Send(f) => {
                            if tx.send(f).await.is_err() {
                                return;
                            }
                        }
                        Act::Close => return,
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx).map(Ok))))
    }
}

/// The engine's handler for the function at `endpoint`.
pub fn engine(
    endpoint: RemoteEndpoint,
    limits: RemoteLimits,
) -> (RemoteProcessFunction, Arc<RemoteMetrics>) {
    let metrics = Arc::new(RemoteMetrics::default());
    let f = RemoteProcessFunction::new(
        Arc::new(descriptor()),
        endpoint,
        limits,
        RemoteRuntime::new().unwrap(),
        Arc::clone(&metrics),
    );
    (f, metrics)
}

pub fn engine_limits() -> RemoteLimits {
    RemoteLimits {
        call_deadline: Duration::from_secs(5),
        ..RemoteLimits::default()
    }
}

/// Split the engine's error text `remote worker at E: CODE: message`.
pub fn engine_outcome(endpoint: &RemoteEndpoint, error: &str) -> Outcome {
    let prefix = format!("remote worker at {endpoint}: ");
    let rest = error
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("'{error}' starts with '{prefix}'"));
    let (code, message) = rest
        .split_once(": ")
        .unwrap_or_else(|| panic!("'{rest}' is 'CODE: message'"));
    Outcome::new(code, message)
}

/// Run `f` on a thread, failing if it takes longer than [`PATIENCE`].
pub fn within<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(PATIENCE * 3) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("the test took longer than {:?}", PATIENCE * 3),
    }
}

/// Decode a Complete the way the engine does (without its checks).
pub fn decode_complete(c: &Complete, n: usize) -> Vec<ProcessActivationResult> {
    let d = descriptor();
    let b = ResultBatches {
        results: ipc::decode("results", &c.results_ipc, &results::results_schema(), n).unwrap(),
        mutations: ipc::decode(
            "mutations",
            &c.mutations_ipc,
            &results::mutations_schema(),
            1000,
        )
        .unwrap(),
        timers: ipc::decode("timers", &c.timers_ipc, &results::timers_schema(), 1000).unwrap(),
        output: ipc::decode(
            "output",
            &c.output_ipc,
            &results::output_schema(&d.output_schema),
            1000,
        )
        .unwrap(),
    };
    results::decode(&d.output_schema, &b).unwrap()
}

/// Run `fut` to completion on a fresh runtime, within [`PATIENCE`] (x3).
pub fn block<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    within(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let out = rt.block_on(fut);
        rt.shutdown_background();
        out
    })
}
