//! `MinMaxBytes` against a model (a map of each group's best value) on
//! random batches of every type it handles, with nulls, filters, partial
//! emits, state round trips through a second accumulator, and values whose
//! lengths vary so that in-place writes, appends and compaction all run.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BinaryArray, BinaryViewArray, BooleanArray, LargeBinaryArray,
    LargeStringArray, StringArray, StringViewArray,
};
use arrow::datatypes::DataType;
use datafusion::logical_expr::{EmitTo, GroupsAccumulator};

use super::{handles, MinMaxBytes};

use crate::test_rng::Rng;

const TYPES: [DataType; 6] = [
    DataType::Utf8,
    DataType::LargeUtf8,
    DataType::Utf8View,
    DataType::Binary,
    DataType::LargeBinary,
    DataType::BinaryView,
];

/// A column of `data_type` holding `values` (all valid UTF-8).
fn column(data_type: &DataType, values: &[Option<String>]) -> ArrayRef {
    let strs = values.iter().map(|v| v.as_deref());
    let bins = values.iter().map(|v| v.as_deref().map(str::as_bytes));
    match data_type {
        DataType::Utf8 => Arc::new(strs.collect::<StringArray>()),
        DataType::LargeUtf8 => Arc::new(strs.collect::<LargeStringArray>()),
        DataType::Utf8View => Arc::new(strs.collect::<StringViewArray>()),
        DataType::Binary => Arc::new(bins.collect::<BinaryArray>()),
        DataType::LargeBinary => Arc::new(bins.collect::<LargeBinaryArray>()),
        DataType::BinaryView => Arc::new(bins.collect::<BinaryViewArray>()),
        other => panic!("no column of {other}"),
    }
}

/// The values of an emitted column, as strings.
fn read(array: &ArrayRef) -> Vec<Option<String>> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    match array.data_type() {
        DataType::Utf8 => array
            .as_string::<i32>()
            .iter()
            .map(|v| v.map(String::from))
            .collect(),
        DataType::LargeUtf8 => array
            .as_string::<i64>()
            .iter()
            .map(|v| v.map(String::from))
            .collect(),
        DataType::Utf8View => array
            .as_string_view()
            .iter()
            .map(|v| v.map(String::from))
            .collect(),
        DataType::Binary => array
            .as_binary::<i32>()
            .iter()
            .map(|v| v.map(text))
            .collect(),
        DataType::LargeBinary => array
            .as_binary::<i64>()
            .iter()
            .map(|v| v.map(text))
            .collect(),
        DataType::BinaryView => array.as_binary_view().iter().map(|v| v.map(text)).collect(),
        other => panic!("no values of {other}"),
    }
}

fn random_value(rng: &mut Rng) -> Option<String> {
    if rng.below(8) == 0 {
        return None;
    }
    // Short alphabets and lengths from 0 to 40 (past a view's inline 12
    // bytes), with some multi-byte characters.
    let len = rng.below(41) as usize;
    Some(
        (0..len)
            .map(|_| ['a', 'b', 'z', 'é', '中'][rng.below(5) as usize])
            .collect(),
    )
}

fn fold_model(model: &mut [Option<String>], keep_min: bool, g: usize, v: &str) {
    let slot = &mut model[g];
    let replace = match slot {
        None => true,
        Some(old) if keep_min => v.as_bytes() < old.as_bytes(),
        Some(old) => v.as_bytes() > old.as_bytes(),
    };
    if replace {
        *slot = Some(v.to_string());
    }
}

fn run(seed: u64) {
    let mut rng = Rng(seed | 1);
    let data_type = TYPES[rng.below(TYPES.len() as u64) as usize].clone();
    let keep_min = rng.below(2) == 0;
    // Compact at any size, so that it runs between most batches.
    let compact_above = rng.below(64) as usize;
    let fresh = || {
        let mut acc = MinMaxBytes::new(keep_min, data_type.clone());
        acc.compact_above = compact_above;
        acc
    };
    let mut acc = fresh();
    let mut model: Vec<Option<String>> = Vec::new();
    for _ in 0..rng.below(40) + 1 {
        let groups = (model.len() + rng.below(50) as usize).max(1);
        model.resize(groups, None);
        let rows = rng.below(200) as usize;
        let values: Vec<Option<String>> = (0..rows).map(|_| random_value(&mut rng)).collect();
        let idx: Vec<usize> = (0..rows)
            .map(|_| rng.below(groups as u64) as usize)
            .collect();
        let filter = (rng.below(3) == 0).then(|| {
            (0..rows)
                .map(|_| match rng.below(4) {
                    0 => None,
                    1 => Some(false),
                    _ => Some(true),
                })
                .collect::<BooleanArray>()
        });
        for (i, (v, g)) in values.iter().zip(&idx).enumerate() {
            let kept = filter.as_ref().is_none_or(|f| f.is_valid(i) && f.value(i));
            if let (Some(v), true) = (v, kept) {
                fold_model(&mut model, keep_min, *g, v);
            }
        }
        acc.update_batch(
            &[column(&data_type, &values)],
            &idx,
            filter.as_ref(),
            groups,
        )
        .unwrap();
        match rng.below(6) {
            0 if !model.is_empty() => {
                // Emit the first n groups: they leave both.
                let n = rng.below(model.len() as u64 + 1) as usize;
                let out = acc.evaluate(EmitTo::First(n)).unwrap();
                assert_eq!(out.data_type(), &data_type, "seed {seed}");
                assert_eq!(read(&out), model[..n], "seed {seed}");
                model.drain(..n);
            }
            1 => {
                // Move the whole state into a fresh accumulator, in a
                // shuffled group order, as a scope's merge does.
                let state = acc.state(EmitTo::All).unwrap();
                assert_eq!(acc.size(), 0, "seed {seed}");
                let len = state[0].len();
                let mut order: Vec<usize> = (0..len).collect();
                for i in (1..len).rev() {
                    order.swap(i, rng.below(i as u64 + 1) as usize);
                }
                let take = arrow::array::UInt32Array::from(
                    order.iter().map(|g| *g as u32).collect::<Vec<_>>(),
                );
                let shuffled = arrow::compute::take(&state[0], &take, None).unwrap();
                acc = fresh();
                acc.merge_batch(&[shuffled], &order, model.len()).unwrap();
            }
            _ => {}
        }
    }
    let out = acc.evaluate(EmitTo::All).unwrap();
    assert_eq!(read(&out), model, "seed {seed}");
}

#[test]
fn min_and_max_over_every_byte_type_equal_a_model() {
    for seed in 0..400 {
        run(seed * 6151 + 3);
    }
}

#[test]
fn a_buffer_of_replaced_values_is_compacted() {
    // MAX over ever-growing values appends each one; the buffer stays
    // within twice what is referenced (past the minimum).
    let mut acc = MinMaxBytes::new(false, DataType::Utf8);
    for round in 0..2_000usize {
        let v = format!("{round:08}{}", "x".repeat(round % 100));
        let values: ArrayRef = Arc::new(StringArray::from(vec![v.as_str(); 4]));
        acc.update_batch(&[values], &[0, 1, 2, 3], None, 4).unwrap();
    }
    assert!(acc.bytes.len() <= super::MIN_COMPACT_BYTES.max(2 * acc.used));
    let out = acc.evaluate(EmitTo::All).unwrap();
    let expect = format!("{:08}{}", 1_999, "x".repeat(99));
    assert_eq!(read(&out), vec![Some(expect); 4]);
}

#[test]
fn a_column_of_the_wrong_type_or_length_is_an_error() {
    let mut acc = MinMaxBytes::new(true, DataType::Utf8);
    let binary: ArrayRef = Arc::new(BinaryArray::from(vec![b"a".as_slice()]));
    let err = acc.update_batch(&[binary], &[0], None, 1).unwrap_err();
    assert!(
        err.to_string()
            .contains("min over Utf8 was given a Binary column"),
        "{err}"
    );
    let text: ArrayRef = Arc::new(StringArray::from(vec!["a", "b"]));
    let err = acc
        .update_batch(std::slice::from_ref(&text), &[0], None, 1)
        .unwrap_err();
    assert!(
        err.to_string().contains("2 values for 1 group indices"),
        "{err}"
    );
    let err = acc.update_batch(&[text], &[0, 5], None, 2).unwrap_err();
    assert!(err.to_string().contains("group 5 of 2"), "{err}");
    assert!(acc.update_batch(&[], &[], None, 0).is_err());
}

#[test]
fn it_handles_exactly_the_byte_types() {
    for t in TYPES {
        assert!(handles(&t), "{t}");
    }
    let dictionary = DataType::Dictionary(Box::new(DataType::Int32), Box::new(DataType::Utf8));
    for t in [
        DataType::Int64,
        DataType::Boolean,
        DataType::Null,
        dictionary,
    ] {
        assert!(!handles(&t), "{t}");
    }
}
