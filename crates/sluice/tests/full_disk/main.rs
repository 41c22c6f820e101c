//! A checkpoint store that fails writes or fills up, seen from the
//! Database, in both checkpointed delivery modes, with a file source and
//! file sinks. Every test runs under a timeout: a run that hangs fails.

mod common;
mod failed_write;
mod hook;
mod pacing;
mod stays_full;
mod stopped;
mod tails;
