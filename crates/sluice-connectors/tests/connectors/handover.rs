//! Handing a file source's files from one set of shares to another (the
//! vnodes of a split moved between nodes): whatever shares read, and
//! wherever each stopped, the shares after the handover read every row the
//! shares before did not, and none they did, through several handovers
//! in a row, in CSV and JSON lines, through positions that were stored as
//! checkpoint offsets. A handover that cannot be exact is refused.

use std::collections::{BTreeMap, BTreeSet};

use arrow::datatypes::DataType;
use sluice_connectors::{
    handover, BatchReader, FileFormat, FileProgress, FileShare, FileSourceConfig, FileSourceReader,
    OnError, PreviousShare, SourcePosition,
};

use crate::support::*;

/// xorshift64: a small deterministic generator, so a failing seed repeats.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

/// A share holding exactly `keys`; its identity names them.
fn share_of(keys: BTreeSet<String>) -> FileShare {
    let identity = keys.iter().cloned().collect::<Vec<_>>().join(",");
    FileShare::new(
        identity.clone(),
        format!("keys {identity}"),
        move |k: &str| keys.contains(k),
    )
}

/// `files` files `in/d{i % 3}/f{i}.EXT` (keys like `d1/f4.csv`) of random
/// row counts (empty files too); file i holds ids `i*1000 ..`. Returns
/// every key and every id.
fn write_files(
    dir: &std::path::Path,
    rng: &mut Rng,
    files: u64,
    format: FileFormat,
) -> (Vec<String>, Vec<i64>) {
    let mut keys = Vec::new();
    let mut ids = Vec::new();
    for i in 0..files {
        let rows = rng.below(9);
        let (ext, mut body) = match format {
            FileFormat::Csv => ("csv", "id\n".to_string()),
            _ => ("jsonl", String::new()),
        };
        for r in 0..rows {
            let id = i as i64 * 1000 + r as i64;
            ids.push(id);
            body += &match format {
                FileFormat::Csv => format!("{id}\n"),
                _ => format!("{{\"id\": {id}}}\n"),
            };
        }
        let key = format!("d{}/f{i}.{ext}", i % 3);
        write_file(dir, &format!("in/{key}"), &body);
        keys.push(key);
    }
    (keys, ids)
}

fn cfg(
    dir: &std::path::Path,
    format: FileFormat,
    batch: usize,
    share: Option<FileShare>,
) -> FileSourceConfig {
    let ext = if format == FileFormat::Csv {
        "csv"
    } else {
        "jsonl"
    };
    let mut c = config(
        dir,
        &format!("in/**/*.{ext}"),
        format,
        schema(&[("id", DataType::Int64)]),
        batch,
        OnError::Fail,
    );
    c.share = share;
    c
}

/// `in/*.csv` in batches of 2, as the share holding exactly `keys`.
fn flat_csv(dir: &std::path::Path, keys: &[&str]) -> FileSourceConfig {
    let mut c = config(
        dir,
        "in/*.csv",
        FileFormat::Csv,
        schema(&[("id", DataType::Int64)]),
        2,
        OnError::Fail,
    );
    c.share = Some(share_of(keys.iter().map(|s| s.to_string()).collect()));
    c
}

/// Read up to `batches` batches (all with `None`), appending the ids to
/// `out`; whether the reader reached its end.
fn read(reader: &mut FileSourceReader, batches: Option<u64>, out: &mut Vec<i64>) -> bool {
    let mut n = 0;
    while batches.is_none_or(|b| n < b) {
        match reader.next_batch().unwrap() {
            Some(b) => out.extend(i64s(&b, "id").into_iter().flatten()),
            None => return true,
        }
        n += 1;
    }
    false
}

/// Random partitions of the keys into 1 to 4 shares, several handovers in
/// a row, each share stopping after a random number of batches (the last
/// round reads to the end): every id is read exactly once.
#[test]
fn shares_after_handovers_read_every_row_exactly_once() {
    for seed in 1..=120u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let format = if seed % 2 == 0 {
            FileFormat::Csv
        } else {
            FileFormat::JsonLines
        };
        let dir = tempfile::tempdir().unwrap();
        let files = 1 + rng.below(12);
        let (keys, all) = write_files(dir.path(), &mut rng, files, format);
        let batch = 1 + rng.below(5) as usize;
        let mut read_ids = Vec::new();
        // Round 0: one whole (not split) run, stopped anywhere.
        let mut previous = {
            let mut reader = FileSourceReader::open(cfg(dir.path(), format, batch, None)).unwrap();
            let finished = read(&mut reader, Some(rng.below(4)), &mut read_ids);
            vec![PreviousShare {
                share: None,
                position: Some(reader.position()),
                finished,
            }]
        };
        let rounds = 1 + rng.below(4);
        for round in 1..=rounds {
            let last = round == rounds;
            let of = 1 + rng.below(4);
            let mut parts = vec![BTreeSet::new(); of as usize];
            for k in &keys {
                parts[rng.below(of) as usize].insert(k.clone());
            }
            let mut next = Vec::new();
            for part in parts {
                let share = share_of(part);
                let config = cfg(dir.path(), format, batch, Some(share.clone()));
                let start = handover(&config, &previous)
                    .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
                let (position, finished) = if start.finished {
                    (start.position, true)
                } else {
                    // Through a checkpoint offset, as a node resumes.
                    let offset = serde_json::to_string(&start.position).unwrap();
                    let mut reader = FileSourceReader::open_at_offset(config, &offset)
                        .unwrap_or_else(|e| panic!("seed {seed} round {round}: {e}"));
                    let batches = (!last).then(|| rng.below(4));
                    let finished = read(&mut reader, batches, &mut read_ids);
                    let offset = BatchReader::offset(&reader).unwrap();
                    (serde_json::from_str(&offset).unwrap(), finished)
                };
                next.push(PreviousShare {
                    share: Some(share),
                    position: Some(position),
                    finished,
                });
            }
            previous = next;
        }
        let mut got = read_ids.clone();
        got.sort_unstable();
        assert_eq!(got, all, "seed {seed}: read {read_ids:?}");
    }
}

/// What a handover's position says, exactly: the first unfinished file of
/// the share, where its previous share stopped, and the handed-over files
/// after it; a share whose files were all read starts finished.
#[test]
fn a_handover_starts_at_the_first_unread_row_and_carries_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    for (i, rows) in [3, 4, 2, 5].iter().enumerate() {
        let body = (0..*rows).fold("id\n".to_string(), |s, r| s + &format!("{}\n", i * 10 + r));
        write_file(dir.path(), &format!("in/f{i}.csv"), &body);
    }
    let cfg = |keys: &[&str]| flat_csv(dir.path(), keys);
    // Share A = {f0, f2} read f0 whole and one row of f2; share B =
    // {f1, f3} read two rows of f1.
    let stop = |share: &[&str], rows: usize| {
        let mut r = FileSourceReader::open(cfg(share)).unwrap();
        let mut n = 0;
        while n < rows {
            n += r.next_batch().unwrap().unwrap().num_rows();
        }
        r.position()
    };
    let mut a = FileSourceReader::open(cfg(&["f0.csv", "f2.csv"])).unwrap();
    a.next_batch().unwrap();
    a.next_batch().unwrap(); // f0's third row and f2's first
    let a = PreviousShare {
        share: Some(share_of(["f0.csv", "f2.csv"].map(String::from).into())),
        position: Some(a.position()),
        finished: false,
    };
    let b = PreviousShare {
        share: Some(share_of(["f1.csv", "f3.csv"].map(String::from).into())),
        position: Some(stop(&["f1.csv", "f3.csv"], 2)),
        finished: false,
    };
    let start = handover(
        &cfg(&["f0.csv", "f1.csv", "f2.csv"]),
        &[a.clone(), b.clone()],
    )
    .unwrap();
    assert!(!start.finished);
    assert_eq!(start.position.key.as_deref(), Some("f1.csv"));
    assert_eq!(start.position.file_index, 1);
    assert_eq!(start.position.rows_consumed, 2);
    assert_eq!(
        start.position.ahead,
        BTreeMap::from([(
            "f2.csv".to_string(),
            FileProgress::Partial {
                rows_consumed: 1,
                byte_offset: Some(6),
            }
        )])
    );
    let mut r =
        FileSourceReader::open_at(cfg(&["f0.csv", "f1.csv", "f2.csv"]), &start.position).unwrap();
    let mut ids = Vec::new();
    assert!(read(&mut r, None, &mut ids));
    assert_eq!(ids, vec![12, 13, 21]);
    // f0 alone was read whole: a share of it starts finished, at a
    // position that reads nothing whatever a checkpoint records of it.
    let done = handover(&cfg(&["f0.csv"]), &[a.clone(), b.clone()]).unwrap();
    assert!(done.finished && done.position.done);
    let mut r = FileSourceReader::open_at(cfg(&["f0.csv"]), &done.position).unwrap();
    assert!(r.next_batch().unwrap().is_none());
    let again = PreviousShare {
        share: Some(share_of(["f0.csv".to_string()].into())),
        position: Some(r.position()),
        finished: false,
    };
    let after = handover(&cfg(&["f0.csv", "f1.csv"]), &[again, b.clone()]).unwrap();
    assert_eq!(after.position.key.as_deref(), Some("f1.csv"));
    // Files read already may be archived: the handover goes on without
    // them (f0 was read whole; A stopped in f2).
    std::fs::remove_file(dir.path().join("in/f0.csv")).unwrap();
    let start = handover(&cfg(&["f1.csv", "f2.csv"]), &[a, b]).unwrap();
    assert_eq!(start.position.key.as_deref(), Some("f1.csv"));
    assert_eq!(start.position.rows_consumed, 2);
}

/// Refused, naming the file: a file no previous share held, one that two
/// held, and a previous position that was read under another share.
#[test]
fn a_handover_that_cannot_be_exact_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..3 {
        write_file(dir.path(), &format!("in/f{i}.csv"), "id\n1\n");
    }
    let cfg = |keys: &[&str]| flat_csv(dir.path(), keys);
    let prev = |keys: &[&str], position: Option<SourcePosition>| PreviousShare {
        share: Some(share_of(keys.iter().map(|s| s.to_string()).collect())),
        position,
        finished: false,
    };
    fn err<T>(r: Result<T, sluice_connectors::ConnectorError>) -> String {
        let e = r.err().expect("refused");
        assert_eq!(e.code(), "SLC-CONN-006");
        e.to_string()
    }
    let e = err(handover(
        &cfg(&["f0.csv", "f2.csv"]),
        &[prev(&["f0.csv"], None)],
    ));
    assert!(
        e.contains("'f2.csv'") && e.contains("no previous share held it"),
        "{e}"
    );
    let e = err(handover(
        &cfg(&["f1.csv"]),
        &[
            prev(&["f0.csv", "f1.csv"], None),
            prev(&["f1.csv", "f2.csv"], None),
        ],
    ));
    assert!(e.contains("2 previous shares held it"), "{e}");
    let read_under_other = FileSourceReader::open(cfg(&["f0.csv"])).unwrap().position();
    let e = err(handover(
        &cfg(&["f0.csv"]),
        &[prev(&["f0.csv", "f1.csv"], Some(read_under_other))],
    ));
    assert!(e.contains("was read under share 'f0.csv'"), "{e}");
    // A finished share's position too: another share's final position
    // says nothing of this one's files.
    let finished_elsewhere = PreviousShare {
        finished: true,
        ..prev(
            &["f0.csv", "f1.csv"],
            Some(FileSourceReader::open(cfg(&["f0.csv"])).unwrap().position()),
        )
    };
    let e = err(handover(&cfg(&["f0.csv"]), &[finished_elsewhere]));
    assert!(e.contains("was read under share 'f0.csv'"), "{e}");
    // A position whose carried file comes before its own file.
    let mut bad = FileSourceReader::open(cfg(&["f1.csv", "f2.csv"])).unwrap();
    bad.next_batch().unwrap(); // f1's row and f2's
    let mut bad = bad.position();
    assert_eq!(bad.key.as_deref(), Some("f2.csv"));
    bad.ahead.insert("f1.csv".into(), FileProgress::Done);
    let e = err(FileSourceReader::open_at(cfg(&["f1.csv", "f2.csv"]), &bad).map(|_| ()));
    assert!(e.contains("'f1.csv'") && e.contains("comes before"), "{e}");
    // A run that was not split names its file by path: once that file is
    // gone, where its later files stand is not known.
    let mut whole_cfg = cfg(&["f0.csv"]);
    whole_cfg.share = None;
    let mut whole = FileSourceReader::open(whole_cfg).unwrap();
    whole.next_batch().unwrap(); // f0's row and f1's
    let whole = PreviousShare {
        share: None,
        position: Some(whole.position()),
        finished: false,
    };
    assert_eq!(whole.position.as_ref().unwrap().key, None);
    std::fs::remove_file(dir.path().join("in/f1.csv")).unwrap();
    let e = err(handover(&cfg(&["f2.csv"]), &[whole]));
    assert!(e.contains("not matched by"), "{e}");
}
