//! SUM and projected `+ - *` over random values near the ends of every
//! integer type, in random batches, against an `i128` model: the result
//! when it fits the result type, an overflow error naming the column when
//! it does not.

use proptest::prelude::*;

use crate::common::{batch, run, INTEGER_TYPES};

/// A value of the type's range, biased to its ends.
fn value(min: i128, max: i128) -> impl Strategy<Value = i128> {
    prop_oneof![
        (0i128..4).prop_map(move |d| max - d),
        (0i128..4).prop_map(move |d| min + d),
        (-3i128..4).prop_map(move |d| d.clamp(min, max)),
        (min..=max),
    ]
}

/// Rows and batch sizes for one type.
fn case() -> impl Strategy<Value = (usize, Vec<(i128, i128)>, Vec<usize>)> {
    (0..INTEGER_TYPES.len()).prop_flat_map(|t| {
        let (_, _, min, max) = &INTEGER_TYPES[t];
        let (min, max) = (*min, *max);
        (
            Just(t),
            prop::collection::vec((value(min, max), value(min, max)), 1..8),
            prop::collection::vec(1usize..4, 1..8),
        )
    })
}

fn batches(
    dt: &sluice::arrow::datatypes::DataType,
    rows: &[(i128, i128)],
    sizes: &[usize],
) -> Vec<sluice::arrow::record_batch::RecordBatch> {
    let all: Vec<(i64, i128, i128, i64)> = rows
        .iter()
        .enumerate()
        .map(|(i, (v, w))| (i as i64, *v, *w, 1_000 + i as i64))
        .collect();
    let mut out = Vec::new();
    let mut at = 0;
    let mut size = sizes.iter().cycle();
    while at < all.len() {
        let n = (*size.next().unwrap_or(&1)).min(all.len() - at);
        out.push(batch(dt, &all[at..at + n]));
        at += n;
    }
    out
}

/// An operator of the model: None when even i128 cannot hold the result.
type Op = fn(i128, i128) -> Option<i128>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn sum_matches_the_i128_model((t, rows, sizes) in case()) {
        let (ty, dt, _, _) = &INTEGER_TYPES[t];
        // SUM widens signed types to BIGINT and unsigned ones to BIGINT UNSIGNED.
        let (lo, hi, out_ty) = if dt.is_unsigned_integer() {
            (0, u64::MAX as i128, "BIGINT UNSIGNED")
        } else {
            (i64::MIN as i128, i64::MAX as i128, "BIGINT")
        };
        let exact: i128 = rows.iter().map(|r| r.0).sum();
        // One tumbling window closed at the end: its final sum is the model's.
        let sql = "CREATE MATERIALIZED VIEW out AS SELECT tumble(ts, INTERVAL '1' HOUR) AS ws, SUM(v) AS total FROM s GROUP BY tumble(ts, INTERVAL '1' HOUR)";
        let got = runtime().block_on(run(ty, "ts", &[sql], batches(dt, &rows, &sizes)));
        if (lo..=hi).contains(&exact) {
            prop_assert_eq!(got.unwrap(), vec![format!("1970-01-01T00:00:00|{exact}")]);
        } else {
            let e = got.unwrap_err().to_string();
            prop_assert_eq!(
                e,
                format!("pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'total': sum(s.v) = {exact} does not fit in {out_ty}")
            );
        }
    }

    #[test]
    fn projected_arithmetic_matches_the_i128_model((t, rows, sizes) in case()) {
        let (ty, dt, min, max) = &INTEGER_TYPES[t];
        // Both operands have the declared type, and so does the result.
        let ops: [(&str, Op); 3] = [
            ("+", |a, b| a.checked_add(b)),
            ("-", |a, b| a.checked_sub(b)),
            ("*", |a, b| a.checked_mul(b)),
        ];
        let fits = |r: Option<i128>| r.is_some_and(|r| (*min..=*max).contains(&r));
        for (op, f) in ops {
            let sql = format!("CREATE MATERIALIZED VIEW out AS SELECT k, v {op} w AS r FROM s");
            let got = runtime().block_on(run(ty, "ts", &[&sql], batches(dt, &rows, &sizes)));
            let first_bad = rows.iter().find(|(v, w)| !fits(f(*v, *w)));
            match first_bad {
                None => {
                    let mut want: Vec<String> = rows
                        .iter()
                        .enumerate()
                        .map(|(k, (v, w))| format!("{k}|{}", f(*v, *w).unwrap_or_default()))
                        .collect();
                    want.sort();
                    prop_assert_eq!(got.unwrap(), want, "{} {}", ty, op);
                }
                Some(_) => {
                    let e = got.unwrap_err().to_string();
                    prop_assert!(
                        e.starts_with("pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'r': Overflow happened on: "),
                        "{} {}: {}", ty, op, e
                    );
                }
            }
        }
    }
}
