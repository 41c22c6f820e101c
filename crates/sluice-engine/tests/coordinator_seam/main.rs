//! The streaming coordinator driven through its `PipelineCallback` seam by a
//! scripted test implementation that records every call, so the checkpoint
//! lifecycle (reserve, align, capture, commit, abandon, fail, fault, halt,
//! shutdown settlement) can be asserted call by call.
//!
//! `scripted` is the callback, `harness` drives a coordinator over it; the
//! other modules hold the tests, one concern each.

mod harness;
mod scripted;

mod alignment;
mod checkpoint_failures;
mod cluster_admission;
mod cluster_follower;
mod control;
mod deferred;
mod fences;
mod halts;
mod recovering;
mod shutdown;
