//! Where cycle results go: materialized views, subscriptions and sinks.

pub(crate) mod epoch_ledger;
pub mod mv;
pub mod sink;
pub mod sink_writer;
pub mod subscription;
