//! The catalog: every source, stream, materialized view and sink, as declared.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_connectors::{
    BatchReader, FileFormat, FileSourceConfig, FileSourceReader, NexmarkConfig, NexmarkReader,
    NexmarkStream,
};
use sluice_sql::{
    ColumnsRead, CreateSource, ObjectKind, PlanCatalog, StreamNode, StreamPlan, WatermarkSpec,
};

use crate::error::{EngineError, Result};
use crate::options::{parse_count, parse_duration, take_format, take_on_error, PipelineOptions};
use crate::process::{
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionInfo, ProcessRuntime, ValueState,
};
use crate::split::handover::{SourceProgress, SplitAt, SplitHandover};

pub mod admission;
mod conflicts;
mod fingerprint;
pub mod split_admission;
pub use fingerprint::{fingerprint_version, object_fingerprints, FINGERPRINT_VERSION};

/// How a source gets its rows.
#[derive(Debug, Clone)]
pub enum SourceConnector {
    /// Batches pushed from Rust.
    Push,
    /// Files read in order.
    File(FileSourceConfig),
    /// A generated Nexmark stream (person, auction or bid).
    Nexmark(NexmarkConfig),
}

impl SourceDef {
    /// Check the final offset of a source that had finished, which is not
    /// reopened: a file source's must be of this node's share.
    pub fn check_finished_offset(&self, offset: Option<&str>) -> Result<()> {
        match (&self.connector, offset) {
            (SourceConnector::File(cfg), Some(o)) => {
                Ok(FileSourceReader::check_finished_offset(cfg, o)?)
            }
            _ => Ok(()),
        }
    }

    /// For a split node whose vnodes moved, its file or Nexmark source's reader from
    /// the handover, given this node's own checkpointed progress (`None`
    /// without a checkpoint), and whether it resumes this node's own
    /// position of its current share (see `SplitHandover::open`); `None`
    /// for every other source.
    pub fn handed_over_reader(
        &self,
        own: Option<&SourceProgress>,
    ) -> Result<Option<(Box<dyn BatchReader>, bool)>> {
        match (&self.connector, &self.handover) {
            (SourceConnector::File(cfg), Some((at, handover))) => {
                Ok(Some(handover.open(at, &self.name, cfg, own)?))
            }
            (SourceConnector::Nexmark(cfg), Some((at, handover))) => {
                Ok(Some(handover.open_nexmark(at, &self.name, cfg, own)?))
            }
            _ => Ok(None),
        }
    }

    /// Open the connector's reader, at `offset` when resuming from a
    /// checkpoint. `None` for a push source, which has no reader.
    pub fn open_reader(&self, offset: Option<&str>) -> Result<Option<Box<dyn BatchReader>>> {
        if offset.is_none() {
            if let Some((reader, _)) = self.handed_over_reader(None)? {
                return Ok(Some(reader));
            }
        }
        Ok(match &self.connector {
            SourceConnector::Push => None,
            SourceConnector::File(cfg) => {
                let reader = match offset {
                    Some(o) => FileSourceReader::open_at_offset(cfg.clone(), o)?,
                    None => FileSourceReader::open(cfg.clone())?,
                };
                Some(Box::new(reader))
            }
            SourceConnector::Nexmark(cfg) => {
                let reader = match offset {
                    Some(o) => NexmarkReader::open_at_offset(cfg.clone(), o)?,
                    None => NexmarkReader::open(cfg.clone())?,
                };
                Some(Box::new(reader))
            }
        })
    }

    /// Whether the source can replay from a checkpointed offset.
    pub fn is_replayable(&self) -> bool {
        !matches!(self.connector, SourceConnector::Push)
    }
}

/// A declared source.
#[derive(Debug, Clone)]
pub struct SourceDef {
    /// Name.
    pub name: String,
    /// Columns.
    pub schema: SchemaRef,
    /// Event-time declaration.
    pub watermark: Option<WatermarkSpec>,
    /// Index of the event-time column.
    pub time_index: Option<usize>,
    /// Stream receiving late rows.
    pub late_data_to: Option<String>,
    /// `PRIMARY KEY` columns (empty if none): read only by temporal joins.
    pub primary_key: Vec<String>,
    /// Where rows come from.
    pub connector: SourceConnector,
    /// Quiet time after which the source stops holding the watermark.
    pub idle_timeout: Duration,
    /// For a file or Nexmark source of a split node whose vnodes moved: this node's
    /// name and who held its vnodes before (see [`crate::split::handover`]).
    pub handover: Option<(SplitAt, Arc<SplitHandover>)>,
}

impl SourceDef {
    /// Build from `CREATE SOURCE`, validating every option.
    pub fn from_statement(
        stmt: CreateSource,
        opts: &PipelineOptions,
        base_dir: Option<&Path>,
    ) -> Result<Self> {
        let context = format!("source '{}'", stmt.name);
        let mut with = stmt.options;
        let connector_name = with.take("connector");
        let idle_timeout = match with.take("idle_timeout") {
            Some(v) => parse_duration("idle_timeout", &v).map_err(|e| in_context(&context, e))?,
            None => opts.idle_timeout,
        };
        let connector = match connector_name.as_deref() {
            None | Some("push") => {
                with.finish(&context, &["connector", "idle_timeout"])?;
                SourceConnector::Push
            }
            Some("file") => {
                let path = with.require("path", &context)?;
                let format = take_format(&mut with, &path, &context)?;
                let on_error = take_on_error(&mut with, &context)?;
                let batch_size = match with.take("batch_size") {
                    Some(v) => {
                        parse_count("batch_size", &v).map_err(|e| in_context(&context, e))?
                    }
                    None => opts.batch_size,
                };
                let max_record_bytes = match with.take("max_record_bytes") {
                    Some(v) => sluice_connectors::parse_max_record_bytes(&v)
                        .map_err(|e| EngineError::Option(format!("{context}: {e}")))?,
                    None => sluice_connectors::DEFAULT_MAX_RECORD_BYTES,
                };
                with.finish(
                    &context,
                    &[
                        "connector",
                        "path",
                        "format",
                        "on_error",
                        "batch_size",
                        "idle_timeout",
                        "max_record_bytes",
                    ],
                )?;
                SourceConnector::File(FileSourceConfig {
                    path,
                    base_dir: base_dir.map(Path::to_path_buf),
                    format,
                    schema: Arc::clone(&stmt.schema),
                    batch_size,
                    on_error,
                    unread_columns: Vec::new(),
                    max_record_bytes,
                    share: opts.split.as_ref().map(|split| split.file_share()),
                })
            }
            Some("nexmark") => {
                let in_context = |e: sluice_connectors::ConnectorError| {
                    EngineError::Option(format!("{context}: {e}"))
                };
                let stream = with
                    .require("stream", &context)?
                    .parse::<NexmarkStream>()
                    .map_err(in_context)?;
                let mut cfg = NexmarkConfig::new(stream, Arc::clone(&stmt.schema))
                    .map_err(|e| EngineError::Schema(format!("{context}: {e}")))?;
                cfg.batch_size = opts.batch_size;
                // A split node generates only its share of the partitions.
                cfg.share = opts.split.as_ref().map(|split| split.file_share());
                for name in sluice_connectors::nexmark::NEXMARK_OPTIONS {
                    if let Some(v) = with.take(name) {
                        cfg.set(name, &v).map_err(in_context)?;
                    }
                }
                let mut known = vec!["connector", "stream", "idle_timeout"];
                known.extend(sluice_connectors::nexmark::NEXMARK_OPTIONS);
                with.finish(&context, &known)?;
                SourceConnector::Nexmark(cfg)
            }
            Some(other) => {
                return Err(EngineError::Option(format!(
                    "{context}: unknown connector '{other}' (known: file, nexmark, push)"
                )))
            }
        };
        let time_index = stmt
            .watermark
            .as_ref()
            .and_then(|w| stmt.schema.index_of(&w.column).ok());
        Ok(Self {
            name: stmt.name,
            schema: stmt.schema,
            watermark: stmt.watermark,
            time_index,
            late_data_to: stmt.late_data_to,
            primary_key: stmt.primary_key,
            handover: match (&connector, &opts.split) {
                (SourceConnector::File(_) | SourceConnector::Nexmark(_), Some(split)) => split
                    .handover()
                    .map(|h| (SplitAt::of(split), Arc::clone(h))),
                _ => None,
            },
            connector,
            idle_timeout,
        })
    }
}

/// Prefix an option error with the object it belongs to (`source 's': ...`).
fn in_context(context: &str, e: EngineError) -> EngineError {
    match e {
        EngineError::Option(m) => EngineError::Option(format!("{context}: {m}")),
        other => other,
    }
}

/// How a stream is produced.
#[derive(Debug, Clone)]
pub enum StreamKind {
    /// By a continuous query.
    Query(Box<StreamPlan>),
    /// Late rows of a source (`LATE DATA TO`).
    LateData {
        /// The source.
        source: String,
    },
    /// The output of a bound process function.
    Process(Box<ProcessFunctionInfo>),
}

/// A declared stream or materialized view.
#[derive(Debug, Clone)]
pub struct StreamDef {
    /// Name.
    pub name: String,
    /// Output schema (with the change column for changelogs).
    pub schema: SchemaRef,
    /// Whether the output is a changelog.
    pub changelog: bool,
    /// Whether the current result is queryable.
    pub materialized: bool,
    /// Producer.
    pub kind: StreamKind,
}

impl StreamDef {
    /// The user columns (no change column).
    pub fn data_schema(&self) -> SchemaRef {
        sluice_sql::plan::without_change_column(&self.schema)
    }

    /// Names this stream reads.
    pub fn inputs(&self) -> Vec<String> {
        match &self.kind {
            StreamKind::Query(p) => p.inputs(),
            StreamKind::LateData { source } => vec![source.clone()],
            StreamKind::Process(info) => vec![info.input.clone()],
        }
    }
}

/// Where a sink writes.
#[derive(Debug, Clone)]
pub enum SinkConnector {
    /// One file, made visible atomically.
    File {
        /// Final path: where this node writes (the declared path, with
        /// the node's name in it when the pipeline is split; see
        /// `crate::split`).
        path: PathBuf,
        /// The path as declared (resolved against the base directory):
        /// what the catalog's fingerprint encodes, the same on every node.
        declared: PathBuf,
        /// Format.
        format: FileFormat,
    },
}

/// A declared sink.
#[derive(Debug, Clone)]
pub struct SinkDef {
    /// Name.
    pub name: String,
    /// Input stream or source.
    pub from: String,
    /// Rows written (input schema).
    pub schema: SchemaRef,
    /// Optional filter over the input.
    pub filter: Option<StreamNode>,
    /// Destination.
    pub connector: SinkConnector,
}

/// Every declared object, in creation order (which is dependency order).
#[derive(Debug, Default, Clone)]
pub struct Catalog {
    /// Sources.
    pub sources: Vec<SourceDef>,
    /// Streams and materialized views.
    pub streams: Vec<StreamDef>,
    /// Sinks.
    pub sinks: Vec<SinkDef>,
    /// Registered process functions (bound or not), by registration order.
    pub functions: Vec<ProcessFunctionDescriptor>,
    /// Lookup tables registered from Rust, read only by lookup joins.
    pub lookups: Vec<Arc<crate::lookup::LookupBinding>>,
}

impl PlanCatalog for Catalog {
    fn lookup_table_names(&self) -> Vec<String> {
        self.lookups.iter().map(|l| l.name.clone()).collect()
    }

    fn lookup_table(
        &self,
        name: &str,
    ) -> Option<(SchemaRef, Vec<String>, sluice_sql::LookupHandle)> {
        self.lookups
            .iter()
            .find(|l| l.name == name)
            .map(|l| (Arc::clone(&l.schema), l.keys.clone(), l.handle()))
    }

    fn relation_names(&self) -> Vec<String> {
        self.sources
            .iter()
            .map(|s| s.name.clone())
            .chain(self.streams.iter().map(|s| s.name.clone()))
            .collect()
    }

    fn relation(&self, name: &str) -> Option<(SchemaRef, bool)> {
        if let Some(s) = self.sources.iter().find(|s| s.name == name) {
            return Some((Arc::clone(&s.schema), false));
        }
        self.streams
            .iter()
            .find(|s| s.name == name)
            .map(|s| (Arc::clone(&s.schema), s.changelog))
    }

    fn primary_key(&self, name: &str) -> Vec<String> {
        self.sources
            .iter()
            .find(|s| s.name == name)
            .map(|s| s.primary_key.clone())
            .unwrap_or_default()
    }

    fn time_columns(&self, name: &str) -> Vec<(String, i64)> {
        if let Some(s) = self.sources.iter().find(|s| s.name == name) {
            return s
                .watermark
                .as_ref()
                .map(|w| vec![(w.column.clone(), 0)])
                .unwrap_or_default();
        }
        match self
            .streams
            .iter()
            .find(|s| s.name == name)
            .map(|s| &s.kind)
        {
            Some(StreamKind::Query(plan)) => plan.time_columns.clone(),
            _ => vec![],
        }
    }
}

impl Catalog {
    /// The kind of object named `name`, if any.
    pub fn kind_of(&self, name: &str) -> Option<ObjectKind> {
        if self.sources.iter().any(|s| s.name == name) {
            Some(ObjectKind::Source)
        } else if let Some(s) = self.streams.iter().find(|s| s.name == name) {
            Some(if s.materialized {
                ObjectKind::MaterializedView
            } else {
                ObjectKind::Stream
            })
        } else if self.sinks.iter().any(|s| s.name == name) {
            Some(ObjectKind::Sink)
        } else {
            None
        }
    }

    /// The columns (and whether it is a changelog) of the source or stream
    /// `name` that `context` reads; a sink or a missing name is an error.
    pub fn readable(&self, name: &str, context: &str) -> Result<(SchemaRef, bool)> {
        match self.kind_of(name) {
            Some(ObjectKind::Sink) => Err(EngineError::Catalog(format!(
                "{context}: '{name}' is a sink, not a stream"
            ))),
            None => Err(EngineError::Catalog(format!(
                "{context}: no source or stream named '{name}'"
            ))),
            Some(_) => PlanCatalog::relation(self, name)
                .ok_or_else(|| EngineError::Catalog(format!("{context}: '{name}' vanished"))),
        }
    }

    /// Refuse a name that is taken.
    pub fn check_free(&self, name: &str) -> Result<()> {
        match self.kind_of(name) {
            Some(kind) => Err(EngineError::Catalog(format!(
                "a {kind} named '{name}' already exists"
            ))),
            None if self.lookups.iter().any(|l| l.name == name) => Err(EngineError::Catalog(
                format!("a lookup table named '{name}' already exists"),
            )),
            None => Ok(()),
        }
    }

    /// Streams and sinks that read `name` (excluding a source's own late stream).
    pub fn dependents(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .streams
            .iter()
            .filter(|s| !matches!(&s.kind, StreamKind::LateData { source } if source == name))
            .filter(|s| s.inputs().iter().any(|i| i == name))
            .map(|s| s.name.clone())
            .collect();
        out.extend(
            self.sinks
                .iter()
                .filter(|s| s.from == name)
                .map(|s| s.name.clone()),
        );
        out
    }

    /// A fingerprint of the pipeline definition: a checkpoint restores only
    /// into the pipeline that wrote it. A versioned, canonical encoding
    /// (see [`fingerprint`](self::fingerprint) for the format).
    pub fn fingerprint(&self) -> String {
        fingerprint::fingerprint(self)
    }

    /// `SHOW <kind>` as a table.
    pub fn show(&self, kind: ObjectKind) -> Result<RecordBatch> {
        let (names, details): (Vec<String>, Vec<String>) = match kind {
            ObjectKind::Source => self
                .sources
                .iter()
                .map(|s| {
                    let c = match &s.connector {
                        SourceConnector::Push => "push".to_string(),
                        SourceConnector::File(f) => {
                            format!("file {} ({})", f.path, f.format.name())
                        }
                        SourceConnector::Nexmark(n) => n.describe(),
                    };
                    (s.name.clone(), c)
                })
                .unzip(),
            ObjectKind::Stream | ObjectKind::MaterializedView => self
                .streams
                .iter()
                .filter(|s| s.materialized == (kind == ObjectKind::MaterializedView))
                .map(|s| {
                    let d = match &s.kind {
                        StreamKind::Query(_) if s.changelog => "changelog".to_string(),
                        StreamKind::Query(_) => "append-only".to_string(),
                        StreamKind::LateData { source } => format!("late rows of {source}"),
                        StreamKind::Process(info) => format!(
                            "process function {} v{} over {}",
                            info.descriptor.name, info.descriptor.version, info.input
                        ),
                    };
                    (s.name.clone(), d)
                })
                .unzip(),
            ObjectKind::Sink => self
                .sinks
                .iter()
                .map(|s| {
                    let SinkConnector::File { path, format, .. } = &s.connector;
                    (
                        s.name.clone(),
                        format!("from {} to {} ({})", s.from, path.display(), format.name()),
                    )
                })
                .unzip(),
        };
        two_columns(("name", names), ("details", details))
    }

    /// `DESCRIBE name` as a table of columns.
    pub fn describe(&self, name: &str) -> Result<RecordBatch> {
        let mut key: &[String] = &[];
        let schema = if let Some(s) = self.sources.iter().find(|s| s.name == name) {
            key = &s.primary_key;
            Arc::clone(&s.schema)
        } else if let Some(s) = self.streams.iter().find(|s| s.name == name) {
            Arc::clone(&s.schema)
        } else if let Some(s) = self.sinks.iter().find(|s| s.name == name) {
            Arc::clone(&s.schema)
        } else if let Some(l) = self.lookups.iter().find(|l| l.name == name) {
            Arc::clone(&l.schema)
        } else if let Some(d) = self.functions.iter().find(|d| d.name == name) {
            return self.describe_function(d);
        } else {
            return Err(EngineError::Catalog(format!(
                "nothing named '{name}' to describe"
            )));
        };
        let (names, types) = schema
            .fields()
            .iter()
            .map(|f| {
                // A PRIMARY KEY column says so after its type.
                let pk = if key.contains(f.name()) {
                    " PRIMARY KEY"
                } else {
                    ""
                };
                (f.name().clone(), format!("{}{pk}", f.data_type()))
            })
            .unzip();
        two_columns(("column", names), ("type", types))
    }
}

impl Catalog {
    /// The columns of source `source` that something reads: its watermark
    /// column, the columns its queries use, and all of them when a sink, a
    /// process function or its late-data stream takes its rows whole.
    pub fn columns_read(&self, source: &str) -> ColumnsRead {
        let Some(def) = self.sources.iter().find(|s| s.name == source) else {
            return ColumnsRead::All;
        };
        if def.late_data_to.is_some() || self.sinks.iter().any(|s| s.from == source) {
            return ColumnsRead::All;
        }
        let mut read = ColumnsRead::none();
        if let Some(w) = &def.watermark {
            read.merge(ColumnsRead::Some([w.column.clone()].into()));
        }
        for stream in &self.streams {
            match &stream.kind {
                StreamKind::Query(plan) => {
                    if let Some(r) = plan.root.columns_read(source) {
                        read.merge(r);
                    }
                }
                StreamKind::Process(info) if info.input == source => return ColumnsRead::All,
                StreamKind::LateData { source: s } if s == source => return ColumnsRead::All,
                _ => {}
            }
        }
        read
    }

    /// Streams that bind `function`.
    pub fn bindings_of(&self, function: &str) -> Vec<&ProcessFunctionInfo> {
        self.streams
            .iter()
            .filter_map(|s| match &s.kind {
                StreamKind::Process(info) if info.descriptor.name == function => {
                    Some(info.as_ref())
                }
                _ => None,
            })
            .collect()
    }

    /// The source a stream's rows come from batch by batch (the relation
    /// itself for a source, or through filters and projections), if any.
    pub fn batchwise_origin(&self, name: &str) -> Option<&str> {
        if let Some(s) = self.sources.iter().find(|s| s.name == name) {
            return Some(&s.name);
        }
        match &self.streams.iter().find(|s| s.name == name)?.kind {
            StreamKind::Query(plan) => self.batchwise_origin(plan.root.batchwise_input()?),
            StreamKind::LateData { .. } | StreamKind::Process(_) => None,
        }
    }

    /// `SHOW PROCESS FUNCTIONS`: one row per binding, and one per function
    /// that is registered but not bound.
    pub fn show_process_functions(&self) -> Result<RecordBatch> {
        let mut cols: [Vec<Option<String>>; 8] = Default::default();
        for d in &self.functions {
            let bindings = self.bindings_of(&d.name);
            let rows: Vec<Option<&ProcessFunctionInfo>> = if bindings.is_empty() {
                vec![None]
            } else {
                bindings.into_iter().map(Some).collect()
            };
            for b in rows {
                let values = [
                    Some(d.name.clone()),
                    Some(d.version.to_string()),
                    Some(runtime_name(&d.runtime).to_string()),
                    Some(determinism_name(d.determinism).to_string()),
                    Some(d.key_columns.join(", ")),
                    Some(d.binding_hash()),
                    b.map(|b| b.input.clone()),
                    b.map(|b| b.output.clone()),
                ];
                for (c, v) in cols.iter_mut().zip(values) {
                    c.push(v);
                }
            }
        }
        let names = [
            "name",
            "version",
            "runtime",
            "determinism",
            "key_columns",
            "binding_hash",
            "input",
            "output",
        ];
        let schema = Arc::new(Schema::new(
            names
                .iter()
                .enumerate()
                .map(|(i, n)| Field::new(*n, DataType::Utf8, i >= 6))
                .collect::<Vec<_>>(),
        ));
        let arrays: Vec<ArrayRef> = cols
            .into_iter()
            .map(|c| Arc::new(StringArray::from(c)) as ArrayRef)
            .collect();
        Ok(RecordBatch::try_new(schema, arrays)?)
    }

    fn describe_function(&self, d: &ProcessFunctionDescriptor) -> Result<RecordBatch> {
        let columns = |s: &SchemaRef| {
            s.fields()
                .iter()
                .map(|f| format!("{} {}", f.name(), f.data_type()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let l = &d.limits;
        let mut rows = vec![
            ("name", d.name.clone()),
            ("version", d.version.to_string()),
            ("runtime", runtime_name(&d.runtime).to_string()),
            ("determinism", determinism_name(d.determinism).to_string()),
            ("input_columns", columns(&d.input_schema)),
            ("key_columns", d.key_columns.join(", ")),
            ("output_columns", columns(&d.output_schema)),
            (
                "initial_state",
                match d.initial_state {
                    None | Some(ValueState::Absent) => "absent".to_string(),
                    Some(ValueState::Null) => "null".to_string(),
                    Some(ValueState::Int64(v)) => v.to_string(),
                },
            ),
            (
                "limits",
                format!(
                    "activations/call {}, rows/activation {}, rows/call {}, timers/key {}, timer name {} bytes, state changes/activation {}",
                    l.max_activations_per_call,
                    l.max_output_rows_per_activation,
                    l.max_output_rows_per_call,
                    l.max_timers_per_key,
                    l.max_timer_name_len,
                    l.max_state_changes_per_activation
                ),
            ),
            ("binding_hash", d.binding_hash()),
        ];
        for b in self.bindings_of(&d.name) {
            rows.push(("bound", format!("{} -> {}", b.input, b.output)));
        }
        let (props, values) = rows.into_iter().map(|(p, v)| (p.to_string(), v)).unzip();
        two_columns(("property", props), ("value", values))
    }
}

/// How `SHOW` and `DESCRIBE` name a runtime.
pub fn runtime_name(r: &ProcessRuntime) -> &'static str {
    match r {
        ProcessRuntime::Native => "native",
        ProcessRuntime::RemoteRust => "remote_rust",
        ProcessRuntime::Python(_) => "python",
    }
}

/// How `SHOW` and `DESCRIBE` name a determinism contract.
pub fn determinism_name(d: ProcessDeterminism) -> &'static str {
    match d {
        ProcessDeterminism::ReplaySafe => "replay_safe",
        ProcessDeterminism::NonDeterministic => "non_deterministic",
    }
}

fn two_columns(a: (&str, Vec<String>), b: (&str, Vec<String>)) -> Result<RecordBatch> {
    let schema = Arc::new(Schema::new(vec![
        Field::new(a.0, DataType::Utf8, false),
        Field::new(b.0, DataType::Utf8, false),
    ]));
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from(a.1)),
        Arc::new(StringArray::from(b.1)),
    ];
    Ok(RecordBatch::try_new(schema, cols)?)
}
