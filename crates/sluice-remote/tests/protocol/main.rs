//! Protocol-level tests of `sluice-remote`: the worker's handshake and call
//! checks against a raw client, the engine's checks against fake workers,
//! codec round trips and fuzzing, and a table proving every stable code is
//! produced by at least one scenario.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod codec;
mod common;
mod coverage;
mod engine;
mod handshake;
