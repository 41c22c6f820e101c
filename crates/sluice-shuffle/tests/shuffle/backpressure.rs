//! Credit flow control: a receiver that does not drain stops its sender
//! after the budget (frames or bytes), and nothing is lost on resume.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use sluice_shuffle::ipc::IpcEncoder;
use sluice_shuffle::proto::{frame, Frame};
use sluice_shuffle::{CreditBudget, ShuffleEvent, ShuffleReceiver};

use crate::common::*;

const BATCHES: usize = 40;
const ROWS: i64 = 100;

fn nth_batch(n: usize) -> arrow::record_batch::RecordBatch {
    let base = n as i64 * ROWS;
    batch((base..base + ROWS).collect(), vec![0; ROWS as usize])
}

/// The charged size of one data frame of `nth_batch` (all are equal).
fn batch_frame_size() -> u64 {
    let mut encoder = IpcEncoder::new(EDGE, schema());
    let frames = encoder.encode(&nth_batch(0)).unwrap();
    let ipc = frames.last().unwrap().clone();
    Frame {
        kind: Some(frame::Kind::Data(ipc)),
    }
    .encoded_len() as u64
}

/// Run a sender of `BATCHES` batches against a receiver with `budget` that
/// does not drain; return the receiver, the count of completed sends at
/// the stall, and the sender task.
async fn stall(
    budget: CreditBudget,
) -> (
    sluice_shuffle::ShuffleServer,
    ShuffleReceiver,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
    sluice_shuffle::SendPressure,
) {
    let r = server("r", 1).await;
    let receiver = r
        .receiver(EDGE, schema(), vec!["s".into()], budget)
        .unwrap();
    let mut sender = sender_to("s", &r, "r", 1).await.unwrap();
    let pressure = sender.pressure();
    assert!(!pressure.is_backpressured());
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&sent);
    let task = tokio::spawn(async move {
        for n in 0..BATCHES {
            sender.send(&nth_batch(n)).await.unwrap();
            counter.fetch_add(1, Ordering::SeqCst);
        }
        sender.finish().await.unwrap();
    });
    // Wait until the count stops moving.
    let mut last = usize::MAX;
    loop {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = sent.load(Ordering::SeqCst);
        if now == last {
            break;
        }
        last = now;
    }
    (r, receiver, sent, task, pressure)
}

async fn drain_all(receiver: &ShuffleReceiver) -> Vec<i64> {
    let mut got = Vec::new();
    loop {
        match next_event(receiver).await {
            ShuffleEvent::Data(b) => got.extend(keys(&b)),
            ShuffleEvent::EndOfStream => return got,
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test]
async fn frame_budget_stops_the_sender_and_resumes_losslessly() {
    let (_r, receiver, sent, task, pressure) = stall(CreditBudget::new(3, 1 << 30).unwrap()).await;
    // The schema frame's credit comes back at once; three batches fill the
    // budget, and the fourth send waits.
    assert_eq!(sent.load(Ordering::SeqCst), 3);
    assert_eq!(receiver.buffered().0, 3);
    assert!(pressure.is_backpressured());
    assert!(!task.is_finished());

    let got = drain_all(&receiver).await;
    task.await.unwrap();
    let expected: Vec<i64> = (0..BATCHES as i64 * ROWS).collect();
    assert_eq!(got, expected);
    assert!(!pressure.is_backpressured());
}

#[tokio::test]
async fn byte_budget_stops_the_sender_and_bounds_buffered_bytes() {
    let frame = batch_frame_size();
    // Room for four and a half batch frames.
    let budget_bytes = frame * 9 / 2;
    let (_r, receiver, sent, task, pressure) =
        stall(CreditBudget::new(1000, budget_bytes).unwrap()).await;
    assert_eq!(sent.load(Ordering::SeqCst), 4);
    let (frames, bytes) = receiver.buffered();
    assert_eq!(frames, 4);
    assert_eq!(bytes, 4 * frame);
    assert!(bytes <= budget_bytes);
    assert!(pressure.is_backpressured());
    assert!(!task.is_finished());

    let got = drain_all(&receiver).await;
    task.await.unwrap();
    let expected: Vec<i64> = (0..BATCHES as i64 * ROWS).collect();
    assert_eq!(got, expected);
}

#[tokio::test]
async fn a_frame_larger_than_the_byte_budget_passes_alone() {
    let frame = batch_frame_size();
    let (_r, receiver, sent, task, _pressure) =
        stall(CreditBudget::new(1000, frame / 2).unwrap()).await;
    // One oversized frame at a time: the first is in flight, the second waits.
    assert_eq!(sent.load(Ordering::SeqCst), 1);
    assert_eq!(receiver.buffered(), (1, frame / 2));
    let got = drain_all(&receiver).await;
    task.await.unwrap();
    assert_eq!(got.len(), BATCHES * ROWS as usize);
}
