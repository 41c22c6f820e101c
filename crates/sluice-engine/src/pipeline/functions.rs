//! Registered native process functions and their bindings to streams.

use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use sluice_sql::CreateProcessStream;

use super::Pipeline;
use crate::catalog::{StreamDef, StreamKind};
use crate::error::{EngineError, Result};
use crate::process::{
    encode_keys, NativeProcessFunction, ProcessFunctionDescriptor, ProcessFunctionInfo,
    ProcessRuntime,
};

/// Makes a fresh handler for each binding of a function (a handler's own
/// memory is never authoritative, so a new one can take over any state,
/// which is also what a restart after a fault relies on).
pub type HandlerFactory = Arc<dyn Fn() -> Box<dyn NativeProcessFunction> + Send + Sync>;

/// A registered function: its descriptor and how to make handlers.
pub(super) struct RegisteredFunction {
    pub(super) descriptor: ProcessFunctionDescriptor,
    pub(super) factory: HandlerFactory,
}

fn check_descriptor(d: &ProcessFunctionDescriptor, remote: bool) -> Result<()> {
    let context = format!("process function '{}' v{}", d.name, d.version);
    if d.name.is_empty() {
        return Err(EngineError::Catalog(
            "a process function needs a name".into(),
        ));
    }
    if !remote && d.runtime != ProcessRuntime::Native {
        return Err(EngineError::Catalog(format!(
            "{context}: a native handler must be registered with ProcessRuntime::Native (remote and python runtimes run in workers, not in this process)"
        )));
    }
    if remote && d.runtime == ProcessRuntime::Native {
        return Err(EngineError::Catalog(format!(
            "{context}: a handler served by a worker must be declared with a worker runtime (RemoteRust or Python), not Native"
        )));
    }
    if d.key_columns.is_empty() {
        return Err(EngineError::Catalog(format!(
            "{context}: declare at least one key column"
        )));
    }
    let mut keys = Vec::new();
    for k in &d.key_columns {
        let Ok(i) = d.input_schema.index_of(k) else {
            return Err(EngineError::Catalog(format!(
                "{context}: key column '{k}' is not in the input schema"
            )));
        };
        keys.push(arrow::array::new_empty_array(
            d.input_schema.field(i).data_type(),
        ));
    }
    encode_keys(&keys, 0).map_err(|e| EngineError::Catalog(format!("{context}: {e}")))?;
    let l = &d.limits;
    if l.max_activations_per_call == 0 {
        return Err(EngineError::Catalog(format!(
            "{context}: max_activations_per_call must be at least 1"
        )));
    }
    Ok(())
}

impl Pipeline {
    /// Register a native process function under its descriptor's name.
    pub fn register_function(
        &mut self,
        descriptor: ProcessFunctionDescriptor,
        factory: HandlerFactory,
    ) -> Result<()> {
        self.register(descriptor, factory, false)
    }

    /// Register a function whose handlers forward calls to a worker
    /// process (runtime `RemoteRust` or `Python`); `factory` makes the
    /// forwarding handlers. Everything else is as for a native function.
    pub fn register_worker_function(
        &mut self,
        descriptor: ProcessFunctionDescriptor,
        factory: HandlerFactory,
    ) -> Result<()> {
        self.register(descriptor, factory, true)
    }

    fn register(
        &mut self,
        descriptor: ProcessFunctionDescriptor,
        factory: HandlerFactory,
        remote: bool,
    ) -> Result<()> {
        check_descriptor(&descriptor, remote)?;
        if self.functions.contains_key(&descriptor.name) {
            return Err(EngineError::Catalog(format!(
                "a process function named '{}' is already registered",
                descriptor.name
            )));
        }
        self.catalog.functions.push(descriptor.clone());
        self.functions.insert(
            descriptor.name.clone(),
            RegisteredFunction {
                descriptor,
                factory,
            },
        );
        Ok(())
    }

    /// Every binding of a process function, in creation order.
    pub fn process_functions(&self) -> Vec<ProcessFunctionInfo> {
        self.catalog
            .streams
            .iter()
            .filter_map(|s| match &s.kind {
                StreamKind::Process(info) => Some((**info).clone()),
                _ => None,
            })
            .collect()
    }

    /// Resolve and check a binding without installing it (also what
    /// `EXPLAIN ... AS PROCESS` shows).
    pub fn plan_binding(
        &self,
        b: &CreateProcessStream,
    ) -> Result<(ProcessFunctionInfo, SchemaRef)> {
        self.catalog.check_free(&b.name)?;
        let context = format!("'{}' AS PROCESS {}", b.name, b.function);
        let f = self.functions.get(&b.function).ok_or_else(|| {
            let known: Vec<&str> = self.functions.keys().map(String::as_str).collect();
            EngineError::Catalog(format!(
                "{context}: no process function named '{}' is registered (registered: {})",
                b.function,
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })?;
        if let Some(v) = b.version {
            if v != f.descriptor.version {
                return Err(EngineError::Catalog(format!(
                    "{context}: VERSION {v} was asked for, but version {} is registered",
                    f.descriptor.version
                )));
            }
        }
        let (schema, changelog) = self.catalog.readable(&b.input, &context)?;
        if changelog {
            return Err(EngineError::Catalog(format!(
                "{context}: '{}' is a changelog (it retracts rows); process functions read append-only streams",
                b.input
            )));
        }
        let info = ProcessFunctionInfo {
            descriptor: f.descriptor.clone(),
            input: b.input.clone(),
            output: b.name.clone(),
        };
        crate::process::input_projection(&info, &schema)?;
        Ok((info, schema))
    }

    /// `CREATE STREAM out AS PROCESS f FROM input`: bind and install.
    pub async fn bind(&mut self, b: CreateProcessStream) -> Result<ProcessFunctionInfo> {
        self.lifecycle.check_create(&b.name)?;
        let (info, _) = self.plan_binding(&b)?;
        let def = StreamDef {
            name: b.name.clone(),
            schema: Arc::clone(&info.descriptor.output_schema),
            changelog: false,
            materialized: b.materialized,
            kind: StreamKind::Process(Box::new(info.clone())),
        };
        let mut next = self.catalog.clone();
        next.streams.push(def.clone());
        self.admit_while_running(&next)?;
        // Fails now, before the catalog changes, if the pipeline is gone.
        self.coordinator()?;
        let msg = self.install_stream(&def)?;
        self.created.push(def.name.clone());
        self.catalog.streams.push(def);
        self.coordinator()?.handle.control(msg).await?;
        Ok(info)
    }
}
