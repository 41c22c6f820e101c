//! What a stop does to sink output: the facts a tool needs to tell its
//! user, after an interrupted run, which files hold what.
//!
//! `sluice run` stops on SIGINT/SIGTERM. Whether that stop publishes,
//! commits or discards sink output depends on the delivery mode, so the
//! tool asks the database rather than re-deriving the rules from options.

use std::path::PathBuf;

use sluice_engine::catalog::SinkConnector;
use sluice_engine::options::Delivery;
#[cfg(test)]
use sluice_engine::options::PipelineOptions;

use super::Database;

/// One sink and the final file its output goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkOutput {
    /// The sink's name.
    pub name: String,
    /// The final file (resolved against the base directory).
    pub path: PathBuf,
}

/// Whether the pipeline checkpoints, and with which delivery guarantee
/// (the rule the pipeline applies when it starts).
#[cfg(test)]
fn checkpoint_delivery(o: &PipelineOptions) -> Option<Delivery> {
    sluice_engine::pipeline::checkpoint_delivery(o)
}

impl Database {
    /// Every declared sink with its final path, in declaration order.
    pub async fn sink_outputs(&self) -> Vec<SinkOutput> {
        let p = self.inner.pipeline.lock().await;
        p.catalog()
            .sinks
            .iter()
            .map(|s| {
                let SinkConnector::File { path, .. } = &s.connector;
                SinkOutput {
                    name: s.name.clone(),
                    path: path.clone(),
                }
            })
            .collect()
    }

    /// The delivery guarantee when checkpointing is on, None when it is off.
    /// With checkpointing off, [`abort`](Self::abort) discards all sink
    /// output (nothing appears under a final name); with it on,
    /// [`shutdown`](Self::shutdown) takes a final checkpoint that commits
    /// (exactly-once) or keeps (at-least-once) what was processed.
    pub async fn checkpoint_delivery(&self) -> Option<Delivery> {
        self.inner.pipeline.lock().await.checkpointing()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of the two options that turn checkpointing on.
    #[test]
    fn checkpointing_follows_interval_and_delivery() {
        for interval in [None, Some(std::time::Duration::from_millis(50))] {
            for delivery in [Delivery::AtLeastOnce, Delivery::ExactlyOnce] {
                let o = PipelineOptions {
                    checkpoint_interval: interval,
                    delivery,
                    ..PipelineOptions::default()
                };
                let want = match (interval, delivery) {
                    (None, Delivery::AtLeastOnce) => None,
                    _ => Some(delivery),
                };
                assert_eq!(checkpoint_delivery(&o), want, "{interval:?} {delivery:?}");
            }
        }
    }
}
