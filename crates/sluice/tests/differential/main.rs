//! Differential tests: Sluice's streaming results against the same queries
//! answered in batch by DataFusion over the rows that were on time.
//!
//! Generated event streams (bounded disorder plus rows older than the
//! watermark delay allows, split into random batches) are pushed through
//! Sluice; the oracle applies the lateness rule per batch, drops the late
//! rows, and computes the expected final result in batch. Deterministic tests
//! cover late data, idleness, DROP while running and refused statements.

mod asof;
mod bounded_joins;
mod changelog_aggregates;
mod changelog_over;
mod changes;
mod checkpointing;
mod common;
mod distinct;
mod gen;
mod joins;
mod late;
mod liveness;
mod lookup;
mod oracle;
mod outer_joins;
mod over;
mod refusals;
mod relational;
mod scalar_candidates;
mod scalar_registry;
mod temporal;
mod top_n;
mod top_n_cases;
mod window_tvfs;
mod windows;
