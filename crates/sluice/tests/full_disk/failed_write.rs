//! One checkpoint write fails (any put of it, or the disk fills during it),
//! then space comes back: the error is reported, the previous checkpoint
//! stays, nothing of the failed attempt is left, and the output is right.

use std::sync::Arc;

use sluice::object_store::ObjectStore;

use crate::common::{
    bounded, committed, faulty, hidden_sink_files, leftovers, objects, rows, Fixture,
};

/// How the checkpoint write fails.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// The n-th put of the checkpoint (1 = reserving its id) is refused.
    Put(u64),
    /// The disk holds only this many bytes more than it does now.
    Full(u64),
}

/// What one faulty checkpoint led to.
#[derive(Debug, PartialEq, Eq)]
enum Ending {
    /// The run went on and completed.
    Completed,
    /// The run faulted and completed after reopening on the same store.
    Reopened,
}

/// One run in `mode` whose second checkpoint meets `fault`. Returns the
/// error of that checkpoint (`None`: it committed, the fault came too late)
/// and how the run ended.
async fn run(fx: &Fixture, mode: &str, fault: Fault, reference: &[String; 2]) -> Option<Ending> {
    let what = format!("{mode}, {fault:?}");
    let (store, mem) = faulty();
    let db = fx
        .open(mode, Arc::new(store.clone()) as Arc<dyn ObjectStore>)
        .await;
    bounded(&what, db.start()).await.unwrap();
    let first = bounded(&what, db.checkpoint()).await.unwrap();
    let before: Vec<_> = objects(&mem)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with("checkpoints/"))
        .collect();
    match fault {
        Fault::Put(n) => store.fail_put(n),
        Fault::Full(room) => store.set_capacity(Some(store.used_bytes() + room)),
    }
    let err = match bounded(&what, db.checkpoint()).await {
        Ok(_) => {
            bounded(&what, db.abort()).await.ok();
            fx.clear_outputs();
            return None;
        }
        Err(e) => e,
    };
    let msg = err.to_string();
    // The store's own code: the cause survives the checkpoint's failure.
    assert_eq!(err.code(), "SLC-STO-002", "{what}: {msg}");
    assert!(msg.contains("FaultyStore(InMemory)"), "{what}: {msg}");
    match fault {
        Fault::Put(_) => assert!(msg.contains("refused"), "{what}: {msg}"),
        Fault::Full(_) => assert!(msg.contains("no space left"), "{what}: {msg}"),
    }
    assert_eq!(store.failed_puts(), 1, "{what}");
    assert_eq!(db.metrics().checkpoints_failed, 1, "{what}");
    // The previous checkpoint is intact, and the failed one left nothing.
    assert_eq!(committed(&db).await, vec![first.id], "{what}");
    assert_eq!(
        leftovers(&mem, &[first.id]).await,
        Vec::<String>::new(),
        "{what}"
    );
    let after: Vec<_> = objects(&mem)
        .await
        .into_iter()
        .filter(|(k, _)| k.starts_with("checkpoints/"))
        .collect();
    assert_eq!(after, before, "{what}");

    store.heal();
    // Space is back: the next checkpoint commits (also on a faulted
    // exactly-once run, whose sinks then still hold only committed epochs).
    let faulted = mode == "exactly_once" && !matches!(fault, Fault::Put(1));
    match bounded(&what, db.checkpoint()).await {
        Ok(later) => {
            assert!(!faulted, "{what}: a faulted run took checkpoint {later:?}");
            assert_eq!(committed(&db).await, vec![first.id, later.id], "{what}");
        }
        Err(e) => {
            // The pipeline faulted: a checkpoint would commit the source
            // positions of output that was discarded.
            assert!(faulted, "{what}: {e}");
            assert_eq!(e.code(), "SLC-ENG-009", "{what}: {e}");
            let m = e.to_string();
            assert!(
                m.contains("no checkpoint is taken after the pipeline stopped (checkpoint ")
                    && m.contains("recovery replays from the last committed checkpoint)"),
                "{what}: {m}"
            );
            assert_eq!(committed(&db).await, vec![first.id], "{what}");
        }
    }
    let ending = match bounded(&what, db.run_to_completion()).await {
        Ok(_) => {
            bounded(&what, db.shutdown()).await.unwrap();
            Ending::Completed
        }
        Err(e) => {
            assert!(matches!(e, sluice::Error::Fault { .. }), "{what}: {e}");
            assert_eq!(e.code(), "SLC-STO-002", "{what}: {e}");
            let m = e.to_string();
            assert!(
                m.contains(&format!("checkpoint {} failed", first.id + 1)) && m.contains("refused")
                    || m.contains("no space left"),
                "{what}: {m}"
            );
            let _ = bounded(&what, db.shutdown()).await;
            let db = fx
                .open(mode, Arc::new(store.clone()) as Arc<dyn ObjectStore>)
                .await;
            bounded(&what, db.run_to_completion()).await.unwrap();
            bounded(&what, db.shutdown()).await.unwrap();
            Ending::Reopened
        }
    };
    let out = fx.outputs();
    if mode == "exactly_once" {
        assert_eq!(
            &out, reference,
            "{what}: byte-identical to an uninterrupted run"
        );
    } else {
        for (got, want) in out.iter().zip(reference) {
            assert_eq!(rows(got), rows(want), "{what}: every row, once");
        }
    }
    assert_eq!(
        hidden_sink_files(fx.dir.path()),
        Vec::<String>::new(),
        "{what}"
    );
    fx.clear_outputs();
    Some(ending)
}

/// Every put of a checkpoint in turn, then a disk that fills during it.
async fn every_fault(mode: &str) -> Vec<(String, Ending)> {
    let fx = Fixture::new();
    let reference = fx.reference(mode).await;
    let mut seen = Vec::new();
    for n in 1.. {
        match run(&fx, mode, Fault::Put(n), &reference).await {
            Some(ending) => seen.push((format!("put {n}"), ending)),
            None => break,
        }
    }
    // Reserving the id, at least one state blob, the manifest.
    assert!(seen.len() >= 3, "{mode}: {seen:?}");
    for room in [0, 16] {
        let ending = run(&fx, mode, Fault::Full(room), &reference)
            .await
            .expect("a full disk fails the checkpoint");
        seen.push((format!("full +{room}"), ending));
    }
    seen
}

#[tokio::test]
async fn at_least_once_failed_checkpoint_write_is_reported_and_later_checkpoints_succeed() {
    let seen = every_fault("at_least_once").await;
    // At-least-once never faults on a failed checkpoint: the run goes on
    // and the next checkpoint (here the shutdown one) commits.
    assert!(
        seen.iter().all(|(_, e)| *e == Ending::Completed),
        "{seen:?}"
    );
}

#[tokio::test]
async fn exactly_once_failed_checkpoint_write_faults_and_reopening_replays_exactly() {
    let seen = every_fault("exactly_once").await;
    // Reserving the id writes no state: its failure is reported and the run
    // goes on. Any later write faults the run; reopening replays from the
    // previous checkpoint.
    assert_eq!(
        seen[0],
        ("put 1".to_string(), Ending::Completed),
        "{seen:?}"
    );
    assert!(
        seen[1..].iter().all(|(_, e)| *e == Ending::Reopened),
        "{seen:?}"
    );
}
