//! Every interleaving of the reader gate's handshake and of the checkpoint
//! tail's manifest fence, explored by loom.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p sluice-sync --release`
//! (scripts/test.sh does, in its own target directory). Without
//! `--cfg loom` this file is empty.
//!
//! loom's timed waits never time out, so the gate's backstop timer is gone
//! here: a lost wake-up leaves the reader waiting forever, which loom
//! reports as a deadlock. Each model asserts what the reader may do
//! (never read while held) and that it gets there.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use sluice_sync::{ManifestFence, ReaderGate, Step};

/// Explore `reader` on its own thread against `coordinator` on this one,
/// sharing a gate (held from the start when `held`) and a flag the two may
/// use to say what happened when.
fn explore<R, C>(held: bool, reader: R, coordinator: C)
where
    R: Fn(&ReaderGate, &AtomicBool) + Copy + Send + Sync + 'static,
    C: Fn(&ReaderGate, &AtomicBool) + Send + Sync + 'static,
{
    loom::model(move || {
        let gate = Arc::new(ReaderGate::new());
        let flag = Arc::new(AtomicBool::new(false));
        gate.hold(held);
        let thread = {
            let (gate, flag) = (Arc::clone(&gate), Arc::clone(&flag));
            thread::spawn(move || reader(&gate, &flag))
        };
        coordinator(&gate, &flag);
        thread.join().expect("the reader thread");
    });
}

/// The reader's steps until `last` (inclusive).
fn steps_until(gate: &ReaderGate, last: Step) -> Vec<Step> {
    let mut answered = 0;
    let mut steps = Vec::new();
    loop {
        let step = gate.next_step(&mut answered);
        steps.push(step);
        if step == last {
            return steps;
        }
    }
}

/// A held reader reads only after the release, and the release wakes it.
#[test]
fn a_held_reader_reads_only_after_its_release() {
    explore(
        true,
        |gate, released| {
            assert_eq!(gate.next_step(&mut 0), Step::Read);
            assert!(released.load(Ordering::SeqCst), "read while held");
        },
        |gate, released| {
            released.store(true, Ordering::SeqCst);
            gate.hold(false);
        },
    );
}

/// A barrier request alone reaches a held reader: it is woken, answers,
/// and reads nothing.
#[test]
fn a_barrier_request_wakes_a_held_reader() {
    explore(
        true,
        |gate, _| assert_eq!(gate.next_step(&mut 0), Step::Barrier(1)),
        |gate, _| gate.request_barrier(1),
    );
}

/// A stop reaches a held reader that has nothing else to do.
#[test]
fn a_held_reader_stops_when_asked() {
    explore(
        true,
        |gate, _| assert_eq!(gate.next_step(&mut 0), Step::Stop),
        |gate, _| gate.stop(),
    );
}

/// A held reader answers a barrier without reading, and a stop after the
/// request ends it (it may see the stop first if it looked at the request
/// before it was made).
#[test]
fn a_held_reader_answers_a_barrier_and_stops() {
    explore(
        true,
        |gate, _| {
            let steps = steps_until(gate, Step::Stop);
            assert!(
                steps == [Step::Barrier(1), Step::Stop] || steps == [Step::Stop],
                "steps {steps:?}"
            );
        },
        |gate, _| {
            gate.request_barrier(1);
            gate.stop();
        },
    );
}

/// Two requests in a row: the reader answers each attempt at most once, in
/// order, and always the newest.
#[test]
fn a_newer_request_replaces_one_not_yet_answered() {
    explore(
        true,
        |gate, _| {
            let steps = steps_until(gate, Step::Barrier(2));
            assert!(
                steps == [Step::Barrier(1), Step::Barrier(2)] || steps == [Step::Barrier(2)],
                "steps {steps:?}"
            );
        },
        |gate, _| {
            gate.request_barrier(1);
            gate.request_barrier(2);
        },
    );
}

/// A hold and its release racing with a reader that reads twice: it is
/// never left waiting once released.
#[test]
fn a_hold_and_release_never_strand_the_reader() {
    explore(
        false,
        |gate, _| {
            for _ in 0..2 {
                assert_eq!(gate.next_step(&mut 0), Step::Read);
            }
        },
        |gate, _| {
            gate.hold(true);
            gate.hold(false);
        },
    );
}

/// A tail reaching its manifest races a cancel by recovery: exactly one
/// wins, and each side sees the same outcome (a won cancel is seen by the
/// tail as cancelled; a manifest begun is never cancelled afterwards).
#[test]
fn a_manifest_write_and_a_cancel_never_both_win() {
    loom::model(|| {
        let fence = Arc::new(ManifestFence::new());
        let tail = {
            let fence = Arc::clone(&fence);
            thread::spawn(move || {
                let cancelled_before = fence.is_cancelled();
                let wrote = fence.begin_manifest();
                if cancelled_before {
                    assert!(!wrote, "a tail that saw its cancel wrote its manifest");
                }
                wrote
            })
        };
        let cancelled = fence.cancel();
        let wrote = tail.join().expect("the tail thread");
        assert!(
            cancelled != wrote,
            "cancelled {cancelled}, manifest {wrote}"
        );
        assert_eq!(fence.is_cancelled(), cancelled);
        // Whatever happened, a later cancel stops nothing.
        assert!(!fence.cancel());
    });
}
