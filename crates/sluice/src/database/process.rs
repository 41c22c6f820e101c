//! Registering native process functions and binding them to streams.

use std::sync::Arc;

use sluice_engine::catalog::{StreamDef, StreamKind};
use sluice_engine::coordinator::{ControlMsg, StreamProducer};
use sluice_engine::output::mv::MaterializedView;
use sluice_engine::process::{
    encode_keys, NativeProcessFunction, ProcessFunctionDescriptor, ProcessFunctionInfo,
    ProcessOperator, ProcessRuntime,
};
use sluice_sql::CreateProcessStream;

use super::{Database, State};
use crate::{Error, Result};

/// Makes a fresh handler for each binding of a function (a handler's own
/// memory is never authoritative, so a new one can take over any state).
pub type HandlerFactory = Arc<dyn Fn() -> Box<dyn NativeProcessFunction> + Send + Sync>;

/// A registered function: its descriptor and how to make handlers.
pub(super) struct RegisteredFunction {
    pub(super) descriptor: ProcessFunctionDescriptor,
    pub(super) factory: HandlerFactory,
}

fn check_descriptor(d: &ProcessFunctionDescriptor) -> Result<()> {
    let context = format!("process function '{}' v{}", d.name, d.version);
    if d.name.is_empty() {
        return Err(Error::Catalog("a process function needs a name".into()));
    }
    if d.runtime != ProcessRuntime::Native {
        return Err(Error::Catalog(format!(
            "{context}: a native handler must be registered with ProcessRuntime::Native (remote and python runtimes run in workers, not in this process)"
        )));
    }
    if d.key_columns.is_empty() {
        return Err(Error::Catalog(format!(
            "{context}: declare at least one key column"
        )));
    }
    let mut keys = Vec::new();
    for k in &d.key_columns {
        let Ok(i) = d.input_schema.index_of(k) else {
            return Err(Error::Catalog(format!(
                "{context}: key column '{k}' is not in the input schema"
            )));
        };
        keys.push(arrow::array::new_empty_array(
            d.input_schema.field(i).data_type(),
        ));
    }
    encode_keys(&keys, 0).map_err(|e| Error::Catalog(format!("{context}: {e}")))?;
    let l = &d.limits;
    if l.max_activations_per_call == 0 {
        return Err(Error::Catalog(format!(
            "{context}: max_activations_per_call must be at least 1"
        )));
    }
    Ok(())
}

impl Database {
    /// Register a native process function under its descriptor's name.
    /// `factory` makes one handler per binding. Bind it to an input with
    /// `CREATE STREAM out AS PROCESS name FROM input` or
    /// [`Database::bind_process_function`].
    pub async fn register_process_function<F, H>(
        &self,
        descriptor: ProcessFunctionDescriptor,
        factory: F,
    ) -> Result<()>
    where
        F: Fn() -> H + Send + Sync + 'static,
        H: NativeProcessFunction + 'static,
    {
        check_descriptor(&descriptor)?;
        let mut state = self.inner.state.lock().await;
        if state.functions.contains_key(&descriptor.name) {
            return Err(Error::Catalog(format!(
                "a process function named '{}' is already registered",
                descriptor.name
            )));
        }
        state.catalog.functions.push(descriptor.clone());
        let factory: HandlerFactory = Arc::new(move || Box::new(factory()));
        state.functions.insert(
            descriptor.name.clone(),
            RegisteredFunction {
                descriptor,
                factory,
            },
        );
        Ok(())
    }

    /// Bind a registered function to `input` (a source or stream); its
    /// output becomes the stream `output`.
    pub async fn bind_process_function(
        &self,
        function: &str,
        input: &str,
        output: &str,
    ) -> Result<ProcessFunctionInfo> {
        let mut state = self.inner.state.lock().await;
        self.bind(
            &mut state,
            CreateProcessStream {
                name: output.into(),
                materialized: false,
                function: function.into(),
                version: None,
                input: input.into(),
            },
        )
        .await
    }

    /// Every binding of a process function, in creation order.
    pub async fn process_functions(&self) -> Vec<ProcessFunctionInfo> {
        let state = self.inner.state.lock().await;
        state
            .catalog
            .streams
            .iter()
            .filter_map(|s| match &s.kind {
                StreamKind::Process(info) => Some((**info).clone()),
                _ => None,
            })
            .collect()
    }

    /// Resolve and check a binding without installing it.
    pub(super) fn plan_binding(
        state: &State,
        b: &CreateProcessStream,
    ) -> Result<(ProcessFunctionInfo, arrow::datatypes::SchemaRef)> {
        state.catalog.check_free(&b.name)?;
        let context = format!("'{}' AS PROCESS {}", b.name, b.function);
        let f = state.functions.get(&b.function).ok_or_else(|| {
            let known: Vec<&str> = state.functions.keys().map(String::as_str).collect();
            Error::Catalog(format!(
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
                return Err(Error::Catalog(format!(
                    "{context}: VERSION {v} was asked for, but version {} is registered",
                    f.descriptor.version
                )));
            }
        }
        let (schema, changelog) = state.catalog.readable(&b.input, &context)?;
        if changelog {
            return Err(Error::Catalog(format!(
                "{context}: '{}' is a changelog (it retracts rows); process functions read append-only streams",
                b.input
            )));
        }
        let info = ProcessFunctionInfo {
            descriptor: f.descriptor.clone(),
            input: b.input.clone(),
            output: b.name.clone(),
        };
        sluice_engine::process::input_projection(&info, &schema)?;
        Ok((info, schema))
    }

    pub(super) async fn bind(
        &self,
        state: &mut State,
        b: CreateProcessStream,
    ) -> Result<ProcessFunctionInfo> {
        super::seal::check_not_sealed(state, &b.name)?;
        let (info, input_schema) = Self::plan_binding(state, &b)?;
        let handler = (state
            .functions
            .get(&b.function)
            .ok_or_else(|| Error::Internal("registered function vanished".into()))?
            .factory)();
        let operator = ProcessOperator::new(info.clone(), &input_schema, handler)?;
        let out_schema = Arc::clone(&info.descriptor.output_schema);
        let def = StreamDef {
            name: b.name.clone(),
            schema: Arc::clone(&out_schema),
            changelog: false,
            materialized: b.materialized,
            kind: StreamKind::Process(Box::new(info.clone())),
        };
        let mut next = state.catalog.clone();
        next.streams.push(def.clone());
        super::admit_while_running(state, &next)?;
        // Fails now, before the catalog changes, if the pipeline is gone.
        self.running(state)?;
        let view = if b.materialized {
            let v = MaterializedView::new(Arc::clone(&out_schema), false)?;
            state.views.insert(b.name.clone(), Arc::clone(&v));
            Some(v)
        } else {
            None
        };
        self.inner
            .subscriptions
            .register(&b.name, Arc::clone(&out_schema), false);
        state.catalog.streams.push(def);
        let r = self.running(state)?;
        r.coordinator
            .control(ControlMsg::AddStream {
                name: b.name,
                producer: Box::new(StreamProducer::Process(Box::new(operator))),
                view,
            })
            .await?;
        Ok(info)
    }
}
