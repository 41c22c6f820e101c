//! In-process recovery: a fault restarts the pipeline from its last
//! committed checkpoint, up to a budget, with exponential backoff.
//!
//! # Architecture
//!
//! ```text
//!   supervisor ──wait_finished──▶ Ok ─────────────▶ done
//!        ▲                 │ after_end: Fault, budget left, restartable
//!        │                 ▼
//!        │          sleep(backoff · 2^(n-1), at most 1 min)
//!        │                 ▼
//!        └──── Pipeline::restart: abort the coordinator (discard what
//!              no checkpoint covers), build a new one from the catalog
//!              in creation order, recover the newest checkpoint, start
//! ```
//!
//! A fault (`SLC-ENG-008`) means the pipeline's state may be inconsistent
//! with its inputs, and the checkpoint is the last consistent point; a
//! halt is deterministic and is never retried. The rebuild is possible
//! because the [`Pipeline`] records every object the coordinator was
//! given. The `sluice` crate's `Database` supervises every started
//! pipeline with [`after_end`] in a background task, so an embedding
//! program recovers whether or not it waits in `run_to_completion`.
//!
//! A restart needs checkpointing on and replayable sources only (a push
//! source's pushed batches since the checkpoint are gone). It ends the
//! live subscriptions of the old coordinator (their `next()` returns
//! `None`); committed subscriptions resume from an epoch. Metrics keep
//! counting across restarts, so replayed rows count again.

use std::time::Duration;

use sluice_storage::CheckpointStore;
use tokio::sync::Mutex;

use super::start::latest_matching;
use super::Pipeline;
use crate::coordinator::ControlMsg;
use crate::error::{EngineError, Result};
use crate::options::PipelineOptions;
use crate::output::sink::SinkRuntime;

/// The longest wait between two restarts.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// How a pipeline restarts after a fault (options `restart_budget` and
/// `restart_backoff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed in the pipeline's life (0: report the first fault).
    pub budget: u32,
    /// Wait before the first restart; doubled for each later one.
    pub backoff: Duration,
}

impl RestartPolicy {
    /// The wait before restart number `attempt` (1-based): the backoff
    /// doubled for each earlier restart, at most one minute.
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(20);
        self.backoff
            .saturating_mul(1 << doublings)
            .min(MAX_BACKOFF.max(self.backoff))
    }
}

impl Pipeline {
    /// The restart policy from the options.
    pub fn restart_policy(&self) -> RestartPolicy {
        RestartPolicy {
            budget: u32::try_from(self.options.restart_budget).unwrap_or(u32::MAX),
            backoff: self.options.restart_backoff,
        }
    }

    /// Why a fault cannot be recovered inside the process, if it cannot.
    fn unrestartable(&self) -> Option<String> {
        if !self.lifecycle.is_running() {
            return Some("the pipeline is not running".into());
        }
        if self.checkpointing().is_none() {
            return Some("checkpointing is off".into());
        }
        if self
            .options
            .shuffle
            .as_ref()
            .is_some_and(|s| !s.0.edges().is_empty())
        {
            // Its state holds the other nodes' rows up to a checkpoint they
            // may have moved past (or finished after): every node resumes
            // from the last checkpoint committed for all, together.
            return Some(
                "its keyed operators exchange rows with other nodes: every node must be \
                 started again to resume from one checkpoint"
                    .into(),
            );
        }
        self.catalog
            .sources
            .iter()
            .find(|s| !s.is_replayable())
            .map(|s| format!("push source '{}' cannot replay", s.name))
    }

    /// Tear the coordinator down and build a new one from the catalog,
    /// resuming from the newest valid checkpoint in `store`.
    async fn restart(&mut self, store: Option<CheckpointStore>) -> Result<()> {
        if let Err(e) = self.teardown(true, false).await {
            // The fault being recovered from, reported by the old coordinator.
            tracing::debug!(error = %e, "teardown before a restart");
        }
        if let Some(shuffle) = &self.options.shuffle {
            shuffle.0.reset();
        }
        self.coordinator = Some(self.spawn_coordinator()?);
        for name in self.created.clone() {
            let msg = if let Some(def) = self.catalog.sources.iter().find(|s| s.name == name) {
                ControlMsg::AddSource(Box::new(def.clone()))
            } else if let Some(def) = self.catalog.streams.iter().find(|s| s.name == name) {
                let def = def.clone();
                self.install_stream(&def)?
            } else if let Some(def) = self.catalog.sinks.iter().find(|s| s.name == name) {
                ControlMsg::AddSink(Box::new(
                    SinkRuntime::new(def)?.with_queue_bytes(self.options.sink_queue_bytes),
                ))
            } else {
                return Err(EngineError::Internal(format!(
                    "'{name}' was created but is not in the catalog"
                )));
            };
            self.coordinator()?.handle.control(msg).await?;
        }
        let config = self.checkpoint_config(store)?;
        let recovered = match &config {
            Some(cfg) => latest_matching(cfg).await?,
            None => None,
        };
        self.send_start(config, recovered).await
    }
}

/// What a supervisor does once a pipeline's coordinator ended.
#[derive(Debug)]
pub enum AfterEnd {
    /// A fault was recovered from: a new coordinator runs from the last
    /// committed checkpoint; wait for it in turn.
    Restarted,
    /// The pipeline's end stands: finished or shut down (`Ok`), or the
    /// error that is not recovered from.
    Ended(Result<()>),
}

/// The pipeline's coordinator ended with `ended` (what
/// [`wait_finished`](crate::coordinator::wait_finished) said): after a fault, restart it from its last
/// committed checkpoint while its restart budget lasts (see the module
/// docs). `store` resolves where checkpoints go from the options.
pub async fn after_end<F, Fut>(pipeline: &Mutex<Pipeline>, ended: Result<()>, store: F) -> AfterEnd
where
    F: Fn(PipelineOptions) -> Fut,
    Fut: std::future::Future<Output = Result<Option<CheckpointStore>>>,
{
    let fault = match ended {
        Err(e @ EngineError::Fault { .. }) => e,
        other => return AfterEnd::Ended(other),
    };
    let (delay, mut closed) = {
        let mut p = pipeline.lock().await;
        let policy = p.restart_policy();
        if p.restarts >= policy.budget {
            return AfterEnd::Ended(Err(fault));
        }
        if let Some(why) = p.unrestartable() {
            tracing::debug!(%why, "a fault that cannot be recovered in process");
            return AfterEnd::Ended(Err(fault));
        }
        p.restarts += 1;
        let attempt = p.restarts;
        let delay = policy.delay(attempt);
        tracing::warn!(error = %fault, attempt, ?delay, "recovering from the last checkpoint");
        (delay, p.closed.subscribe())
    };
    // A stop during the backoff ends the wait: the check below finds the
    // pipeline closed.
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        _ = closed.wait_for(|c| *c) => {}
    }
    let mut p = pipeline.lock().await;
    // Shut down while waiting: the fault stands.
    if !p.lifecycle.is_running() {
        return AfterEnd::Ended(Err(fault));
    }
    let restarted = async {
        let s = store(p.options().clone()).await?;
        p.restart(s).await
    };
    match restarted.await {
        Ok(()) => AfterEnd::Restarted,
        Err(e) => AfterEnd::Ended(Err(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_a_minute() {
        let p = RestartPolicy {
            budget: 5,
            backoff: Duration::from_millis(100),
        };
        let got: Vec<u128> = (1..=4).map(|n| p.delay(n).as_millis()).collect();
        assert_eq!(got, [100, 200, 400, 800]);
        assert_eq!(p.delay(30), MAX_BACKOFF);
        let slow = RestartPolicy {
            budget: 1,
            backoff: Duration::from_secs(120),
        };
        assert_eq!(slow.delay(3), Duration::from_secs(120));
    }
}
