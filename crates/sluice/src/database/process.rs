//! Registering native process functions and binding them to streams (the
//! pipeline checks and installs them; see `sluice_engine::pipeline`).

use std::sync::Arc;

pub use sluice_engine::pipeline::HandlerFactory;
use sluice_engine::process::{
    NativeProcessFunction, ProcessFunctionDescriptor, ProcessFunctionInfo,
};
use sluice_sql::CreateProcessStream;

use super::Database;
use crate::Result;

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
        let factory: HandlerFactory = Arc::new(move || Box::new(factory()));
        self.inner
            .pipeline
            .lock()
            .await
            .register_function(descriptor, factory)
    }

    /// Bind a registered function to `input` (a source or stream); its
    /// output becomes the stream `output`.
    pub async fn bind_process_function(
        &self,
        function: &str,
        input: &str,
        output: &str,
    ) -> Result<ProcessFunctionInfo> {
        self.inner
            .pipeline
            .lock()
            .await
            .bind(CreateProcessStream {
                name: output.into(),
                materialized: false,
                function: function.into(),
                version: None,
                input: input.into(),
            })
            .await
    }

    /// Every binding of a process function, in creation order.
    pub async fn process_functions(&self) -> Vec<ProcessFunctionInfo> {
        self.inner.pipeline.lock().await.process_functions()
    }
}
