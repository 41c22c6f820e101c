//! Registering process functions (native, or served by a remote worker)
//! and binding them to streams (the pipeline checks and installs them; see
//! `sluice_engine::pipeline`).

use std::sync::Arc;

pub use sluice_engine::pipeline::HandlerFactory;
use sluice_engine::process::{
    NativeProcessFunction, ProcessFunctionDescriptor, ProcessFunctionInfo,
};
use sluice_remote::{
    RemoteEndpoint, RemoteError, RemoteLimits, RemoteMetrics, RemoteProcessFunction, RemoteRuntime,
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

    /// Register a function served by a remote Rust worker listening on
    /// `endpoint` (`unix:/path/to.sock`, or `tcp://127.0.0.1:PORT`; any
    /// address that is not loopback is refused). The descriptor's runtime
    /// must be [`ProcessRuntime::RemoteRust`](crate::process::ProcessRuntime).
    ///
    /// The worker is contacted at once: an unreachable worker, one that
    /// speaks no common protocol version, or one serving another binding
    /// is an error here, naming both sides. Each binding of the function
    /// then opens its own session on its first call.
    pub async fn register_remote_process_function(
        &self,
        descriptor: ProcessFunctionDescriptor,
        endpoint: &str,
    ) -> Result<()> {
        self.register_remote_process_function_with(descriptor, endpoint, RemoteLimits::default())
            .await
    }

    /// [`Self::register_remote_process_function`] with explicit limits
    /// (frame size, calls in flight, per-call deadline).
    pub async fn register_remote_process_function_with(
        &self,
        descriptor: ProcessFunctionDescriptor,
        endpoint: &str,
        limits: RemoteLimits,
    ) -> Result<()> {
        let remote = |e: RemoteError| crate::Error::Worker {
            code: e.code(),
            source: Box::new(e),
        };
        if descriptor.runtime != crate::process::ProcessRuntime::RemoteRust {
            return Err(crate::Error::Catalog(format!(
                "process function '{}' v{}: a remote worker serves runtime RemoteRust, but the descriptor declares {}",
                descriptor.name,
                descriptor.version,
                sluice_engine::catalog::runtime_name(&descriptor.runtime)
            )));
        }
        let endpoint: RemoteEndpoint = endpoint.parse().map_err(remote)?;
        sluice_remote::probe(&descriptor, &endpoint, limits)
            .await
            .map_err(remote)?;
        let runtime = RemoteRuntime::new().map_err(remote)?;
        let metrics = Arc::new(RemoteMetrics::default());
        let shared = Arc::new(descriptor.clone());
        let factory: HandlerFactory = Arc::new(move || {
            Box::new(RemoteProcessFunction::new(
                Arc::clone(&shared),
                endpoint.clone(),
                limits,
                Arc::clone(&runtime),
                Arc::clone(&metrics),
            ))
        });
        self.inner
            .pipeline
            .lock()
            .await
            .register_worker_function(descriptor, factory)
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
