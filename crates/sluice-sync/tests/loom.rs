//! Every interleaving of the reader gate's handshake, of the checkpoint
//! tail's manifest fence and of the backpressure handshakes (a producer
//! waiting on a byte budget, a coordinator paused on a full output),
//! explored by loom.
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

use loom::future::block_on;
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;
use sluice_sync::{ByteBudget, ManifestFence, ReaderGate, Relief, Step};

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

/// A producer waiting for room in a full budget races the consumer
/// releasing the batch that fills it: the release always lets it through
/// (a lost wake-up leaves it waiting forever, which loom reports).
#[test]
fn a_waiting_producer_is_never_missed_by_a_release() {
    loom::model(|| {
        let budget = ByteBudget::new(100);
        let queued = budget.charge(100);
        let consumer = thread::spawn(move || drop(queued));
        assert!(block_on(budget.admit()), "admitted, not closed");
        consumer.join().expect("the consumer thread");
        assert_eq!(budget.queued(), 0);
    });
}

/// Two producers wait on one full budget; one release lets both through.
#[test]
fn one_release_lets_every_waiting_producer_through() {
    loom::model(|| {
        let budget = ByteBudget::new(100);
        let queued = budget.charge(100);
        let other = {
            let budget = std::sync::Arc::clone(&budget);
            thread::spawn(move || assert!(block_on(budget.admit())))
        };
        let consumer = thread::spawn(move || drop(queued));
        assert!(block_on(budget.admit()));
        other.join().expect("the other producer");
        consumer.join().expect("the consumer thread");
    });
}

/// A producer waiting on a budget whose consumer is gone is let through by
/// the close, and told so.
#[test]
fn a_close_lets_a_waiting_producer_through() {
    loom::model(|| {
        let budget = ByteBudget::new(100);
        let _held = budget.charge(100);
        let closer = {
            let budget = std::sync::Arc::clone(&budget);
            thread::spawn(move || budget.close())
        };
        assert!(!block_on(budget.admit()), "closed, not admitted");
        closer.join().expect("the closing thread");
    });
}

/// The coordinator found an output over its high-water mark and pauses
/// until relieved, while the output's consumer releases the batch: the
/// coordinator always wakes and then sees room (a release between its
/// check and its wait leaves a permit).
#[test]
fn a_paused_coordinator_never_misses_its_output_draining() {
    loom::model(|| {
        let relief = Relief::new();
        let output = ByteBudget::with_relief(100, Some(std::sync::Arc::clone(&relief)));
        let queued = output.charge(90);
        let consumer = thread::spawn(move || drop(queued));
        while output.is_over_high_water() {
            block_on(relief.notified());
        }
        consumer.join().expect("the consumer thread");
        assert_eq!(output.queued(), 0);
    });
}
