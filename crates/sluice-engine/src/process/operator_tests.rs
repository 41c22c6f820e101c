//! A placed process function's checkpoint carries its per-vnode
//! sequences: restored from its encoded checkpoint part, it goes on with
//! exactly the activation ids of a run that never stopped.

#![allow(clippy::unwrap_used)]

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
