//! Argument lists to try on a scalar function, derived from its signature.
//!
//! Each argument is an "atom": a column of the test source, a literal, or a
//! small constructed value (an array, a binary), written in SQL. A
//! signature that names its types (`Exact`, `Uniform`, `Variadic`,
//! `Coercible`, ...) gets atoms of those types first; a signature that does
//! not (`UserDefined`, `Any`, array signatures) gets a pool of atom lists of
//! its plausible arities. DataFusion's batch `SELECT` then decides which
//! lists are valid calls: nothing here has to be exact, only broad enough.

use datafusion::common::types::NativeType;
use datafusion::logical_expr::{TypeSignature, TypeSignatureClass};
use sluice::arrow::datatypes::DataType;

/// The test source's columns, as `CREATE SOURCE` declares them.
pub const SOURCE_COLUMNS: &str = "i BIGINT, n INT, f DOUBLE, s VARCHAR, w VARCHAR, b BOOLEAN, \
                                  d DATE, ts TIMESTAMP, dec DECIMAL(10, 2)";

const INT: &str = "i";
const INT32: &str = "n";
const FLOAT: &str = "f";
/// Date-like strings.
const DATES: &str = "s";
/// Words.
const WORDS: &str = "w";
const BOOL: &str = "b";
const DATE: &str = "d";
const TS: &str = "ts";
const DEC: &str = "dec";
const INTERVAL: &str = "INTERVAL '1' DAY";
const INT_ARRAY: &str = "make_array(i, 2)";
const STR_ARRAY: &str = "make_array(w, 'x')";
const BYTES: &str = "CAST(w AS BYTEA)";
const TIME: &str = "CAST('10:30:00' AS TIME)";

/// Literals that often make a second or third argument valid: a small
/// integer, a format, a separator, a unit name, an Arrow type name.
const LITERALS: &[&str] = &[
    "2",
    "'%Y-%m-%d'",
    "' '",
    "'day'",
    "'x'",
    "1.5",
    "'Int64'",
    "'hex'",
    "'sha256'",
];

/// Atoms of one Arrow type (empty when none fits).
fn atoms_of(t: &DataType) -> Vec<&'static str> {
    match t {
        DataType::Int64 => vec![INT, "2"],
        DataType::Int32 => vec![INT32],
        DataType::Int8 | DataType::Int16 | DataType::UInt8 | DataType::UInt16 => vec![INT32],
        DataType::UInt32 | DataType::UInt64 => vec![INT],
        DataType::Float64 | DataType::Float32 | DataType::Float16 => vec![FLOAT],
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => vec![WORDS, DATES],
        DataType::Boolean => vec![BOOL],
        DataType::Date32 | DataType::Date64 => vec![DATE],
        DataType::Timestamp(..) => vec![TS],
        DataType::Time32(_) | DataType::Time64(_) => vec![TIME],
        DataType::Interval(_) => vec![INTERVAL],
        DataType::Decimal128(..) | DataType::Decimal256(..) => vec![DEC],
        DataType::Binary | DataType::LargeBinary | DataType::BinaryView => vec![BYTES],
        DataType::List(f) | DataType::LargeList(f) | DataType::FixedSizeList(f, _) => {
            match f.data_type() {
                DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => vec![STR_ARRAY],
                _ => vec![INT_ARRAY],
            }
        }
        DataType::Null => vec!["NULL"],
        _ => vec![],
    }
}

/// Atoms of a signature class.
fn atoms_of_class(c: &TypeSignatureClass) -> Vec<&'static str> {
    match c {
        TypeSignatureClass::Timestamp => vec![TS],
        TypeSignatureClass::Time => vec![TIME],
        TypeSignatureClass::Interval => vec![INTERVAL],
        TypeSignatureClass::Integer => vec![INT, "2"],
        TypeSignatureClass::Float => vec![FLOAT],
        TypeSignatureClass::Decimal => vec![DEC],
        TypeSignatureClass::Numeric => vec![FLOAT, INT],
        TypeSignatureClass::Binary => vec![BYTES],
        TypeSignatureClass::Native(l) => match l.native() {
            NativeType::String => vec![WORDS, DATES, "'%Y-%m-%d'"],
            NativeType::Boolean => vec![BOOL],
            NativeType::Int8
            | NativeType::Int16
            | NativeType::Int32
            | NativeType::Int64
            | NativeType::UInt8
            | NativeType::UInt16
            | NativeType::UInt32
            | NativeType::UInt64 => vec![INT, "2"],
            NativeType::Float16 | NativeType::Float32 | NativeType::Float64 => vec![FLOAT],
            NativeType::Date => vec![DATE],
            NativeType::Timestamp(..) => vec![TS],
            NativeType::Time(_) => vec![TIME],
            NativeType::Interval(_) => vec![INTERVAL],
            NativeType::Decimal(..) => vec![DEC],
            NativeType::Binary | NativeType::FixedSizeBinary(_) => vec![BYTES],
            NativeType::List(_) | NativeType::FixedSizeList(..) => vec![INT_ARRAY],
            _ => vec![INT, WORDS],
        },
        _ => vec![INT, WORDS, FLOAT, TS],
    }
}

/// Every combination of one atom per position, at most `cap` of them.
fn product(positions: &[Vec<&'static str>], cap: usize) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = vec![vec![]];
    for atoms in positions {
        if atoms.is_empty() {
            return vec![];
        }
        let mut next = Vec::new();
        for prefix in &out {
            for a in atoms {
                if next.len() >= cap {
                    break;
                }
                let mut l = prefix.clone();
                l.push((*a).to_string());
                next.push(l);
            }
        }
        out = next;
    }
    out
}

/// `n` copies of `atom`.
fn same(atom: &str, n: usize) -> Vec<String> {
    vec![atom.to_string(); n]
}

/// Columns (and constructed values) a generic signature is tried with.
const COLUMNS: [&str; 12] = [
    WORDS, INT, FLOAT, DATES, TS, INT_ARRAY, STR_ARRAY, BOOL, DATE, DEC, INT32, BYTES,
];

/// The most structured atom lists of `arity` for a signature that names no
/// types: each column repeated, and an array with an element (array_append,
/// array_position, array_slice, ...).
fn pool_plain(arity: usize) -> Vec<Vec<String>> {
    if arity == 0 {
        return vec![vec![]];
    }
    let mut out: Vec<Vec<String>> = COLUMNS.iter().map(|c| same(c, arity)).collect();
    if arity == 1 {
        // Positive numbers, for functions that fail on a negative row.
        out.extend([same("2", 1), same("1.5", 1)]);
    }
    if arity >= 2 {
        for (array, element) in [(INT_ARRAY, INT), (STR_ARRAY, WORDS)] {
            let mut list = vec![array.to_string(), element.to_string()];
            list.extend(same("1", arity - 2));
            out.push(list);
        }
    }
    out
}

/// Atom lists of `arity` mixing a column with literals: the column first,
/// then (for two arguments) a literal first (a unit or a format).
fn pool_literals(arity: usize) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    if arity < 2 {
        return out;
    }
    for c in COLUMNS {
        for l in LITERALS {
            let mut list = vec![c.to_string()];
            list.extend(same(l, arity - 1));
            out.push(list);
        }
    }
    if arity == 2 {
        for l in LITERALS {
            for c in COLUMNS {
                out.push(vec![l.to_string(), c.to_string()]);
            }
        }
    }
    out
}

/// Every generic atom list of arity 0 to 3, the most structured first.
pub fn pool() -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = [1, 2, 3, 0].into_iter().flat_map(pool_plain).collect();
    out.extend([2, 3].into_iter().flat_map(pool_literals));
    out
}

/// Candidate argument lists for one signature, most specific first.
pub fn candidates(sig: &TypeSignature) -> Vec<Vec<String>> {
    let mut out = match sig {
        TypeSignature::Nullary => vec![vec![]],
        TypeSignature::Exact(types) => product(&types.iter().map(atoms_of).collect::<Vec<_>>(), 4),
        TypeSignature::Uniform(n, types) => types
            .iter()
            .flat_map(atoms_of)
            .map(|a| same(a, *n))
            .collect(),
        TypeSignature::Variadic(types) => types
            .iter()
            .flat_map(atoms_of)
            .flat_map(|a| [same(a, 1), same(a, 2), vec![a.to_string(), "NULL".into()]])
            .collect(),
        TypeSignature::Coercible(cs) => product(
            &cs.iter()
                .map(|c| atoms_of_class(c.desired_type()))
                .collect::<Vec<_>>(),
            8,
        ),
        TypeSignature::Comparable(n) => vec![same(INT, *n), same(WORDS, *n)],
        TypeSignature::Numeric(n) => vec![same(FLOAT, *n), same(INT, *n), same(DEC, *n)],
        TypeSignature::String(n) => {
            let mut v = vec![same(WORDS, *n), same(DATES, *n)];
            for l in LITERALS {
                let mut list = vec![WORDS.to_string()];
                list.extend(same(l, n.saturating_sub(1)));
                v.push(list);
            }
            v
        }
        TypeSignature::Any(n) => {
            let mut v = pool_plain(*n);
            v.extend(pool_literals(*n));
            v
        }
        TypeSignature::OneOf(sigs) => sigs.iter().flat_map(candidates).collect(),
        TypeSignature::VariadicAny
        | TypeSignature::UserDefined
        | TypeSignature::ArraySignature(_) => pool(),
    };
    let mut seen = std::collections::HashSet::new();
    out.retain(|l| seen.insert(l.clone()));
    out
}
