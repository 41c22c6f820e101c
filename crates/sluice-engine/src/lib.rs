//! The Sluice streaming engine: operators, state, watermarks, outputs, and
//! the streaming coordinator with its `PipelineCallback` seam.

pub mod budget;
pub mod catalog;
pub mod coordinator;
pub mod error;
pub mod exchange;
pub mod fault;
pub mod lookup;
pub mod metrics;
pub mod operators;
pub mod options;
pub mod output;
pub mod panic;
pub mod partition;
pub mod pipeline;
pub mod process;
pub mod seam;
pub mod sources;
pub mod split;
pub mod state;
pub mod watermark;

#[cfg(test)]
mod test_rng;

pub use error::{EngineError, Result};
