//! DDL: creating and dropping sources, streams and sinks.
//!
//! Each statement is checked in full (name, options, conflicts, admission
//! under the running delivery guarantee, lifecycle) before the catalog
//! changes; the catalog and the coordinator then change together. The
//! `install_*` functions turn a catalog entry into the control message
//! that installs it, and are shared with the rebuild after a fault.

use std::sync::Arc;

use sluice_sql::{CreateSink, CreateSource, CreateStream, ObjectKind, StreamPlanner};

use super::Pipeline;
use crate::catalog::{Catalog, SinkConnector, SinkDef, SourceDef, StreamDef, StreamKind};
use crate::coordinator::{ControlMsg, StreamProducer};
use crate::error::{EngineError, Result};
use crate::operators::Operator;
use crate::options::{resolve_path, take_format};
use crate::output::mv::MaterializedView;
use crate::output::sink::SinkRuntime;
use crate::process::ProcessOperator;

impl Pipeline {
    /// `CREATE SOURCE`.
    pub async fn create_source(&mut self, src: CreateSource) -> Result<()> {
        self.lifecycle.check_create(&src.name)?;
        self.catalog.check_free(&src.name)?;
        if let Some(late) = &src.late_data_to {
            self.catalog.check_late_target(&src.name, late)?;
        }
        let inherited = inherited_options(&src);
        let def = SourceDef::from_statement(src, &self.options, self.base_dir.as_deref())?;
        self.catalog.check_source_files(&def)?;
        let mut next = self.catalog.clone();
        next.sources.push(def.clone());
        self.admit_while_running(&next)?;
        // Fail at CREATE time for a path that matches nothing or a bad
        // header, with the connector's code.
        def.open_reader(None)
            .map_err(|e| e.context(format!("source '{}'", def.name)))?;
        // Applied by the running pipeline first: a source it refuses leaves
        // the catalog as it was.
        self.coordinator()?
            .handle
            .control(ControlMsg::AddSource(Box::new(def.clone())))
            .await?;
        if let Some(late) = &def.late_data_to {
            self.catalog.streams.push(StreamDef {
                name: late.clone(),
                schema: Arc::clone(&def.schema),
                changelog: false,
                materialized: false,
                kind: StreamKind::LateData {
                    source: def.name.clone(),
                },
            });
            self.subscriptions
                .register(late, Arc::clone(&def.schema), false);
        }
        self.subscriptions
            .register(&def.name, Arc::clone(&def.schema), false);
        self.inherited.insert(def.name.clone(), inherited);
        self.created.push(def.name.clone());
        self.catalog.sources.push(def);
        Ok(())
    }

    /// `CREATE STREAM` / `CREATE MATERIALIZED VIEW`.
    pub async fn create_stream(&mut self, cs: CreateStream) -> Result<()> {
        self.lifecycle.check_create(&cs.name)?;
        self.catalog.check_free(&cs.name)?;
        let plan = StreamPlanner::plan_stream(&self.catalog, &cs).await?;
        let def = StreamDef {
            name: plan.name.clone(),
            schema: Arc::clone(&plan.schema),
            changelog: plan.changelog,
            materialized: plan.materialized,
            kind: StreamKind::Query(Box::new(plan)),
        };
        if self.options.split.is_some() {
            let mut next = self.catalog.clone();
            next.streams.push(def.clone());
            self.admit_while_running(&next)?;
        }
        self.coordinator()?;
        let msg = self.install_stream(&def)?;
        // Installed first: a stream the pipeline refuses is not catalogued.
        self.coordinator()?.handle.control(msg).await?;
        self.created.push(def.name.clone());
        self.catalog.streams.push(def);
        Ok(())
    }

    /// `CREATE SINK`.
    pub async fn create_sink(&mut self, cs: CreateSink) -> Result<()> {
        self.lifecycle.check_create(&cs.name)?;
        let def = self.plan_sink(cs).await?;
        let mut next = self.catalog.clone();
        next.sinks.push(def.clone());
        self.admit_while_running(&next)?;
        let runtime = SinkRuntime::new(&def)?.with_queue_bytes(self.options.sink_queue_bytes);
        // Opened by the running pipeline first: a sink whose file cannot
        // be created is refused with the connector's error, and neither the
        // catalog nor the pipeline changes.
        self.coordinator()?
            .handle
            .control(ControlMsg::AddSink(Box::new(runtime)))
            .await?;
        self.created.push(def.name.clone());
        self.catalog.sinks.push(def);
        Ok(())
    }

    /// Check a `CREATE SINK` and parse its options, without installing it
    /// (also what `EXPLAIN CREATE SINK` shows).
    pub async fn plan_sink(&self, cs: CreateSink) -> Result<SinkDef> {
        sink_def(
            &self.catalog,
            self.base_dir.as_deref(),
            self.options.split.as_ref(),
            cs,
        )
        .await
    }

    /// `DROP kind name`: the object, and a source's late-data stream with it.
    pub async fn drop_object(
        &mut self,
        kind: ObjectKind,
        name: &str,
        if_exists: bool,
    ) -> Result<()> {
        self.lifecycle.check_open()?;
        match self.catalog.kind_of(name) {
            None if if_exists => return Ok(()),
            None => return Err(EngineError::Catalog(format!("no {kind} named '{name}'"))),
            Some(k) if k != kind => {
                return Err(EngineError::Catalog(format!(
                    "'{name}' is a {k}, not a {kind}; use DROP {}",
                    k.to_string().to_uppercase()
                )))
            }
            Some(_) => {}
        }
        let mut names = vec![name.to_string()];
        if kind == ObjectKind::Source {
            if let Some(late) = self
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
            let deps: Vec<String> = self
                .catalog
                .dependents(n)
                .into_iter()
                .filter(|d| !names.contains(d))
                .collect();
            if !deps.is_empty() {
                return Err(EngineError::Catalog(format!(
                    "cannot drop '{n}': {} read(s) it; drop those first",
                    deps.join(", ")
                )));
            }
        }
        for n in &names {
            self.catalog.sources.retain(|s| &s.name != n);
            self.catalog.streams.retain(|s| &s.name != n);
            self.catalog.sinks.retain(|s| &s.name != n);
            self.views.remove(n);
            // Handles of a dropped push source refuse further rows: a batch
            // pushed after the drop would reach a coordinator that no longer
            // knows the source.
            if let Some(finished) = self.push_finished.remove(n) {
                finished.store(true, std::sync::atomic::Ordering::Release);
            }
            self.inherited.remove(n);
            self.created.retain(|c| c != n);
        }
        if let Some(c) = &self.coordinator {
            for n in names {
                c.handle.control(ControlMsg::Drop(n)).await?;
            }
        }
        Ok(())
    }

    /// The control message that installs `def` (a query or process
    /// stream), registering its view and subscription topic. A late-data
    /// stream is installed with its source: None.
    pub(super) fn install_stream(&mut self, def: &StreamDef) -> Result<ControlMsg> {
        let producer = match &def.kind {
            StreamKind::Query(plan) => {
                let op = Operator::compile(&plan.root)?;
                StreamProducer::Query(match &self.options.shuffle {
                    Some(shuffle) => crate::operators::exchange::distribute(
                        &def.name, &plan.root, op, &shuffle.0,
                    )?,
                    None => op,
                })
            }
            StreamKind::Process(info) => {
                let (input_schema, _) = self.catalog.readable(&info.input, &def.name)?;
                let handler = (self
                    .functions
                    .get(&info.descriptor.name)
                    .ok_or_else(|| {
                        EngineError::Internal(format!(
                            "process function '{}' is bound but not registered",
                            info.descriptor.name
                        ))
                    })?
                    .factory)();
                let mut op = ProcessOperator::new((**info).clone(), &input_schema, handler)?;
                if let Some(shuffle) = &self.options.shuffle {
                    // Each key runs on its vnode's owner, numbering its
                    // activations by vnode.
                    let setup = &shuffle.0;
                    let owned = crate::process::VnodePlacement::new(
                        setup.table().vnode_count(),
                        setup.owned_vnodes(),
                    )
                    .map_err(EngineError::Option)?;
                    op.place(owned)?;
                    op.route_through(crate::operators::exchange::for_process(
                        &def.name,
                        &input_schema,
                        &info.descriptor.key_columns,
                        setup,
                    )?);
                }
                StreamProducer::Process(Box::new(op))
            }
            StreamKind::LateData { source } => {
                return Err(EngineError::Internal(format!(
                    "late-data stream '{}' is installed with source '{source}'",
                    def.name
                )))
            }
        };
        let view = if def.materialized {
            let v = MaterializedView::new(def.data_schema(), def.changelog)?;
            self.views.insert(def.name.clone(), Arc::clone(&v));
            Some(v)
        } else {
            None
        };
        self.subscriptions
            .register(&def.name, def.data_schema(), def.changelog);
        Ok(ControlMsg::AddStream {
            name: def.name.clone(),
            producer: Box::new(producer),
            view,
        })
    }

    /// A running checkpointed pipeline admits its catalog again when it
    /// changes: a later binding, source or sink must follow the same rules
    /// as at start.
    pub(super) fn admit_while_running(&self, next: &Catalog) -> Result<()> {
        // A split pipeline's nodes run only what certifies: each
        // statement is refused as it is made, before a cluster seals it.
        self.certify_split(next)?;
        let keyed = crate::catalog::split_admission::keyed_stream(next).is_some();
        if self.lone_checkpoints && self.options.shuffle.is_some() && keyed {
            return Err(super::start::lone_checkpoints_refused());
        }
        if let (true, Some(delivery)) = (self.lifecycle.is_running(), self.checkpointing()) {
            crate::catalog::admission::admit_delivery(next, delivery)?;
        }
        Ok(())
    }
}

/// The pipeline options a source takes its value from because its `WITH`
/// does not set them (what a later `SET` of them would not reach).
fn inherited_options(src: &CreateSource) -> Vec<&'static str> {
    let has = |k: &str| src.options.clone().take(k).is_some();
    let connector = src.options.clone().take("connector");
    let mut out = Vec::new();
    if !has("idle_timeout") {
        out.push("idle_timeout");
    }
    let reads_files = matches!(connector.as_deref(), Some("file") | Some("nexmark"));
    if reads_files && !has("batch_size") {
        out.push("batch_size");
    }
    out
}

/// Parse and check a `CREATE SINK` against `catalog`.
async fn sink_def(
    catalog: &Catalog,
    base_dir: Option<&std::path::Path>,
    split: Option<&crate::split::SourceSplit>,
    cs: CreateSink,
) -> Result<SinkDef> {
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
            let declared = resolve_path(base_dir, &path);
            let path = match split {
                Some(split) => split.sink_path(&declared),
                None => declared.clone(),
            };
            catalog.check_sink_path(&cs.name, &path)?;
            SinkConnector::File {
                path,
                declared,
                format,
            }
        }
        Some(other) => {
            return Err(EngineError::Option(format!(
                "{context}: unknown connector '{other}' (known: file)"
            )))
        }
        None => {
            return Err(EngineError::Option(format!(
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
