//! A family of `COUNT(DISTINCT ...)` members against a model (a set of
//! (group, value) pairs per member), on random batches with nulls and
//! filters, calls interleaved as a scope never makes them (a member
//! updating twice before the others, states taken mid-batch), states
//! merged into a second family, and members whose values differ at a row.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, Int32Array, Int64Array};
use arrow::datatypes::{DataType, Int32Type, Int64Type};
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::{handles, members, MAX_MEMBERS};
use crate::test_rng::Rng;

/// Per member, the (group, value) pairs it has seen.
type Model = Vec<BTreeSet<(usize, i64)>>;

/// One member's input over a batch: values and an optional filter.
struct Input {
    values: Vec<Option<i64>>,
    filter: Option<Vec<Option<bool>>>,
}

fn column(data_type: &DataType, values: &[Option<i64>]) -> ArrayRef {
    match data_type {
        DataType::Int32 => Arc::new(
            values
                .iter()
                .map(|v| v.map(|v| v as i32))
                .collect::<Int32Array>(),
        ),
        _ => Arc::new(values.iter().copied().collect::<Int64Array>()),
    }
}

fn counts_of(model: &Model, member: usize, groups: usize) -> Vec<i64> {
    let mut counts = vec![0; groups];
    for (g, _) in &model[member] {
        counts[*g] += 1;
    }
    counts
}

/// A batch of `rows` rows over `groups` groups: a column `x` with nulls, and
/// per member `x` where a random predicate holds (as `CASE WHEN p THEN x
/// END` gives), or, when `stray`, sometimes another value.
fn batch(
    rng: &mut Rng,
    k: usize,
    rows: usize,
    groups: usize,
    stray: bool,
) -> (Vec<usize>, Vec<Input>) {
    let idx: Vec<usize> = (0..rows)
        .map(|_| rng.below(groups as u64) as usize)
        .collect();
    let x: Vec<Option<i64>> = (0..rows)
        .map(|_| (rng.below(8) != 0).then(|| rng.below(12) as i64 - 3))
        .collect();
    let inputs = (0..k)
        .map(|_| {
            let values = x
                .iter()
                .map(|v| match rng.below(4) {
                    0 => None,
                    1 if stray => v.map(|v| v + 100),
                    _ => *v,
                })
                .collect();
            let filter = (rng.below(3) == 0).then(|| {
                (0..rows)
                    .map(|_| match rng.below(5) {
                        0 => None,
                        1 => Some(false),
                        _ => Some(true),
                    })
                    .collect()
            });
            Input { values, filter }
        })
        .collect();
    (idx, inputs)
}

fn record(model: &mut Model, member: usize, idx: &[usize], input: &Input) {
    for (row, g) in idx.iter().enumerate() {
        let kept = input.filter.as_ref().is_none_or(|f| f[row] == Some(true));
        if let (true, Some(v)) = (kept, input.values[row]) {
            model[member].insert((*g, v));
        }
    }
}

fn update(
    acc: &mut dyn GroupsAccumulator,
    data_type: &DataType,
    idx: &[usize],
    input: &Input,
    groups: usize,
) {
    let filter = input
        .filter
        .as_ref()
        .map(|f| f.iter().copied().collect::<BooleanArray>());
    acc.update_batch(
        &[column(data_type, &input.values)],
        idx,
        filter.as_ref(),
        groups,
    )
    .unwrap();
}

/// The (group, value) pairs of a state list.
fn pairs(state: &ArrayRef, data_type: &DataType) -> BTreeSet<(usize, i64)> {
    let lists = state.as_list::<i32>();
    let mut out = BTreeSet::new();
    for g in 0..lists.len() {
        let values = lists.value(g);
        for i in 0..values.len() {
            let v = match data_type {
                DataType::Int32 => i64::from(values.as_primitive::<Int32Type>().value(i)),
                _ => values.as_primitive::<Int64Type>().value(i),
            };
            assert!(out.insert((g, v)), "a value listed twice in group {g}");
        }
    }
    out
}

fn run_case(seed: u64, data_type: &DataType) {
    let mut rng = Rng(seed);
    let k = 1 + rng.below(5) as usize;
    let groups = 1 + rng.below(9) as usize;
    let stray = rng.below(3) == 0;
    let mut family = members(data_type, k).unwrap();
    let mut model: Model = vec![BTreeSet::new(); k];
    for _ in 0..1 + rng.below(6) {
        let rows = rng.below(40) as usize;
        let (idx, inputs) = batch(&mut rng, k, rows, groups, stray);
        // Members in a random order; sometimes one twice, with the other
        // batch's rows in between.
        let mut order: Vec<usize> = (0..k).collect();
        for i in (1..k).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for m in order {
            update(family[m].as_mut(), data_type, &idx, &inputs[m], groups);
            record(&mut model, m, &idx, &inputs[m]);
            if rng.below(6) == 0 {
                let (idx2, inputs2) = batch(&mut rng, k, 5, groups, stray);
                update(family[m].as_mut(), data_type, &idx2, &inputs2[m], groups);
                record(&mut model, m, &idx2, &inputs2[m]);
            }
        }
        // A state taken, and merged back or not: nothing is lost or
        // counted twice, and a drained member starts from nothing.
        if rng.below(4) == 0 {
            let m = rng.below(k as u64) as usize;
            let state = family[m].state(EmitTo::All).unwrap();
            assert_eq!(
                pairs(&state[0], data_type),
                model[m],
                "seed {seed}: state of {m}"
            );
            if rng.below(2) == 0 {
                let all: Vec<usize> = (0..state[0].len()).collect();
                family[m].merge_batch(&state, &all, groups).unwrap();
            } else {
                // Drained: the member starts again from nothing.
                model[m].clear();
            }
        }
    }
    // Sometimes every member is drained (the table is then cleared at
    // once) and the family goes on with another batch.
    if rng.below(3) == 0 {
        for (m, acc) in family.iter_mut().enumerate() {
            let counts = acc.evaluate(EmitTo::All).unwrap();
            let counts = counts.as_primitive::<Int64Type>().values().to_vec();
            // A member drained alone since its last update has no groups.
            let expected = match counts.is_empty() && model[m].is_empty() {
                true => vec![],
                false => counts_of(&model, m, groups),
            };
            assert_eq!(counts, expected, "seed {seed}: drained member {m}");
        }
        model.iter_mut().for_each(BTreeSet::clear);
        let rows = 1 + rng.below(30) as usize;
        let (idx, inputs) = batch(&mut rng, k, rows, groups, stray);
        for (m, input) in inputs.iter().enumerate() {
            update(family[m].as_mut(), data_type, &idx, input, groups);
            record(&mut model, m, &idx, input);
        }
    }
    // Each member's state merges into a second family's member.
    let mut second = members(data_type, k).unwrap();
    for m in 0..k {
        let state = family[m].state(EmitTo::All).unwrap();
        assert_eq!(
            pairs(&state[0], data_type),
            model[m],
            "seed {seed}: member {m}"
        );
        let all: Vec<usize> = (0..state[0].len()).collect();
        second[m].merge_batch(&state, &all, groups).unwrap();
    }
    for (m, acc) in second.iter_mut().enumerate() {
        let counts = acc.evaluate(EmitTo::All).unwrap();
        let counts = counts.as_primitive::<Int64Type>().values().to_vec();
        let expected = counts_of(&model, m, groups);
        assert_eq!(counts, expected, "seed {seed}: counts of member {m}");
        assert_eq!(acc.evaluate(EmitTo::All).unwrap().len(), 0, "drained");
    }
}

#[test]
fn a_family_counts_what_each_member_would_alone() {
    for seed in 0..400u64 {
        for t in [DataType::Int64, DataType::Int32] {
            run_case(seed * 2 + 1, &t);
        }
    }
}

#[test]
fn only_whole_accumulators_are_emitted() {
    let mut family = members(&DataType::Int64, 2).unwrap();
    let input = Input {
        values: vec![Some(1), Some(2)],
        filter: None,
    };
    for m in family.iter_mut() {
        update(m.as_mut(), &DataType::Int64, &[0, 1], &input, 2);
    }
    let e = family[0].evaluate(EmitTo::First(1)).unwrap_err();
    assert!(e.to_string().contains("EmitTo::First"), "{e}");
    let e = family[1].state(EmitTo::First(1)).unwrap_err();
    assert!(e.to_string().contains("EmitTo::First"), "{e}");
    let counts = family[0].evaluate(EmitTo::All).unwrap();
    assert_eq!(counts.as_primitive::<Int64Type>().values().to_vec(), [1, 1]);
}

#[test]
fn families_have_a_size_limit_and_take_integers_only() {
    assert!(members(&DataType::Int64, MAX_MEMBERS).is_some());
    assert!(members(&DataType::Int64, MAX_MEMBERS + 1).is_none());
    assert!(members(&DataType::Int64, 0).is_none());
    assert!(members(&DataType::Float64, 2).is_none());
    assert!(members(&DataType::Utf8, 2).is_none());
    for t in [DataType::Int8, DataType::UInt16, DataType::UInt64] {
        assert!(handles(&t) && members(&t, 3).is_some());
    }
}

/// Bad input is an error, not a panic.
#[test]
fn wrong_input_types_are_errors() {
    let mut family = members(&DataType::Int64, 2).unwrap();
    let strings: ArrayRef = Arc::new(arrow::array::StringArray::from(vec!["a"]));
    family[0]
        .update_batch(std::slice::from_ref(&strings), &[0], None, 1)
        .unwrap();
    let e = family[1].evaluate(EmitTo::All).unwrap_err();
    assert!(e.to_string().contains("unexpected type"), "{e}");
    let e = family[1].merge_batch(&[strings], &[0], 1).unwrap_err();
    assert!(e.to_string().contains("not a list"), "{e}");
}
