//! Placed execution on generated input with random batch sizes and
//! watermark cuts: N owners of a share of the vnodes produce exactly the
//! activations (ids included) of one owner of all of them; a restore from
//! snapshots replays the same ids; vnodes that move keep their state,
//! timers and sequences; what no owner may run is refused by name.

use std::sync::Arc;

use arrow::array::{AsArray, Int64Array};
use arrow::datatypes::Int64Type;
use arrow::record_batch::RecordBatch;

use super::{PlacedOwners, Step};
use crate::process::benchmark::{activation_log_descriptor, input_schema, ActivationLog};
use crate::process::keyed::{CallOutput, KeyedProcessor};
use crate::process::placement::{split_activation_id, VnodePlacement};
use crate::test_rng::Rng;

/// One output row of [`ActivationLog`]: (id, key, callback, count, watermark).
type Row = (i64, i64, String, i64, i64);

fn processor() -> KeyedProcessor<ActivationLog> {
    KeyedProcessor::new(
        activation_log_descriptor("log"),
        ActivationLog { window_ms: 30 },
    )
    .expect("processor")
}

fn batch(keys: Vec<i64>, amounts: Vec<i64>) -> RecordBatch {
    RecordBatch::try_new(
        input_schema(),
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(Int64Array::from(amounts)),
        ],
    )
    .expect("batch")
}

/// Random batches (1 to 60 rows over 40 keys) and advancing watermark
/// cuts, ending with a cut that fires every timer.
pub(crate) fn steps(rng: &mut Rng) -> Vec<Step> {
    let mut out = Vec::new();
    let mut watermark = 0;
    for _ in 0..40 {
        if rng.below(10) < 7 {
            let n = 1 + rng.below(60) as usize;
            let keys = (0..n).map(|_| rng.below(40) as i64).collect();
            let amounts = (0..n).map(|_| rng.below(1000) as i64).collect();
            out.push(Step::Input(batch(keys, amounts)));
        } else {
            watermark += rng.below(50) as i64;
            out.push(Step::Watermark(watermark));
        }
    }
    out.push(Step::Watermark(watermark + 1_000));
    out
}

fn rows(outs: &[CallOutput]) -> Vec<Row> {
    let mut rows = Vec::new();
    for out in outs {
        for b in &out.batches {
            let int = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
            let (id, key, count, wm) = (int(0), int(1), int(3), int(4));
            let callback = b.column(2).as_string::<i32>();
            for r in 0..b.num_rows() {
                rows.push((
                    id.value(r),
                    key.value(r),
                    callback.value(r).to_string(),
                    count.value(r),
                    wm.value(r),
                ));
            }
        }
    }
    rows
}

fn sorted(mut rows: Vec<Row>) -> Vec<Row> {
    rows.sort();
    rows
}

/// `n` owners, each vnode of `count` given to a random one.
fn owners(n: usize, count: u32, rng: &mut Rng) -> (PlacedOwners<ActivationLog>, Vec<u32>) {
    let owner_of: Vec<u32> = (0..count).map(|_| rng.below(n as u64) as u32).collect();
    let placed =
        PlacedOwners::new((0..n).map(|_| processor()).collect(), &owner_of).expect("placed owners");
    (placed, owner_of)
}

#[test]
fn owners_of_a_share_give_the_ids_and_rows_of_one_owner_of_all() {
    for seed in (1..40u64).step_by(2) {
        let mut rng = Rng(seed * 0x9E37_79B9);
        let input = steps(&mut rng);
        let count = [1, 7, 256][rng.below(3) as usize];
        let (mut one, _) = owners(1, count, &mut rng);
        let whole = sorted(rows(&one.run(&input).expect("one owner")));
        assert!(!whole.is_empty());
        for n in [2, 3, 5] {
            let (mut many, _) = owners(n, count, &mut rng);
            let split = sorted(rows(&many.run(&input).expect("owners")));
            assert_eq!(split, whole, "seed {seed}, {n} owners of {count} vnodes");
        }
        // Every id names its key's vnode, and the rows are those of an
        // unplaced processor (whose ids are one sequence instead).
        let placement = VnodePlacement::all(count).expect("placement");
        for (id, key, ..) in &whole {
            let encoded =
                crate::process::encode_key(&[Arc::new(Int64Array::from(vec![*key])) as _], 0)
                    .expect("key");
            assert_eq!(
                split_activation_id(*id as u64).1,
                placement.vnode_of(&encoded)
            );
        }
        let mut unplaced = processor();
        let mut out = CallOutput::default();
        for step in &input {
            match step {
                Step::Input(b) => unplaced.process_batch(b, &mut out).expect("input"),
                Step::Watermark(w) => unplaced.advance_watermark(*w, &mut out).expect("cut"),
            }
        }
        let without_ids = |rows: Vec<Row>| {
            let mut v: Vec<_> = rows
                .into_iter()
                .map(|(_, k, c, n, w)| (k, c, n, w))
                .collect();
            v.sort();
            v
        };
        assert_eq!(without_ids(rows(&[out])), without_ids(whole), "seed {seed}");
    }
}

#[test]
fn a_restore_from_snapshots_replays_the_same_ids() {
    for seed in (1..30u64).step_by(2) {
        let mut rng = Rng(seed * 0x2545_F491);
        let input = steps(&mut rng);
        let cut = 1 + rng.below(input.len() as u64 - 1) as usize;
        let (mut live, owner_of) = owners(3, 64, &mut rng);
        live.run(&input[..cut]).expect("first part");
        let snaps: Vec<_> = live.owners().iter().map(|o| o.snapshot()).collect();
        let after = live.run(&input[cut..]).expect("rest");
        let mut restored = PlacedOwners::new((0..3).map(|_| processor()).collect(), &owner_of)
            .expect("placed owners");
        for (owner, snap) in restored.owners_mut().iter_mut().zip(snaps) {
            owner.restore(snap).expect("restore");
        }
        let replayed = restored.run(&input[cut..]).expect("replay");
        // Owner by owner, in the same order.
        for (i, (a, b)) in after.iter().zip(&replayed).enumerate() {
            assert_eq!(
                rows(&[CallOutput {
                    batches: b.batches.clone(),
                    log: None
                }]),
                rows(&[CallOutput {
                    batches: a.batches.clone(),
                    log: None
                }]),
                "seed {seed}, owner {i}"
            );
            assert_eq!(a.log, b.log, "seed {seed}, owner {i}");
        }
    }
}

#[test]
fn vnodes_that_move_keep_their_state_timers_and_sequences() {
    for seed in (1..30u64).step_by(2) {
        let mut rng = Rng(seed * 0x6C07_8965);
        let input = steps(&mut rng);
        let (mut one, _) = owners(1, 32, &mut rng);
        let whole = sorted(rows(&one.run(&input).expect("one owner")));
        let (mut many, owner_of) = owners(3, 32, &mut rng);
        let cut = rng.below(input.len() as u64) as usize;
        let mut got = rows(&many.run(&input[..cut]).expect("before"));
        // Half of owner 0's vnodes go to owner 2, all of owner 1's to 0.
        let of = |o: u32| -> Vec<u32> { (0..32).filter(|v| owner_of[*v as usize] == o).collect() };
        let zero = of(0);
        many.move_vnodes(&zero[..zero.len() / 2], 0, 2)
            .expect("move 0 to 2");
        many.move_vnodes(&of(1), 1, 0).expect("move 1 to 0");
        assert!(many.owners()[1]
            .placement()
            .expect("placed")
            .owned()
            .is_empty());
        got.extend(rows(&many.run(&input[cut..]).expect("after")));
        assert_eq!(sorted(got), whole, "seed {seed}, moved after step {cut}");
    }
}

#[test]
fn what_no_owner_may_run_is_refused_by_name() {
    // A key of a vnode the owner does not hold.
    let mut p = processor();
    p.place(VnodePlacement::new(4, []).expect("placement"))
        .expect("place");
    let mut out = CallOutput::default();
    let err = p
        .process_batch(&batch(vec![7], vec![1]), &mut out)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("which this owner does not hold (it holds 0 of 4 vnodes)"),
        "{err}"
    );
    assert!(out.batches.is_empty() && p.snapshot().vnode_sequences.is_empty());

    // A processor that ran unplaced keeps its one sequence.
    let mut p = processor();
    p.process_batch(&batch(vec![7], vec![1]), &mut CallOutput::default())
        .expect("unplaced run");
    let err = p
        .place(VnodePlacement::all(4).expect("placement"))
        .unwrap_err();
    assert!(
        err.to_string().contains("has run 1 activations unplaced"),
        "{err}"
    );

    // A placed snapshot restores only into a placed processor.
    let (mut placed, _) = owners(1, 4, &mut Rng(7));
    placed
        .run(&[Step::Input(batch(vec![1, 2], vec![3, 4]))])
        .expect("run");
    let snap = placed.owners()[0].snapshot();
    let err = processor().restore(snap.clone()).unwrap_err();
    assert!(
        err.to_string()
            .contains("place the processor before restoring it"),
        "{err}"
    );
    // ... and only with keys of the vnodes it holds.
    let mut narrow = processor();
    narrow
        .place(VnodePlacement::new(4, []).expect("placement"))
        .expect("place");
    let err = narrow.restore(snap).unwrap_err();
    assert!(err.to_string().contains("outside this placement"), "{err}");

    // Moves: to itself, of a vnode not held, to an owner that holds it.
    let (mut two, owner_of) = owners(2, 8, &mut Rng(11));
    assert!(two
        .move_vnodes(&[0], 0, 0)
        .unwrap_err()
        .contains("cannot move vnodes"));
    let held_by_1 = (0..8).find(|v| owner_of[*v as usize] == 1);
    if let Some(v) = held_by_1 {
        assert!(two
            .move_vnodes(&[v], 0, 1)
            .unwrap_err()
            .contains("is not held here"));
    }
    assert!(PlacedOwners::new(vec![processor()], &[0, 1])
        .err()
        .is_some_and(|e| e == "owner 1 is not one of the 1 processors"));
}
