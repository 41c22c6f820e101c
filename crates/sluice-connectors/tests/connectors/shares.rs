//! A file source split across nodes: each node's share reads the files
//! whose partition key it holds, every file is read by exactly one share,
//! a share with no file reads nothing, and a share resumes where it was.

use std::collections::BTreeMap;

use arrow::compute::concat_batches;
use arrow::datatypes::DataType;
use sluice_connectors::{
    ConnectorError, FileFormat, FileShare, FileSourceConfig, FileSourceReader, OnError,
};

use crate::support::*;

/// `files` CSV files `in/f{i}.csv` of `rows` ids each (file i holds ids
/// `i*1000 ..`), plus a hidden file no wildcard matches.
fn write_files(dir: &std::path::Path, files: usize, rows: i64) {
    for i in 0..files {
        let body = (0..rows).fold("id\n".to_string(), |s, r| {
            s + &format!("{}\n", i as i64 * 1000 + r)
        });
        write_file(dir, &format!("in/f{i}.csv"), &body);
    }
    write_file(dir, "in/.hidden.csv", "id\n-1\n");
}

fn cfg(dir: &std::path::Path, share: Option<FileShare>) -> FileSourceConfig {
    let mut c = config(
        dir,
        "in/*.csv",
        FileFormat::Csv,
        schema(&[("id", DataType::Int64)]),
        3,
        OnError::Fail,
    );
    c.share = share;
    c
}

/// Share `n` of `of`: the keys whose byte sum is `n` modulo `of`.
fn nth_of(n: usize, of: usize) -> FileShare {
    FileShare::new(
        format!("{n}/{of}"),
        format!("share {n} of {of}"),
        move |key: &str| key.bytes().map(usize::from).sum::<usize>() % of == n,
    )
}

fn ids(config: FileSourceConfig) -> Vec<i64> {
    read_one(config)
        .column(0)
        .as_any()
        .downcast_ref::<arrow::array::Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

#[test]
fn every_file_is_read_by_exactly_one_share_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), 11, 5);
    let all = ids(cfg(dir.path(), None));
    assert_eq!(all.len(), 55);
    for of in 1..=4 {
        let mut union = Vec::new();
        for n in 0..of {
            let reader = FileSourceReader::open(cfg(dir.path(), Some(nth_of(n, of)))).unwrap();
            // Each share reads whole files, in the sorted order of the list.
            let names: Vec<String> = reader
                .files()
                .iter()
                .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            let mut sorted = names.clone();
            sorted.sort();
            assert_eq!(names, sorted);
            let got = ids(cfg(dir.path(), Some(nth_of(n, of))));
            let by_file: BTreeMap<i64, usize> = got.iter().fold(BTreeMap::new(), |mut m, id| {
                *m.entry(id / 1000).or_default() += 1;
                m
            });
            assert!(by_file.values().all(|&c| c == 5), "{by_file:?}");
            union.extend(got);
        }
        union.sort_unstable();
        let mut expected = all.clone();
        expected.sort_unstable();
        assert_eq!(union, expected, "{of} shares");
    }
}

#[test]
fn a_share_holding_no_file_reads_nothing_and_resumes_to_files_that_came_later() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), 2, 4);
    let nothing_yet = FileShare::new("g*", "only g*", |k: &str| k.starts_with('g'));
    let mut reader = FileSourceReader::open(cfg(dir.path(), Some(nothing_yet.clone()))).unwrap();
    assert!(reader.files().is_empty());
    assert!(reader.next_batch().unwrap().is_none());
    let offset = sluice_connectors::BatchReader::offset(&reader).unwrap();
    // A file of the share appears after the checkpoint: the resumed reader
    // reads it whole.
    write_file(dir.path(), "in/g.csv", "id\n7\n8\n");
    let mut resumed =
        FileSourceReader::open_at_offset(cfg(dir.path(), Some(nothing_yet)), &offset).unwrap();
    let batches = read_all(&mut resumed, 3);
    let got = concat_batches(&resumed.schema(), &batches).unwrap();
    assert_eq!(i64s(&got, "id"), vec![Some(7), Some(8)]);
}

#[test]
fn a_share_resumes_mid_file_and_reads_the_rest_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), 6, 7);
    let share = || nth_of(1, 2);
    let whole = ids(cfg(dir.path(), Some(share())));
    assert!(!whole.is_empty());
    for stop_after in 1..5 {
        let mut reader = FileSourceReader::open(cfg(dir.path(), Some(share()))).unwrap();
        let mut got = Vec::new();
        for _ in 0..stop_after {
            if let Some(b) = reader.next_batch().unwrap() {
                got.extend(i64s(&b, "id").into_iter().flatten());
            }
        }
        let offset = sluice_connectors::BatchReader::offset(&reader).unwrap();
        let mut rest =
            FileSourceReader::open_at_offset(cfg(dir.path(), Some(share())), &offset).unwrap();
        for b in read_all(&mut rest, 3) {
            got.extend(i64s(&b, "id").into_iter().flatten());
        }
        assert_eq!(got, whole, "stopped after {stop_after} batches");
    }
}

/// A position resumes only under the share it was checkpointed in: a
/// share's file index means nothing in another share's list, or in the
/// whole list.
#[test]
fn a_position_resumes_only_under_its_own_share() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), 6, 5);
    let offset_of = |share: Option<FileShare>| {
        let mut reader = FileSourceReader::open(cfg(dir.path(), share)).unwrap();
        reader.next_batch().unwrap();
        sluice_connectors::BatchReader::offset(&reader).unwrap()
    };
    let cases = [
        (
            Some(nth_of(0, 3)),
            Some(nth_of(0, 2)),
            "reading share '0/3'",
            "reading share '0/2'",
        ),
        (
            None,
            Some(nth_of(0, 1)),
            "reading every file",
            "reading share '0/1'",
        ),
        (
            Some(nth_of(0, 1)),
            None,
            "reading share '0/1'",
            "reading every file",
        ),
    ];
    for (then, now, was, is) in cases {
        let offset = offset_of(then.clone());
        let err = FileSourceReader::open_at_offset(cfg(dir.path(), now), &offset)
            .expect_err("another share");
        assert!(
            matches!(err, ConnectorError::InvalidPosition { .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains(&format!(
                "checkpointed {was} of 'in/*.csv' and is resumed {is}"
            )),
            "{text}"
        );
        // Under its own share it resumes.
        FileSourceReader::open_at_offset(cfg(dir.path(), then), &offset).unwrap();
    }
}

#[test]
fn a_share_reads_the_same_files_through_a_base_directory_with_a_dot() {
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), 9, 2);
    let held = |base: &std::path::Path| {
        let mut c = cfg(base, Some(nth_of(1, 3)));
        c.base_dir = Some(base.to_path_buf());
        FileSourceReader::open(c)
            .unwrap()
            .files()
            .iter()
            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    };
    let absolute = held(dir.path());
    assert!(!absolute.is_empty());
    // The same files through a base with a `.` in it (glob drops `.`
    // components from its matches, so the pattern's directory must too).
    let relative = held(&dir.path().join("."));
    assert_eq!(relative, absolute);
}
