//! Native process functions through the test harness: engine-owned state,
//! timers, ordering, all-or-nothing validation, snapshot and restore.

use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use sluice_engine::operators::{restore_part, snapshot_part};
use sluice_engine::process::{
    encode_key, NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionLimits,
    ProcessFunctionTestHarness, ProcessRuntime, TimerOperation, ValueMutation, ValueState,
};

fn input(keys: &[&str], amounts: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("user", DataType::Utf8, false),
        Field::new("amount", DataType::Int64, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from(keys.to_vec())),
            Arc::new(Int64Array::from(amounts.to_vec())),
        ],
    )
    .unwrap()
}

fn out_schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![Field::new(
        "count",
        DataType::Int64,
        false,
    )]))
}

fn descriptor(limits: ProcessFunctionLimits) -> ProcessFunctionDescriptor {
    ProcessFunctionDescriptor {
        name: "counter".into(),
        version: 1,
        input_schema: input(&[], &[]).schema(),
        key_columns: vec!["user".into()],
        output_schema: out_schema(),
        initial_state: None,
        limits,
        determinism: ProcessDeterminism::ReplaySafe,
        runtime: ProcessRuntime::Native,
    }
}

fn key(user: &str) -> Vec<u8> {
    encode_key(&[Arc::new(StringArray::from(vec![user]))], 0).unwrap()
}

/// Counts rows per key; emits the new count; on amounts >= 1000 arms a
/// 10 ms "review" timer; the timer emits -1 and clears the state.
#[derive(Default)]
struct Counter {
    calls: Vec<Vec<u64>>,
    /// Misbehave on the next call.
    fault: Option<Fault>,
}

#[derive(Clone, Copy)]
enum Fault {
    TooManyRows,
    TwoMutations,
    LongTimerName,
    TooManyTimers,
    WrongSchema,
    NullInNotNull,
    MissingResult,
    WrongId,
    Error,
    Panic,
}

impl NativeProcessFunction for Counter {
    fn process(
        &mut self,
        acts: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        self.calls.push(acts.iter().map(|a| a.id).collect());
        let fault = self.fault.take();
        let mut out = Vec::new();
        for a in acts {
            let mut r = ProcessActivationResult {
                activation_id: a.id,
                ..Default::default()
            };
            match &a.callback {
                ProcessCallback::Input(row) => {
                    let n = match a.state {
                        ValueState::Int64(n) => n + 1,
                        _ => 1,
                    };
                    r.mutations.push(ValueMutation::Set(Some(n)));
                    let amount = row.column(1).as_primitive::<Int64Type>().value(0);
                    if amount >= 1000 {
                        r.timers.push(TimerOperation::Set {
                            name: "review".into(),
                            at_ms: a.watermark.max(0) + 10,
                        });
                    }
                    r.output = Some(
                        RecordBatch::try_new(
                            out_schema(),
                            vec![Arc::new(Int64Array::from(vec![n]))],
                        )
                        .unwrap(),
                    );
                }
                ProcessCallback::Timer { .. } => {
                    r.mutations.push(ValueMutation::Clear);
                    r.output = Some(
                        RecordBatch::try_new(
                            out_schema(),
                            vec![Arc::new(Int64Array::from(vec![-1]))],
                        )
                        .unwrap(),
                    );
                }
            }
            out.push(r);
        }
        match fault {
            None => {}
            Some(Fault::TooManyRows) => {
                out[0].output = Some(
                    RecordBatch::try_new(
                        out_schema(),
                        vec![Arc::new(Int64Array::from(vec![1, 2, 3]))],
                    )
                    .unwrap(),
                )
            }
            Some(Fault::TwoMutations) => out[0].mutations.push(ValueMutation::Set(None)),
            Some(Fault::LongTimerName) => out[0].timers.push(TimerOperation::Set {
                name: "x".repeat(100),
                at_ms: 1,
            }),
            Some(Fault::TooManyTimers) => {
                for i in 0..5 {
                    out[0].timers.push(TimerOperation::Set {
                        name: format!("t{i}"),
                        at_ms: 1,
                    })
                }
            }
            Some(Fault::WrongSchema) => out[0].output = Some(input(&["a"], &[1])),
            Some(Fault::NullInNotNull) => {
                let nullable = Arc::new(Schema::new(vec![Field::new(
                    "count",
                    DataType::Int64,
                    true,
                )]));
                out[0].output = Some(
                    RecordBatch::try_new(nullable, vec![Arc::new(Int64Array::from(vec![None]))])
                        .unwrap(),
                )
            }
            Some(Fault::MissingResult) => {
                out.pop();
            }
            Some(Fault::WrongId) => out[0].activation_id += 100,
            Some(Fault::Error) => return Err("boom".into()),
            Some(Fault::Panic) => panic!("handler bug"),
        }
        Ok(out)
    }
}

fn counts(h: &ProcessFunctionTestHarness<Counter>) -> Vec<i64> {
    h.outputs()
        .iter()
        .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
        .collect()
}

fn limits() -> ProcessFunctionLimits {
    ProcessFunctionLimits {
        max_activations_per_call: 8,
        max_output_rows_per_activation: 2,
        max_output_rows_per_call: 100,
        max_timers_per_key: 3,
        max_timer_name_len: 16,
        max_state_changes_per_activation: 1,
    }
}

#[test]
fn one_activation_per_key_per_call_in_arrival_order() {
    let mut h = ProcessFunctionTestHarness::new(descriptor(limits()), Counter::default()).unwrap();
    h.process_batch(&input(&["a", "b", "a", "a", "c"], &[1, 1, 1, 1, 1]))
        .unwrap();
    // Calls: [a#1, b#1, c#1], [a#2], [a#3].
    assert_eq!(
        h.activation_log().iter().map(|l| l.id).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );
    let keys: Vec<Vec<u8>> = h.activation_log().iter().map(|l| l.key.clone()).collect();
    assert_eq!(keys, vec![key("a"), key("b"), key("c"), key("a"), key("a")]);
    assert_eq!(counts(&h), vec![1, 1, 1, 2, 3]);
    assert_eq!(h.state(&key("a")), ValueState::Int64(3));
    assert_eq!(h.state(&key("zzz")), ValueState::Absent);
}

#[test]
fn timers_fire_at_the_watermark_in_time_key_name_order_and_once() {
    let mut h = ProcessFunctionTestHarness::new(descriptor(limits()), Counter::default()).unwrap();
    h.advance_watermark(0).unwrap();
    h.process_batch(&input(&["b", "a"], &[5000, 5000])).unwrap();
    assert_eq!(h.timers(&key("a")).get("review"), Some(&10));
    h.advance_watermark(9).unwrap();
    assert_eq!(counts(&h), vec![1, 1], "not due yet");
    h.advance_watermark(10).unwrap();
    let log: Vec<String> = h
        .activation_log()
        .iter()
        .map(|l| l.callback.clone())
        .collect();
    assert_eq!(log, vec!["input", "input", "timer:review", "timer:review"]);
    // Same time: key order decides ("a" < "b").
    assert_eq!(h.activation_log()[2].key, key("a"));
    assert_eq!(counts(&h), vec![1, 1, -1, -1]);
    assert_eq!(
        h.state(&key("a")),
        ValueState::Absent,
        "timer cleared the state"
    );
    assert!(h.timers(&key("a")).is_empty(), "a fired timer is gone");
    h.advance_watermark(100).unwrap();
    assert_eq!(h.activation_log().len(), 4, "timers fire once");
}

#[test]
fn present_null_is_distinct_from_absent_and_initial_state_applies() {
    struct Nuller;
    impl NativeProcessFunction for Nuller {
        fn process(
            &mut self,
            acts: &[ProcessActivation],
        ) -> Result<Vec<ProcessActivationResult>, String> {
            Ok(acts
                .iter()
                .map(|a| ProcessActivationResult {
                    activation_id: a.id,
                    mutations: match a.state {
                        ValueState::Int64(_) => vec![ValueMutation::Set(None)],
                        ValueState::Null => vec![ValueMutation::Clear],
                        ValueState::Absent => vec![],
                    },
                    ..Default::default()
                })
                .collect())
        }
    }
    let mut d = descriptor(limits());
    d.initial_state = Some(ValueState::Int64(7));
    let mut h = ProcessFunctionTestHarness::new(d, Nuller).unwrap();
    assert_eq!(h.state(&key("a")), ValueState::Int64(7));
    h.process_batch(&input(&["a"], &[1])).unwrap();
    assert_eq!(h.state(&key("a")), ValueState::Null);
    h.process_batch(&input(&["a"], &[1])).unwrap();
    assert_eq!(h.state(&key("a")), ValueState::Absent);
    h.process_batch(&input(&["a"], &[1])).unwrap();
    assert_eq!(
        h.state(&key("a")),
        ValueState::Absent,
        "no mutation leaves state unchanged"
    );
}

#[test]
fn every_violation_discards_the_whole_call() {
    for (fault, needle) in [
        (Fault::TooManyRows, "max_output_rows_per_activation"),
        (Fault::TwoMutations, "max_state_changes_per_activation"),
        (Fault::LongTimerName, "max_timer_name_len"),
        (Fault::TooManyTimers, "max_timers_per_key"),
        (Fault::WrongSchema, "output schema"),
        (
            Fault::NullInNotNull,
            "output column 'count' is declared NOT NULL but holds nulls",
        ),
        (Fault::MissingResult, "one result per activation"),
        (Fault::WrongId, "was expected"),
        (Fault::Error, "handler error: boom"),
        (Fault::Panic, "handler panicked: handler bug"),
    ] {
        let mut h =
            ProcessFunctionTestHarness::new(descriptor(limits()), Counter::default()).unwrap();
        h.process_batch(&input(&["a", "b"], &[1, 1])).unwrap();
        let before = (h.snapshot(), counts(&h));
        h.handler_mut().fault = Some(fault);
        let err = h
            .process_batch(&input(&["a", "b"], &[2000, 1]))
            .unwrap_err();
        assert!(err.to_string().contains(needle), "{err}");
        assert!(err.to_string().contains("'counter' v1"), "{err}");
        assert_eq!(
            (h.snapshot(), counts(&h)),
            before,
            "nothing of the call applied"
        );
    }
    let mut l = limits();
    l.max_output_rows_per_call = 1;
    let mut h = ProcessFunctionTestHarness::new(descriptor(l), Counter::default()).unwrap();
    let err = h.process_batch(&input(&["a", "b"], &[1, 1])).unwrap_err();
    assert!(
        err.to_string().contains("max_output_rows_per_call"),
        "{err}"
    );
    assert_eq!(h.state(&key("a")), ValueState::Absent);
}

#[test]
fn activations_beyond_the_per_call_limit_go_to_the_next_call() {
    let mut l = limits();
    l.max_activations_per_call = 2;
    let mut h = ProcessFunctionTestHarness::new(descriptor(l), Counter::default()).unwrap();
    h.process_batch(&input(&["a", "b", "c"], &[1, 1, 1]))
        .unwrap();
    assert_eq!(h.handler_mut().calls, vec![vec![0, 1], vec![2]]);
}

#[test]
fn restore_replays_identically_and_refuses_another_binding() {
    let batches = [
        input(&["a", "b", "a"], &[1, 5000, 1]),
        input(&["c", "a"], &[1, 1]),
        input(&["b"], &[1]),
    ];
    let run_all = |h: &mut ProcessFunctionTestHarness<Counter>, from: usize| {
        for (i, b) in batches.iter().enumerate().skip(from) {
            h.process_batch(b).unwrap();
            h.advance_watermark(i as i64 * 20).unwrap();
        }
    };
    let mut straight =
        ProcessFunctionTestHarness::new(descriptor(limits()), Counter::default()).unwrap();
    run_all(&mut straight, 0);

    let mut first =
        ProcessFunctionTestHarness::new(descriptor(limits()), Counter::default()).unwrap();
    first.process_batch(&batches[0]).unwrap();
    first.advance_watermark(0).unwrap();
    let snap = first.snapshot();
    let mut resumed =
        ProcessFunctionTestHarness::new(descriptor(limits()), Counter::default()).unwrap();
    resumed.restore(snap.clone()).unwrap();
    run_all(&mut resumed, 1);
    let tail = &straight.activation_log()[first.activation_log().len()..];
    assert_eq!(
        resumed.activation_log(),
        tail,
        "same ids, keys and callback order after restore"
    );
    assert_eq!(resumed.snapshot(), straight.snapshot());

    let mut d = descriptor(limits());
    d.version = 2;
    let mut other = ProcessFunctionTestHarness::new(d, Counter::default()).unwrap();
    let err = other.restore(snap).unwrap_err().to_string();
    assert!(
        err.contains("belongs to 'counter' v1") && err.contains("now bound as 'counter' v2"),
        "{err}"
    );
    assert!(straight
        .outputs()
        .iter()
        .all(|b| b.column(0).null_count() == 0));
}

/// Sets a present null, a value or nothing by amount, and a timer per row.
struct Mixed;

impl NativeProcessFunction for Mixed {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        Ok(activations
            .iter()
            .map(|a| {
                let mut r = ProcessActivationResult {
                    activation_id: a.id,
                    output: RecordBatch::try_new(
                        out_schema(),
                        vec![Arc::new(Int64Array::from(vec![a.id as i64]))],
                    )
                    .ok(),
                    ..Default::default()
                };
                if let ProcessCallback::Input(row) = &a.callback {
                    let amount = row.column(1).as_primitive::<Int64Type>().value(0);
                    r.mutations.push(match amount % 3 {
                        0 => ValueMutation::Set(None),
                        1 => ValueMutation::Set(Some(amount)),
                        _ => ValueMutation::Clear,
                    });
                    r.timers.push(TimerOperation::Set {
                        name: format!("t{}", amount % 2),
                        at_ms: amount,
                    });
                }
                r
            })
            .collect())
    }
}

#[test]
fn the_pipeline_operator_checkpoints_state_timers_and_ids_exactly() {
    use sluice_engine::process::{ProcessFunctionInfo, ProcessOperator};
    let info = ProcessFunctionInfo {
        descriptor: descriptor(limits()),
        input: "events".into(),
        output: "out".into(),
    };
    let schema = input(&[], &[]).schema();
    let op = || ProcessOperator::new(info.clone(), &schema, Box::new(Mixed)).unwrap();
    let b1 = input(&["a", "b", "c", "a"], &[3, 4, 5, 40]);
    let b2 = input(&["b", "d"], &[9, 2]);
    let ids = |batches: Vec<RecordBatch>| -> Vec<i64> {
        batches
            .iter()
            .flat_map(|b| b.column(0).as_primitive::<Int64Type>().values().to_vec())
            .collect()
    };
    let mut straight = op();
    let first = ids(straight
        .run(std::slice::from_ref(&b1), Some(&[(1, 4)]), 4)
        .unwrap());
    let second = ids(straight
        .run(std::slice::from_ref(&b2), Some(&[(1, 10)]), 10)
        .unwrap());
    // Inputs a, b, c then a again, then the timers due at 4: a's t1 (3),
    // b's t0 (4); then b, d and the timers due at 10.
    assert_eq!(first, vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(second.first(), Some(&6));

    let mut before = op();
    before.run(&[b1], Some(&[(1, 4)]), 4).unwrap();
    let bytes = snapshot_part(&mut before).unwrap();
    let mut resumed = op();
    restore_part(&mut resumed, &bytes).unwrap();
    assert_eq!(
        snapshot_part(&mut resumed).unwrap(),
        bytes,
        "restore is exact"
    );
    assert_eq!(
        ids(resumed.run(&[b2], Some(&[(1, 10)]), 10).unwrap()),
        second
    );
    assert_eq!(
        snapshot_part(&mut resumed).unwrap(),
        snapshot_part(&mut straight).unwrap()
    );

    let mut d = descriptor(limits());
    d.name = "other".into();
    let other = ProcessFunctionInfo {
        descriptor: d,
        ..info.clone()
    };
    let mut renamed = ProcessOperator::new(other, &schema, Box::new(Mixed)).unwrap();
    let e = restore_part(&mut renamed, &bytes).unwrap_err().to_string();
    assert!(
        e.contains("belongs to 'counter' v1") && e.contains("now bound as 'other' v1"),
        "{e}"
    );
}

/// Re-arms its timer in the past on every firing.
struct Rearm;

impl NativeProcessFunction for Rearm {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        Ok(activations
            .iter()
            .map(|a| ProcessActivationResult {
                activation_id: a.id,
                timers: vec![TimerOperation::Set {
                    name: "again".into(),
                    at_ms: a.watermark.max(0) - 1,
                }],
                ..Default::default()
            })
            .collect())
    }
}

#[test]
fn a_timer_fires_at_most_once_per_cut() {
    let mut h = ProcessFunctionTestHarness::new(descriptor(limits()), Rearm).unwrap();
    h.process_batch(&input(&["a"], &[1])).unwrap();
    for (cut, wm) in [10, 20, 20].into_iter().enumerate() {
        h.advance_watermark(wm).unwrap();
        let timers = h
            .activation_log()
            .iter()
            .filter(|l| l.callback == "timer:again")
            .count();
        assert_eq!(timers, cut + 1, "one firing per cut, re-armed for the next");
    }
}

/// Arms a freshly named timer in the past on every firing.
struct FreshNames;

impl NativeProcessFunction for FreshNames {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        Ok(activations
            .iter()
            .map(|a| ProcessActivationResult {
                activation_id: a.id,
                timers: vec![TimerOperation::Set {
                    name: format!("t{}", a.id),
                    at_ms: 0,
                }],
                ..Default::default()
            })
            .collect())
    }
}

#[test]
fn a_key_fires_at_most_its_timer_limit_per_cut() {
    let mut h = ProcessFunctionTestHarness::new(descriptor(limits()), FreshNames).unwrap();
    h.process_batch(&input(&["a"], &[1])).unwrap();
    h.advance_watermark(i64::MAX).unwrap();
    let fired = h
        .activation_log()
        .iter()
        .filter(|l| l.callback.starts_with("timer:"))
        .count();
    assert_eq!(
        fired,
        limits().max_timers_per_key,
        "the cut ends; the rest waits"
    );
    assert_eq!(
        h.timers(&key("a")).len(),
        1,
        "one re-armed timer waits for the next cut"
    );
}
