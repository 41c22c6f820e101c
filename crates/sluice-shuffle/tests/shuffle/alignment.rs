//! Barrier alignment and the minimum watermark over real channels.

use std::collections::BTreeSet;

use sluice_shuffle::{BarrierId, CreditBudget, ShuffleEvent};

use crate::common::*;

fn data_keys(event: &ShuffleEvent) -> Vec<i64> {
    match event {
        ShuffleEvent::Data(b) => keys(b),
        other => panic!("expected data, got {other:?}"),
    }
}

#[tokio::test]
async fn early_barrier_blocks_its_channel_until_every_channel_delivers_it() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(
            EDGE,
            schema(),
            vec!["s1".into(), "s2".into()],
            CreditBudget::default(),
        )
        .unwrap();
    let mut s1 = sender_to("s1", &r, "r", 1).await.unwrap();
    let mut s2 = sender_to("s2", &r, "r", 1).await.unwrap();
    let b1 = BarrierId {
        checkpoint_id: 1,
        attempt: 0,
    };

    // s1 runs ahead: pre-barrier rows, the barrier, post-barrier rows.
    assert!(s1.send(&batch(vec![11], vec![0])).await.unwrap().is_none());
    s1.send_barrier(b1).await.unwrap();
    s1.send(&batch(vec![12], vec![1])).await.unwrap();
    assert_eq!(data_keys(&next_event(&receiver).await), vec![11]);
    // Its post-barrier rows arrive but are not drained past the barrier.
    eventually("s1's post-barrier batch to arrive", || {
        assert!(receiver.try_next().is_none());
        receiver.buffered().0 == 1
    })
    .await;
    for _ in 0..5 {
        assert!(receiver.try_next().is_none());
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(receiver.buffered().0, 1);

    // s2's pre-barrier rows still flow.
    s2.send(&batch(vec![21], vec![2])).await.unwrap();
    assert_eq!(data_keys(&next_event(&receiver).await), vec![21]);
    // s2 delivers the barrier: exactly one barrier comes out, then epoch 2.
    s2.send_barrier(b1).await.unwrap();
    s2.send(&batch(vec![22], vec![3])).await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::Barrier(b1));
    let mut epoch2 = BTreeSet::new();
    epoch2.extend(data_keys(&next_event(&receiver).await));
    epoch2.extend(data_keys(&next_event(&receiver).await));
    assert_eq!(epoch2, BTreeSet::from([12, 22]));

    s1.finish().await.unwrap();
    s2.finish().await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::EndOfStream);
    assert!(receiver.next().await.is_none());
}

#[tokio::test]
async fn output_watermark_is_the_minimum_over_channels() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(
            EDGE,
            schema(),
            vec!["s1".into(), "s2".into()],
            CreditBudget::default(),
        )
        .unwrap();
    let wake = receiver.shuffle_work_wake();
    let mut s1 = sender_to("s1", &r, "r", 1).await.unwrap();
    let mut s2 = sender_to("s2", &r, "r", 1).await.unwrap();

    s1.send_watermark(100).await.unwrap();
    // The wake fires for the arrival (its permit is kept until awaited).
    tokio::time::timeout(std::time::Duration::from_secs(5), wake.notified())
        .await
        .unwrap();
    // One channel has no watermark yet: nothing is emitted.
    eventually("s1's watermark to be consumed", || {
        receiver.try_next().is_none() && receiver.buffered().0 == 0
    })
    .await;
    s2.send_watermark(50).await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::Watermark(50));
    s2.send_watermark(200).await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::Watermark(100));
    s1.send_watermark(300).await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::Watermark(200));
    // s2 ends: only s1 counts.
    s2.finish().await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::Watermark(300));
    s1.finish().await.unwrap();
    assert_eq!(next_event(&receiver).await, ShuffleEvent::EndOfStream);
}
