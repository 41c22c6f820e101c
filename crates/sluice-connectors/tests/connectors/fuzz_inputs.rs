//! The short, CI-sized counterpart of the `csv`, `json` and `parquet` fuzz
//! targets (`fuzz/` at the repository root): the same entry point,
//! [`fuzzing::check_file_input`], fed (a) every file of the committed seed
//! corpus, (b) random mutations of those files (byte flips, truncations,
//! insertions, splices) and (c) structured random files. Whatever the bytes,
//! only batches of the declared schema or clean, coded errors may come out;
//! every run has a watchdog, so a hang fails instead of stalling CI.

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use sluice_connectors::fuzzing::{self, ReadOutcome};
use sluice_connectors::FileFormat;

const FORMATS: [(FileFormat, &str); 3] = [
    (FileFormat::Csv, "csv"),
    (FileFormat::JsonLines, "json"),
    (FileFormat::Parquet, "parquet"),
];

pub fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into()),
    )
    .join("../../fuzz/corpus")
    .join(target)
}

/// The seed corpus of one target, sorted by name.
pub fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

/// Cases per property: the given default, or `SLUICE_FUZZ_CASES` for a
/// longer local campaign (the watchdogs then allow an hour).
pub fn cases(default: u32) -> u32 {
    std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The watchdog limit for a property run: `default`, or an hour for a
/// campaign sized by `SLUICE_FUZZ_CASES`.
pub fn run_limit(default: Duration) -> Duration {
    if std::env::var_os("SLUICE_FUZZ_CASES").is_some() {
        Duration::from_secs(3600)
    } else {
        default
    }
}

/// Run `f` on its own thread and fail if it takes longer than `limit`.
pub fn with_watchdog(limit: Duration, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(limit) {
        Ok(()) => worker.join().unwrap(),
        // The worker panicked: re-raise its panic here.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(panic) = worker.join() {
                std::panic::resume_unwind(panic);
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("fuzz run still going after {limit:?}"),
    }
}

fn rows_of(outcome: &ReadOutcome) -> Option<usize> {
    match outcome {
        ReadOutcome::Rows { rows, .. } => Some(*rows),
        ReadOutcome::Error(_) => None,
    }
}

#[test]
fn every_corpus_file_reads_cleanly() {
    with_watchdog(Duration::from_secs(60), || {
        for (format, target) in FORMATS {
            let files = corpus(target);
            assert!(
                files.len() >= 10,
                "{target}: only {} corpus files",
                files.len()
            );
            for (name, bytes) in &files {
                let outcomes = fuzzing::check_file_input(format, bytes);
                assert_eq!(
                    outcomes.len(),
                    fuzzing::read_cases().len(),
                    "{target}/{name}"
                );
            }
        }
    });
}

/// The harness reaches the row decoders: the all-types seed of each format
/// reads in full under the wide nullable schema, so the fuzzers start from
/// inputs that decode rather than from header errors.
#[test]
fn all_types_seeds_decode_in_full() {
    // (format, seed, rows under the wide nullable schema, rows under the
    // narrow one, whose NOT NULL `big` refuses the Parquet seed's null row).
    let expected = [
        (FileFormat::Csv, "csv", "valid_all_types.csv", 2, Some(2)),
        (
            FileFormat::JsonLines,
            "json",
            "valid_all_types.jsonl",
            2,
            Some(2),
        ),
        (
            FileFormat::Parquet,
            "parquet",
            "all_types_snappy.parquet",
            3,
            None,
        ),
    ];
    for (format, target, file, wide, narrow) in expected {
        let bytes = std::fs::read(corpus_dir(target).join(file)).unwrap();
        let outcomes = fuzzing::check_file_input(format, &bytes);
        assert_eq!(
            rows_of(&outcomes[0]),
            Some(wide),
            "{file}: {:?}",
            outcomes[0]
        );
        assert_eq!(rows_of(&outcomes[3]), narrow, "{file}: {:?}", outcomes[3]);
    }
}

/// Regressions: corrupt Parquet files on which the parquet crate (or
/// arrow-ipc, decoding the Arrow schema embedded in the footer) panics
/// instead of returning an error. Each is a clean Parquet error naming the
/// file and carrying the panic message (some read cases stop at other
/// damage first, with a clean error too). Found by the
/// mutation test (the first) and the `parquet` fuzz target (the others).
#[test]
fn corrupt_parquet_panics_are_clean_errors() {
    let cases = [
        (
            "regression_ipc_schema_bad_int_width.parquet",
            "Int type with bit width of 24 and signed of false not supported",
        ),
        (
            "regression_ipc_schema_int_overflow.parquet",
            "called `Result::unwrap()` on an `Err` value: TryFromIntError",
        ),
        (
            "regression_ipc_schema_no_fields.parquet",
            "called `Option::unwrap()` on a `None` value",
        ),
        (
            "regression_negative_column_start.parquet",
            "column start and length should not be negative",
        ),
    ];
    let listed: Vec<String> = corpus("parquet")
        .into_iter()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("regression_"))
        .collect();
    assert_eq!(listed, cases.map(|(name, _)| name.to_string()).to_vec());
    for (file, panic) in cases {
        let bytes = std::fs::read(corpus_dir("parquet").join(file)).unwrap();
        let mut contained = 0;
        for outcome in fuzzing::check_file_input(FileFormat::Parquet, &bytes) {
            let ReadOutcome::Error(e) = outcome else {
                panic!("{file}: expected an error, got {outcome:?}");
            };
            let text = e.to_string();
            // Some read paths notice the damage before reaching the panic.
            assert!(
                matches!(e.code(), "SLC-CONN-007" | "SLC-CONN-008"),
                "{file}: {e}"
            );
            assert!(text.starts_with("reading parquet file "), "{file}: {text}");
            assert!(text.contains("input.parquet: "), "{file}: {text}");
            if text.contains("the file is corrupt: ") {
                assert_eq!(e.code(), "SLC-CONN-008", "{file}: {e}");
                assert!(text.contains(panic), "{file}: {text}");
                contained += 1;
            }
        }
        assert!(contained > 0, "{file}: no read case reached the panic");
    }
}

/// One edit of a corpus file.
#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bit: u8,
    },
    Set {
        at: usize,
        byte: u8,
    },
    Truncate {
        at: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    Remove {
        at: usize,
        len: usize,
    },
    /// Replace the tail from `at` with the tail of another corpus file.
    Splice {
        at: usize,
        other: usize,
        from: usize,
    },
    Duplicate {
        at: usize,
        len: usize,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    let interesting = prop::sample::select(vec![
        b',', b'"', b'\n', b'\r', b'{', b'}', b'[', b'\\', b':', 0, 0xff, 0xc3, b'-', b'9', b'e',
        b'.',
    ]);
    prop_oneof![
        (at, 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (at, prop_oneof![interesting.clone(), any::<u8>()])
            .prop_map(|(at, byte)| Mutation::Set { at, byte }),
        at.prop_map(|at| Mutation::Truncate { at }),
        (at, prop::collection::vec(interesting, 1..8))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (at, 1usize..64).prop_map(|(at, len)| Mutation::Remove { at, len }),
        (at, any::<usize>(), any::<usize>()).prop_map(|(at, other, from)| Mutation::Splice {
            at,
            other,
            from
        }),
        (at, 1usize..256).prop_map(|(at, len)| Mutation::Duplicate { at, len }),
    ]
}

fn mutate(mut bytes: Vec<u8>, corpus: &[(String, Vec<u8>)], edits: &[Mutation]) -> Vec<u8> {
    for edit in edits {
        let pos = |at: usize, len: usize| if len == 0 { 0 } else { at % (len + 1) };
        let len = bytes.len();
        match edit {
            Mutation::Flip { at, bit } if len > 0 => bytes[at % len] ^= 1 << bit,
            Mutation::Set { at, byte } if len > 0 => bytes[at % len] = *byte,
            Mutation::Flip { .. } | Mutation::Set { .. } => {}
            Mutation::Truncate { at } => bytes.truncate(pos(*at, len)),
            Mutation::Insert { at, bytes: new } => {
                let at = pos(*at, len);
                bytes.splice(at..at, new.iter().copied());
            }
            Mutation::Remove { at, len: n } => {
                let at = pos(*at, len);
                bytes.drain(at..(at + n).min(len));
            }
            Mutation::Splice { at, other, from } => {
                let donor = &corpus[other % corpus.len()].1;
                bytes.truncate(pos(*at, len));
                bytes.extend_from_slice(&donor[pos(*from, donor.len())..]);
            }
            Mutation::Duplicate { at, len: n } => {
                let at = pos(*at, len);
                let piece = bytes[at..(at + n).min(len)].to_vec();
                bytes.splice(at..at, piece);
            }
        }
    }
    bytes
}

fn run_mutations(format: FileFormat, target: &'static str, default_cases: u32) {
    with_watchdog(run_limit(Duration::from_secs(120)), move || {
        let files = corpus(target);
        let mut runner = TestRunner::new(Config {
            cases: cases(default_cases),
            failure_persistence: None,
            ..Config::default()
        });
        let strategy = (0..files.len(), prop::collection::vec(mutation(), 1..6));
        runner
            .run(&strategy, |(index, edits)| {
                let input = mutate(files[index].1.clone(), &files, &edits);
                fuzzing::check_file_input(format, &input);
                Ok(())
            })
            .unwrap();
    });
}

#[test]
fn mutated_csv_corpus_reads_cleanly() {
    run_mutations(FileFormat::Csv, "csv", 256);
}

#[test]
fn mutated_json_corpus_reads_cleanly() {
    run_mutations(FileFormat::JsonLines, "json", 256);
}

#[test]
fn mutated_parquet_corpus_reads_cleanly() {
    run_mutations(FileFormat::Parquet, "parquet", 256);
}
