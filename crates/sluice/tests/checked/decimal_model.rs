//! SUM and projected `+ - *` over random `DECIMAL(38, 0)` and
//! `DECIMAL(38, 2)` values near the 38-digit limit, in random batches,
//! against an `i128` model: the exact value when it fits the result's
//! precision, an overflow naming the column when it does not.

use proptest::prelude::*;

use crate::common::run;
use crate::decimal::{decimal_batch, MAX38};

/// The scales tested, each of precision 38.
const SCALES: [i8; 2] = [0, 2];

/// An unscaled value of 38 digits at most, biased to the limits and to
/// the square root of the limit (where products cross it).
fn value() -> impl Strategy<Value = i128> {
    let root = 10i128.pow(19);
    prop_oneof![
        (0i128..4).prop_map(|d| MAX38 - d),
        (0i128..4).prop_map(|d| -MAX38 + d),
        (0i128..4).prop_map(|d| 6 * 10i128.pow(37) - d),
        (-3i128..4),
        (-root * 2..root * 2),
        (-MAX38..=MAX38),
    ]
}

fn case() -> impl Strategy<Value = (usize, Vec<(i128, i128)>, Vec<usize>)> {
    (
        0..SCALES.len(),
        prop::collection::vec((value(), value()), 1..6),
        prop::collection::vec(1usize..4, 1..6),
    )
}

fn batches(
    scale: i8,
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
        out.push(decimal_batch(scale, &all[at..at + n]));
        at += n;
    }
    out
}

/// The rows as `batches` splits them.
fn chunks<'a>(rows: &'a [(i128, i128)], sizes: &[usize]) -> Vec<&'a [(i128, i128)]> {
    let mut out = Vec::new();
    let mut at = 0;
    let mut size = sizes.iter().cycle();
    while at < rows.len() {
        let n = (*size.next().unwrap_or(&1)).min(rows.len() - at);
        out.push(&rows[at..at + n]);
        at += n;
    }
    out
}

/// The unscaled `v` at `scale` as SQL shows it.
fn show(v: i128, scale: usize) -> String {
    if scale == 0 {
        return v.to_string();
    }
    let digits = format!("{:0>width$}", v.unsigned_abs(), width = scale + 1);
    let (int, frac) = digits.split_at(digits.len() - scale);
    format!("{}{int}.{frac}", if v < 0 { "-" } else { "" })
}

fn fits(v: i128) -> bool {
    v.unsigned_abs() <= MAX38.unsigned_abs()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// An operator of the model (unscaled): None when even i128 cannot hold it.
type Op = fn(i128, i128) -> Option<i128>;

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn decimal_sum_matches_the_i128_model((t, rows, sizes) in case()) {
        let scale = SCALES[t];
        let ty = format!("DECIMAL(38, {scale})");
        let s = scale as usize;
        // Rows of one window are folded in arrival order, in i128.
        let folded = rows.iter().try_fold(0i128, |acc, r| acc.checked_add(r.0));
        let sql = "CREATE MATERIALIZED VIEW out AS SELECT tumble(ts, INTERVAL '1' HOUR) AS ws, SUM(v) AS total FROM s GROUP BY tumble(ts, INTERVAL '1' HOUR)";
        let got = runtime().block_on(run(&ty, "ts", &[sql], batches(scale, &rows, &sizes)));
        let prefix = "pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'total': sum(s.v) = ";
        let suffix = format!(" does not fit in DECIMAL(38, {scale})");
        match folded {
            Some(sum) if fits(sum) => {
                prop_assert_eq!(got.unwrap(), vec![format!("1970-01-01T00:00:00|{}", show(sum, s))]);
            }
            Some(sum) => {
                prop_assert_eq!(got.unwrap_err().to_string(), format!("{prefix}{}{suffix}", show(sum, s)));
            }
            None => {
                let e = got.unwrap_err().to_string();
                prop_assert!(
                    e.starts_with(prefix) && e.ends_with(&format!(" (beyond 128 bits){suffix}")),
                    "{}", e
                );
            }
        }
    }

    #[test]
    fn projected_decimal_arithmetic_matches_the_i128_model((t, rows, sizes) in case()) {
        let scale = SCALES[t];
        let ty = format!("DECIMAL(38, {scale})");
        let s = scale as usize;
        // + and - keep the scale; * adds the scales. Precision stays 38.
        let ops: [(&str, Op, usize); 3] = [
            ("+", |a, b| a.checked_add(b), s),
            ("-", |a, b| a.checked_sub(b), s),
            ("*", |a, b| a.checked_mul(b), 2 * s),
        ];
        for (op, f, out_scale) in ops {
            let sql = format!("CREATE MATERIALIZED VIEW out AS SELECT k, v {op} w AS r FROM s");
            let got = runtime().block_on(run(&ty, "ts", &[&sql], batches(scale, &rows, &sizes)));
            // A batch is checked as a whole: the i128 kernel fails before the
            // precision of any of its rows is looked at.
            let bad = |r: &&(i128, i128)| !f(r.0, r.1).is_some_and(fits);
            let first_bad = chunks(&rows, &sizes)
                .into_iter()
                .find(|c| c.iter().any(|r| bad(&r)))
                .map(|c| {
                    c.iter()
                        .find(|r| f(r.0, r.1).is_none())
                        .or_else(|| c.iter().find(bad))
                        .copied()
                        .unwrap_or_default()
                });
            match first_bad.as_ref() {
                None => {
                    let mut want: Vec<String> = rows
                        .iter()
                        .enumerate()
                        .map(|(k, (v, w))| format!("{k}|{}", show(f(*v, *w).unwrap_or_default(), out_scale)))
                        .collect();
                    want.sort();
                    prop_assert_eq!(got.unwrap(), want, "{} {}", ty, op);
                }
                Some((v, w)) => {
                    let e = got.unwrap_err().to_string();
                    let prefix = "pipeline halted: stream 'out': arithmetic overflow (SLC-ENG-013) in column 'r': ";
                    let detail = match f(*v, *w) {
                        // Fits i128, not 38 digits: the operands and the exact result.
                        Some(r) => format!(
                            "{} {op} {} = {} does not fit in DECIMAL(38, {out_scale})",
                            show(*v, s), show(*w, s), show(r, out_scale)
                        ),
                        // Beyond i128: Arrow's checked kernel.
                        None => "Overflow happened on: ".to_string(),
                    };
                    prop_assert!(e.starts_with(&format!("{prefix}{detail}")), "{} {}: {}", ty, op, e);
                }
            }
        }
    }
}
