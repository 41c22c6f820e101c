//! Codec properties: random activations and results round-trip exactly
//! through encode -> Arrow IPC -> decode; random bytes, and every (or a
//! random) single-byte change or truncation of a valid payload, give the
//! decoders an error, never a panic.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use proptest::prelude::*;
use sluice_engine::process::{
    ProcessActivation, ProcessActivationResult, ProcessCallback, TimerOperation, ValueMutation,
    ValueState,
};
use sluice_remote::codec::results::{self, ResultBatches};
use sluice_remote::codec::{activations, ipc};
use sluice_remote::RemoteError;

/// An input with one column of each kind the wire must carry, nullable
/// and not.
fn input() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("i", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("f", DataType::Float64, false),
        Field::new("b", DataType::Boolean, true),
        Field::new("raw", DataType::Binary, true),
        Field::new("n", DataType::Int32, false),
    ]))
}

fn output() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("v", DataType::Int64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("n", DataType::Int64, false),
    ]))
}

fn int64() -> impl Strategy<Value = i64> {
    prop_oneof![
        any::<i64>(),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(0),
        Just(-1)
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,12}",
        Just(String::new()),
        Just("ü€😀\u{0}".to_string())
    ]
}

fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::num::f64::NORMAL
            | prop::num::f64::SUBNORMAL
            | prop::num::f64::ZERO
            | prop::num::f64::INFINITE,
        Just(f64::MAX),
        Just(f64::MIN),
    ]
}

type Row = (
    Option<i64>,
    Option<String>,
    f64,
    Option<bool>,
    Option<Vec<u8>>,
    i32,
);

fn row() -> impl Strategy<Value = Row> {
    (
        prop::option::of(int64()),
        prop::option::of(text()),
        float(),
        prop::option::of(any::<bool>()),
        prop::option::of(prop::collection::vec(any::<u8>(), 0..8)),
        any::<i32>(),
    )
}

fn row_batch(r: Row) -> RecordBatch {
    let cols: Vec<ArrayRef> = vec![
        Arc::new(Int64Array::from(vec![r.0])),
        Arc::new(StringArray::from(vec![r.1])),
        Arc::new(Float64Array::from(vec![r.2])),
        Arc::new(BooleanArray::from(vec![r.3])),
        Arc::new(BinaryArray::from(vec![r.4.as_deref()])),
        Arc::new(Int32Array::from(vec![r.5])),
    ];
    RecordBatch::try_new(input(), cols).unwrap()
}

fn state() -> impl Strategy<Value = ValueState> {
    prop_oneof![
        Just(ValueState::Absent),
        Just(ValueState::Null),
        int64().prop_map(ValueState::Int64),
    ]
}

fn activation() -> impl Strategy<Value = ProcessActivation> {
    let callback = prop_oneof![
        row().prop_map(|r| ProcessCallback::Input(row_batch(r))),
        (text(), int64()).prop_map(|(name, at_ms)| ProcessCallback::Timer { name, at_ms }),
    ];
    (
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..16),
        state(),
        int64(),
        callback,
    )
        .prop_map(|(id, key, state, watermark, callback)| ProcessActivation {
            id,
            key,
            state,
            watermark,
            callback,
        })
}

fn output_batch() -> impl Strategy<Value = Option<RecordBatch>> {
    let rows = prop::collection::vec(
        (prop::option::of(int64()), prop::option::of(text()), int64()),
        0..4,
    );
    let all_null = (1usize..4, int64()).prop_map(|(n, v)| vec![(None, None, v); n]);
    prop::option::of(prop_oneof![rows, all_null].prop_map(|rows| {
        let cols: Vec<ArrayRef> = vec![
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.0).collect::<Vec<_>>(),
            )),
            Arc::new(StringArray::from(
                rows.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
            )),
            Arc::new(Int64Array::from(
                rows.iter().map(|r| r.2).collect::<Vec<_>>(),
            )),
        ];
        RecordBatch::try_new(output(), cols).unwrap()
    }))
}

fn result() -> impl Strategy<Value = ProcessActivationResult> {
    let mutation = prop_oneof![
        prop::option::of(int64()).prop_map(ValueMutation::Set),
        Just(ValueMutation::Clear),
    ];
    let timer = prop_oneof![
        (text(), int64()).prop_map(|(name, at_ms)| TimerOperation::Set { name, at_ms }),
        text().prop_map(|name| TimerOperation::Delete { name }),
    ];
    (
        any::<u64>(),
        output_batch(),
        prop::collection::vec(mutation, 0..3),
        prop::collection::vec(timer, 0..3),
    )
        .prop_map(
            |(activation_id, output, mutations, timers)| ProcessActivationResult {
                activation_id,
                output,
                mutations,
                timers,
            },
        )
}

const BOUND: usize = 1 << 16;

fn decode_activations(bytes: &[u8]) -> Result<Vec<ProcessActivation>, RemoteError> {
    let input = input();
    let batch = ipc::decode("activations", bytes, &activations::schema(&input), BOUND)?;
    activations::decode(&input, &batch)
}

fn encode_results(r: &[ProcessActivationResult]) -> [Vec<u8>; 4] {
    let b = results::encode(&output(), r).unwrap();
    [
        ipc::encode("results", &b.results).unwrap(),
        ipc::encode("mutations", &b.mutations).unwrap(),
        ipc::encode("timers", &b.timers).unwrap(),
        ipc::encode("output", &b.output).unwrap(),
    ]
}

fn decode_results(p: &[Vec<u8>; 4]) -> Result<Vec<ProcessActivationResult>, RemoteError> {
    let b = ResultBatches {
        results: ipc::decode("results", &p[0], &results::results_schema(), BOUND)?,
        mutations: ipc::decode("mutations", &p[1], &results::mutations_schema(), BOUND)?,
        timers: ipc::decode("timers", &p[2], &results::timers_schema(), BOUND)?,
        output: ipc::decode("output", &p[3], &results::output_schema(&output()), BOUND)?,
    };
    results::decode(&output(), &b)
}

/// The wire cannot tell an empty output from none: both decode as none.
fn normalized(mut r: Vec<ProcessActivationResult>) -> Vec<ProcessActivationResult> {
    for x in &mut r {
        if x.output.as_ref().is_some_and(|b| b.num_rows() == 0) {
            x.output = None;
        }
    }
    r
}

/// Every code a decoder may answer with: never anything else.
fn check_error(e: &RemoteError) {
    assert!(
        ["SLC-RMT-007", "SLC-RMT-009", "SLC-RMT-010"].contains(&e.code()),
        "{}",
        e.render()
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn activations_round_trip_exactly(a in prop::collection::vec(activation(), 0..12)) {
        let wire = activations::encode(&input(), &a).unwrap();
        let bytes = ipc::encode("activations", &wire).unwrap();
        prop_assert_eq!(decode_activations(&bytes).unwrap(), a);
    }

    #[test]
    fn results_round_trip_exactly(r in prop::collection::vec(result(), 0..12)) {
        let got = decode_results(&encode_results(&r)).unwrap();
        prop_assert_eq!(got, normalized(r));
    }

    #[test]
    fn random_bytes_never_panic_a_decoder(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        if let Err(e) = decode_activations(&bytes) {
            check_error(&e);
        }
        for i in 0..4 {
            let mut p = encode_results(&[]);
            p[i].clone_from(&bytes);
            if let Err(e) = decode_results(&p) {
                check_error(&e);
            }
        }
    }

    #[test]
    fn a_changed_or_cut_activations_payload_never_panics(
        a in prop::collection::vec(activation(), 1..6),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let bytes = ipc::encode("activations", &activations::encode(&input(), &a).unwrap()).unwrap();
        let mut changed = bytes.clone();
        changed[at.index(bytes.len())] = byte;
        if let Err(e) = decode_activations(&changed) {
            check_error(&e);
        }
        if let Err(e) = decode_activations(&bytes[..cut.index(bytes.len())]) {
            check_error(&e);
        }
    }

    #[test]
    fn a_changed_or_cut_results_payload_never_panics(
        r in prop::collection::vec(result(), 1..6),
        which in 0usize..4,
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let p = encode_results(&r);
        let mut changed = p.clone();
        let n = changed[which].len();
        changed[which][at.index(n)] = byte;
        if let Err(e) = decode_results(&changed) {
            check_error(&e);
        }
        let mut cut_p = p;
        cut_p[which].truncate(cut.index(n));
        if let Err(e) = decode_results(&cut_p) {
            check_error(&e);
        }
    }
}

/// A fixed, rich call and answer, for the exhaustive sweeps below.
fn fixed() -> (Vec<u8>, [Vec<u8>; 4]) {
    let row = |i: i64| {
        row_batch((
            Some(i),
            Some(format!("s{i}")),
            i as f64,
            Some(i % 2 == 0),
            Some(vec![i as u8]),
            i as i32,
        ))
    };
    let a: Vec<ProcessActivation> = (0..3)
        .map(|i| ProcessActivation {
            id: i as u64,
            key: vec![i as u8; 3],
            state: [ValueState::Absent, ValueState::Null, ValueState::Int64(i)][i as usize],
            watermark: 100,
            callback: if i == 2 {
                ProcessCallback::Timer {
                    name: "t".into(),
                    at_ms: 5,
                }
            } else {
                ProcessCallback::Input(row(i))
            },
        })
        .collect();
    let out = RecordBatch::try_new(
        output(),
        vec![
            Arc::new(Int64Array::from(vec![Some(1), None])),
            Arc::new(StringArray::from(vec![None, Some("x")])),
            Arc::new(Int64Array::from(vec![1, 2])),
        ],
    )
    .unwrap();
    let r: Vec<ProcessActivationResult> = (0..3)
        .map(|i| ProcessActivationResult {
            activation_id: i,
            output: (i != 1).then(|| out.clone()),
            mutations: vec![
                [
                    ValueMutation::Set(Some(1)),
                    ValueMutation::Set(None),
                    ValueMutation::Clear,
                ][i as usize],
            ],
            timers: vec![
                TimerOperation::Set {
                    name: "t".into(),
                    at_ms: 9,
                },
                TimerOperation::Delete { name: "u".into() },
            ],
        })
        .collect();
    let acts = ipc::encode("activations", &activations::encode(&input(), &a).unwrap()).unwrap();
    assert_eq!(decode_activations(&acts).unwrap(), a);
    let res = encode_results(&r);
    assert_eq!(decode_results(&res).unwrap(), r);
    (acts, res)
}

/// Every byte of every payload set to each of a few values, and every
/// truncation: the decoders answer (an error, or a well-formed value),
/// never panic.
#[test]
fn every_single_byte_change_and_truncation_is_answered_without_a_panic() {
    let (acts, res) = fixed();
    let mut errors = 0usize;
    let mut count = |r: Result<(), RemoteError>| {
        if let Err(e) = r {
            check_error(&e);
            errors += 1;
        }
    };
    for at in 0..acts.len() {
        for v in [0x00, 0xff, acts[at] ^ 0x01, acts[at] ^ 0x80, 0x7f] {
            let mut c = acts.clone();
            c[at] = v;
            count(decode_activations(&c).map(drop));
        }
    }
    for cut in 0..acts.len() {
        count(decode_activations(&acts[..cut]).map(drop));
    }
    for which in 0..4 {
        let n = res[which].len();
        for at in 0..n {
            for v in [
                0x00,
                0xff,
                res[which][at] ^ 0x01,
                res[which][at] ^ 0x80,
                0x7f,
            ] {
                let mut c = res.clone();
                c[which][at] = v;
                count(decode_results(&c).map(drop));
            }
        }
        for cut in 0..n {
            let mut c = res.clone();
            c[which].truncate(cut);
            count(decode_results(&c).map(drop));
        }
    }
    assert!(errors > 0);
}

/// Declared lengths are checked against the payload before Arrow
/// allocates anything: a ten-byte payload declaring 2 GiB of metadata, or
/// a message whose body is longer than what follows (or negative), is
/// refused at once.
#[test]
fn declared_lengths_beyond_the_payload_are_refused_before_allocating() {
    let started = std::time::Instant::now();
    let e =
        decode_activations(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0, 0]).unwrap_err();
    assert_eq!(
        e.render(),
        "SLC-RMT-010: Arrow IPC decoding activations: Ipc error: message 0 declares 2147483647 bytes of metadata, but 2 remain"
    );
    // The same without the continuation marker (the legacy framing).
    let e = decode_activations(&[0xff, 0xff, 0xff, 0x7f, 0, 0]).unwrap_err();
    assert_eq!(
        e.render(),
        "SLC-RMT-010: Arrow IPC decoding activations: Ipc error: message 0 declares 2147483647 bytes of metadata, but 2 remain"
    );
    let e = decode_activations(&[0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x80]).unwrap_err();
    assert_eq!(
        e.render(),
        "SLC-RMT-010: Arrow IPC decoding activations: Ipc error: message 0 declares -2147483648 bytes of metadata, but 0 remain"
    );
    // A valid stream whose batch's body is cut: the body length is checked.
    let (acts, _) = fixed();
    let schema_len = {
        let meta = i32::from_le_bytes([acts[4], acts[5], acts[6], acts[7]]) as usize;
        8 + meta
    };
    let cut = &acts[..acts.len() - 16];
    let e = decode_activations(cut).unwrap_err();
    assert_eq!(e.code(), "SLC-RMT-010");
    assert!(
        e.render().contains("message 1 declares a body of ") && e.render().contains(" remain"),
        "{} (schema message {schema_len} bytes)",
        e.render()
    );
    assert!(started.elapsed() < std::time::Duration::from_millis(500));
}
