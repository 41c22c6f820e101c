//! Subscriber queues: full by count or bytes; backpressure keeps every
//! batch and reports pressure, disconnect drops the subscriber.

use std::sync::Arc;

use arrow::array::Int64Array;
use arrow::datatypes::{DataType, Field, Schema};

use super::*;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("v", DataType::Int64, false)]))
}

fn batch(v: i64) -> RecordBatch {
    RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from(vec![v; 100]))]).unwrap()
}

fn options(on_lag: OnLag, buffer: usize, buffer_bytes: u64) -> SubscribeOptions {
    SubscribeOptions {
        on_lag,
        buffer,
        buffer_bytes,
    }
}

#[test]
fn a_backpressure_subscriber_keeps_every_batch_and_reports_pressure_until_it_reads() {
    let r = SubscriptionRegistry::default();
    let mut sub = r.subscribe_with(
        "s",
        schema(),
        false,
        options(OnLag::Backpressure, 2, 1 << 30),
    );
    r.publish("s", &[batch(1)]).unwrap();
    assert!(!r.pressure().0, "one of two batches queued");
    r.publish("s", &[batch(2), batch(3)]).unwrap();
    let (full, bytes) = r.pressure();
    assert!(full);
    assert_eq!(bytes, 3 * batch(1).get_array_memory_size() as u64);
    let got: Vec<i64> = std::iter::from_fn(|| sub.try_next())
        .map(|b| {
            b.data
                .column(0)
                .as_primitive::<arrow::datatypes::Int64Type>()
                .value(0)
        })
        .collect();
    assert_eq!(got, vec![1, 2, 3], "nothing dropped");
    assert_eq!(r.pressure(), (false, 0));
}

#[test]
fn a_subscriber_is_full_at_eighty_percent_of_its_bytes() {
    let size = batch(0).get_array_memory_size() as u64;
    let r = SubscriptionRegistry::default();
    // Room for 1.25 batches: one batch is 80% of the budget.
    let _sub = r.subscribe_with(
        "s",
        schema(),
        false,
        options(OnLag::Backpressure, 1000, size * 5 / 4),
    );
    r.publish("s", &[batch(1)]).unwrap();
    assert!(r.pressure().0);
}

#[tokio::test]
async fn a_disconnect_subscriber_gets_its_queue_then_the_lag_error() {
    let r = SubscriptionRegistry::default();
    let mut sub = r.subscribe_with("s", schema(), false, options(OnLag::Disconnect, 2, 1 << 30));
    r.publish("s", &[batch(1), batch(2), batch(3), batch(4)])
        .unwrap();
    assert_eq!(
        r.pressure(),
        (false, 0),
        "a dropped subscriber holds nothing back"
    );
    assert!(sub.next().await.unwrap().is_some());
    assert!(sub.next().await.unwrap().is_some());
    let e = sub.next().await.unwrap_err();
    assert_eq!(e.code(), "SLC-ENG-016");
    assert_eq!(
        e.to_string(),
        "subscriber fell behind its queue (subscription_buffer batches or \
         subscription_buffer_bytes) and was disconnected"
    );
}

/// A halt or fault ends every subscription with that error (after the
/// batches delivered before it, and on every later read); a shutdown ends
/// them cleanly.
#[tokio::test]
async fn a_halt_or_fault_ends_each_subscription_with_it_and_a_shutdown_cleanly() {
    let cause = || Arc::new(EngineError::Injected("boom".into()));
    let ends: [(Option<DeliveryEnd>, Option<&str>); 3] = [
        (
            Some(DeliveryEnd::Halted(cause())),
            Some("pipeline halted: boom"),
        ),
        (
            Some(DeliveryEnd::Faulted(cause())),
            Some("pipeline fault (recover from the last checkpoint): boom"),
        ),
        (None, None),
    ];
    for (end, want) in ends {
        let r = SubscriptionRegistry::default();
        let mut subs: Vec<Subscription> = (0..2)
            .map(|_| r.subscribe("s", schema(), false, 8))
            .collect();
        r.publish("s", &[batch(1)]).unwrap();
        r.close_all(end);
        for sub in &mut subs {
            assert!(
                sub.next().await.unwrap().is_some(),
                "delivered before the end"
            );
            for _ in 0..2 {
                match (sub.next().await, want) {
                    (Err(e), Some(w)) => {
                        assert_eq!((e.to_string().as_str(), e.code()), (w, "SLC-ENG-017"))
                    }
                    (Ok(None), None) => {}
                    (other, _) => panic!("{want:?}: {:?}", other.map(|b| b.is_some())),
                }
            }
        }
    }
}

/// A cycle's output is staged: live subscribers see it once every consumer
/// of the cycle accepted it (`commit_staged`), never when the cycle failed
/// (`abort_staged`), and the committed-only cut holds only committed
/// cycles' output. A subscriber that came between staging and the commit
/// gets the batch too.
#[tokio::test]
async fn staged_output_reaches_subscribers_only_once_its_cycle_committed() {
    let value = |b: ChangeBatch| {
        b.data
            .column(0)
            .as_primitive::<arrow::datatypes::Int64Type>()
            .value(0)
    };
    let r = SubscriptionRegistry::default();
    r.set_history(4, 1 << 30);
    let opts = || options(OnLag::Backpressure, 100, 1 << 30);
    let mut live = r.subscribe_with("s", schema(), false, opts());
    let mut committed = r
        .subscribe_committed("s", schema(), false, opts(), ResumeFrom::Next)
        .unwrap();
    r.stage("s", &[batch(1)]).unwrap();
    assert!(live.try_next().is_none(), "staged, not delivered");
    r.abort_staged();
    r.commit_staged();
    assert!(
        live.try_next().is_none(),
        "an aborted cycle's output is gone"
    );

    r.stage("s", &[batch(2)]).unwrap();
    let mut late = r.subscribe_with("s", schema(), false, opts());
    r.commit_staged();
    assert_eq!(live.try_next().map(value), Some(2));
    assert_eq!(late.try_next().map(value), Some(2));
    assert!(live.try_next().is_none());

    r.reserve_cut(1);
    r.publish_cut(1).unwrap();
    assert_eq!(committed.next().await.unwrap().map(value), Some(2));
    assert!(committed.try_next().is_none(), "batch 1 is in no cut");
}
