//! The disk fills and stays full: every later checkpoint fails the same
//! way, nothing accumulates in the store, and the run ends with an error
//! instead of hanging or claiming success. Once space is back, reopening
//! on the same store gives the right output.

use std::sync::Arc;

use sluice::object_store::ObjectStore;

use crate::common::{bounded, committed, faulty, leftovers, objects, rows, Fixture};

/// Checkpoints tried while the disk is full.
const ATTEMPTS: usize = 4;

/// The message with every number removed (checkpoint ids differ).
fn shape(msg: &str) -> String {
    msg.chars().filter(|c| !c.is_ascii_digit()).collect()
}

async fn stays_full(mode: &str) -> Vec<String> {
    let fx = Fixture::new();
    let reference = fx.reference(mode).await;
    let (store, mem) = faulty();
    let db = fx
        .open(mode, Arc::new(store.clone()) as Arc<dyn ObjectStore>)
        .await;
    bounded(mode, db.start()).await.unwrap();
    let first = bounded(mode, db.checkpoint()).await.unwrap();
    // Room for a few bytes: the next blob is written in part, then fails.
    store.set_capacity(Some(store.used_bytes() + 16));
    let held = store.used_bytes();

    let exactly_once = mode == "exactly_once";
    let mut messages = Vec::new();
    let mut store_after_first = None;
    for i in 1..=ATTEMPTS {
        let err = bounded(mode, db.checkpoint()).await.unwrap_err();
        let msg = err.to_string();
        // The store's own code, except for a checkpoint refused because the
        // pipeline stopped.
        let code = if exactly_once && i > 1 {
            "SLC-ENG-009"
        } else {
            "SLC-STO-002"
        };
        assert_eq!(err.code(), code, "{mode} #{i}: {msg}");
        // At-least-once tries every checkpoint and each fails the same way.
        // Exactly-once faults at the first: later ones are refused (they
        // would commit input whose output was discarded), naming it.
        let id = if exactly_once {
            first.id + 1
        } else {
            first.id + i as u64
        };
        let blob = format!("checkpoints/{id:020}/stream__counted__0");
        let failure = format!(
            "writing state 'stream/counted/0': object store FaultyStore(InMemory)/{blob}: \
             Generic FaultyStore error: injected fault: no space left writing {blob}: 16 of "
        );
        if exactly_once && i > 1 {
            let want = format!(
                "checkpoint failed: no checkpoint is taken after the pipeline stopped \
                 (checkpoint {id} failed: {failure}"
            );
            assert!(msg.starts_with(&want), "{mode} #{i}: {msg}");
            assert!(
                msg.ends_with(
                    "bytes written; recovery replays from the last committed checkpoint): it \
                     would commit input whose output was discarded; reopen on the same state \
                     to recover from the last committed checkpoint"
                ),
                "{mode} #{i}: {msg}"
            );
        } else {
            let want = format!("checkpoint failed: {failure}");
            assert!(msg.starts_with(&want), "{mode} #{i}: {msg}");
            assert!(msg.ends_with(" bytes written"), "{mode} #{i}: {msg}");
        }
        let failed = if exactly_once { 1 } else { i as u64 };
        assert_eq!(db.metrics().checkpoints_failed, failed, "{mode} #{i}");
        assert_eq!(store.failed_puts(), failed, "{mode} #{i}");
        assert_eq!(committed(&db).await, vec![first.id], "{mode} #{i}");
        assert_eq!(
            leftovers(&mem, &[first.id]).await,
            Vec::<String>::new(),
            "{mode} #{i}"
        );
        assert_eq!(store.used_bytes(), held, "{mode} #{i}: nothing accumulates");
        // The same objects, byte for byte, apart from the id in the one
        // marker of the newest attempt.
        let now: Vec<(String, u64)> = objects(&mem)
            .await
            .into_iter()
            .map(|(k, n)| (shape(&k), n))
            .collect();
        match &store_after_first {
            None => store_after_first = Some(now),
            Some(then) => assert_eq!(&now, then, "{mode} #{i}: nothing accumulates"),
        }
        messages.push(msg);
    }

    // The store lease is released when the database stops (below).
    let lease: u64 = objects(&mem)
        .await
        .into_iter()
        .filter(|(k, _)| k == sluice_storage::LEASE_KEY)
        .map(|(_, n)| n)
        .sum();
    assert!(lease > 0, "{mode}: the store lease is held while running");

    // The run ends with an error, not a hang and not a success.
    let ended = bounded(mode, async {
        match db.run_to_completion().await {
            Ok(_) => db.shutdown().await.map(|_| ()),
            Err(e) => {
                let _ = db.shutdown().await;
                Err(e)
            }
        }
    })
    .await
    .unwrap_err();
    let ended_msg = ended.to_string();
    let blob = format!("checkpoints/{:020}/stream__counted__0", first.id + 1);
    if exactly_once {
        // The fault of the first failed checkpoint ends the run.
        assert!(matches!(ended, sluice::Error::Fault { .. }), "{ended_msg}");
        assert_eq!(ended.code(), "SLC-STO-002", "{ended_msg}");
        assert!(
            ended_msg.starts_with(&format!(
                "pipeline fault (recover from the last checkpoint): checkpoint {} failed: \
                 writing state 'stream/counted/0': object store FaultyStore(InMemory)/{blob}: ",
                first.id + 1
            )),
            "{ended_msg}"
        );
    } else {
        // The run completes, but its shutdown checkpoint fails: the
        // shutdown is an error and the sinks' unsettled output is dropped.
        let blob = format!(
            "checkpoints/{:020}/stream__counted__0",
            first.id + ATTEMPTS as u64 + 1
        );
        assert!(matches!(ended, sluice::Error::Halted { .. }), "{ended_msg}");
        assert_eq!(ended.code(), "SLC-STO-002", "{ended_msg}");
        assert!(
            ended_msg.starts_with(&format!(
                "pipeline halted: shutdown: the shutdown checkpoint did not commit: writing \
                 state 'stream/counted/0': object store FaultyStore(InMemory)/{blob}: "
            )),
            "{ended_msg}"
        );
    }
    assert!(ended_msg.contains("no space left"), "{ended_msg}");
    messages.push(format!("{}: {ended}", ended.code()));
    assert_eq!(
        store.used_bytes() + lease,
        held,
        "{mode}: the shutdown attempt left nothing (and the lease was released)"
    );
    assert_eq!(
        leftovers(&mem, &[first.id]).await,
        Vec::<String>::new(),
        "{mode}"
    );

    // Space comes back: reopening on the same store completes the output.
    store.heal();
    let db = fx
        .open(mode, Arc::new(store.clone()) as Arc<dyn ObjectStore>)
        .await;
    bounded(mode, db.run_to_completion()).await.unwrap();
    bounded(mode, db.shutdown()).await.unwrap();
    let out = fx.outputs();
    if mode == "exactly_once" {
        assert_eq!(out, reference, "byte-identical to an uninterrupted run");
    } else {
        for (got, want) in out.iter().zip(&reference) {
            let got = rows(got);
            for row in rows(want) {
                assert!(
                    got.binary_search(&row).is_ok(),
                    "{mode}: row {row} is missing"
                );
            }
        }
    }
    messages
}

#[tokio::test]
async fn at_least_once_disk_that_stays_full_fails_every_checkpoint_and_the_shutdown() {
    let messages = stays_full("at_least_once").await;
    println!("{messages:#?}");
}

#[tokio::test]
async fn exactly_once_disk_that_stays_full_fails_every_checkpoint_and_the_run() {
    let messages = stays_full("exactly_once").await;
    println!("{messages:#?}");
}
