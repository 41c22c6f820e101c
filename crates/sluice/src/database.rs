//! The [`Database`]: catalog, statement execution, and the running pipeline.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::StringArray;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_engine::catalog::{
    fingerprint_version, Catalog, SinkConnector, SinkDef, SourceConnector, SourceDef, StreamDef,
    StreamKind, FINGERPRINT_VERSION,
};
use sluice_engine::coordinator::{
    CheckpointConfig, CheckpointReport, ConnectorPipelineCallback, ControlMsg, CoordinatorConfig,
    CoordinatorHandle, PipelineStatus, SharedOutputs, StreamProducer,
};
use sluice_engine::metrics::{MetricsSnapshot, PipelineMetrics};
use sluice_engine::operators::Operator;
use sluice_engine::options::{resolve_path, take_format, Delivery, PipelineOptions};
use sluice_engine::output::mv::MaterializedView;
use sluice_engine::output::sink::SinkRuntime;
use sluice_engine::output::subscription::{ResumeFrom, Subscription, SubscriptionRegistry};
use sluice_engine::sources::{PushSource, SourceMessage};
use sluice_sql::{CreateSink, ObjectKind, Statement, StreamPlanner};
use sluice_storage::object_store::ObjectStore;
use sluice_storage::CheckpointInfo;
use tokio::sync::{mpsc, Mutex};

use crate::query::run_query;
use crate::{Error, Result};

mod checkpoint_store;
mod outputs;
mod process;
mod seal;
pub use outputs::SinkOutput;
pub use process::HandlerFactory;
use process::RegisteredFunction;

/// Options that size the pipeline and must be set before it starts.
const OPEN_TIME_OPTIONS: &[&str] = &["channel_capacity", "max_batches_per_cycle"];

/// Options read when the pipeline starts.
const START_TIME_OPTIONS: &[&str] = &[
    "checkpoint_interval",
    "delivery",
    "checkpoint_store",
    "checkpoint_retain",
    "checkpoint_alignment_timeout",
    "subscription_history",
    "subscription_history_bytes",
];

struct Running {
    coordinator: CoordinatorHandle,
    source_tx: mpsc::Sender<SourceMessage>,
}

struct State {
    catalog: Catalog,
    options: PipelineOptions,
    views: HashMap<String, Arc<MaterializedView>>,
    functions: HashMap<String, RegisteredFunction>,
    /// Per push source, whether it was finished (shared by its handles).
    push_finished: HashMap<String, Arc<std::sync::atomic::AtomicBool>>,
    running: Option<Running>,
    started: bool,
    closed: bool,
    /// Set by [`Database::seal`]: no more statements or source readers.
    sealed: bool,
    /// Sources subscribed to (their rows go out whole).
    subscribed_sources: HashSet<String>,
}

struct Inner {
    state: Mutex<State>,
    base_dir: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    /// A store given to [`DatabaseBuilder::checkpoint_object_store`].
    checkpoint_object_store: Option<Arc<dyn ObjectStore>>,
    /// The checkpoint store, built once (see `checkpoint_store`).
    checkpoint_slot: Mutex<checkpoint_store::StoreSlot>,
    _lock: Option<std::fs::File>,
    metrics: Arc<PipelineMetrics>,
    subscriptions: Arc<SubscriptionRegistry>,
}

/// An embedded streaming database. Cheap to clone; clones share the pipeline.
#[derive(Clone)]
pub struct Database {
    inner: Arc<Inner>,
}

/// Configures and opens a [`Database`].
#[derive(Default)]
pub struct DatabaseBuilder {
    state_dir: Option<PathBuf>,
    base_dir: Option<PathBuf>,
    options: PipelineOptions,
    checkpoint_object_store: Option<Arc<dyn ObjectStore>>,
}

impl DatabaseBuilder {
    /// Keep state in `dir` (created if missing; one process at a time).
    pub fn state_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.state_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Resolve relative connector paths against `dir` (default: the working directory).
    pub fn base_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.base_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Keep checkpoints in `store`, an `object_store` store built by the
    /// caller: the hook for stores a `checkpoint_store` URL cannot describe
    /// (custom credentials or clients, a wrapper that meters or fails
    /// writes in tests). Checkpoints go to the root of the store. It takes
    /// the place of the state directory's `checkpoints` folder; setting the
    /// `checkpoint_store` option as well is refused when the pipeline starts,
    /// because two stores would each hold half of the pipeline's history.
    pub fn checkpoint_object_store(mut self, store: Arc<dyn ObjectStore>) -> Self {
        self.checkpoint_object_store = Some(store);
        self
    }

    /// Set a pipeline option by name (see [`PipelineOptions`]); unknown names are refused.
    pub fn set(mut self, name: &str, value: &str) -> Result<Self> {
        self.options.set(name, value)?;
        Ok(self)
    }

    /// Open the database.
    pub async fn open(self) -> Result<Database> {
        let lock = match &self.state_dir {
            Some(dir) => Some(lock_state_dir(dir)?),
            None => None,
        };
        Ok(Database {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    catalog: Catalog::default(),
                    options: self.options,
                    views: HashMap::new(),
                    functions: HashMap::new(),
                    push_finished: HashMap::new(),
                    running: None,
                    started: false,
                    closed: false,
                    sealed: false,
                    subscribed_sources: HashSet::new(),
                }),
                base_dir: self.base_dir,
                state_dir: self.state_dir,
                checkpoint_object_store: self.checkpoint_object_store,
                checkpoint_slot: Mutex::default(),
                _lock: lock,
                metrics: Arc::new(PipelineMetrics::new()),
                subscriptions: Arc::new(SubscriptionRegistry::default()),
            }),
        })
    }
}

fn lock_state_dir(dir: &Path) -> Result<std::fs::File> {
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::Option(format!(
            "state directory {}: cannot create it: {e}",
            dir.display()
        ))
    })?;
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::Option(format!("state directory {}: {e}", dir.display())))?;
    file.try_lock().map_err(|_| {
        Error::Option(format!(
            "state directory {} is in use by another process",
            dir.display()
        ))
    })?;
    Ok(file)
}

fn text_batch(column: &str, lines: Vec<String>) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![Field::new(column, DataType::Utf8, false)]));
    Ok(RecordBatch::try_new(
        schema,
        vec![Arc::new(StringArray::from(lines))],
    )?)
}

impl Database {
    /// A database without a state directory.
    pub async fn open_in_memory() -> Result<Database> {
        DatabaseBuilder::default().open().await
    }

    /// A database keeping its state in `dir`.
    pub async fn open(dir: impl AsRef<Path>) -> Result<Database> {
        DatabaseBuilder::default().state_dir(dir).open().await
    }

    /// A builder for more options.
    pub fn builder() -> DatabaseBuilder {
        DatabaseBuilder::default()
    }

    fn running<'a>(&self, state: &'a mut State) -> Result<&'a Running> {
        if state.closed {
            return Err(Error::NotRunning);
        }
        if state.running.is_none() {
            let opts = &state.options;
            let (tx, rx) = mpsc::channel(opts.channel_capacity);
            let callback = ConnectorPipelineCallback::new(
                tx.clone(),
                SharedOutputs {
                    metrics: Arc::clone(&self.inner.metrics),
                    subscriptions: Arc::clone(&self.inner.subscriptions),
                },
            );
            let config = CoordinatorConfig {
                max_batches_per_cycle: opts.max_batches_per_cycle,
                idle_tick: (opts.idle_timeout / 4)
                    .clamp(Duration::from_millis(10), Duration::from_millis(250)),
            };
            let coordinator = CoordinatorHandle::spawn(callback, rx, config)?;
            state.running = Some(Running {
                coordinator,
                source_tx: tx,
            });
        }
        state.running.as_ref().ok_or(Error::NotRunning)
    }

    /// Execute one or more `;`-separated statements. Returns the rows of
    /// statements that produce rows (SHOW, DESCRIBE, EXPLAIN, SELECT).
    pub async fn execute(&self, sql: &str) -> Result<Vec<RecordBatch>> {
        let mut out = Vec::new();
        for stmt in sluice_sql::parse_sql(sql)? {
            out.extend(self.execute_statement(stmt).await?);
        }
        Ok(out)
    }

    async fn execute_statement(&self, stmt: Statement) -> Result<Vec<RecordBatch>> {
        let mut state = self.inner.state.lock().await;
        let created = match &stmt {
            Statement::CreateSource(s) => Some(&s.name),
            Statement::CreateStream(s) => Some(&s.name),
            Statement::CreateProcessStream(s) => Some(&s.name),
            Statement::CreateSink(s) => Some(&s.name),
            _ => None,
        };
        if let Some(name) = created {
            seal::check_not_sealed(&state, name)?;
        }
        match stmt {
            Statement::Set { name, value } => {
                // The value is checked first, so a bad value is reported with
                // its allowed range whenever it is set.
                let mut next = state.options.clone();
                next.set(&name, &value)?;
                let name = sluice_engine::options::spec(&name)?.name;
                if state.running.is_some() && OPEN_TIME_OPTIONS.contains(&name) {
                    return Err(Error::Option(format!(
                        "option '{name}' sizes the pipeline and must be set before the first CREATE"
                    )));
                }
                if state.started && START_TIME_OPTIONS.contains(&name) {
                    return Err(Error::Option(format!(
                        "option '{name}' is read when the pipeline starts; set it before start"
                    )));
                }
                state.options = next;
                Ok(vec![])
            }
            Statement::CreateSource(src) => {
                state.catalog.check_free(&src.name)?;
                if let Some(late) = &src.late_data_to {
                    state.catalog.check_late_target(&src.name, late)?;
                }
                let def =
                    SourceDef::from_statement(src, &state.options, self.inner.base_dir.as_deref())?;
                state.catalog.check_source_files(&def)?;
                let mut next = state.catalog.clone();
                next.sources.push(def.clone());
                admit_while_running(&state, &next)?;
                // Fail at CREATE time for a path that matches nothing or a bad header.
                def.open_reader(None)
                    .map_err(|e| Error::Catalog(format!("source '{}': {e}", def.name)))?;
                if let Some(late) = &def.late_data_to {
                    state.catalog.streams.push(StreamDef {
                        name: late.clone(),
                        schema: Arc::clone(&def.schema),
                        changelog: false,
                        materialized: false,
                        kind: StreamKind::LateData {
                            source: def.name.clone(),
                        },
                    });
                }
                self.inner
                    .subscriptions
                    .register(&def.name, Arc::clone(&def.schema), false);
                if let Some(late) = &def.late_data_to {
                    self.inner
                        .subscriptions
                        .register(late, Arc::clone(&def.schema), false);
                }
                state.catalog.sources.push(def.clone());
                let r = self.running(&mut state)?;
                r.coordinator
                    .control(ControlMsg::AddSource(Box::new(def)))
                    .await?;
                Ok(vec![])
            }
            Statement::CreateStream(cs) => {
                state.catalog.check_free(&cs.name)?;
                let plan = StreamPlanner::plan_stream(&state.catalog, &cs).await?;
                let operator = StreamProducer::Query(Operator::compile(&plan.root)?);
                let view = if plan.materialized {
                    let v = MaterializedView::new(plan.data_schema(), plan.changelog)?;
                    state.views.insert(plan.name.clone(), Arc::clone(&v));
                    Some(v)
                } else {
                    None
                };
                self.inner
                    .subscriptions
                    .register(&plan.name, plan.data_schema(), plan.changelog);
                state.catalog.streams.push(StreamDef {
                    name: plan.name.clone(),
                    schema: Arc::clone(&plan.schema),
                    changelog: plan.changelog,
                    materialized: plan.materialized,
                    kind: StreamKind::Query(Box::new(plan.clone())),
                });
                let r = self.running(&mut state)?;
                r.coordinator
                    .control(ControlMsg::AddStream {
                        name: plan.name,
                        producer: Box::new(operator),
                        view,
                    })
                    .await?;
                Ok(vec![])
            }
            Statement::CreateProcessStream(b) => {
                self.bind(&mut state, b).await?;
                Ok(vec![])
            }
            Statement::ShowProcessFunctions => Ok(vec![state.catalog.show_process_functions()?]),
            Statement::CreateSink(cs) => {
                let def = self.sink_def(&state.catalog, cs).await?;
                let runtime = SinkRuntime::new(&def)?;
                state.catalog.sinks.push(def);
                let r = self.running(&mut state)?;
                r.coordinator
                    .control(ControlMsg::AddSink(Box::new(runtime)))
                    .await?;
                Ok(vec![])
            }
            Statement::Drop {
                kind,
                name,
                if_exists,
            } => {
                match state.catalog.kind_of(&name) {
                    None if if_exists => return Ok(vec![]),
                    None => return Err(Error::Catalog(format!("no {kind} named '{name}'"))),
                    Some(k) if k != kind => {
                        return Err(Error::Catalog(format!(
                            "'{name}' is a {k}, not a {kind}; use DROP {}",
                            k.to_string().to_uppercase()
                        )))
                    }
                    Some(_) => {}
                }
                let mut names = vec![name.clone()];
                if kind == ObjectKind::Source {
                    if let Some(late) = state
                        .catalog
                        .sources
                        .iter()
                        .find(|s| s.name == name)
                        .and_then(|s| s.late_data_to.clone())
                    {
                        names.push(late);
                    }
                }
                for n in &names {
                    let deps: Vec<String> = state
                        .catalog
                        .dependents(n)
                        .into_iter()
                        .filter(|d| !names.contains(d))
                        .collect();
                    if !deps.is_empty() {
                        return Err(Error::Catalog(format!(
                            "cannot drop '{n}': {} read(s) it; drop those first",
                            deps.join(", ")
                        )));
                    }
                }
                for n in &names {
                    state.catalog.sources.retain(|s| &s.name != n);
                    state.catalog.streams.retain(|s| &s.name != n);
                    state.catalog.sinks.retain(|s| &s.name != n);
                    state.views.remove(n);
                    state.push_finished.remove(n);
                }
                if let Some(r) = &state.running {
                    for n in names {
                        r.coordinator.control(ControlMsg::Drop(n)).await?;
                    }
                }
                Ok(vec![])
            }
            Statement::Show(kind) => Ok(vec![state.catalog.show(kind)?]),
            Statement::Checkpoint => {
                drop(state);
                let r = self.checkpoint().await?;
                checkpoint_rows(&[(
                    r.id,
                    r.created_ms,
                    r.state_bytes,
                    Some(r.duration.as_millis() as u64),
                )])
            }
            Statement::ShowCheckpoints => {
                drop(state);
                let list = self.checkpoints().await?;
                let rows: Vec<_> = list
                    .iter()
                    .map(|c| (c.id, c.created_ms, c.state_bytes, None))
                    .collect();
                checkpoint_rows(&rows)
            }
            Statement::Describe(name) => Ok(vec![state.catalog.describe(&name)?]),
            Statement::Explain(inner) => {
                let text = match *inner {
                    Statement::CreateStream(cs) => {
                        let plan = StreamPlanner::plan_stream(&state.catalog, &cs).await?;
                        // Lowering refuses what CREATE would refuse (e.g.
                        // aggregate arguments checked only by DataFusion's
                        // accumulators); the operator itself is dropped.
                        Operator::compile(&plan.root)?;
                        let kind = if plan.changelog { "changelog" } else { "append-only" };
                        format!("{} ({kind})\n{}", plan.name, plan.root)
                    }
                    Statement::CreateProcessStream(b) => {
                        let (info, _) = Self::plan_binding(&state, &b)?;
                        let d = &info.descriptor;
                        format!(
                            "{} (append-only)\nProcess: {} v{} over {} keyed by ({}), binding {}",
                            info.output,
                            d.name,
                            d.version,
                            info.input,
                            d.key_columns.join(", "),
                            d.binding_hash()
                        )
                    }
                    Statement::CreateSink(cs) => {
                        let def = self.sink_def(&state.catalog, cs).await?;
                        match def.filter {
                            Some(f) => format!("sink {} from {}\n{f}", def.name, def.from),
                            None => format!("sink {} from {}", def.name, def.from),
                        }
                    }
                    other => {
                        return Err(Error::Sql(sluice_sql::SqlError::Unsupported(format!(
                            "EXPLAIN of {} (EXPLAIN supports CREATE STREAM, CREATE MATERIALIZED VIEW, AS PROCESS bindings and CREATE SINK)",
                            statement_name(&other)
                        ))))
                    }
                };
                let lines = text.lines().map(str::to_string).collect();
                Ok(vec![text_batch("plan", lines)?])
            }
            Statement::Query(q) => {
                let views: Vec<(String, Arc<MaterializedView>)> = state
                    .views
                    .iter()
                    .map(|(k, v)| (k.clone(), Arc::clone(v)))
                    .collect();
                run_query(&state.catalog, &views, &q).await
            }
        }
    }

    async fn sink_def(&self, catalog: &Catalog, cs: CreateSink) -> Result<SinkDef> {
        catalog.check_free(&cs.name)?;
        let context = format!("sink '{}'", cs.name);
        let (schema, _) = catalog.readable(&cs.from, &context)?;
        let filter = match &cs.filter {
            Some(f) => Some(StreamPlanner::plan_filter(catalog, &cs.from, f).await?),
            None => None,
        };
        let mut with = cs.options;
        let connector = match with.take("connector").as_deref() {
            Some("file") => {
                let path = with.require("path", &context)?;
                let format = take_format(&mut with, &path, &context)?;
                with.finish(&context, &["connector", "path", "format"])?;
                let path = resolve_path(self.inner.base_dir.as_deref(), &path);
                catalog.check_sink_path(&cs.name, &path)?;
                SinkConnector::File { path, format }
            }
            Some(other) => {
                return Err(Error::Option(format!(
                    "{context}: unknown connector '{other}' (known: file)"
                )))
            }
            None => {
                return Err(Error::Option(format!(
                    "{context} requires option 'connector' (e.g. connector = 'file')"
                )))
            }
        };
        Ok(SinkDef {
            name: cs.name,
            from: cs.from,
            schema,
            filter,
            connector,
        })
    }

    /// The push handle of a source declared without a connector.
    pub async fn source(&self, name: &str) -> Result<PushSource> {
        let mut state = self.inner.state.lock().await;
        let def = state
            .catalog
            .sources
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::Catalog(format!("no source named '{name}'")))?;
        if !matches!(def.connector, SourceConnector::Push) {
            return Err(Error::Catalog(format!(
                "source '{name}' reads from a connector; only sources declared without WITH (connector = ...) accept pushed batches"
            )));
        }
        let schema = Arc::clone(&def.schema);
        let finished = Arc::clone(state.push_finished.entry(name.to_string()).or_default());
        let r = self.running(&mut state)?;
        Ok(
            PushSource::new(Arc::from(name), schema, r.source_tx.clone(), finished)
                .watching(r.coordinator.death()),
        )
    }

    /// Subscribe to a stream, materialized view or source: every later output batch is delivered.
    pub async fn subscribe(&self, name: &str) -> Result<Subscription> {
        let mut state = self.inner.state.lock().await;
        let (schema, changelog) = relation_for_subscription(&mut state, name)?;
        Ok(self.inner.subscriptions.subscribe(
            name,
            schema,
            changelog,
            state.options.subscription_buffer,
        ))
    }

    /// Subscribe to the committed output of a stream, view or source: each
    /// batch arrives only after the checkpoint that covers it committed, tagged
    /// with that checkpoint's id as its epoch. `from` resumes at an epoch that
    /// is still retained (`subscription_history` epochs are); an epoch that is
    /// no longer retained is an error.
    pub async fn subscribe_committed(&self, name: &str, from: ResumeFrom) -> Result<Subscription> {
        let mut state = self.inner.state.lock().await;
        let (schema, changelog) = relation_for_subscription(&mut state, name)?;
        self.inner.subscriptions.subscribe_committed(
            name,
            schema,
            changelog,
            state.options.subscription_buffer,
            from,
        )
    }

    /// Start reading file sources (push sources are live from creation).
    ///
    /// With checkpointing on, this is where the delivery guarantee is
    /// admitted (every source and sink must support it) and where the
    /// pipeline resumes from its newest valid checkpoint.
    pub async fn start(&self) -> Result<()> {
        let mut state = self.inner.state.lock().await;
        if state.started {
            return Ok(());
        }
        let config = self.checkpoint_config(&state).await?;
        let mut recovered = None;
        if let Some(cfg) = &config {
            if let Some(cp) = cfg.store.latest_valid().await? {
                let found = fingerprint_version(&cp.manifest.pipeline);
                if found != FINGERPRINT_VERSION {
                    return Err(Error::Catalog(format!(
                        "checkpoint {} in {} has a pipeline fingerprint of version {found}, but \
                         this build writes and compares version {FINGERPRINT_VERSION}, so it \
                         cannot tell whether the checkpoint belongs to this pipeline; recover \
                         with the release that wrote it, or use a new state directory",
                        cp.manifest.id,
                        cfg.store.describe()
                    )));
                }
                if cp.manifest.pipeline != cfg.fingerprint {
                    return Err(Error::Catalog(format!(
                        "checkpoint {} in {} was written by a different pipeline definition; \
                         run the same statements, or use a new state directory",
                        cp.manifest.id,
                        cfg.store.describe()
                    )));
                }
                recovered = Some(cp);
            }
        }
        state.started = true;
        let unread = if state.sealed {
            seal::unread_columns(&state)
        } else {
            Vec::new()
        };
        let r = self.running(&mut state)?;
        if let Some(cfg) = config {
            r.coordinator
                .control(ControlMsg::EnableCheckpoints(Box::new(cfg)))
                .await?;
        }
        for (source, columns) in unread {
            tracing::debug!(%source, ?columns, "columns no statement reads are left unparsed");
            r.coordinator
                .control(ControlMsg::LeaveUnread { source, columns })
                .await?;
        }
        if let Some(cp) = recovered {
            r.coordinator
                .control(ControlMsg::Recover(Box::new(cp)))
                .await?;
            if let Some(reason) = r.coordinator.status().halted {
                return Err(Error::Halted(reason));
            }
        }
        r.coordinator.control(ControlMsg::Start).await
    }

    /// Checkpointing for this pipeline, or None when it is off; refuses a
    /// delivery guarantee that a source or sink cannot honour.
    async fn checkpoint_config(&self, state: &State) -> Result<Option<CheckpointConfig>> {
        let o = &state.options;
        let enabled = o.checkpoint_interval.is_some() || o.delivery == Delivery::ExactlyOnce;
        if !enabled {
            return Ok(None);
        }
        let Some(store) = self.leased_checkpoint_store(o).await? else {
            return Err(Error::Option(
                "checkpointing (checkpoint_interval or delivery = 'exactly_once') needs a state directory (--state-dir, Database::open(dir)), a checkpoint_store URL or DatabaseBuilder::checkpoint_object_store".into(),
            ));
        };
        sluice_engine::process::admission::admit(&state.catalog, o.delivery)?;
        if o.delivery == Delivery::ExactlyOnce {
            for s in &state.catalog.sources {
                if !s.is_replayable() {
                    return Err(Error::Option(format!(
                        "delivery = 'exactly_once' needs replayable sources, but source '{}' is a push source and cannot replay after a crash; use delivery = 'at_least_once'",
                        s.name
                    )));
                }
            }
            for s in &state.catalog.sinks {
                let SinkConnector::File { format, .. } = &s.connector;
                if *format == sluice_connectors::FileFormat::Parquet {
                    return Err(Error::Option(format!(
                        "delivery = 'exactly_once' needs transactional sinks, but sink '{}' writes parquet, which cannot commit epochs; use format = 'csv' or 'json'",
                        s.name
                    )));
                }
            }
        }
        Ok(Some(CheckpointConfig {
            store,
            interval: o.checkpoint_interval,
            alignment_timeout: o.checkpoint_alignment_timeout,
            retain: o.checkpoint_retain,
            delivery: o.delivery,
            fingerprint: state.catalog.fingerprint(),
            history_epochs: o.subscription_history,
            history_bytes: o.subscription_history_bytes,
        }))
    }

    /// Take a checkpoint now (checkpointing must be on and the pipeline started).
    pub async fn checkpoint(&self) -> Result<CheckpointReport> {
        let state = self.inner.state.lock().await;
        if !state.started {
            return Err(Error::Checkpoint("the pipeline has not started".into()));
        }
        let Some(r) = &state.running else {
            return Err(Error::NotRunning);
        };
        // The coordinator refuses a checkpoint once the pipeline stopped
        // (see `Command::Checkpoint`): it owns that status.
        r.coordinator.checkpoint().await
    }

    /// Committed checkpoints, oldest first.
    pub async fn checkpoints(&self) -> Result<Vec<CheckpointInfo>> {
        let state = self.inner.state.lock().await;
        match self.checkpoint_store(&state.options).await? {
            Some(store) => Ok(store.list().await?),
            None => Ok(vec![]),
        }
    }

    /// Start, then wait until every source has finished (file sources at the
    /// end of their files, push sources after `finish()`) and the last
    /// windows closed. Returns the metrics at that point.
    pub async fn run_to_completion(&self) -> Result<MetricsSnapshot> {
        self.start().await?;
        let status = {
            let state = self.inner.state.lock().await;
            if state.catalog.sources.is_empty() {
                return Err(Error::Catalog("the pipeline has no sources to run".into()));
            }
            state
                .running
                .as_ref()
                .map(|r| r.coordinator.status_receiver())
        };
        if let Some(rx) = status {
            sluice_engine::coordinator::wait_finished(rx).await?;
        }
        Ok(self.metrics())
    }

    /// Pipeline metrics so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The coordinator's status (None before the pipeline exists).
    pub async fn status(&self) -> Option<PipelineStatus> {
        let state = self.inner.state.lock().await;
        state.running.as_ref().map(|r| r.coordinator.status())
    }

    /// Names of every declared source (for tools that must check connectors).
    pub async fn push_sources(&self) -> Vec<String> {
        let state = self.inner.state.lock().await;
        state
            .catalog
            .sources
            .iter()
            .filter(|s| matches!(s.connector, SourceConnector::Push))
            .map(|s| s.name.clone())
            .collect()
    }

    /// Close sinks (making their files visible), end subscriptions and stop.
    /// If the pipeline halted, sink output is discarded and the halt is returned.
    pub async fn shutdown(&self) -> Result<MetricsSnapshot> {
        self.stop(false).await
    }

    /// Stop without publishing: every sink's unpublished output is discarded.
    /// For a run that failed. Without checkpoints no sink file appears
    /// under its final name; under exactly-once a sink file holds exactly
    /// the committed epochs (and does not exist before the first epoch with
    /// rows committed); under at-least-once it holds the rows delivered so
    /// far, and a rerun on the same state directory continues from the last
    /// checkpoint (repeating at most the rows delivered after it).
    pub async fn abort(&self) -> Result<MetricsSnapshot> {
        self.stop(true).await
    }

    async fn stop(&self, discard: bool) -> Result<MetricsSnapshot> {
        let mut state = self.inner.state.lock().await;
        state.closed = true;
        let stopped = match state.running.take() {
            Some(mut r) => {
                drop(r.source_tx);
                r.coordinator.shutdown(discard).await
            }
            None => Ok(()),
        };
        // After the final checkpoint, whatever the shutdown returned.
        self.release_checkpoint_lease().await;
        stopped?;
        Ok(self.inner.metrics.snapshot())
    }
}

/// A running checkpointed pipeline admits process functions again when it
/// changes: binding one later, or adding a source, must follow the same
/// rules as at start.
fn admit_while_running(state: &State, next: &Catalog) -> Result<()> {
    let o = &state.options;
    let checkpointed = o.checkpoint_interval.is_some() || o.delivery == Delivery::ExactlyOnce;
    if state.started && checkpointed {
        sluice_engine::process::admission::admit(next, o.delivery)?;
    }
    Ok(())
}

fn relation_for_subscription(
    state: &mut State,
    name: &str,
) -> Result<(arrow::datatypes::SchemaRef, bool)> {
    if let Some(s) = state.catalog.streams.iter().find(|s| s.name == name) {
        Ok((s.data_schema(), s.changelog))
    } else if let Some(s) = state.catalog.sources.iter().find(|s| s.name == name) {
        if state.sealed {
            return Err(Error::Sealed(format!(
                "a subscription to source '{name}' needs every column, and a sealed \
                 pipeline reads only the columns its statements use; subscribe before seal()"
            )));
        }
        let schema = Arc::clone(&s.schema);
        state.subscribed_sources.insert(name.to_string());
        Ok((schema, false))
    } else {
        Err(Error::Catalog(format!(
            "no stream, view or source named '{name}'"
        )))
    }
}

fn checkpoint_rows(rows: &[(u64, i64, u64, Option<u64>)]) -> Result<Vec<RecordBatch>> {
    use arrow::array::{Int64Array, UInt64Array};
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("created_ms", DataType::Int64, false),
        Field::new("state_bytes", DataType::UInt64, false),
        Field::new("duration_ms", DataType::UInt64, true),
    ]));
    Ok(vec![RecordBatch::try_new(
        schema,
        vec![
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.0))),
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.1))),
            Arc::new(UInt64Array::from_iter_values(rows.iter().map(|r| r.2))),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.3))),
        ],
    )?])
}

fn statement_name(s: &Statement) -> &'static str {
    match s {
        Statement::CreateSource(_) => "CREATE SOURCE",
        Statement::CreateStream(_) => "CREATE STREAM",
        Statement::CreateProcessStream(_) => "CREATE STREAM ... AS PROCESS",
        Statement::ShowProcessFunctions => "SHOW PROCESS FUNCTIONS",
        Statement::CreateSink(_) => "CREATE SINK",
        Statement::Drop { .. } => "DROP",
        Statement::Show(_) => "SHOW",
        Statement::Describe(_) => "DESCRIBE",
        Statement::Explain(_) => "EXPLAIN",
        Statement::Set { .. } => "SET",
        Statement::Checkpoint => "CHECKPOINT",
        Statement::ShowCheckpoints => "SHOW CHECKPOINTS",
        Statement::Query(_) => "SELECT",
    }
}
