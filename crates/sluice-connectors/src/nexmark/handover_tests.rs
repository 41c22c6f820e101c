//! [`handover`](super::handover::handover): partitions that move between shares,
//! through several assignments of random shares stopping at random rows,
//! are each emitted once; a handover that cannot be exact is refused.

use arrow::record_batch::RecordBatch;

use super::tests::{block_of, config, drain, keyed_rows};
use super::*;
use crate::reader::BatchReader;

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// Share `me` of an assignment where partition `b` belongs to
/// `owner[b % owner.len()]`; `name` tells assignments apart.
fn share(name: &str, me: usize, owner: &[usize]) -> FileShare {
    let owner = owner.to_vec();
    FileShare::new(
        format!("{name}/{me}"),
        format!("share {me} of {name}"),
        move |key| owner[(block_of(key) % owner.len() as u64) as usize] == me,
    )
}

/// Read up to `batches` batches; the rows, the offset reached and whether
/// the stream ended.
fn read_some(reader: &mut NexmarkReader, batches: u64) -> (Vec<RecordBatch>, bool) {
    let mut out = Vec::new();
    for _ in 0..batches {
        match reader.next_batch().expect("generation") {
            Some(b) => out.push(b),
            None => return (out, true),
        }
    }
    (out, false)
}

#[test]
fn partitions_handed_over_between_random_shares_are_emitted_once() {
    let mut rng = Rng(0x4e78_6d6b);
    let mut midway = 0;
    for round in 0..60 {
        let events = (2 + rng.below(10)) * PARTITION_ROWS + rng.below(PARTITION_ROWS);
        let mut base = config(NexmarkStream::Bid, events);
        base.batch_size = 1 + rng.below(700) as usize;
        let mut whole = keyed_rows(&drain(
            NexmarkReader::open(config(NexmarkStream::Bid, events)).expect("open"),
        ));
        whole.sort();
        let mut union = Vec::new();
        // The shares of the previous assignment and where they stopped.
        let mut previous: Vec<PreviousNexmarkShare> = Vec::new();
        let assignments = 1 + rng.below(4);
        for assignment in 0..assignments {
            let last = assignment + 1 == assignments;
            let shares = 1 + rng.below(4) as usize;
            let owner: Vec<usize> = (0..1 + rng.below(9))
                .map(|_| rng.below(shares as u64) as usize)
                .collect();
            let name = format!("r{round}a{assignment}");
            let mut now = Vec::new();
            for me in 0..shares {
                let mut cfg = base.clone();
                cfg.share = Some(share(&name, me, &owner));
                let mut reader = if assignment == 0 {
                    NexmarkReader::open(cfg.clone()).expect("open")
                } else {
                    let offset = nexmark_handover(&cfg, &previous).expect("handover");
                    NexmarkReader::open_at_offset(cfg.clone(), &offset).expect("open")
                };
                // Stop and resume from its own offset a few times: what
                // it took over is in its offset.
                let mut finished = false;
                for _ in 0..rng.below(3) {
                    let (rows, ended) = read_some(&mut reader, rng.below(4));
                    union.extend(keyed_rows(&rows));
                    let offset = reader.offset().expect("offset");
                    reader = NexmarkReader::open_at_offset(cfg.clone(), &offset).expect("resume");
                    finished |= ended;
                }
                let batches = if last { u64::MAX } else { rng.below(12) };
                let (rows, ended) = read_some(&mut reader, batches);
                union.extend(keyed_rows(&rows));
                finished |= ended;
                if !finished {
                    midway += 1;
                }
                now.push(PreviousNexmarkShare {
                    share: cfg.share.clone(),
                    offset: reader.offset(),
                    finished,
                });
            }
            previous = now;
        }
        union.sort();
        assert_eq!(union.len(), whole.len(), "round {round}: rows emitted");
        assert!(union == whole, "round {round}: other rows than one node's");
    }
    assert!(midway > 20, "only {midway} shares stopped midway");
}

#[test]
fn a_handover_that_cannot_be_exact_is_refused() {
    let events = 20 * PARTITION_ROWS;
    let cfg_of = |s: Option<FileShare>| {
        let mut c = config(NexmarkStream::Bid, events);
        c.share = s;
        c
    };
    // Two shares of [0, 1], 30 batches of 97 rows in: in partitions 4
    // and 5.
    let old = [share("old", 0, &[0, 1]), share("old", 1, &[0, 1])];
    let stopped = |me: usize| {
        let mut r = NexmarkReader::open(cfg_of(Some(old[me].clone()))).expect("open");
        for _ in 0..30 {
            r.next_batch().expect("batch");
        }
        PreviousNexmarkShare {
            share: Some(old[me].clone()),
            offset: r.offset(),
            finished: false,
        }
    };
    let (a, b) = (stopped(0), stopped(1));
    let target = cfg_of(Some(share("new", 0, &[0])));
    // Partition 1 was held by none of them, then by both.
    let e = nexmark_handover(&target, std::slice::from_ref(&a)).expect_err("unheld");
    assert_eq!(
        e.to_string(),
        "invalid value for option 'offset': cannot hand partition 'bid/1' of the bid stream \
         over to this share: no previous share held it, so nothing says whether its rows were \
         emitted"
    );
    let e = nexmark_handover(&target, &[a.clone(), b.clone(), b.clone()]).expect_err("twice");
    assert!(
        e.to_string()
            .contains("'bid/1' of the bid stream over to this share: 2 previous shares held it"),
        "{e}"
    );
    // An offset given with another share than the one it was read under.
    let swapped = PreviousNexmarkShare {
        share: b.share.clone(),
        ..a.clone()
    };
    let e = nexmark_handover(&target, &[swapped, b.clone()]).expect_err("other share");
    assert!(
        e.to_string().contains(
            "a previous share's offset of the bid stream was emitted under share 'old/0', not \
             under 'old/1'"
        ),
        "{e}"
    );
    // Of another stream, and unreadable.
    let mut person = PreviousNexmarkShare {
        offset: Some(
            NexmarkReader::open(config(NexmarkStream::Person, events))
                .expect("open")
                .offset()
                .expect("offset"),
        ),
        share: None,
        finished: false,
    };
    let e = nexmark_handover(&cfg_of(None), std::slice::from_ref(&person)).expect_err("stream");
    assert!(e.to_string().contains("for the person stream"), "{e}");
    person.offset = Some("{".into());
    let e = nexmark_handover(&cfg_of(None), &[person]).expect_err("unreadable");
    assert!(e.to_string().contains("is unreadable"), "{e}");
    // The exact one: every row once.
    let offset = nexmark_handover(&target, &[a, b]).expect("exact");
    assert!(offset.contains("\"ahead\""), "{offset}");
}
