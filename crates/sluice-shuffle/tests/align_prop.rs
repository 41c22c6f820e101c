//! Property test of barrier alignment: random interleavings of 2–4
//! channels' frames (and of the consumer's pops) always give every epoch's
//! rows between the right barriers, barriers once each and in order, a
//! watermark that never runs ahead of an unaligned channel, and one end of
//! stream at the end.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;

use arrow::array::{Int64Array, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use proptest::prelude::*;
use sluice_shuffle::{Aligner, BarrierId, ChannelItem, ShuffleEvent};

fn row(key: i64) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("vnode", DataType::UInt32, false),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(vec![key])),
            Arc::new(UInt32Array::from(vec![0])),
        ],
    )
    .unwrap()
}

fn barrier(epoch: usize) -> BarrierId {
    BarrierId {
        checkpoint_id: epoch as u64,
        attempt: 0,
    }
}

/// Row keys encode (channel, epoch, index).
fn key(channel: usize, epoch: usize, index: usize) -> i64 {
    (channel * 10_000 + epoch * 100 + index) as i64
}

/// Channel `c`'s script: per epoch its rows and a watermark in
/// `[(e+1)*100, (e+1)*100+99]`, a barrier between epochs, end of stream.
fn script(c: usize, rows: &[usize], jitter: &[u8]) -> Vec<ChannelItem> {
    let epochs = rows.len();
    let mut items = Vec::new();
    for (e, &n) in rows.iter().enumerate() {
        for i in 0..n {
            items.push(ChannelItem::Data(row(key(c, e, i))));
        }
        let wm = ((e + 1) * 100) as i64 + i64::from(jitter[e] % 100);
        items.push(ChannelItem::Watermark(wm));
        if e + 1 < epochs {
            items.push(ChannelItem::Barrier(barrier(e + 1)));
        }
    }
    items.push(ChannelItem::EndOfStream);
    items
}

fn case() -> impl Strategy<Value = (Vec<Vec<usize>>, Vec<Vec<u8>>, Vec<u8>)> {
    (2usize..=4, 1usize..=3).prop_flat_map(|(channels, epochs)| {
        (
            prop::collection::vec(prop::collection::vec(0usize..3, epochs), channels),
            prop::collection::vec(prop::collection::vec(any::<u8>(), epochs), channels),
            prop::collection::vec(any::<u8>(), 0..200),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn alignment_holds_under_any_interleaving((rows, jitter, choices) in case()) {
        let channels = rows.len();
        let epochs = rows[0].len();
        let mut scripts: Vec<std::collections::VecDeque<ChannelItem>> = (0..channels)
            .map(|c| script(c, &rows[c], &jitter[c]).into())
            .collect();
        let mut aligner = Aligner::new(channels);
        let mut out = Vec::new();
        let pop = |aligner: &mut Aligner, out: &mut Vec<ShuffleEvent>| {
            while let Some(event) = aligner.pop().unwrap() {
                out.push(event);
            }
        };
        // Random interleaving: each choice either drains the aligner or
        // pushes the next item of one channel that has items left.
        for choice in choices {
            let live: Vec<usize> = (0..channels).filter(|c| !scripts[*c].is_empty()).collect();
            if live.is_empty() {
                break;
            }
            if choice % 4 == 0 {
                pop(&mut aligner, &mut out);
            } else {
                let c = live[usize::from(choice) % live.len()];
                let item = scripts[c].pop_front().unwrap();
                aligner.push(c, item, 1).unwrap();
            }
        }
        for (c, script) in scripts.iter_mut().enumerate() {
            for item in script.drain(..) {
                aligner.push(c, item, 1).unwrap();
            }
        }
        pop(&mut aligner, &mut out);

        // Split the output into epochs by barrier.
        let mut epoch = 0usize;
        let mut seen: Vec<Vec<i64>> = vec![Vec::new(); epochs];
        let mut barriers = Vec::new();
        let mut watermarks = Vec::new();
        let mut ends = 0;
        for (i, event) in out.iter().enumerate() {
            match event {
                ShuffleEvent::Data(b) => {
                    prop_assert_eq!(ends, 0);
                    let k = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(0);
                    seen[epoch].push(k);
                }
                ShuffleEvent::Barrier(b) => {
                    barriers.push(*b);
                    epoch += 1;
                }
                ShuffleEvent::Watermark(wm) => {
                    // No channel's post-barrier watermark leaks into an
                    // epoch still being aligned.
                    prop_assert!(*wm < ((epoch + 2) * 100) as i64, "wm {} in epoch {}", wm, epoch);
                    if let Some(last) = watermarks.last() {
                        prop_assert!(wm > last);
                    }
                    watermarks.push(*wm);
                }
                ShuffleEvent::EndOfStream => {
                    prop_assert_eq!(i, out.len() - 1);
                    ends += 1;
                }
            }
        }
        prop_assert_eq!(ends, 1);
        let expected_barriers: Vec<BarrierId> = (1..epochs).map(barrier).collect();
        prop_assert_eq!(barriers, expected_barriers);
        for (e, got) in seen.iter_mut().enumerate() {
            let mut expected: Vec<i64> = (0..channels)
                .flat_map(|c| (0..rows[c][e]).map(move |i| key(c, e, i)))
                .collect();
            expected.sort_unstable();
            got.sort_unstable();
            prop_assert_eq!(&*got, &expected, "epoch {}", e);
        }
        // Every channel reported a watermark in the last epoch; once all
        // but one have ended, the survivor's final watermark is out.
        let finals: Vec<i64> = (0..channels)
            .map(|c| (epochs * 100) as i64 + i64::from(jitter[c][epochs - 1] % 100))
            .collect();
        let last = *watermarks.last().unwrap();
        prop_assert!(finals.contains(&last));
        prop_assert!(last >= *finals.iter().min().unwrap());
    }
}
