//! `split_part` against DataFusion's on generated strings: every length
//! class (empty, short, past the byte-loop threshold), nulls, multi-byte
//! characters, repeated and leading delimiters; every delimiter kind
//! (one byte, multi-byte, two characters, empty, NULL); positions from
//! before the first to past the last field, zero, the extremes and NULL;
//! each string type. The same strings and nulls, or the same error.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, LargeStringArray, StringArray, StringViewArray};
use arrow::datatypes::{DataType, Field};
use datafusion::common::config::ConfigOptions;
use datafusion::common::ScalarValue;
use datafusion::functions::string::split_part::SplitPartFunc;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDFImpl};

use super::{fast_path, field, SplitPart, SHORT};

type TestResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Characters the generated strings are made of: each delimiter below,
/// letters, and two- and three-byte characters.
const ALPHABET: &[&str] = &["/", "/", ",", ".", "a", "bc", "é", "日", " "];

/// Delimiters: one byte (the fast path), a two-byte character, two
/// characters, empty, and NULL.
const DELIMITERS: &[Option<&str>] = &[
    Some("/"),
    Some(","),
    Some("."),
    Some("é"),
    Some("//"),
    Some(""),
    None,
];

const POSITIONS: &[Option<i64>] = &[
    Some(1),
    Some(2),
    Some(3),
    Some(4),
    Some(6),
    Some(9),
    Some(40),
    Some(0),
    Some(-1),
    Some(-3),
    Some(i64::MAX),
    Some(i64::MIN),
    None,
];

/// Deterministic strings: a few fixed ones (empty, only delimiters, a
/// Nexmark URL), then generated ones of lengths up to four times the
/// byte-loop threshold, every seventh a NULL.
fn strings() -> Vec<Option<String>> {
    let mut out: Vec<Option<String>> = vec![
        Some(String::new()),
        Some("/".into()),
        Some("///".into()),
        Some("https://www.nexmark.com/abc/def/ghi/item.htm?query=1".into()),
        Some("a".repeat(SHORT)),
        Some(format!("{}/", "a".repeat(SHORT))),
        Some(format!("{}/b", "a".repeat(SHORT - 1))),
        None,
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: usize| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) as usize % bound
    };
    for i in 0..400 {
        if i % 7 == 0 {
            out.push(None);
            continue;
        }
        let pieces = next(4 * SHORT / 3);
        out.push(Some(
            (0..pieces)
                .map(|_| ALPHABET[next(ALPHABET.len())])
                .collect(),
        ));
    }
    out
}

fn columns() -> Vec<ArrayRef> {
    let s = strings();
    vec![
        Arc::new(StringArray::from(s.clone())),
        Arc::new(LargeStringArray::from(s.clone())),
        Arc::new(StringViewArray::from(s)),
    ]
}

fn invoke(
    f: &dyn ScalarUDFImpl,
    values: &ArrayRef,
    delimiter: Option<&str>,
    position: Option<i64>,
) -> datafusion::common::Result<ArrayRef> {
    let args = ScalarFunctionArgs {
        args: vec![
            ColumnarValue::Array(Arc::clone(values)),
            ColumnarValue::Scalar(ScalarValue::Utf8(delimiter.map(str::to_string))),
            ColumnarValue::Scalar(ScalarValue::Int64(position)),
        ],
        arg_fields: vec![
            Arc::new(Field::new("s", values.data_type().clone(), true)),
            Arc::new(Field::new("d", DataType::Utf8, true)),
            Arc::new(Field::new("n", DataType::Int64, true)),
        ],
        number_rows: values.len(),
        return_field: Arc::new(Field::new(
            "out",
            f.return_type(&[values.data_type().clone(), DataType::Utf8, DataType::Int64])?,
            true,
        )),
        config_options: Arc::new(ConfigOptions::default()),
    };
    f.invoke_with_args(args)?.into_array(values.len())
}

#[test]
fn every_delimiter_and_position_matches_datafusion_on_every_string_type() -> TestResult {
    let mut compared = 0;
    for values in columns() {
        for &delimiter in DELIMITERS {
            for &position in POSITIONS {
                let ours = invoke(&SplitPart::default(), &values, delimiter, position);
                let theirs = invoke(&SplitPartFunc::new(), &values, delimiter, position);
                let case = format!("{:?}, {delimiter:?}, {position:?}", values.data_type());
                match (ours, theirs) {
                    (Ok(a), Ok(b)) => {
                        assert_eq!(a.data_type(), b.data_type(), "{case}");
                        assert_eq!(a.as_ref(), b.as_ref(), "{case}");
                        compared += 1;
                    }
                    (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{case}"),
                    (a, b) => panic!("{case}: ours {a:?}, DataFusion's {b:?}"),
                }
            }
        }
    }
    assert!(compared > 100, "only {compared} cases produced values");
    Ok(())
}

#[test]
fn the_fast_path_takes_exactly_one_byte_delimiters_and_positive_positions_over_utf8() {
    let [utf8, large, view] = <[ArrayRef; 3]>::try_from(columns()).unwrap_or_else(|_| panic!());
    let slash = ScalarValue::Utf8(Some("/".into()));
    for values in [&utf8, &large] {
        assert!(fast_path(values, &slash, 1).is_some());
        assert!(fast_path(values, &slash, i64::MAX).is_some());
        assert!(fast_path(values, &ScalarValue::LargeUtf8(Some(",".into())), 2).is_some());
        assert!(fast_path(values, &ScalarValue::Utf8View(Some(".".into())), 2).is_some());
        // DataFusion's: zero, negative, multi-byte, empty and NULL.
        assert!(fast_path(values, &slash, 0).is_none());
        assert!(fast_path(values, &slash, -1).is_none());
        assert!(fast_path(values, &ScalarValue::Utf8(Some("é".into())), 1).is_none());
        assert!(fast_path(values, &ScalarValue::Utf8(Some("//".into())), 1).is_none());
        assert!(fast_path(values, &ScalarValue::Utf8(Some(String::new())), 1).is_none());
        assert!(fast_path(values, &ScalarValue::Utf8(None), 1).is_none());
    }
    assert!(fast_path(&view, &slash, 1).is_none());
}

#[test]
fn fields_of_a_url_on_both_sides_of_the_byte_loop_threshold() {
    let url = "https://www.nexmark.com/abc/def/ghi/item.htm";
    let long = format!("{url}?{}", "q".repeat(2 * SHORT));
    for s in [url, long.as_str()] {
        let part = |i| {
            let (a, b) = field(s.as_bytes(), b'/', i);
            &s[a..b]
        };
        assert_eq!(
            (part(0), part(1), part(2), part(3), part(4), part(5)),
            ("https:", "", "www.nexmark.com", "abc", "def", "ghi")
        );
        assert!(part(6).starts_with("item.htm"));
        assert_eq!(part(7), "");
    }
}
