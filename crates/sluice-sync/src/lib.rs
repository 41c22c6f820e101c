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
//!
//! Run the model: `RUSTFLAGS="--cfg loom" cargo test -p sluice-sync --release`.

mod primitives;
pub mod reader_gate;

pub use reader_gate::{ReaderGate, Step};
