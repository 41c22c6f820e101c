//! The handshakes between Sluice's threads that a lost wake-up would hang,
//! kept apart from the engine so that loom can check them.
//!
//! Each type here owns one piece of shared state and the only code that
//! touches it, written against [`primitives`] (std's mutex, condvar and
//! atomics; loom's under `--cfg loom`). The engine uses the same code the
//! model checker explores: `tests/loom.rs` runs every interleaving of each
//! handshake (loom's timed waits never time out, so a wake-up that the code
//! relies on a backstop timer to recover shows up there as a deadlock).
//!
//! * [`ReaderGate`]: what a source reader thread does next — answer a
//!   checkpoint barrier, stop, or read — and the hold that watermark
//!   alignment puts on it.
//! * [`ManifestFence`]: a checkpoint tail's manifest write against its
//!   cancellation by recovery; exactly one of them wins.
//! * [`ByteBudget`] and [`Relief`]: backpressure. A producer waiting for
//!   room in a queue's byte budget against the consumer's releases, and a
//!   coordinator paused on a full output against that output draining.
//!
//! Run the model: `RUSTFLAGS="--cfg loom" cargo test -p sluice-sync --release`.

pub mod byte_budget;
pub mod manifest_fence;
mod primitives;
pub mod reader_gate;

pub use byte_budget::{BudgetTicket, ByteBudget, Relief, HIGH_WATER_PERCENT};
pub use manifest_fence::ManifestFence;
pub use reader_gate::{ReaderGate, Step};
