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

#[test]
fn a_placed_operator_restored_from_its_checkpoint_part_keeps_its_ids() {
    for seed in 0..40u64 {
        let mut rng = Rng(seed.wrapping_mul(6_364_136_223_846_793_005) | 1);
        let all = steps(&mut rng);
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
        let mut rng = Rng(seed.wrapping_mul(6_364_136_223_846_793_005) | 1);
        let all = steps(&mut rng);
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

/// A checkpoint holding sealed input is refused by an operator that is
/// not gated (the pipeline is no longer a checkpointed split with a
/// shuffle), by name; damaged epoch lists are refused too.
#[test]
fn sealed_input_is_restored_only_into_a_gated_operator() {
    let mut rng = Rng(11);
    let mut op = operator(true);
    op.gate_on_commits();
    let mut wm = 0;
    cycles(&mut op, &steps(&mut rng), &mut wm);
    op.seal(5);
    let part = snapshot_part(&mut op).unwrap();
    let e = restore_part(&mut operator(true), &part).unwrap_err();
    assert!(e.to_string().contains("can only be restored there"), "{e}");

    let reader = crate::state::SnapshotReader::new(&part).unwrap();
    let listed: String = reader.get("sealed_epochs").unwrap();
    assert!(listed.starts_with("5:"), "{listed}");
}
