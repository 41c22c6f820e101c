//! Byte budgets for the queues between pipeline stages (source to
//! coordinator, sink writer queues, subscription queues), and the
//! [`Relief`] a coordinator paused on a full output waits for.
//!
//! They live in `sluice-sync`, whose loom model checks that neither a
//! waiting producer nor a paused coordinator ever misses a release; see
//! its `byte_budget` module for the architecture. Producers stop waiting
//! when their channel closes too (see `SourceSender`), so a stopped
//! coordinator never leaves a reader blocked on a budget.

pub use sluice_sync::{BudgetTicket, ByteBudget, Relief, HIGH_WATER_PERCENT};
