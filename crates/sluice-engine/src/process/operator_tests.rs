//! A placed process function's checkpoint carries its per-vnode
//! sequences: restored from its encoded checkpoint part, it goes on with
//! exactly the activation ids of a run that never stopped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use arrow::record_batch::RecordBatch;

use super::ProcessOperator;
use crate::operators::stateful::{restore_part, snapshot_part, StatefulOperator};
use crate::process::benchmark::{
    activation_log_descriptor, input_schema, random_steps as steps, ActivationLog, Step,
};
use crate::process::placement::VnodePlacement;
use crate::process::types::ProcessFunctionInfo;
use crate::test_rng::Rng;

const VNODES: u32 = 16;

fn operator(placed: bool) -> ProcessOperator {
    let info = ProcessFunctionInfo {
        descriptor: activation_log_descriptor("log"),
        input: "events".into(),
        output: "log".into(),
    };
    let mut op = ProcessOperator::new(
        info,
        &input_schema(),
        Box::new(ActivationLog { window_ms: 30 }),
    )
    .unwrap();
    if placed {
        op.place(VnodePlacement::all(VNODES).unwrap()).unwrap();
    }
    op
}

fn run(op: &mut ProcessOperator, steps: &[Step]) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for s in steps {
        out.extend(match s {
            Step::Input(b) => op.update(0, b.clone()).unwrap(),
            Step::Watermark(w) => op.advance(*w).unwrap(),
        });
    }
    out
}

/// A generator from `seed`, and the steps it gave first.
fn seeded(seed: u64) -> (Rng, Vec<Step>) {
    let mut rng = Rng(seed.wrapping_mul(6_364_136_223_846_793_005) | 1);
    let all = steps(&mut rng);
    (rng, all)
}

#[test]
fn a_placed_operator_restored_from_its_checkpoint_part_keeps_its_ids() {
    for seed in 0..40u64 {
        let (mut rng, all) = seeded(seed);
        let cut = 1 + rng.below(all.len() as u64 - 1) as usize;
        let (before, after) = all.split_at(cut);

        let mut whole = operator(true);
        run(&mut whole, before);
        let part = snapshot_part(&mut whole).unwrap();
        let expected = run(&mut whole, after);

        let mut restored = operator(true);
        restore_part(&mut restored, &part).unwrap();
        assert_eq!(run(&mut restored, after), expected, "seed {seed} cut {cut}");

        // An unplaced operator cannot take a placed one's state.
        if before.iter().any(|s| matches!(s, Step::Input(_))) {
            let e = restore_part(&mut operator(false), &part).unwrap_err();
            assert!(
                e.to_string()
                    .contains("place the processor before restoring it"),
                "{e}"
            );
        }
    }
}

#[test]
fn an_unplaced_operators_checkpoint_has_no_vnode_sequences() {
    let mut rng = Rng(7);
    let mut op = operator(false);
    run(&mut op, &steps(&mut rng));
    let part = snapshot_part(&mut op).unwrap();
    let reader = crate::state::SnapshotReader::new(&part).unwrap();
    assert_eq!(
        reader.get_optional::<String>("vnode_sequences").unwrap(),
        None
    );
    assert!(reader.get::<u64>("next_id").unwrap() > 0);
    restore_part(&mut operator(false), &part).unwrap();
}

/// The output rows of an activation log by activation id, refusing an id
/// emitted twice.
fn by_id(batches: &[RecordBatch]) -> std::collections::BTreeMap<i64, String> {
    use arrow::array::AsArray;
    use arrow::datatypes::Int64Type;
    let mut rows = std::collections::BTreeMap::new();
    for b in batches {
        let int = |i: usize| b.column(i).as_primitive::<Int64Type>().clone();
        let (id, key, count, wm) = (int(0), int(1), int(3), int(4));
        let callback = b.column(2).as_string::<i32>();
        for r in 0..b.num_rows() {
            let row = format!(
                "{},{},{},{}",
                key.value(r),
                callback.value(r),
                count.value(r),
                wm.value(r)
            );
            assert!(
                rows.insert(id.value(r), row).is_none(),
                "id {} twice",
                id.value(r)
            );
        }
    }
    rows
}

/// Cycles of a gated operator: each step is a cycle (an input batch, or
/// none at a new watermark); returns the output.
fn cycles(op: &mut ProcessOperator, steps: &[Step], watermark: &mut i64) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    for s in steps {
        let batches = match s {
            Step::Input(b) => vec![b.clone()],
            Step::Watermark(w) => {
                *watermark = *w;
                vec![]
            }
        };
        out.extend(op.run(&batches, None, *watermark).unwrap());
    }
    out
}

/// The same input rows as `steps` cut into other batches (a replay after
/// a crash takes its input in other groupings).
fn regrouped(steps: &[Step], rng: &mut Rng) -> Vec<Step> {
    let mut out = Vec::new();
    let mut pending: Vec<RecordBatch> = Vec::new();
    for s in steps {
        match s {
            Step::Input(b) => pending.push(b.clone()),
            Step::Watermark(w) => {
                if !pending.is_empty() {
                    let all = arrow::compute::concat_batches(&input_schema(), &pending).unwrap();
                    pending.clear();
                    let mut at = 0;
                    while at < all.num_rows() {
                        let n = 1 + rng.below((all.num_rows() - at) as u64) as usize;
                        out.push(Step::Input(all.slice(at, n)));
                        at += n;
                    }
                }
                out.push(Step::Watermark(*w));
            }
        }
    }
    out
}

/// A gated operator (a routed function of a checkpointed split) runs no
/// input before a checkpoint at or after its seal commits. A crash after
/// it ran what checkpoint 1 sealed, and a restore from checkpoint 1's
/// part, run that input again as the same activations (ids, rows,
/// watermarks), whatever batches the replayed input after the cut comes
/// in; and the run restored goes on to emit every input once.
#[test]
fn a_gated_operator_runs_sealed_input_after_its_commit_and_replays_it_identically() {
    for seed in 0..40u64 {
        let (mut rng, all) = seeded(seed);
        let inputs: usize = all
            .iter()
            .map(|s| match s {
                Step::Input(b) => b.num_rows(),
                Step::Watermark(_) => 0,
            })
            .sum();
        let cut = 1 + rng.below(all.len() as u64 - 2) as usize;
        let (before, after) = all.split_at(cut);
        let gated = || {
            let mut op = operator(true);
            op.gate_on_commits();
            op
        };

        let mut live = gated();
        let mut wm = i64::MIN;
        assert!(
            cycles(&mut live, before, &mut wm).is_empty(),
            "seed {seed}: ran before a seal"
        );
        live.seal(1);
        let part = snapshot_part(&mut live).unwrap();
        let mut early = cycles(&mut live, &after[..1], &mut wm);
        assert!(early.is_empty(), "seed {seed}: ran before its commit");
        live.commit(1);
        // The crash comes after checkpoint 1's input ran, and after more
        // input was held (sealed by checkpoint 2, which never commits).
        early.extend(cycles(&mut live, &after[1..], &mut wm));
        live.seal(2);
        let ran = by_id(&early);

        let mut restored = gated();
        restore_part(&mut restored, &part).unwrap();
        let mut wm = i64::MIN;
        let mut out = cycles(&mut restored, &regrouped(after, &mut rng), &mut wm);
        restored.seal(3);
        restored.commit(3);
        out.extend(restored.run(&[], None, wm).unwrap());
        let replayed = by_id(&out);
        for (id, row) in &ran {
            assert_eq!(
                replayed.get(id),
                Some(row),
                "seed {seed} cut {cut}: activation {id}"
            );
        }
        let replayed_inputs = replayed.values().filter(|r| r.contains(",input,")).count();
        let ran_before: usize = before
            .iter()
            .map(|s| match s {
                Step::Input(b) => b.num_rows(),
                Step::Watermark(_) => 0,
            })
            .sum();
        assert_eq!(replayed_inputs, inputs, "seed {seed}: every input once");
        assert!(
            ran.values().filter(|r| r.contains(",input,")).count() == ran_before,
            "seed {seed}: the live run ran exactly checkpoint 1's input"
        );
    }
}

/// A checkpoint holding sealed input lists its epochs. Restored into an
/// operator that is not gated (a node dropped from the split, which has no
/// shuffle and gives its keys up), the input is left to the vnodes' new
/// owners: nothing runs. Restored into a gated operator placed on fewer
/// vnodes (a node whose vnodes moved recovers its own cut before it takes
/// the moved state), only its vnodes' keys and rows come back, and they
/// run as they did on the whole.
#[test]
fn sealed_input_is_restored_within_the_placement_and_left_by_an_ungated_operator() {
    use crate::process::placement::split_activation_id;
    let mut rng = Rng(11);
    let all: Vec<u32> = (0..VNODES).collect();
    let mut op = gated_on(&all);
    let mut wm = 0;
    cycles(&mut op, &steps(&mut rng), &mut wm);
    op.seal(5);
    let part = snapshot_part(&mut op).unwrap();
    let reader = crate::state::SnapshotReader::new(&part).unwrap();
    let listed: String = reader.get("sealed_epochs").unwrap();
    assert!(listed.starts_with("5:"), "{listed}");

    let mut ungated = operator(false);
    restore_part(&mut ungated, &part).unwrap();
    assert!(!ungated.has_runnable_input());
    assert!(ungated.run(&[], None, wm).unwrap().is_empty());

    let mut whole = gated_on(&all);
    restore_part(&mut whole, &part).unwrap();
    let whole = by_id(&whole.run(&[], None, wm).unwrap());
    assert!(!whole.is_empty());
    let half: Vec<u32> = (0..VNODES).filter(|v| v % 2 == 1).collect();
    let mut fewer = gated_on(&half);
    restore_part(&mut fewer, &part).unwrap();
    let expected: std::collections::BTreeMap<i64, String> = whole
        .into_iter()
        .filter(|(id, _)| split_activation_id(*id as u64).1 % 2 == 1)
        .collect();
    assert_eq!(by_id(&fewer.run(&[], None, wm).unwrap()), expected);
}

/// A gated operator placed on `owned` of [`VNODES`].
fn gated_on(owned: &[u32]) -> ProcessOperator {
    let mut op = operator(false);
    op.place(VnodePlacement::new(VNODES, owned.iter().copied()).unwrap())
        .unwrap();
    op.gate_on_commits();
    op
}

/// `steps` with only the rows of `owned`'s keys (what the exchange
/// routes to their owner).
fn routed_to(steps: &[Step], owned: &[u32]) -> Vec<Step> {
    let placement = VnodePlacement::new(VNODES, owned.iter().copied()).unwrap();
    steps
        .iter()
        .map(|s| match s {
            Step::Input(b) => {
                let mask = placement
                    .rows_owned(&[b.column(0).clone()], b.num_rows())
                    .unwrap();
                Step::Input(arrow::compute::filter_record_batch(b, &mask).unwrap())
            }
            Step::Watermark(w) => Step::Watermark(*w),
        })
        .collect()
}

/// Vnodes move between the nodes of a gated split at a committed cut:
/// the new owner runs each previous holder's sealed input of its vnodes
/// again as that holder did after the commit (same ids, rows, watermarks,
/// each holder with its own timer cuts), and then goes on.
#[test]
fn sealed_input_moves_with_its_vnodes_and_runs_again_as_its_holder_ran_it() {
    use crate::process::placement::split_activation_id;
    for seed in 0..30u64 {
        let (mut rng, all) = seeded(seed);
        let cut = 1 + rng.below(all.len() as u64 - 2) as usize;
        let (before, after) = all.split_at(cut);
        // Two holders, each with its vnodes and its own watermarks.
        let owners: [Vec<u32>; 2] = [
            (0..VNODES).filter(|v| v % 2 == 0).collect(),
            (0..VNODES).filter(|v| v % 2 == 1).collect(),
        ];
        let mut parts = Vec::new();
        let mut observed = std::collections::BTreeMap::new();
        for (i, owned) in owners.iter().enumerate() {
            let mut op = gated_on(owned);
            let mut wm = i64::MIN;
            let mut mine = routed_to(before, owned);
            // The second holder's watermark trails the first's.
            if i == 1 {
                mine.push(Step::Watermark(rng.below(40) as i64));
            }
            cycles(&mut op, &mine, &mut wm);
            op.seal(1);
            parts.push(snapshot_part(&mut op).unwrap());
            op.commit(1);
            observed.extend(by_id(&op.run(&[], None, wm).unwrap()));
        }
        // The new owner holds a random half of the vnodes.
        let keep: Vec<u32> = (0..VNODES).filter(|_| rng.below(2) == 0).collect();
        let placement = VnodePlacement::new(VNODES, keep.iter().copied()).unwrap();
        let mut next = gated_on(&keep);
        let readers: Vec<_> = parts
            .iter()
            .map(|p| crate::state::SnapshotReader::new(p).unwrap())
            .collect();
        next.restore_moved(&readers, &placement).unwrap();
        assert!(next.has_runnable_input() || observed.is_empty() || keep.is_empty());
        let carried = by_id(&next.run(&[], None, i64::MIN).unwrap());
        let expected: std::collections::BTreeMap<i64, String> = observed
            .into_iter()
            .filter(|(id, _)| placement.owns(split_activation_id(*id as u64).1))
            .collect();
        assert_eq!(carried, expected, "seed {seed} cut {cut} keep {keep:?}");
        // It goes on with the rest of its keys' input.
        let mut wm = i64::MIN;
        let rest = cycles(&mut next, &routed_to(after, &keep), &mut wm);
        assert!(rest.is_empty(), "seed {seed}: nothing runs before a commit");
        next.seal(2);
        next.commit(2);
        let later = by_id(&next.run(&[], None, wm).unwrap());
        assert!(
            later.keys().all(|id| !carried.contains_key(id)),
            "seed {seed}: an id reused"
        );
    }
}

/// A previous holder's sealed epoch may hold no row of the moved vnodes
/// and still cut their timers: its watermark fired them on that holder
/// after the commit. The new owner fires them at the same cut (same ids,
/// same order), not at its own next watermark, after rows that came later.
#[test]
fn a_moved_keys_timers_fire_at_a_sealed_epoch_that_holds_none_of_its_rows() {
    use crate::process::placement::split_activation_id;
    let vnode_of = |key: i64| -> u32 {
        let col: arrow::array::ArrayRef =
            std::sync::Arc::new(arrow::array::Int64Array::from(vec![key]));
        (0..VNODES)
            .find(|v| {
                let p = VnodePlacement::new(VNODES, [*v]).unwrap();
                p.rows_owned(std::slice::from_ref(&col), 1)
                    .unwrap()
                    .value(0)
            })
            .unwrap()
    };
    let moved = 1i64;
    let other = (2..100).find(|k| vnode_of(*k) != vnode_of(moved)).unwrap();
    let rows = |key: i64| {
        Step::Input(
            RecordBatch::try_new(
                input_schema(),
                vec![
                    std::sync::Arc::new(arrow::array::Int64Array::from(vec![key])),
                    std::sync::Arc::new(arrow::array::Int64Array::from(vec![5])),
                ],
            )
            .unwrap(),
        )
    };
    // The holder runs the moved key's row (its timer is armed), then
    // seals an epoch holding only another key's row and a watermark past
    // that timer.
    let mut holder = gated_on(&(0..VNODES).collect::<Vec<_>>());
    let mut wm = i64::MIN;
    cycles(&mut holder, &[Step::Watermark(0), rows(moved)], &mut wm);
    holder.seal(1);
    holder.commit(1);
    assert!(!holder.run(&[], None, wm).unwrap().is_empty());
    cycles(&mut holder, &[rows(other), Step::Watermark(100)], &mut wm);
    holder.seal(2);
    let part = snapshot_part(&mut holder).unwrap();
    holder.commit(2);
    let keep = VnodePlacement::new(VNODES, [vnode_of(moved)]).unwrap();
    let expected: std::collections::BTreeMap<i64, String> =
        by_id(&holder.run(&[], None, wm).unwrap())
            .into_iter()
            .filter(|(id, _)| keep.owns(split_activation_id(*id as u64).1))
            .collect();
    assert!(
        !expected.is_empty(),
        "the holder fired the moved key's timer"
    );

    let mut next = gated_on(&[vnode_of(moved)]);
    let reader = crate::state::SnapshotReader::new(&part).unwrap();
    next.restore_moved(&[reader], &keep).unwrap();
    assert_eq!(by_id(&next.run(&[], None, i64::MIN).unwrap()), expected);
}
