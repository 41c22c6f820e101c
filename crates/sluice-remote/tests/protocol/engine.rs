//! The engine's side: `RemoteProcessFunction` (through
//! `NativeProcessFunction::process`) against fake workers that misbehave in
//! their first session and serve correctly afterwards. Every misbehaviour
//! is an error with its exact code and message, and the next call opens a
//! fresh session (counted by the fake and by the metrics) that gives the
//! native handler's results.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array, UInt8Array};
use arrow::datatypes::SchemaRef;
use sluice_engine::process::NativeProcessFunction;
use sluice_remote::codec::results::{self, ResultBatches};
use sluice_remote::proto::{worker_frame, Complete, Failure, Hello, Refusal, Welcome};
use sluice_remote::RemoteLimits;

use crate::common::*;

/// Misbehave in the first session as told; check the error, then that the
/// next calls open exactly one fresh session and get the native results.
pub fn misbehave(
    bad_hello: Option<OnHello>,
    bad_call: Option<OnCall>,
    limits: RemoteLimits,
) -> Outcome {
    within(move || {
        let fake = Fake::new(bad_hello, bad_call);
        let sessions = Arc::clone(&fake.sessions);
        let served = Served::fake(fake);
        let (mut f, metrics) = engine(served.endpoint(), limits);
        let e = f
            .process(&acts(3, 1))
            .expect_err("the first session misbehaves");
        let o = engine_outcome(&served.endpoint(), &e);
        assert_eq!(sessions.load(Ordering::SeqCst), 1);
        for first in [4, 7] {
            let a = acts(3, first);
            assert_eq!(f.process(&a).unwrap(), expected(&a));
        }
        assert_eq!(sessions.load(Ordering::SeqCst), 2, "{o:?}");
        assert_eq!(metrics.sessions.load(Ordering::SeqCst), 2);
        assert_eq!(metrics.errors.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.calls.load(Ordering::SeqCst), 2);
        o
    })
}

fn on_hello(f: impl Fn(&Hello) -> worker_frame::Kind + Send + Sync + 'static) -> Option<OnHello> {
    Some(Arc::new(move |h: &Hello| wf(f(h))))
}

fn on_call(f: impl Fn(Complete) -> Vec<Act> + Send + Sync + 'static) -> Option<OnCall> {
    Some(Arc::new(
        move |_: &sluice_remote::proto::Call, c: Complete| f(c),
    ))
}

/// Answer with the correct Complete changed by `f`.
fn answer(f: impl Fn(&mut Complete) + Send + Sync + 'static) -> Option<OnCall> {
    on_call(move |mut c| {
        f(&mut c);
        vec![Act::Send(wf(worker_frame::Kind::Complete(c)))]
    })
}

pub fn bad_complete(f: impl Fn(&mut Complete) + Send + Sync + 'static) -> Outcome {
    misbehave(None, answer(f), engine_limits())
}

pub fn bad_welcome(f: impl Fn(&mut Welcome) + Send + Sync + 'static) -> Outcome {
    misbehave(
        on_hello(move |h| {
            let mut w = match good_welcome(h).kind {
                Some(worker_frame::Kind::Welcome(w)) => w,
                _ => unreachable!(),
            };
            f(&mut w);
            worker_frame::Kind::Welcome(w)
        }),
        None,
        engine_limits(),
    )
}

fn hash() -> String {
    binding().binding_hash
}

#[test]
fn a_welcome_with_another_binding_is_refused_naming_both() {
    let h = hash();
    let ours = format!("'remote_log' version 1 (remote_rust, binding {h})");
    type Case = (fn(&mut Welcome), String);
    let cases: [Case; 4] = [
        (
            |w| w.binding.as_mut().unwrap().name = "other".into(),
            format!("'other' version 1 (remote_rust, binding {h})"),
        ),
        (
            |w| w.binding.as_mut().unwrap().runtime = "python".into(),
            format!("'remote_log' version 1 (python, binding {h})"),
        ),
        (
            |w| w.binding.as_mut().unwrap().binding_hash = "0".into(),
            "'remote_log' version 1 (remote_rust, binding 0)".into(),
        ),
        (|w| w.binding = None, "'' version 0 (, binding )".into()),
    ];
    for (change, theirs) in cases {
        assert_eq!(
            bad_welcome(change),
            Outcome::new(
                "SLC-RMT-005",
                format!("binding mismatch: the engine expects {ours}, the worker serves {theirs}")
            )
        );
    }
}

#[test]
fn a_welcome_with_an_unsupported_version_is_refused() {
    for v in [0, 2, u32::MAX] {
        let o = match v {
            0 => bad_welcome(|w| w.version = 0),
            2 => bad_welcome(|w| w.version = 2),
            _ => bad_welcome(|w| w.version = u32::MAX),
        };
        assert_eq!(
            o,
            Outcome::new(
                "SLC-RMT-004",
                format!("protocol versions do not overlap: the engine speaks 1..=1, the worker chose {v}")
            )
        );
    }
}

pub fn refusal() -> Outcome {
    misbehave(
        on_hello(|_| {
            worker_frame::Kind::Refusal(Refusal {
                code: "SLC-RMT-005".into(),
                message: "not today".into(),
            })
        }),
        None,
        engine_limits(),
    )
}

#[test]
fn a_refusal_is_reported_with_the_workers_code_and_message() {
    assert_eq!(
        refusal(),
        Outcome::new(
            "SLC-RMT-006",
            "the worker refused the session (SLC-RMT-005): not today"
        )
    );
}

#[test]
fn a_first_frame_other_than_welcome_or_refusal_is_a_protocol_violation() {
    let o = misbehave(
        on_hello(|_| {
            worker_frame::Kind::Failure(Failure {
                call_id: 0,
                generation: 0,
                code: "SLC-RMT-011".into(),
                message: "x".into(),
            })
        }),
        None,
        engine_limits(),
    );
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-013",
            "protocol violation: the worker's first frame must be Welcome or Refusal"
        )
    );
}

#[test]
fn garbage_payloads_are_ipc_errors() {
    type Field = fn(&mut Complete) -> &mut Vec<u8>;
    let fields: [(&str, Field); 4] = [
        ("results", |c| &mut c.results_ipc),
        ("mutations", |c| &mut c.mutations_ipc),
        ("timers", |c| &mut c.timers_ipc),
        ("output", |c| &mut c.output_ipc),
    ];
    for (what, field) in fields {
        let o = bad_complete(move |c| *field(c) = b"definitely not arrow".to_vec());
        assert_eq!(o.code, "SLC-RMT-010", "{what}: {o:?}");
        assert!(
            o.message
                .starts_with(&format!("Arrow IPC decoding {what}: ")),
            "{o:?}"
        );
        let o = bad_complete(move |c| {
            let half = field(c).len() / 2;
            field(c).truncate(half);
        });
        assert_eq!(o.code, "SLC-RMT-010", "{what} truncated: {o:?}");
        assert_eq!(
            bad_complete(move |c| field(c).clear()),
            Outcome::new(
                "SLC-RMT-009",
                format!("malformed {what}: the payload is empty; it must be an Arrow IPC stream of one batch")
            )
        );
    }
}

#[test]
fn a_wrong_declared_result_count_is_malformed() {
    for n in [0, 2, 4, u32::MAX] {
        let o = match n {
            0 => bad_complete(|c| c.results = 0),
            2 => bad_complete(|c| c.results = 2),
            4 => bad_complete(|c| c.results = 4),
            _ => bad_complete(|c| c.results = u32::MAX),
        };
        assert_eq!(
            o,
            Outcome::new(
                "SLC-RMT-009",
                format!("malformed response: it declares {n} results for 3 activations")
            )
        );
    }
}

#[test]
fn declared_output_rows_over_the_limit_fail_before_decoding() {
    let want = |n: u32| {
        Outcome::new(
            "SLC-RMT-007",
            format!(
                "output rows in one call (max_output_rows_per_call) is {n}, over the limit of 6"
            ),
        )
    };
    assert_eq!(bad_complete(|c| c.output_rows = 7), want(7));
    // Nothing is decoded: the payloads may be anything.
    assert_eq!(
        bad_complete(|c| {
            c.output_rows = u32::MAX;
            c.results_ipc = b"x".to_vec();
            c.output_ipc = b"x".to_vec();
        }),
        want(u32::MAX)
    );
}

#[test]
fn counts_that_disagree_with_the_payloads_are_malformed() {
    // Results payloads with one row more or less than the 3 declared.
    for ids in [vec![1u64, 2, 3, 3], vec![1, 2]] {
        let n = ids.len();
        let o = bad_batches(move |b| {
            b.results = column(
                results::results_schema(),
                vec![Arc::new(arrow::array::UInt64Array::from(ids.clone()))],
            );
        });
        assert_eq!(
            o,
            Outcome::new(
                "SLC-RMT-009",
                format!("malformed response: it declares 3 results and 3 output rows but carries {n} and 3")
            )
        );
    }
    // The good answer carries 3 output rows.
    for declared in [0u32, 2, 4, 6] {
        let o = match declared {
            0 => bad_complete(|c| c.output_rows = 0),
            2 => bad_complete(|c| c.output_rows = 2),
            4 => bad_complete(|c| c.output_rows = 4),
            _ => bad_complete(|c| c.output_rows = 6),
        };
        assert_eq!(
            o,
            Outcome::new(
                "SLC-RMT-009",
                format!("malformed response: it declares 3 results and {declared} output rows but carries 3 and 3")
            ),
            "declared {declared}"
        );
    }
}

/// A Complete whose batches are the correct ones changed by `f`.
fn bad_batches(f: impl Fn(&mut ResultBatches) + Send + Sync + 'static) -> Outcome {
    misbehave(
        None,
        Some(Arc::new(move |call: &sluice_remote::proto::Call, _| {
            let mut b = good_batches(call);
            f(&mut b);
            let mut c = complete_of(call, &b);
            // Declare what the call expects, whatever the payload holds.
            c.results = call.activations;
            vec![Act::Send(wf(worker_frame::Kind::Complete(c)))]
        })),
        engine_limits(),
    )
}

fn column(schema: SchemaRef, cols: Vec<ArrayRef>) -> RecordBatch {
    RecordBatch::try_new(schema, cols).unwrap()
}

#[test]
fn payloads_of_another_layout_are_malformed() {
    // Two batches in one payload.
    let o = misbehave(
        None,
        Some(Arc::new(
            |call: &sluice_remote::proto::Call, mut c: Complete| {
                let b = good_batches(call);
                let mut two = Vec::new();
                let mut w =
                    arrow::ipc::writer::StreamWriter::try_new(&mut two, &b.mutations.schema())
                        .unwrap();
                w.write(&b.mutations).unwrap();
                w.write(&b.mutations).unwrap();
                w.finish().unwrap();
                drop(w);
                c.mutations_ipc = two;
                vec![Act::Send(wf(worker_frame::Kind::Complete(c)))]
            },
        )),
        engine_limits(),
    );
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed mutations: the stream holds more than one record batch"
        )
    );
    // No batch at all (a schema, then end of stream).
    let o = bad_complete(|c| {
        let mut none = Vec::new();
        let mut w = arrow::ipc::writer::StreamWriter::try_new(&mut none, &results::timers_schema())
            .unwrap();
        w.finish().unwrap();
        drop(w);
        c.timers_ipc = none;
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed timers: the stream holds no record batch"
        )
    );
    // Wrong column types, in each payload.
    let o = bad_batches(|b| {
        b.results = RecordBatch::try_from_iter(vec![(
            "activation_id",
            Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef,
        )])
        .unwrap()
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed results: its columns are (Int64), expected (UInt64)"
        )
    );
    let o = bad_batches(|b| {
        let mut cols = b.output.columns().to_vec();
        cols[2] = Arc::new(StringArray::from(vec!["1", "2", "3"]));
        b.output =
            RecordBatch::try_from_iter(["result", "a", "b", "c", "d", "e"].into_iter().zip(cols))
                .unwrap();
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed output: its columns are (UInt32, Int64, Utf8, Utf8, Int64, Int64), expected (UInt32, Int64, Int64, Utf8, Int64, Int64)"
        )
    );
    let o = bad_batches(|b| {
        b.mutations = b.mutations.project(&[0, 1]).unwrap();
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed mutations: its columns are (UInt32, UInt8), expected (UInt32, UInt8, Int64)"
        )
    );
    // A null in a column declared not null.
    let o = bad_batches(|b| {
        let mut cols = b.output.columns().to_vec();
        cols[1] = Arc::new(Int64Array::from(vec![Some(1), None, Some(3)]));
        b.output =
            RecordBatch::try_from_iter(["result", "a", "b", "c", "d", "e"].into_iter().zip(cols))
                .unwrap();
    });
    assert_eq!(o.code, "SLC-RMT-009", "{o:?}");
    assert!(o.message.starts_with("malformed output: "), "{o:?}");
    assert!(o.message.contains("non-nullable"), "{o:?}");
}

/// Replace the `result` column of mutations, timers or output by `rows`.
fn results_column(which: &'static str, rows: Vec<u32>) -> Outcome {
    bad_batches(move |b| {
        let batch = match which {
            "mutations" => &mut b.mutations,
            "timers" => &mut b.timers,
            _ => &mut b.output,
        };
        let n = rows.len();
        let mut cols: Vec<ArrayRef> = batch
            .columns()
            .iter()
            .map(|c| {
                // Stretch or cut each column to `n` rows by repeating row 0.
                let idx = arrow::array::UInt32Array::from(vec![0u32; n]);
                arrow::compute::take(c.as_ref(), &idx, None).unwrap()
            })
            .collect();
        cols[0] = Arc::new(UInt32Array::from(rows.clone()));
        *batch = column(batch.schema(), cols);
    })
}

#[test]
fn rows_naming_a_result_out_of_range_or_out_of_order_are_malformed() {
    for which in ["mutations", "timers", "output"] {
        // Three rows each, so the declared output count stays right.
        assert_eq!(
            results_column(which, vec![0, 1, 3]),
            Outcome::new(
                "SLC-RMT-009",
                format!("malformed {which}: row 2 names result 3, but the call has 3 results")
            ),
            "{which}"
        );
        assert_eq!(
            results_column(which, vec![0, 2, 1]),
            Outcome::new(
                "SLC-RMT-009",
                format!("malformed {which}: row 2 belongs to result 1 after a row of result 2; rows must be grouped by result in order")
            ),
            "{which}"
        );
        assert_eq!(
            results_column(which, vec![u32::MAX, 0, 0]),
            Outcome::new(
                "SLC-RMT-009",
                format!(
                    "malformed {which}: row 0 names result 4294967295, but the call has 3 results"
                )
            ),
            "{which}"
        );
    }
}

#[test]
fn mutations_and_timers_of_an_unknown_kind_are_malformed() {
    let o = bad_batches(|b| {
        let mut cols = b.mutations.columns().to_vec();
        cols[1] = Arc::new(UInt8Array::from(vec![0, 7, 0]));
        b.mutations = column(b.mutations.schema(), cols);
    });
    assert_eq!(
        o,
        Outcome::new("SLC-RMT-009", "malformed mutations: row 1 has kind 7")
    );
    let o = bad_batches(|b| {
        let mut cols = b.mutations.columns().to_vec();
        cols[1] = Arc::new(UInt8Array::from(vec![1, 1, 1]));
        cols[2] = Arc::new(Int64Array::from(vec![None, Some(5), None]));
        b.mutations = column(b.mutations.schema(), cols);
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed mutations: row 1 has kind 1 with a value"
        )
    );
    let o = bad_batches(|b| {
        let mut cols = b.timers.columns().to_vec();
        let n = b.timers.num_rows();
        cols[3] = Arc::new(Int64Array::from(vec![None; n]));
        b.timers = column(b.timers.schema(), cols);
    });
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-009",
            "malformed timers: row 0 has op 0 without a time"
        )
    );
}

#[test]
fn stale_answers_are_dropped_and_the_right_one_is_used() {
    within(|| {
        let stale = |mut c: Complete| {
            let right = c.clone();
            let mut garbage = c.clone();
            garbage.results_ipc = b"garbage".to_vec();
            let mut other_call = garbage.clone();
            other_call.call_id += 1;
            let mut earlier_call = garbage.clone();
            earlier_call.call_id -= 1;
            c = garbage.clone();
            c.generation += 1;
            let mut old_generation = garbage;
            old_generation.generation -= 1;
            let failure = Failure {
                call_id: right.call_id + 1,
                generation: right.generation,
                code: "SLC-RMT-011".into(),
                message: "late".into(),
            };
            vec![
                Act::Send(wf(worker_frame::Kind::Complete(other_call))),
                Act::Send(wf(worker_frame::Kind::Complete(earlier_call))),
                Act::Send(wf(worker_frame::Kind::Complete(c))),
                Act::Send(wf(worker_frame::Kind::Complete(old_generation))),
                Act::Send(wf(worker_frame::Kind::Failure(failure))),
                Act::Send(wf(worker_frame::Kind::Complete(right))),
            ]
        };
        let fake = Fake::new(
            None,
            Some(Arc::new(move |_: &sluice_remote::proto::Call, c| stale(c))),
        );
        let sessions = Arc::clone(&fake.sessions);
        let served = Served::fake(fake);
        let (mut f, metrics) = engine(served.endpoint(), engine_limits());
        for first in [1, 4, 7] {
            let a = acts(3, first);
            assert_eq!(f.process(&a).unwrap(), expected(&a));
        }
        assert_eq!(sessions.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.sessions.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.errors.load(Ordering::SeqCst), 0);
    });
}

pub fn closed_mid_call() -> Outcome {
    misbehave(None, on_call(|_| vec![Act::Close]), engine_limits())
}

#[test]
fn a_worker_that_closes_the_stream_mid_call_ends_the_session() {
    let o = closed_mid_call();
    assert_eq!(o.code, "SLC-RMT-012");
    assert!(
        o.message
            .starts_with("the session with the worker at unix:/")
            && o.message.ends_with("/worker.sock ended"),
        "{o:?}"
    );
}

pub fn no_answer() -> Outcome {
    let limits = RemoteLimits {
        call_deadline: Duration::from_millis(300),
        ..RemoteLimits::default()
    };
    misbehave(None, on_call(|_| Vec::new()), limits)
}

#[test]
fn a_worker_that_never_answers_fails_the_call_at_the_engines_deadline() {
    assert_eq!(
        no_answer(),
        Outcome::new(
            "SLC-RMT-008",
            "call 1 got no answer within its deadline of 300ms"
        )
    );
}

#[test]
fn a_worker_failure_keeps_the_workers_code() {
    for code in ["SLC-RMT-011", "SLC-RMT-008", "SLC-RMT-007", "SLC-RMT-999"] {
        let c = code.to_string();
        let o = misbehave(
            None,
            on_call(move |good| {
                vec![Act::Send(wf(worker_frame::Kind::Failure(Failure {
                    call_id: good.call_id,
                    generation: good.generation,
                    code: c.clone(),
                    message: "boom".into(),
                })))]
            }),
            engine_limits(),
        );
        // An unknown code is reported as a worker failure.
        let want = if code == "SLC-RMT-999" {
            "SLC-RMT-011"
        } else {
            code
        };
        assert_eq!(
            o,
            Outcome::new(want, "the worker failed call 1: boom"),
            "{code}"
        );
    }
}

#[test]
fn a_welcome_or_refusal_in_place_of_an_answer_is_a_protocol_violation() {
    let o = misbehave(
        None,
        on_call(|_| {
            vec![Act::Send(wf(worker_frame::Kind::Refusal(Refusal {
                code: "SLC-RMT-013".into(),
                message: "x".into(),
            })))]
        }),
        engine_limits(),
    );
    assert_eq!(
        o,
        Outcome::new(
            "SLC-RMT-013",
            "protocol violation: a frame other than Complete or Failure after the handshake"
        )
    );
}

pub fn unreachable_worker() -> Outcome {
    within(|| {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = sluice_remote::RemoteEndpoint::Unix(dir.path().join("nobody.sock"));
        let (mut f, metrics) = engine(endpoint.clone(), engine_limits());
        let e = f.process(&acts(1, 1)).unwrap_err();
        assert_eq!(metrics.errors.load(Ordering::SeqCst), 1);
        engine_outcome(&endpoint, &e)
    })
}

#[test]
fn an_unreachable_worker_cannot_be_reached() {
    let o = unreachable_worker();
    assert_eq!(o.code, "SLC-RMT-003");
    assert!(
        o.message.starts_with("cannot reach the worker at unix:/")
            && o.message.contains("nobody.sock: "),
        "{o:?}"
    );
}

/// Sanity: a correct worker keeps one session for every call.
#[test]
fn a_well_behaved_worker_keeps_one_session() {
    within(|| {
        let fake = Fake::new(None, None);
        let sessions = Arc::clone(&fake.sessions);
        let served = Served::fake(fake);
        let (mut f, metrics) = engine(served.endpoint(), engine_limits());
        for first in [1, 4, 7, 10] {
            let a = acts(4, first);
            assert_eq!(f.process(&a).unwrap(), expected(&a));
        }
        assert_eq!(sessions.load(Ordering::SeqCst), 1);
        assert_eq!(metrics.calls.load(Ordering::SeqCst), 4);
    });
}
