//! Fencing, protocol violations and lost peers, each with its code.

use std::sync::Arc;

use arrow::datatypes::{DataType, Field, Schema};
use sluice_shuffle::proto::{frame, Barrier, EndOfStream, Watermark};
use sluice_shuffle::{BarrierId, CreditBudget, ShuffleError, ShuffleEvent};

use crate::common::*;

#[tokio::test]
async fn a_stale_generation_is_refused_at_the_handshake() {
    let r = server("r", 5).await;
    let _receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let err = sender_to("s", &r, "r", 4).await.unwrap_err();
    assert_eq!(err.code(), "SLC-SHF-002");
    match err {
        ShuffleError::StaleGeneration {
            sent,
            current,
            ref sender,
            ref edge,
        } => {
            assert_eq!((sent, current), (4, 5));
            assert_eq!((sender.as_str(), edge.as_str()), ("s", EDGE));
        }
        other => panic!("expected a stale generation, got {other}"),
    }
    // The current generation is admitted.
    sender_to("s", &r, "r", 5).await.unwrap();
}

#[tokio::test]
async fn a_generation_change_cuts_open_channels() {
    let r = server("r", 5).await;
    let receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut s = sender_to("s", &r, "r", 5).await.unwrap();
    s.send(&batch(vec![1], vec![0])).await.unwrap();
    assert!(matches!(next_event(&receiver).await, ShuffleEvent::Data(_)));
    r.set_generation(6);
    let err = next_error(&receiver).await;
    assert_eq!(err.code(), "SLC-SHF-002", "{err}");
    // The sender hears it on its next send.
    let mut err = None;
    for _ in 0..100 {
        if let Err(e) = s.send(&batch(vec![2], vec![0])).await {
            err = Some(e);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let err = err.expect("the sender was never cut");
    assert!(
        matches!(
            err,
            ShuffleError::StaleGeneration {
                sent: 5,
                current: 6,
                ..
            }
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_frame_before_the_handshake_is_refused() {
    let r = server("r", 1).await;
    let mut raw = RawChannel::open(&r, frame::Kind::Watermark(Watermark { ms: 1 })).await;
    let refused = raw.refusal().await;
    assert_eq!(refused.code, "SLC-SHF-003");
    assert!(
        refused.message.contains("before the handshake"),
        "{}",
        refused.message
    );
}

#[tokio::test]
async fn unknown_edges_senders_and_duplicates_are_refused() {
    let r = server("r", 1).await;
    let mut raw = RawChannel::open(&r, RawChannel::handshake("s", 1)).await;
    let refused = raw.refusal().await;
    assert_eq!(refused.code, "SLC-SHF-006");
    assert!(
        refused.message.contains("receives no edge"),
        "{}",
        refused.message
    );

    let _receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut raw = RawChannel::open(&r, RawChannel::handshake("stranger", 1)).await;
    assert_eq!(raw.refusal().await.code, "SLC-SHF-006");
    let _first = sender_to("s", &r, "r", 1).await.unwrap();
    let err = sender_to("s", &r, "r", 1).await.unwrap_err();
    assert_eq!(err.code(), "SLC-SHF-009");
    assert!(
        err.to_string().contains("SLC-SHF-006")
            && err.to_string().contains("already has a channel"),
        "{err}"
    );
}

#[tokio::test]
async fn frames_after_end_of_stream_are_refused() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut raw = RawChannel::open(&r, RawChannel::handshake("s", 1)).await;
    raw.send(frame::Kind::EndOfStream(EndOfStream {})).await;
    raw.send(frame::Kind::Watermark(Watermark { ms: 5 })).await;
    let refused = raw.refusal().await;
    assert_eq!(refused.code, "SLC-SHF-003");
    assert!(
        refused.message.contains("after end of stream"),
        "{}",
        refused.message
    );
    let err = next_error(&receiver).await;
    assert!(
        matches!(&err, ShuffleError::Protocol { sender, .. } if sender == "s"),
        "{err}"
    );
}

#[tokio::test]
async fn a_barrier_out_of_order_is_refused() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut raw = RawChannel::open(&r, RawChannel::handshake("s", 1)).await;
    raw.send(frame::Kind::Barrier(Barrier {
        checkpoint_id: 2,
        attempt: 0,
    }))
    .await;
    raw.send(frame::Kind::Barrier(Barrier {
        checkpoint_id: 1,
        attempt: 0,
    }))
    .await;
    let refused = raw.refusal().await;
    assert_eq!(refused.code, "SLC-SHF-003");
    assert!(
        refused
            .message
            .contains("barrier out of order: got checkpoint 1 attempt 0"),
        "{}",
        refused.message
    );
    assert_eq!(next_error(&receiver).await.code(), "SLC-SHF-003");
}

#[tokio::test]
async fn channels_that_disagree_on_the_barrier_are_refused() {
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
    let mut raw = RawChannel::open(&r, RawChannel::handshake("s2", 1)).await;
    s1.send_barrier(BarrierId {
        checkpoint_id: 1,
        attempt: 0,
    })
    .await
    .unwrap();
    eventually("s1's barrier to arrive", || receiver.buffered().0 == 1).await;
    raw.send(frame::Kind::Barrier(Barrier {
        checkpoint_id: 2,
        attempt: 0,
    }))
    .await;
    let err = next_error(&receiver).await;
    match &err {
        ShuffleError::Protocol {
            sender, violation, ..
        } => {
            assert_eq!(sender, "s2");
            assert!(
                violation.to_string().contains("got checkpoint 2 attempt 0"),
                "{violation}"
            );
        }
        other => panic!("expected a protocol violation, got {other}"),
    }
    let refused = raw.refusal().await;
    assert_eq!(refused.code, "SLC-SHF-003");
}

#[tokio::test]
async fn sending_past_the_granted_credit_is_refused() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(
            EDGE,
            schema(),
            vec!["s".into()],
            CreditBudget::new(2, 1 << 20).unwrap(),
        )
        .unwrap();
    let mut raw = RawChannel::open(&r, RawChannel::handshake("s", 1)).await;
    for ms in 1..=3 {
        raw.send(frame::Kind::Watermark(Watermark { ms })).await;
    }
    let refused = raw.refusal().await;
    assert_eq!(refused.code, "SLC-SHF-003");
    assert!(
        refused
            .message
            .contains("credit exceeded: a frame needs 1 frames, 0 granted"),
        "{}",
        refused.message
    );
    assert_eq!(next_error(&receiver).await.code(), "SLC-SHF-003");
}

#[tokio::test]
async fn a_foreign_schema_is_refused() {
    let r = server("r", 1).await;
    let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Utf8, false)]));
    let receiver = r
        .receiver(EDGE, other, vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut s = sender_to("s", &r, "r", 1).await.unwrap();
    s.send(&batch(vec![1], vec![0])).await.unwrap();
    let err = next_error(&receiver).await;
    assert_eq!(err.code(), "SLC-SHF-004", "{err}");
    let err = s.finish().await.unwrap_err();
    assert!(
        matches!(&err, ShuffleError::Refused { code, .. } if code == "SLC-SHF-004"),
        "{err}"
    );
    // The sender also refuses a batch that is not its edge's schema.
    let wrong = arrow::record_batch::RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)])),
        vec![Arc::new(arrow::array::Int64Array::from(vec![1]))],
    )
    .unwrap();
    assert_eq!(s.send(&wrong).await.unwrap_err().code(), "SLC-SHF-004");
}

#[tokio::test]
async fn a_sender_that_vanishes_surfaces_peer_gone() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut s = sender_to("s", &r, "r", 1).await.unwrap();
    s.send(&batch(vec![1], vec![0])).await.unwrap();
    eventually("the batch to arrive", || receiver.buffered().0 == 1).await;
    drop(s);
    let err = next_error(&receiver).await;
    assert!(
        matches!(&err, ShuffleError::PeerGone { node, .. } if node == "s"),
        "{err}"
    );
    assert_eq!(err.code(), "SLC-SHF-005");
    assert_eq!(receiver.buffered(), (0, 0));
    assert!(receiver.try_next().is_none());
}

#[tokio::test]
async fn a_receiver_that_goes_away_surfaces_peer_gone() {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut s = sender_to("s", &r, "r", 1).await.unwrap();
    s.send(&batch(vec![1], vec![0])).await.unwrap();
    drop(receiver);
    let err = s.finish().await.unwrap_err();
    assert!(
        matches!(&err, ShuffleError::PeerGone { node, .. } if node == "r"),
        "{err}"
    );

    // A whole node going away does the same.
    let _receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], CreditBudget::default())
        .unwrap();
    let mut s = sender_to("s", &r, "r", 1).await.unwrap();
    r.shutdown().await;
    let mut err = None;
    for _ in 0..100 {
        if let Err(e) = s.send_watermark(1).await {
            err = Some(e);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let err = err.expect("the sender never noticed the receiver left");
    assert_eq!(err.code(), "SLC-SHF-005", "{err}");
}
