//! The [`Database`]: a thin handle over the engine's [`Pipeline`], which
//! owns the catalog, options, lifecycle and coordinator. The handle parses
//! SQL, runs SELECT queries and owns what is tied to opening: the state
//! directory's lock, the base directory and where checkpoints go.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::StringArray;
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_engine::catalog::SourceConnector;
use sluice_engine::coordinator::{CheckpointReport, PipelineStatus};
use sluice_engine::metrics::{MetricsSnapshot, PipelineMetrics};
use sluice_engine::operators::Operator;
use sluice_engine::options::PipelineOptions;
use sluice_engine::output::subscription::{ResumeFrom, SubscribeOptions, Subscription};
use sluice_engine::pipeline::Pipeline;
use sluice_engine::process::placement::VnodePlacement;
use sluice_engine::sources::PushSource;
use sluice_engine::split::handover::SplitHandover;
use sluice_engine::split::moved::MovedState;
use sluice_engine::split::SourceSplit;
use sluice_sql::{Statement, StreamPlanner};
use sluice_storage::object_store::ObjectStore;
use sluice_storage::{CheckpointInfo, CommitAuthority};
use tokio::sync::Mutex;

use crate::query::run_query;
use crate::{Error, Result};

mod checkpoint_store;
mod cluster;
mod declare;
mod exchanges;
mod lookup;
mod outputs;
mod process;
mod seal;
mod supervisor;
pub use cluster::{CatalogFingerprints, ClusterInfo, ClusterMember};
pub use outputs::SinkOutput;
pub use process::{HandlerFactory, ProcessWorkerStats};

struct Inner {
    /// The one owner of DDL and lifecycle; every statement goes through it.
    pipeline: Mutex<Pipeline>,
    /// The pipeline's metrics, readable without the lock.
    metrics: Arc<PipelineMetrics>,
    state_dir: Option<PathBuf>,
    /// A store given to [`DatabaseBuilder::checkpoint_object_store`].
    checkpoint_object_store: Option<Arc<dyn ObjectStore>>,
    /// Who records checkpoint commits (see
    /// [`DatabaseBuilder::commit_authority`]).
    commit_authority: Option<Arc<dyn CommitAuthority>>,
    /// The checkpoint store, built once (see `checkpoint_store`).
    checkpoint_slot: Mutex<checkpoint_store::StoreSlot>,
    /// Process functions served by workers, by name (counters, and the
    /// supervised Python workers this database runs).
    workers: parking_lot::Mutex<std::collections::BTreeMap<String, process::WorkerEntry>>,
    /// What relative paths in statements resolve against (see
    /// [`DatabaseBuilder::base_dir`]).
    base_dir: Option<PathBuf>,
    /// What `SHOW CLUSTER` asks (see [`DatabaseBuilder::cluster_info`]).
    cluster: Option<Arc<dyn ClusterInfo>>,
    /// Restarts the pipeline after a fault (see `supervisor`).
    supervision: Arc<supervisor::Supervision>,
    _lock: Option<std::fs::File>,
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
    commit_authority: Option<Arc<dyn CommitAuthority>>,
    cluster: Option<Arc<dyn ClusterInfo>>,
    exits_after_shutdown: bool,
}

impl DatabaseBuilder {
    /// Keep state in `dir` (created if missing; one process at a time).
    pub fn state_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.state_dir = Some(dir.as_ref().to_path_buf());
        self
    }

    /// Resolve relative connector paths and Python package paths against
    /// `dir` (default: the working directory).
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

    /// Have `authority` record checkpoint commits: a checkpoint exists once
    /// its manifest is written and the authority recorded its id, and
    /// recovery reads only recorded checkpoints. A cluster leader records
    /// them in etcd, fenced by its term, so one that was deposed while it
    /// wrote commits nothing (see `sluice_storage::CommitAuthority`).
    pub fn commit_authority(mut self, authority: Arc<dyn CommitAuthority>) -> Self {
        self.commit_authority = Some(authority);
        self
    }

    /// Run this database as node `node` of a pipeline split across nodes,
    /// holding the vnodes of `placement`: every file source reads only
    /// the files of those vnodes, each file sink writes a file of this
    /// node's own (`out/x.csv` becomes `out/NODE/x.csv`), and the pipeline
    /// starts only when every object can run split (row-by-row queries;
    /// the others are refused by name with the reason). See
    /// `sluice_engine::split`. The nodes of one split run the same
    /// statements, each with its vnodes of one assignment (each vnode held
    /// by exactly one node), so together they read every file once.
    pub fn split(mut self, node: &str, placement: VnodePlacement) -> Result<Self> {
        self.options.split = Some(SourceSplit::new(node, placement)?);
        Ok(self)
    }

    /// The assignment generation of this split node's vnodes (see
    /// `SourceSplit::with_generation`): with generations counted, a node
    /// started again within one assignment after a handover resumes from
    /// its own checkpoints of that assignment, and a position of another
    /// generation is never taken for this one's. Refused before
    /// [`Self::split`].
    pub fn split_generation(mut self, generation: u64) -> Result<Self> {
        let Some(split) = self.options.split.take() else {
            return Err(Error::Option(
                "split_generation: this database is not a node of a split; call split first".into(),
            ));
        };
        self.options.split = Some(split.with_generation(generation));
        Ok(self)
    }

    /// This node of a split holds vnodes that others held before (a node
    /// joined or left): its file sources start where the previous holders
    /// stopped, as `handover` says (see `sluice_engine::split::handover`
    /// and [`crate::split::checkpointed_progress`]). Refused before
    /// [`Self::split`].
    pub fn split_handover(mut self, handover: SplitHandover) -> Result<Self> {
        let Some(split) = self.options.split.take() else {
            return Err(Error::Option(
                "split_handover: this database is not a node of a split; call split first".into(),
            ));
        };
        self.options.split = Some(split.with_handover(handover));
        Ok(self)
    }

    /// This node of a shuffled split holds vnodes whose keyed state other
    /// nodes held before (the member list changed): at the start, its
    /// aggregations and joins take the keys of its vnodes from `state`,
    /// every previous node's checkpoint at one cut (see
    /// `sluice_engine::split::moved` and [`crate::split::recorded_state`]),
    /// unless its own checkpoint is newer than that cut. Give its file
    /// sources the matching [`Self::split_handover`]. Refused before
    /// [`Self::split`]; refused at start without [`Self::shuffle`] or
    /// checkpoints, and for an operator whose state cannot move yet (by
    /// name).
    pub fn split_moved_state(mut self, state: MovedState) -> Result<Self> {
        let Some(split) = self.options.split.take() else {
            return Err(Error::Option(
                "split_moved_state: this database is not a node of a split; call split first"
                    .into(),
            ));
        };
        self.options.split = Some(split.with_moved_state(state));
        Ok(self)
    }

    /// This node of a split runs keyed aggregations with the other nodes:
    /// every row of a windowed or updating `GROUP BY` crosses to the node
    /// that owns its key's vnode in `setup`'s owner table (over gRPC, as
    /// Arrow IPC, bounded by credit), so each key is aggregated on one node
    /// and the nodes' outputs together are the single-node output (see
    /// `sluice_engine::exchange`). The table must give this node exactly
    /// the vnodes of its split. Its checkpoints are one cut through every
    /// node, so it checkpoints only under a commit authority that decides
    /// every node's checkpoint at once (the cluster's leader and follower
    /// records; anything else is refused at start), and a node never
    /// recovers alone (start every node again). Refused before
    /// [`Self::split`].
    pub fn shuffle(mut self, setup: sluice_engine::exchange::ShuffleSetup) -> Result<Self> {
        let Some(split) = &self.options.split else {
            return Err(Error::Option(
                "shuffle: this database is not a node of a split; call split first".into(),
            ));
        };
        let placement = split.placement();
        let owned = setup.owned_vnodes();
        if setup.node() != split.node()
            || setup.table().vnode_count() != placement.count()
            || owned != placement.owned()
        {
            return Err(Error::Option(format!(
                "shuffle: the owner table gives node '{}' {} of {} vnodes, but the split of \
                 node '{}' holds {} of {}: sources and keyed state must be placed by one table",
                setup.node(),
                owned.len(),
                setup.table().vnode_count(),
                split.node(),
                placement.owned().len(),
                placement.count()
            )));
        }
        self.options.shuffle = Some(sluice_engine::exchange::ShuffleHandle(Arc::new(setup)));
        Ok(self)
    }

    /// Answer `SHOW CLUSTER` from `info`: for a database that runs in a
    /// cluster (the `sluice` binary's `--cluster` mode sets it).
    pub fn cluster_info(mut self, info: Arc<dyn ClusterInfo>) -> Self {
        self.cluster = Some(info);
        self
    }

    /// The process exits right after this database shuts down (the
    /// `sluice` binary does): the last shutdown gives the operators' state
    /// up to the exit instead of freeing it row by row, which was the last
    /// tenth of a large top-N run's CPU. Sinks, checkpoints and
    /// subscriptions settle exactly as without it. Do not set it in a
    /// program that goes on after the shutdown: the state's memory stays
    /// allocated until the process ends.
    pub fn exits_after_shutdown(mut self) -> Self {
        self.exits_after_shutdown = true;
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
            Some(dir) => Some(lock_state_dir(dir).await?),
            None => None,
        };
        let base_dir = self.base_dir.clone();
        let mut pipeline = Pipeline::new(self.options, self.base_dir);
        pipeline.set_exits_after_stop(self.exits_after_shutdown);
        Ok(Database {
            inner: Arc::new(Inner {
                metrics: Arc::clone(pipeline.metrics()),
                pipeline: Mutex::new(pipeline),
                state_dir: self.state_dir,
                checkpoint_object_store: self.checkpoint_object_store,
                commit_authority: self.commit_authority,
                checkpoint_slot: Mutex::default(),
                workers: parking_lot::Mutex::default(),
                base_dir,
                cluster: self.cluster,
                supervision: Default::default(),
                _lock: lock,
            }),
        })
    }
}

/// How long an open waits for a state directory's lock that another
/// holder may be about to give up (see [`lock_state_dir`]).
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Take the OS lock on `dir`'s `LOCK` file, or refuse the open.
///
/// The lock is the open file's (`flock`), so a child process that another
/// thread is starting holds it too, through its copy of every descriptor,
/// from its fork until its exec closes them. A database dropped a moment
/// ago can therefore still look open; the lock is tried again for
/// [`LOCK_GRACE`] before the directory is refused as in use. A database
/// that really is open keeps it, and the second open is refused after the
/// grace.
async fn lock_state_dir(dir: &Path) -> Result<std::fs::File> {
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
    let deadline = std::time::Instant::now() + LOCK_GRACE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(Error::Option(format!(
                    "state directory {} is in use by another open database (in this process or \
                     another); shut that one down and drop it first",
                    dir.display()
                )))
            }
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(Error::Option(format!(
                    "state directory {}: cannot lock {}: {e}",
                    dir.display(),
                    path.display()
                )))
            }
        }
    }
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
        let mut p = self.inner.pipeline.lock().await;
        match stmt {
            Statement::Set { name, value } => p.set_option(&name, &value).map(|()| vec![]),
            Statement::CreateSource(s) => p.create_source(s).await.map(|()| vec![]),
            Statement::CreateStream(s) => p.create_stream(s).await.map(|()| vec![]),
            Statement::CreateProcessStream(b) => p.bind(b).await.map(|_| vec![]),
            Statement::CreateProcessFunction(f) => {
                drop(p);
                self.declare_process_function(f).await.map(|()| vec![])
            }
            Statement::CreateSink(s) => p.create_sink(s).await.map(|()| vec![]),
            Statement::ShowProcessFunctions => Ok(vec![p.catalog().show_process_functions()?]),
            Statement::Drop {
                kind,
                name,
                if_exists,
            } => p.drop_object(kind, &name, if_exists).await.map(|()| vec![]),
            Statement::Show(kind) => Ok(vec![p.catalog().show(kind)?]),
            Statement::Checkpoint => {
                drop(p);
                let r = self.checkpoint().await?;
                checkpoint_rows(&[(
                    r.id,
                    r.created_ms,
                    r.state_bytes,
                    Some(r.duration.as_millis() as u64),
                )])
            }
            Statement::ShowCheckpoints => {
                drop(p);
                let list = self.checkpoints().await?;
                let rows: Vec<_> = list
                    .iter()
                    .map(|c| (c.id, c.created_ms, c.state_bytes, None))
                    .collect();
                checkpoint_rows(&rows)
            }
            Statement::ShowCluster => {
                drop(p);
                cluster::show(self.inner.cluster.as_ref()).await
            }
            Statement::ShowExchanges => {
                let shuffle = p.options().shuffle.clone();
                drop(p);
                exchanges::show(shuffle.as_ref(), &self.metrics().exchanges)
            }
            Statement::Describe(name) => Ok(vec![p.catalog().describe(&name)?]),
            Statement::Explain(inner) => {
                let text = explain(&p, *inner).await?;
                let lines = text.lines().map(str::to_string).collect();
                Ok(vec![text_batch("plan", lines)?])
            }
            Statement::Query(q) => run_query(p.catalog(), &p.views(), &q).await,
        }
    }

    /// The push handle of a source declared without a connector.
    pub async fn source(&self, name: &str) -> Result<PushSource> {
        self.inner.pipeline.lock().await.push_source(name)
    }

    /// Subscribe to a stream, materialized view or source: every later
    /// output batch is delivered. A subscriber that falls behind does what
    /// `subscription_on_lag` says (default: it slows the pipeline; see
    /// [`Database::subscribe_with`]).
    pub async fn subscribe(&self, name: &str) -> Result<Subscription> {
        self.inner.pipeline.lock().await.subscribe(name)
    }

    /// Subscribe with a choice of what a subscriber that falls behind its
    /// queue (`subscription_buffer` batches, or 80% of
    /// `subscription_buffer_bytes`) does: `OnLag::Backpressure` pauses the
    /// sources until it catches up and loses nothing; `OnLag::Disconnect`
    /// drops it, and its next read fails with a lag error (`SLC-ENG-016`).
    /// The buffer sizes in `options` are replaced by the pipeline's options.
    pub async fn subscribe_with(
        &self,
        name: &str,
        options: SubscribeOptions,
    ) -> Result<Subscription> {
        self.inner
            .pipeline
            .lock()
            .await
            .subscribe_with(name, options)
    }

    /// Subscribe to the committed output of a stream, view or source: each
    /// batch arrives only after the checkpoint that covers it committed, tagged
    /// with that checkpoint's id as its epoch. `from` resumes at an epoch that
    /// is still retained (`subscription_history` epochs are); an epoch that is
    /// no longer retained is an error.
    pub async fn subscribe_committed(&self, name: &str, from: ResumeFrom) -> Result<Subscription> {
        self.inner
            .pipeline
            .lock()
            .await
            .subscribe_committed(name, from)
    }

    /// Start reading file sources (push sources are live from creation).
    ///
    /// With checkpointing on, this is where the delivery guarantee is
    /// admitted (every source and sink must support it) and where the
    /// pipeline resumes from its newest valid checkpoint. From here on the
    /// pipeline is supervised: a fault restarts it from its last committed
    /// checkpoint while `restart_budget` lasts (see
    /// [`run_to_completion`](Self::run_to_completion)).
    pub async fn start(&self) -> Result<()> {
        let mut p = self.inner.pipeline.lock().await;
        if p.is_started() {
            // No store is opened again: the pipeline reports how its start
            // went (a failed start keeps saying why).
            return p.start(None).await;
        }
        let store = match p.checkpointing() {
            Some(_) => self.leased_checkpoint_store(p.options()).await?,
            None => None,
        };
        p.start(store).await?;
        drop(p);
        self.supervise();
        Ok(())
    }

    /// Take a checkpoint now (checkpointing must be on and the pipeline started).
    pub async fn checkpoint(&self) -> Result<CheckpointReport> {
        self.inner.pipeline.lock().await.checkpoint().await
    }

    /// Committed checkpoints, oldest first.
    pub async fn checkpoints(&self) -> Result<Vec<CheckpointInfo>> {
        let p = self.inner.pipeline.lock().await;
        match self.checkpoint_store(p.options()).await? {
            Some(store) => Ok(store.list().await?),
            None => Ok(vec![]),
        }
    }

    /// Start, then wait until every source has finished (file sources at the
    /// end of their files, push sources after `finish()`) and the last
    /// windows closed. Returns the metrics at that point.
    ///
    /// With checkpointing on and `restart_budget` above 0, a fault
    /// (`SLC-ENG-008`) restarts the pipeline from its last committed
    /// checkpoint, after `restart_backoff` doubled per earlier restart; the
    /// fault is returned once the budget is spent (see
    /// [`restarts`](Self::restarts)). Live subscriptions end at a restart.
    pub async fn run_to_completion(&self) -> Result<MetricsSnapshot> {
        self.start().await?;
        if self
            .inner
            .pipeline
            .lock()
            .await
            .catalog()
            .sources
            .is_empty()
        {
            return Err(Error::Catalog("the pipeline has no sources to run".into()));
        }
        self.supervised_end().await?;
        Ok(self.metrics())
    }

    /// How many times a fault restarted the pipeline from its last
    /// committed checkpoint (see [`run_to_completion`](Self::run_to_completion)).
    pub async fn restarts(&self) -> u32 {
        self.inner.pipeline.lock().await.restarts()
    }

    /// The catalog's identity as a cluster seals it: the whole fingerprint
    /// and each object's (which name what differs when a node is refused).
    pub async fn catalog_fingerprints(&self) -> CatalogFingerprints {
        let p = self.inner.pipeline.lock().await;
        CatalogFingerprints {
            whole: p.catalog().fingerprint(),
            objects: sluice_engine::catalog::object_fingerprints(p.catalog()),
        }
    }

    /// The options in effect (after every accepted `SET`).
    pub async fn options(&self) -> PipelineOptions {
        self.inner.pipeline.lock().await.options().clone()
    }

    /// Pipeline metrics so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.inner.metrics.snapshot()
    }

    /// The coordinator's status (None before the pipeline exists).
    pub async fn status(&self) -> Option<PipelineStatus> {
        self.inner.pipeline.lock().await.status()
    }

    /// Names of every declared source (for tools that must check connectors).
    pub async fn push_sources(&self) -> Vec<String> {
        let p = self.inner.pipeline.lock().await;
        p.catalog()
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
        let stopped = self.inner.pipeline.lock().await.stop(discard).await;
        // After the final checkpoint, whatever the shutdown returned.
        self.release_checkpoint_lease().await;
        // Once this returns, nothing in the background holds the database:
        // dropping it releases the state directory for the next open.
        self.supervisor_ended().await;
        stopped?;
        Ok(self.inner.metrics.snapshot())
    }
}

/// The text of `EXPLAIN stmt`.
async fn explain(p: &Pipeline, stmt: Statement) -> Result<String> {
    Ok(match stmt {
        Statement::CreateStream(cs) => {
            let plan = StreamPlanner::plan_stream(p.catalog(), &cs).await?;
            // Lowering refuses what CREATE would refuse (e.g. aggregate
            // arguments checked only by DataFusion's accumulators); the
            // operator itself is dropped.
            Operator::compile(&plan.root)?;
            let kind = if plan.changelog { "changelog" } else { "append-only" };
            format!("{} ({kind})\n{}", plan.name, plan.root)
        }
        Statement::CreateProcessStream(b) => {
            let (info, _) = p.plan_binding(&b)?;
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
            let def = p.plan_sink(cs).await?;
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
    })
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
        Statement::CreateProcessFunction(_) => "CREATE PROCESS FUNCTION",
        Statement::ShowProcessFunctions => "SHOW PROCESS FUNCTIONS",
        Statement::CreateSink(_) => "CREATE SINK",
        Statement::Drop { .. } => "DROP",
        Statement::Show(_) => "SHOW",
        Statement::Describe(_) => "DESCRIBE",
        Statement::Explain(_) => "EXPLAIN",
        Statement::Set { .. } => "SET",
        Statement::Checkpoint => "CHECKPOINT",
        Statement::ShowCheckpoints => "SHOW CHECKPOINTS",
        Statement::ShowCluster => "SHOW CLUSTER",
        Statement::ShowExchanges => "SHOW EXCHANGES",
        Statement::Query(_) => "SELECT",
    }
}
