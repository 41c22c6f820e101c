//! The worker's side: a real `Worker` on a Unix socket, driven frame by
//! frame by a raw tonic client. Each scenario returns what the worker
//! answered; the tests assert it exactly, and that the session (or the
//! next one) still works where it should.

use std::time::Duration;

use sluice_engine::process::{NativeProcessFunction, ProcessActivation, ProcessActivationResult};
use sluice_remote::proto::{engine_frame, Binding, Call, EngineFrame, Hello, Limits};
use sluice_remote::{RemoteLimits, Worker};

use crate::common::*;

/// What the served handler does.
#[derive(Clone, Copy)]
pub enum Mode {
    Log,
    Sleep(Duration),
    Fail,
    Panic,
}

struct Handler(Mode);

impl NativeProcessFunction for Handler {
    fn process(&mut self, a: &[ProcessActivation]) -> Result<Vec<ProcessActivationResult>, String> {
        match self.0 {
            Mode::Log => handler().process(a),
            Mode::Sleep(d) => {
                std::thread::sleep(d);
                handler().process(a)
            }
            Mode::Fail => Err("no fraud today".into()),
            Mode::Panic => panic!("handler blew up"),
        }
    }
}

pub fn worker(mode: Mode, limits: RemoteLimits) -> Served {
    Served::worker(Worker::new(descriptor(), move || Handler(mode)).limits(limits))
}

fn log_worker() -> Served {
    worker(Mode::Log, RemoteLimits::default())
}

fn hello_with(f: impl FnOnce(&mut Hello)) -> EngineFrame {
    let mut frame = hello(7);
    if let Some(engine_frame::Kind::Hello(h)) = &mut frame.kind {
        f(h);
    }
    frame
}

fn call_with(call_id: u64, generation: u64, n: usize, f: impl FnOnce(&mut Call)) -> EngineFrame {
    let mut frame = call(call_id, generation, &acts(n, 1));
    if let Some(engine_frame::Kind::Call(c)) = &mut frame.kind {
        f(c);
    }
    frame
}

/// Open a session (Hello generation 7), check the Welcome, send `calls`,
/// and return the Failure of the last one.
async fn fail_call(served: &Served, calls: Vec<EngineFrame>) -> Outcome {
    let mut s = Raw::open(&served.path, hello(7)).await;
    let w = s.welcome().await;
    assert_eq!((w.version, w.binding), (1, Some(binding())));
    let (mut id, mut generation) = (0, 0);
    for c in calls {
        if let Some(engine_frame::Kind::Call(c)) = &c.kind {
            (id, generation) = (c.call_id, c.generation);
        }
        s.send(c).await;
    }
    s.failure(id, generation).await
}

/// After a failure the same session still answers a good call correctly
/// (call id 99).
async fn still_answers(served: &Served) {
    let mut s = Raw::open(&served.path, hello(8)).await;
    s.welcome().await;
    let a = acts(3, 1);
    s.send(call(99, 8, &a)).await;
    let c = s.complete(99, 8).await;
    assert_eq!(decode_complete(&c, 3), expected(&a));
}

pub fn versions(min: u32, max: u32) -> Outcome {
    block(async move {
        let served = log_worker();
        let mut s = Raw::open(
            &served.path,
            hello_with(|h| {
                h.min_version = min;
                h.max_version = max;
            }),
        )
        .await;
        s.refusal().await
    })
}

#[test]
fn no_common_version_is_refused_naming_both_ranges() {
    for (min, max) in [(2, 3), (0, 0), (2, 1), (u32::MAX, u32::MAX), (1, 0)] {
        assert_eq!(
            versions(min, max),
            Outcome::new(
                "SLC-RMT-004",
                format!(
                    "protocol versions do not overlap: the engine speaks {min}..={max}, the worker 1..=1"
                )
            ),
            "{min}..={max}"
        );
    }
}

#[test]
fn a_wider_range_is_welcomed_with_the_highest_common_version() {
    block(async {
        let served = log_worker();
        for (min, max) in [(0, 1), (1, 1), (1, 9), (0, u32::MAX)] {
            let mut s = Raw::open(
                &served.path,
                hello_with(|h| {
                    h.min_version = min;
                    h.max_version = max;
                }),
            )
            .await;
            let w = s.welcome().await;
            assert_eq!(w.version, 1);
            assert_eq!(
                w.limits,
                Some(Limits {
                    max_message_bytes: 64 * 1024 * 1024,
                    max_calls_in_flight: 1
                })
            );
        }
    });
}

pub fn call_before_hello() -> Outcome {
    block(async {
        let served = log_worker();
        let mut s = Raw::open(&served.path, call(1, 7, &acts(1, 1))).await;
        s.refusal().await
    })
}

#[test]
fn a_call_before_hello_is_a_protocol_violation() {
    assert_eq!(
        call_before_hello(),
        Outcome::new(
            "SLC-RMT-013",
            "protocol violation: the first frame of a session must be Hello"
        )
    );
    let empty = block(async {
        let served = log_worker();
        let mut s = Raw::open(&served.path, EngineFrame { kind: None }).await;
        s.refusal().await
    });
    assert_eq!(empty, call_before_hello());
}

#[test]
fn a_second_hello_is_a_protocol_violation_that_ends_the_session() {
    let o = block(async {
        let served = log_worker();
        let mut s = Raw::open(&served.path, hello(7)).await;
        s.welcome().await;
        s.send(hello(7)).await;
        s.refusal().await
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-013",
            "protocol violation: only Call frames may follow the handshake"
        )
    );
}

pub fn wrong_binding(f: fn(&mut Binding)) -> Outcome {
    block(async move {
        let served = log_worker();
        let mut s = Raw::open(&served.path, hello_with(|h| f(h.binding.as_mut().unwrap()))).await;
        s.refusal().await
    })
}

#[test]
fn a_binding_that_differs_in_any_field_is_refused_naming_both() {
    let ours = binding();
    let hash = ours.binding_hash.clone();
    let worker_side = format!("'remote_log' version 1 (remote_rust, binding {hash})");
    type Case = (fn(&mut Binding), String);
    let cases: [Case; 5] = [
        (
            |b| b.name = "other".into(),
            format!("'other' version 1 (remote_rust, binding {hash})"),
        ),
        (
            |b| b.version = 2,
            format!("'remote_log' version 2 (remote_rust, binding {hash})"),
        ),
        (
            |b| b.binding_hash = "deadbeef".into(),
            "'remote_log' version 1 (remote_rust, binding deadbeef)".into(),
        ),
        (
            |b| b.runtime = "python".into(),
            format!("'remote_log' version 1 (python, binding {hash})"),
        ),
        (
            |b| *b = Binding::default(),
            "'' version 0 (, binding )".into(),
        ),
    ];
    for (change, engine_side) in cases {
        assert_eq!(
            wrong_binding(change),
            Outcome::new(
                "SLC-RMT-005",
                format!(
                    "binding mismatch: the engine expects {engine_side}, the worker serves {worker_side}"
                )
            )
        );
    }
    // No binding at all is the empty one.
    let none = block(async {
        let served = log_worker();
        let mut s = Raw::open(&served.path, hello_with(|h| h.binding = None)).await;
        s.refusal().await
    });
    assert_eq!(none, wrong_binding(|b| *b = Binding::default()));
}

pub fn stale_generation() -> Outcome {
    block(async {
        let served = log_worker();
        let o = fail_call(&served, vec![call(1, 6, &acts(2, 1))]).await;
        still_answers(&served).await;
        o
    })
}

#[test]
fn a_call_with_another_generation_fails_and_the_session_goes_on() {
    assert_eq!(
        stale_generation(),
        Outcome::new(
            "SLC-RMT-013",
            "protocol violation: call 1 carries generation 6, the session's is 7"
        )
    );
    // In the same session, the next call with the right generation works.
    block(async {
        let served = log_worker();
        let mut s = Raw::open(&served.path, hello(7)).await;
        s.welcome().await;
        for g in [0, 8, u64::MAX] {
            s.send(call(1, g, &acts(1, 1))).await;
            assert_eq!(s.failure(1, g).await.code, "SLC-RMT-013");
        }
        let a = acts(2, 1);
        s.send(call(2, 7, &a)).await;
        assert_eq!(decode_complete(&s.complete(2, 7).await, 2), expected(&a));
    });
}

pub fn calls_in_flight() -> Outcome {
    block(async {
        let limits = RemoteLimits {
            max_calls_in_flight: 1,
            ..RemoteLimits::default()
        };
        let served = worker(Mode::Sleep(Duration::from_millis(400)), limits);
        let mut s = Raw::open(&served.path, hello(7)).await;
        s.welcome().await;
        let a = acts(2, 1);
        s.send(call(1, 7, &a)).await;
        s.send(call(2, 7, &acts(1, 3))).await;
        // The second fails at once, before the first completes.
        let o = s.failure(2, 7).await;
        let c = s.complete(1, 7).await;
        assert_eq!(decode_complete(&c, 2), expected(&a));
        // The slot is free again.
        s.send(call(3, 7, &a)).await;
        s.complete(3, 7).await;
        o
    })
}

#[test]
fn a_call_beyond_the_calls_in_flight_fails_at_once() {
    assert_eq!(
        calls_in_flight(),
        Outcome::new(
            "SLC-RMT-007",
            "calls in flight on this session is 2, over the limit of 1"
        )
    );
}

pub fn too_many_activations(garbage: bool) -> Outcome {
    block(async move {
        let served = log_worker();
        let frame = call_with(1, 7, 5, |c| {
            if garbage {
                c.activations_ipc = b"not arrow at all".to_vec();
            }
        });
        fail_call(&served, vec![frame]).await
    })
}

#[test]
fn more_activations_than_the_function_allows_fail_before_decoding() {
    let want = Outcome::new(
        "SLC-RMT-007",
        "activations in one call is 5, over the limit of 4",
    );
    assert_eq!(too_many_activations(false), want);
    // The payload is not even looked at.
    assert_eq!(too_many_activations(true), want);
}

pub fn count_disagrees(declared: u32, carried: usize) -> Outcome {
    block(async move {
        let served = log_worker();
        let o = fail_call(
            &served,
            vec![call_with(1, 7, carried, |c| c.activations = declared)],
        )
        .await;
        still_answers(&served).await;
        o
    })
}

#[test]
fn a_declared_activation_count_that_disagrees_with_the_payload_is_malformed() {
    for (declared, carried) in [(3, 2), (1, 2), (0, 1), (4, 0), (1, 0)] {
        assert_eq!(
            count_disagrees(declared, carried),
            Outcome::new(
                "SLC-RMT-009",
                format!(
                    "malformed activations: the call declares {declared} activations but carries {carried}"
                )
            ),
            "declared {declared}, carried {carried}"
        );
    }
}

pub fn bad_payload(bytes: Vec<u8>) -> Outcome {
    block(async move {
        let served = log_worker();
        let o = fail_call(
            &served,
            vec![call_with(1, 7, 2, move |c| c.activations_ipc = bytes)],
        )
        .await;
        still_answers(&served).await;
        o
    })
}

#[test]
fn garbage_activations_are_an_ipc_error() {
    let good = payload(&acts(2, 1));
    let garbage: Vec<Vec<u8>> = vec![
        b"garbage".to_vec(),
        vec![0xff; 64],
        good[..good.len() / 2].to_vec(),
        good[..9].to_vec(),
    ];
    for bytes in garbage {
        let o = bad_payload(bytes.clone());
        assert_eq!(o.code, "SLC-RMT-010", "{bytes:?}: {o:?}");
        assert!(
            o.message.starts_with("Arrow IPC decoding activations: "),
            "{o:?}"
        );
    }
    assert_eq!(
        bad_payload(Vec::new()),
        Outcome::new(
            "SLC-RMT-009",
            "malformed activations: the payload is empty; it must be an Arrow IPC stream of one batch"
        )
    );
}

#[test]
fn activations_of_another_layout_are_malformed() {
    use arrow::array::{Int64Array, RecordBatch};
    use sluice_remote::codec::{activations, ipc};
    let d = descriptor();
    let good = activations::encode(&d.input_schema, &acts(2, 1)).unwrap();
    // One column less.
    let fewer = good
        .project(&(0..good.num_columns() - 1).collect::<Vec<_>>())
        .unwrap();
    let o = bad_payload(ipc::encode("t", &fewer).unwrap());
    assert_eq!(o.code, "SLC-RMT-009");
    assert_eq!(
        o.message,
        "malformed activations: its columns are (UInt64, Binary, UInt8, Int64, Int64, Utf8, Int64, Int64), \
         expected (UInt64, Binary, UInt8, Int64, Int64, Utf8, Int64, Int64, Int64)"
    );
    // Two batches.
    let mut two = Vec::new();
    {
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut two, &good.schema()).unwrap();
        w.write(&good).unwrap();
        w.write(&good).unwrap();
        w.finish().unwrap();
    }
    assert_eq!(
        bad_payload(two),
        Outcome::new(
            "SLC-RMT-009",
            "malformed activations: the stream holds more than one record batch"
        )
    );
    // State kind 2 with no value.
    let mut cols = good.columns().to_vec();
    cols[2] = std::sync::Arc::new(arrow::array::UInt8Array::from(vec![2, 2]));
    cols[3] = std::sync::Arc::new(Int64Array::from(vec![None, Some(1)]));
    let bad = RecordBatch::try_new(good.schema(), cols).unwrap();
    assert_eq!(
        bad_payload(ipc::encode("t", &bad).unwrap()),
        Outcome::new(
            "SLC-RMT-009",
            "malformed activations: activation 1 has state kind 2 with a value absent"
        )
    );
}

pub fn handler_fails(mode: Mode) -> Outcome {
    block(async move {
        let served = worker(mode, RemoteLimits::default());
        let o = fail_call(&served, vec![call(1, 7, &acts(2, 1))]).await;
        o
    })
}

#[test]
fn a_handler_error_or_panic_is_a_worker_failure_with_its_message() {
    assert_eq!(
        handler_fails(Mode::Fail),
        Outcome::new("SLC-RMT-011", "handler error: no fraud today")
    );
    assert_eq!(
        handler_fails(Mode::Panic),
        Outcome::new("SLC-RMT-011", "handler panicked: handler blew up")
    );
}

pub fn worker_deadline(worker_ms: u64, engine_ms: u32) -> Outcome {
    block(async move {
        let limits = RemoteLimits {
            call_deadline: Duration::from_millis(worker_ms),
            ..RemoteLimits::default()
        };
        let served = worker(Mode::Sleep(Duration::from_millis(600)), limits);
        let started = std::time::Instant::now();
        let o = fail_call(
            &served,
            vec![call_with(1, 7, 1, |c| c.deadline_ms = engine_ms)],
        )
        .await;
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{:?}",
            started.elapsed()
        );
        o
    })
}

#[test]
fn a_handler_slower_than_the_deadline_fails_with_the_shorter_deadline() {
    let want = |ms: u64| {
        Outcome::new(
            "SLC-RMT-008",
            format!("call 1 got no answer within its deadline of {ms}ms"),
        )
    };
    // The worker's own deadline bounds what the engine asks for...
    assert_eq!(worker_deadline(100, 5_000), want(100));
    // ...and the engine's, if shorter, is used.
    assert_eq!(worker_deadline(5_000, 50), want(50));
    assert_eq!(worker_deadline(5_000, 0), want(0));
}
