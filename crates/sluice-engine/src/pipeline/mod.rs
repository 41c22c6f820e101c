//! The pipeline: the one owner of DDL and lifecycle.
//!
//! # Architecture
//!
//! ```text
//!   Database (sluice crate): parse SQL, run SELECT, own the state-dir lock
//!        │  one async mutex around the Pipeline
//!        ▼
//!   Pipeline ── catalog, options, views, functions, Lifecycle
//!        │  every check first (names, options, admission, lifecycle),
//!        │  then the catalog change and its ControlMsg together
//!        ▼
//!   CoordinatorHandle ── compute thread: sources, streams, sinks
//! ```
//!
//! Before, the facade held the catalog, views, push state, sink option
//! parsing, delivery rules and three lifecycle booleans, while the
//! coordinator's callback held the installed objects, and the two were kept
//! in step by hand. Here one struct decides: a statement is checked in
//! full against the catalog and the [`Lifecycle`] before anything changes,
//! and the catalog records, in creation order, what the coordinator was
//! given, so that the coordinator can be rebuilt from it after a fault
//! (see `recovery`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::SchemaRef;
use tokio::sync::watch;

use crate::catalog::{Catalog, SourceConnector};
use crate::coordinator::{
    ConnectorPipelineCallback, CoordinatorConfig, CoordinatorHandle, PipelineStatus, SharedOutputs,
};
use crate::error::{EngineError, Result};
use crate::metrics::PipelineMetrics;
use crate::options::{Delivery, PipelineOptions};
use crate::output::mv::MaterializedView;
use crate::output::subscription::SubscribeOptions;
use crate::output::subscription::{ResumeFrom, Subscription, SubscriptionRegistry};
use crate::sources::{source_channel, PushSource, SourceSender};

mod ddl;
mod functions;
mod lifecycle;
mod lookup;
mod recovery;
mod settings;
mod start;

pub use functions::HandlerFactory;
pub use lifecycle::Lifecycle;
pub use recovery::{after_end, AfterEnd, RestartPolicy};
pub use settings::{option_timing, OptionTiming};

/// The coordinator of a pipeline and the sender its sources feed.
struct Coordinator {
    handle: CoordinatorHandle,
    source_tx: SourceSender,
}

/// One pipeline: its catalog, options, lifecycle and coordinator.
pub struct Pipeline {
    catalog: Catalog,
    options: PipelineOptions,
    lifecycle: Lifecycle,
    views: HashMap<String, Arc<MaterializedView>>,
    functions: HashMap<String, functions::RegisteredFunction>,
    /// Per push source, whether it was finished (shared by its handles).
    push_finished: HashMap<String, Arc<AtomicBool>>,
    /// Sources subscribed to (their rows go out whole).
    subscribed_sources: HashSet<String>,
    /// Relations with at least one subscription made (late `SET`s).
    subscribed: BTreeSet<String>,
    /// Per source, the pipeline options it took its value from (late `SET`s).
    inherited: HashMap<String, Vec<&'static str>>,
    /// Sources, streams and sinks in creation order (rebuilds after a fault).
    created: Vec<String>,
    coordinator: Option<Coordinator>,
    /// Restarts after faults so far (see `recovery`).
    restarts: u32,
    /// Started with checkpoints under a commit authority that decides this
    /// node's checkpoints alone: no stream may exchange rows with other
    /// nodes (checked at start and for streams made later).
    lone_checkpoints: bool,
    base_dir: Option<PathBuf>,
    metrics: Arc<PipelineMetrics>,
    subscriptions: Arc<SubscriptionRegistry>,
    /// See [`Pipeline::set_exits_after_stop`].
    exits_after_stop: bool,
    /// Becomes true when the pipeline is stopped: a restart waiting out its
    /// backoff gives up at once instead of holding the stop's caller.
    closed: tokio::sync::watch::Sender<bool>,
}

impl Pipeline {
    /// An empty pipeline; relative connector paths resolve against `base_dir`.
    pub fn new(options: PipelineOptions, base_dir: Option<PathBuf>) -> Self {
        Self {
            catalog: Catalog::default(),
            options,
            lifecycle: Lifecycle::Declaring,
            views: HashMap::new(),
            functions: HashMap::new(),
            push_finished: HashMap::new(),
            subscribed_sources: HashSet::new(),
            subscribed: BTreeSet::new(),
            inherited: HashMap::new(),
            created: Vec::new(),
            coordinator: None,
            restarts: 0,
            lone_checkpoints: false,
            exits_after_stop: false,
            base_dir,
            metrics: Arc::new(PipelineMetrics::new()),
            subscriptions: Arc::new(SubscriptionRegistry::default()),
            closed: tokio::sync::watch::channel(false).0,
        }
    }

    /// The catalog as declared.
    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// The options in effect.
    pub fn options(&self) -> &PipelineOptions {
        &self.options
    }

    /// Where the pipeline is in its life.
    pub fn lifecycle(&self) -> Lifecycle {
        self.lifecycle
    }

    /// The metrics, shared with the coordinator (and kept across restarts).
    pub fn metrics(&self) -> &Arc<PipelineMetrics> {
        &self.metrics
    }

    /// Every materialized view, for SELECT.
    pub fn views(&self) -> Vec<(String, Arc<MaterializedView>)> {
        self.views
            .iter()
            .map(|(k, v)| (k.clone(), Arc::clone(v)))
            .collect()
    }

    /// Restarts after a fault so far (see [`after_end`]).
    pub fn restarts(&self) -> u32 {
        self.restarts
    }

    /// The delivery guarantee when checkpointing is on, None when it is
    /// off: a checkpoint interval or exactly-once delivery turns it on.
    pub fn checkpointing(&self) -> Option<Delivery> {
        checkpoint_delivery(&self.options)
    }

    /// Declare the pipeline complete (see `Database::seal`).
    pub fn seal(&mut self) {
        self.lifecycle = self.lifecycle.sealed();
    }

    /// The coordinator's status (None before the pipeline exists).
    pub fn status(&self) -> Option<PipelineStatus> {
        self.coordinator.as_ref().map(|c| c.handle.status())
    }

    /// A receiver of the coordinator's status, once it exists.
    pub fn status_receiver(&self) -> Option<watch::Receiver<PipelineStatus>> {
        self.coordinator
            .as_ref()
            .map(|c| c.handle.status_receiver())
    }

    /// The coordinator, built at the first statement that needs it.
    fn coordinator(&mut self) -> Result<&Coordinator> {
        if self.lifecycle == Lifecycle::Closed {
            return Err(EngineError::NotRunning);
        }
        if self.coordinator.is_none() {
            self.coordinator = Some(self.spawn_coordinator()?);
        }
        self.coordinator.as_ref().ok_or(EngineError::NotRunning)
    }

    fn spawn_coordinator(&self) -> Result<Coordinator> {
        let opts = &self.options;
        let (tx, rx) = source_channel(opts.channel_capacity, opts.source_queue_bytes);
        if let Some(budget) = tx.budget() {
            self.metrics.watch_source_queue(Arc::clone(budget));
        }
        let callback = ConnectorPipelineCallback::new(
            tx.clone(),
            SharedOutputs {
                metrics: Arc::clone(&self.metrics),
                subscriptions: Arc::clone(&self.subscriptions),
            },
        )
        .with_watermark_alignment(opts.watermark_max_drift)
        .with_held_input_budget(opts.process_held_input_bytes)
        .with_exchanges(opts.shuffle.as_ref().map(|h| Arc::clone(&h.0)));
        let config = CoordinatorConfig {
            max_batches_per_cycle: opts.max_batches_per_cycle,
            idle_tick: (opts.idle_timeout / 4)
                .clamp(Duration::from_millis(10), Duration::from_millis(250)),
        };
        let handle = CoordinatorHandle::spawn(callback, rx, config)?;
        Ok(Coordinator {
            handle,
            source_tx: tx,
        })
    }

    /// The push handle of a source declared without a connector.
    pub fn push_source(&mut self, name: &str) -> Result<PushSource> {
        let def = self
            .catalog
            .sources
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| EngineError::Catalog(format!("no source named '{name}'")))?;
        if !matches!(def.connector, SourceConnector::Push) {
            return Err(EngineError::Catalog(format!(
                "source '{name}' reads from a connector; only sources declared without WITH (connector = ...) accept pushed batches"
            )));
        }
        let schema = Arc::clone(&def.schema);
        let finished = Arc::clone(self.push_finished.entry(name.to_string()).or_default());
        let c = self.coordinator()?;
        Ok(
            PushSource::new(Arc::from(name), schema, c.source_tx.clone(), finished)
                .watching(c.handle.death()),
        )
    }

    /// Subscribe to a stream, view or source, with the pipeline's
    /// `subscription_on_lag` choice.
    pub fn subscribe(&mut self, name: &str) -> Result<Subscription> {
        let on_lag = self.options.subscription_on_lag;
        self.subscribe_with(
            name,
            SubscribeOptions {
                on_lag,
                ..Default::default()
            },
        )
    }

    /// Subscribe with a choice of what a subscriber that falls behind does;
    /// the buffer sizes are the pipeline's options.
    pub fn subscribe_with(
        &mut self,
        name: &str,
        options: SubscribeOptions,
    ) -> Result<Subscription> {
        let (schema, changelog) = self.relation_for_subscription(name)?;
        self.subscribed.insert(name.to_string());
        let options = SubscribeOptions {
            buffer: self.options.subscription_buffer,
            buffer_bytes: self.options.subscription_buffer_bytes,
            ..options
        };
        Ok(self
            .subscriptions
            .subscribe_with(name, schema, changelog, options))
    }

    /// Subscribe to the committed output of a stream, view or source.
    pub fn subscribe_committed(&mut self, name: &str, from: ResumeFrom) -> Result<Subscription> {
        let (schema, changelog) = self.relation_for_subscription(name)?;
        let options = SubscribeOptions {
            on_lag: self.options.subscription_on_lag,
            buffer: self.options.subscription_buffer,
            buffer_bytes: self.options.subscription_buffer_bytes,
        };
        let sub = self
            .subscriptions
            .subscribe_committed(name, schema, changelog, options, from)?;
        self.subscribed.insert(name.to_string());
        Ok(sub)
    }

    fn relation_for_subscription(&mut self, name: &str) -> Result<(SchemaRef, bool)> {
        if let Some(s) = self.catalog.streams.iter().find(|s| s.name == name) {
            Ok((s.data_schema(), s.changelog))
        } else if let Some(s) = self.catalog.sources.iter().find(|s| s.name == name) {
            if self.lifecycle.is_sealed() {
                return Err(EngineError::Sealed(format!(
                    "a subscription to source '{name}' needs every column, and a sealed \
                     pipeline reads only the columns its statements use; subscribe before seal()"
                )));
            }
            let schema = Arc::clone(&s.schema);
            self.subscribed_sources.insert(name.to_string());
            Ok((schema, false))
        } else {
            Err(EngineError::Catalog(format!(
                "no stream, view or source named '{name}'"
            )))
        }
    }

    /// Take a checkpoint now (checkpointing must be on and the pipeline started).
    pub async fn checkpoint(&self) -> Result<crate::coordinator::CheckpointReport> {
        match self.lifecycle {
            Lifecycle::Declaring | Lifecycle::Sealed => {
                return Err(EngineError::Checkpoint(
                    "the pipeline has not started".into(),
                ))
            }
            Lifecycle::Closed => return Err(EngineError::NotRunning),
            Lifecycle::Running { .. } => {}
        }
        let Some(c) = &self.coordinator else {
            return Err(EngineError::NotRunning);
        };
        // The coordinator refuses a checkpoint once the pipeline stopped
        // (see `Command::Checkpoint`): it owns that status.
        c.handle.checkpoint().await
    }

    /// Close sinks (or, with `discard`, throw away their unpublished
    /// output), end subscriptions and stop; the pipeline is closed after.
    pub async fn stop(&mut self, discard: bool) -> Result<()> {
        self.lifecycle = Lifecycle::Closed;
        self.closed.send_replace(true);
        self.teardown(discard, self.exits_after_stop).await
    }

    /// The process exits once this pipeline stops (`sluice run`): its last
    /// stop gives the operators' state up instead of freeing it (see
    /// `StatefulOperator::forget_state`). A restart after a fault still
    /// frees the old state.
    pub fn set_exits_after_stop(&mut self, exits: bool) {
        self.exits_after_stop = exits;
    }

    /// Stop the coordinator, if there is one, leaving the lifecycle alone.
    async fn teardown(&mut self, discard: bool, exiting: bool) -> Result<()> {
        if let Some(c) = self.coordinator.take() {
            let Coordinator {
                mut handle,
                source_tx,
            } = c;
            drop(source_tx);
            if exiting {
                handle.shutdown_for_exit(discard).await?;
            } else {
                handle.shutdown(discard).await?;
            }
        }
        Ok(())
    }
}

/// Whether `o` turns checkpointing on, and with which delivery guarantee.
pub fn checkpoint_delivery(o: &PipelineOptions) -> Option<Delivery> {
    let on = o.checkpoint_interval.is_some() || o.delivery == Delivery::ExactlyOnce;
    on.then_some(o.delivery)
}
