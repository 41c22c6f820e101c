//! The two-layer scope against a model: random updates, captures built
//! early, late or never, changelog emissions and a final read, with every
//! capture restored and compared with the model as it was at its barrier.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use arrow::array::{AsArray, Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Int64Type, Schema};
use arrow::record_batch::RecordBatch;
use datafusion::common::DFSchema;
use datafusion::functions_aggregate::expr_fn::{array_agg, count, max, sum};
use datafusion::logical_expr::{col, lit};

use super::{GroupedAggregates, ScopeSnapshot};
use crate::operators::groups::{AggregateFunctions, KeyCodec};
use crate::state::DeferredBatch;

/// A row of the test table: (k, v, s).
type Row = (i64, i64, String);

/// (count, sum, max, array_agg) of one group. `array_agg` keeps its
/// values in arrival order, so a merge that puts a newer state before an
/// older one shows up.
type Values = (i64, i64, String, Vec<i64>);
type Model = BTreeMap<i64, Values>;

use crate::test_rng::Rng;

fn schema() -> Arc<Schema> {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("v", DataType::Int64, false),
        Field::new("s", DataType::Utf8, false),
    ]))
}

fn setup() -> (KeyCodec, AggregateFunctions) {
    let df = DFSchema::try_from(schema().as_ref().clone()).unwrap();
    let aggs = [
        count(lit(1)),
        sum(col("v")),
        max(col("s")),
        array_agg(col("v")),
    ];
    let names = ["n".into(), "total".into(), "top".into(), "all".into()];
    let funcs = AggregateFunctions::lower(&aggs, &df, &names).unwrap();
    (KeyCodec::new(&[DataType::Int64]).unwrap(), funcs)
}

fn update(
    scope: &mut GroupedAggregates,
    codec: &KeyCodec,
    funcs: &AggregateFunctions,
    rows: &[(i64, i64, String)],
) {
    let batch = RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(StringArray::from_iter_values(
                rows.iter().map(|r| r.2.as_str()),
            )),
        ],
    )
    .unwrap();
    let keys = codec
        .encode(&[Arc::clone(batch.column(0))], batch.num_rows())
        .unwrap();
    let inputs = funcs.evaluate_inputs(&batch).unwrap();
    scope.update(codec, &keys, None, &inputs).unwrap();
}

fn apply(model: &mut Model, rows: &[(i64, i64, String)]) {
    for (k, v, s) in rows {
        let e = model.entry(*k).or_insert((0, 0, String::new(), Vec::new()));
        e.0 += 1;
        e.1 += v;
        if *s > e.2 {
            e.2 = s.clone();
        }
        e.3.push(*v);
    }
}

/// Rows of (keys, [count, sum, max, array_agg]) as a model.
fn as_model(keys: &[arrow::array::ArrayRef], values: &[arrow::array::ArrayRef]) -> Model {
    row_list(keys, values).into_iter().collect()
}

/// Rows of (keys, [count, sum, max, array_agg]) in order.
fn row_list(
    keys: &[arrow::array::ArrayRef],
    values: &[arrow::array::ArrayRef],
) -> Vec<(i64, Values)> {
    let k = keys[0].as_primitive::<Int64Type>();
    let n = values[0].as_primitive::<Int64Type>();
    let t = values[1].as_primitive::<Int64Type>();
    let m = values[2].as_string::<i32>();
    let a = values[3].as_list::<i32>();
    (0..k.len())
        .map(|i| {
            let all = a.value(i).as_primitive::<Int64Type>().values().to_vec();
            (
                k.value(i),
                (n.value(i), t.value(i), m.value(i).to_string(), all),
            )
        })
        .collect()
}

/// What a capture holds, read back the way recovery reads it.
fn restored(part: &Arc<dyn DeferredBatch>, codec: &KeyCodec, funcs: &AggregateFunctions) -> Model {
    let snap = ScopeSnapshot::from_batch(&part.produce().unwrap()).unwrap();
    let scope = GroupedAggregates::restore(codec, funcs, 1, &snap).unwrap();
    let (keys, values, _) = scope.finish(codec).unwrap();
    as_model(&keys, &values)
}

fn run(seed: u64, changelog: bool) {
    let (codec, funcs) = setup();
    let mut rng = Rng(seed | 1);
    let mut scope = GroupedAggregates::new(&codec, &funcs).unwrap();
    // Chunks of a few groups, so merges span chunks, skip untouched ones
    // and grow the last one.
    scope.set_chunk(1 + rng.below(8) as usize).unwrap();
    let mut model = Model::new();
    let mut emitted = Model::new();
    let mut touched = BTreeSet::new();
    let mut captures: Vec<(Arc<dyn DeferredBatch>, Model)> = Vec::new();
    let key_space = 1 + rng.below(60) as i64;
    for _ in 0..(20 + rng.below(60)) {
        match rng.below(10) {
            0..=4 => {
                let rows: Vec<(i64, i64, String)> = (0..1 + rng.below(40))
                    .map(|_| {
                        let k = rng.below(key_space as u64) as i64;
                        (
                            k,
                            rng.below(1000) as i64 - 500,
                            format!("{:04}", rng.below(10_000)),
                        )
                    })
                    .collect();
                update(&mut scope, &codec, &funcs, &rows);
                apply(&mut model, &rows);
                touched.extend(rows.iter().map(|r| r.0));
            }
            5 | 6 => captures.push((scope.capture(&codec, vec![]).unwrap(), model.clone())),
            7 if !captures.is_empty() => {
                // A tail builds a capture, maybe long after its barrier.
                let i = rng.below(captures.len() as u64) as usize;
                let (part, at) = &captures[i];
                assert_eq!(&restored(part, &codec, &funcs), at, "seed {seed}");
            }
            8 if !captures.is_empty() => {
                // A tail fails or is cancelled: the capture is dropped unbuilt.
                let i = rng.below(captures.len() as u64) as usize;
                captures.remove(i);
            }
            _ if changelog => {
                let changes = scope.changes(&codec).unwrap();
                let Some((keys, values, kinds)) = changes else {
                    assert!(touched.is_empty(), "seed {seed}");
                    continue;
                };
                let mut rows = row_list(&keys, &values);
                let retracts = kinds.iter().filter(|k| **k == super::Op::Retract).count();
                assert!(kinds[..retracts].iter().all(|k| *k == super::Op::Retract));
                assert!(kinds[retracts..].iter().all(|k| *k == super::Op::Insert));
                // Every touched group that was emitted before is retracted
                // with exactly what was emitted, then inserted as it is now.
                let expect_retract: Vec<(i64, Values)> = touched
                    .iter()
                    .filter_map(|k| emitted.get(k).map(|v| (*k, v.clone())))
                    .collect();
                let expect_insert: Vec<(i64, Values)> =
                    touched.iter().map(|k| (*k, model[k].clone())).collect();
                // Both parts are in group-creation order; the model is by key.
                rows[..retracts].sort_by_key(|r| r.0);
                rows[retracts..].sort_by_key(|r| r.0);
                assert_eq!(rows[..retracts], expect_retract[..], "seed {seed}");
                assert_eq!(rows[retracts..], expect_insert[..], "seed {seed}");
                emitted.extend(expect_insert);
                touched.clear();
            }
            _ => {}
        }
    }
    let (keys, values, n) = scope.finish(&codec).unwrap();
    assert_eq!(n, model.len());
    assert_eq!(as_model(&keys, &values), model, "seed {seed}");
    // Captures still held were built before the scope moved past them.
    for (part, at) in &captures {
        assert_eq!(&restored(part, &codec, &funcs), at, "seed {seed}");
    }
}

#[test]
fn every_capture_restores_the_state_at_its_barrier() {
    for seed in 0..300 {
        run(seed * 7919 + 1, false);
    }
}

#[test]
fn captures_and_changelog_emissions_interleave_exactly() {
    for seed in 0..300 {
        run(seed * 104_729 + 3, true);
    }
}

#[test]
fn a_capture_built_after_later_updates_excludes_them() {
    let (codec, funcs) = setup();
    let mut scope = GroupedAggregates::new(&codec, &funcs).unwrap();
    let row = |k: i64, v: i64| (k, v, format!("{v:04}"));
    update(&mut scope, &codec, &funcs, &[row(1, 10), row(2, 20)]);
    let first = scope.capture(&codec, vec![]).unwrap();
    update(&mut scope, &codec, &funcs, &[row(1, 5), row(3, 7)]);
    let second = scope.capture(&codec, vec![]).unwrap();
    update(&mut scope, &codec, &funcs, &[row(3, 1)]);
    let expect = |rows: &[(i64, i64, i64, &str, &[i64])]| -> Model {
        rows.iter()
            .map(|(k, n, t, m, a)| (*k, (*n, *t, m.to_string(), a.to_vec())))
            .collect()
    };
    // Built out of order of the updates, each is exactly its barrier.
    assert_eq!(
        restored(&first, &codec, &funcs),
        expect(&[(1, 1, 10, "0010", &[10]), (2, 1, 20, "0020", &[20])])
    );
    assert_eq!(
        restored(&second, &codec, &funcs),
        expect(&[
            (1, 2, 15, "0010", &[10, 5]),
            (2, 1, 20, "0020", &[20]),
            (3, 1, 7, "0007", &[7])
        ])
    );
    let (keys, values, _) = scope.finish(&codec).unwrap();
    assert_eq!(
        as_model(&keys, &values),
        expect(&[
            (1, 2, 15, "0010", &[10, 5]),
            (2, 1, 20, "0020", &[20]),
            (3, 2, 8, "0007", &[7, 1])
        ])
    );
}

/// The CPU time this thread has used so far: unlike the wall clock, it
/// does not run while a loaded machine has preempted the thread.
#[cfg(target_os = "linux")]
fn thread_cpu() -> std::time::Duration {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    std::time::Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Builds and encodes `part` under a pacer over an idle pipeline: the
/// bytes, and the CPU time of each step between two pace points (from the
/// tail's start to the first point, and from the last to its end, too).
#[cfg(target_os = "linux")]
fn build_paced(part: &Arc<dyn DeferredBatch>) -> (Vec<u8>, Vec<std::time::Duration>) {
    use crate::state::pace::{paced, PaceHost, Pacer};
    use crate::state::SnapshotWriter;

    /// Never busy; notes the thread's CPU time at each point.
    struct Idle(std::sync::Mutex<Vec<std::time::Duration>>);
    impl PaceHost for Idle {
        fn busy_ns(&self) -> u64 {
            0
        }
        fn rested(&self, _: std::time::Duration) {}
        fn tail_done(&self, _: std::time::Duration) {}
        fn point_passed(&self) {
            let at = thread_cpu();
            self.0.lock().unwrap().push(at);
        }
    }

    let mut w = SnapshotWriter::default();
    w.push_deferred(Arc::clone(part));
    let host = Arc::new(Idle(std::sync::Mutex::new(Vec::new())));
    let mut pacer = Pacer::new(25, Arc::clone(&host) as Arc<dyn PaceHost>);
    pacer.begin();
    let before = thread_cpu();
    let (bytes, _) = paced(&mut pacer, || w.finish());
    let after = thread_cpu();
    pacer.end();
    let mut marks = vec![before];
    marks.extend(host.0.lock().unwrap().iter().copied());
    marks.push(after);
    let steps = marks.windows(2).map(|m| m[1] - m[0]).collect();
    (bytes.unwrap().to_vec(), steps)
}

/// What a snapshot's bytes restore to.
fn restored_bytes(bytes: &[u8], codec: &KeyCodec, funcs: &AggregateFunctions) -> Model {
    let read = crate::state::SnapshotReader::new(bytes).unwrap();
    let snap = ScopeSnapshot::from_batch(&read.parts()[0]).unwrap();
    let scope = GroupedAggregates::restore(codec, funcs, 1, &snap).unwrap();
    let (keys, values, _) = scope.finish(codec).unwrap();
    as_model(&keys, &values)
}

/// A checkpoint tail over a large scope works in short steps, whatever
/// changed since the previous capture: the first capture (every group, the
/// live layer handed over whole), one where a tenth of the groups changed,
/// and one where every group changed. Building and encoding each passes a
/// pace point at least twice per chunk of groups, no step between two
/// points takes more than an eighth of the tail's CPU time, and each
/// restores exactly.
#[cfg(target_os = "linux")]
#[test]
fn a_large_capture_is_built_and_encoded_in_short_steps() {
    const GROUPS: i64 = 300_000;
    const CHUNK: usize = 4096;
    let (codec, funcs) = setup();
    let mut scope = GroupedAggregates::new(&codec, &funcs).unwrap();
    scope.set_chunk(CHUNK).unwrap();
    let mut model = Model::new();
    let row = |k: i64, v: i64| (k, v, format!("{:08}", (k * 7919 + v) % 100_000_000));
    let mut rng = Rng(17);
    // Keys in random order, so batches spread over every segment.
    let all: Vec<_> = (0..GROUPS)
        .map(|k| row((k * 7919) % GROUPS, rng.below(1000) as i64))
        .collect();
    let chunks = (GROUPS as usize).div_ceil(CHUNK) as u64;
    for round in 0..3 {
        let rows: Vec<Row> = match round {
            0 => all.clone(),
            1 => (0..GROUPS / 10)
                .map(|_| row(rng.below(GROUPS as u64) as i64, rng.below(1000) as i64))
                .collect(),
            _ => (0..GROUPS)
                .map(|k| row(GROUPS - 1 - k, rng.below(1000) as i64))
                .collect(),
        };
        for rows in rows.chunks(8192) {
            update(&mut scope, &codec, &funcs, rows);
            apply(&mut model, rows);
        }
        let part = scope.capture(&codec, vec![]).unwrap();
        // The first build also builds the part's batches, which later
        // builds of the same part reuse (they only encode, with one point
        // per chunk): the points are counted on the first. Steps are
        // judged by the thread's CPU time, so preemption cannot make one
        // look long; cache misses on a busy machine still can, so up to
        // three builds are made and the best judged. A tail that really
        // works in one long step fails every time.
        let (bytes, steps) = build_paced(&part);
        let points = steps.len() as u64 - 1;
        let longest_of = |steps: &[std::time::Duration]| {
            let longest = steps.iter().copied().max().unwrap_or_default();
            (longest, steps.iter().sum::<std::time::Duration>())
        };
        let (mut longest, mut whole) = longest_of(&steps);
        for _ in 0..2 {
            if longest * 8 < whole {
                break;
            }
            (longest, whole) = longest_of(&build_paced(&part).1);
        }
        assert!(
            longest * 8 < whole,
            "capture {round}: longest step {longest:?} of a {whole:?} tail (CPU time)"
        );
        assert!(
            points >= 2 * chunks,
            "capture {round}: {points} points for {chunks} chunks"
        );
        assert_eq!(
            restored_bytes(&bytes, &codec, &funcs),
            model,
            "capture {round}"
        );
    }
}
