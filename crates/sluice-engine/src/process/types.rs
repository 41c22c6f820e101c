//! The process-function contract: descriptors, activations, results.

use std::collections::BTreeMap;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;

/// Reviewed handler contract, independent of the pipeline's delivery guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessDeterminism {
    /// Same activations in the same order give the same results: replay is safe.
    ReplaySafe,
    /// Results may differ on replay (wall clock, randomness, external calls).
    NonDeterministic,
}

/// Execution boundary bound by the function manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessRuntime {
    /// Trusted Rust on the compute thread.
    Native,
    /// A Rust worker over the loopback remote protocol.
    RemoteRust,
    /// A supervised Python worker.
    Python(PythonEnvironmentBinding),
}

/// Versioned file-tree binding for a supervised Python deployment. Paths
/// are relative to the package root, so an identical package can move
/// without changing checkpoint identity; the interpreter, the worker SDK
/// and the entry point are part of it, so changing any of them (or any
/// file) is a new identity, under which older state is not restored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PythonEnvironmentBinding {
    /// Package name.
    pub package: String,
    /// Package version.
    pub version: String,
    /// Relative path to SHA-256 digest of every file of the tree.
    pub files: BTreeMap<String, String>,
    /// The handler class, as `module:Class`.
    pub entry: String,
    /// The interpreter, as it reports itself (`CPython 3.11.7`).
    pub interpreter: String,
    /// The version of the worker SDK (`sluice_worker`) it runs under.
    pub sdk: String,
}

impl PythonEnvironmentBinding {
    /// Version of the binding's canonical encoding (in the binding hash).
    pub const FORMAT: u32 = 1;
}

/// Per-function bounds, enforced before a handler response is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessFunctionLimits {
    /// Most activations in one call.
    pub max_activations_per_call: usize,
    /// Most output rows one activation may produce.
    pub max_output_rows_per_activation: usize,
    /// Most output rows one call may produce.
    pub max_output_rows_per_call: usize,
    /// Most timers one key may have set.
    pub max_timers_per_key: usize,
    /// Longest timer name, in bytes.
    pub max_timer_name_len: usize,
    /// Most state mutations one activation may propose.
    pub max_state_changes_per_activation: usize,
}

impl Default for ProcessFunctionLimits {
    fn default() -> Self {
        Self {
            max_activations_per_call: 1024,
            max_output_rows_per_activation: 1024,
            max_output_rows_per_call: 65_536,
            max_timers_per_key: 16,
            max_timer_name_len: 64,
            max_state_changes_per_activation: 1,
        }
    }
}

/// Immutable, versioned binding for one process function. The initial state
/// codec is an optional signed 64-bit value; a present null is distinct from
/// absent state.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessFunctionDescriptor {
    /// Function name.
    pub name: String,
    /// Version; restoring state under another version is refused.
    pub version: u32,
    /// Columns of the input stream the function reads.
    pub input_schema: SchemaRef,
    /// Key columns (by name) of the input.
    pub key_columns: Vec<String>,
    /// Schema of every output batch.
    pub output_schema: SchemaRef,
    /// The value a key's state starts with (None: absent).
    pub initial_state: Option<ValueState>,
    /// Bounds.
    pub limits: ProcessFunctionLimits,
    /// Reviewed determinism.
    pub determinism: ProcessDeterminism,
    /// Where it runs.
    pub runtime: ProcessRuntime,
}

impl ProcessFunctionDescriptor {
    /// A stable hash of the binding (name, version, input and output
    /// columns, key columns, initial state and runtime, with a Python
    /// deployment's whole environment binding): state is restored only
    /// under the same binding. It is the hex SHA-256 of a canonical text:
    /// fields as `name type nullability` with Arrow's display of the type,
    /// explicit words for the state and runtime, and a Python tree as
    /// sorted `path=digest` pairs.
    pub fn binding_hash(&self) -> String {
        let columns = |schema: &SchemaRef| {
            schema
                .fields()
                .iter()
                .map(|f| {
                    let null = if f.is_nullable() { "null" } else { "not null" };
                    format!("{} {} {null}", f.name(), f.data_type())
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let initial = match self.initial_state {
            None | Some(ValueState::Absent) => "absent".to_string(),
            Some(ValueState::Null) => "null".to_string(),
            Some(ValueState::Int64(v)) => format!("int64 {v}"),
        };
        let runtime = match &self.runtime {
            ProcessRuntime::Native => "native".to_string(),
            ProcessRuntime::RemoteRust => "remote_rust".to_string(),
            ProcessRuntime::Python(p) => format!(
                "python format {} package {:?} version {:?} entry {:?} interpreter {:?} sdk {:?} files [{}]",
                PythonEnvironmentBinding::FORMAT,
                p.package,
                p.version,
                p.entry,
                p.interpreter,
                p.sdk,
                p.files
                    .iter()
                    .map(|(path, digest)| format!("{path:?}={digest}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        let text = [
            format!("name {}", self.name),
            format!("version {}", self.version),
            format!("input {}", columns(&self.input_schema)),
            format!("keys {}", self.key_columns.join(", ")),
            format!("output {}", columns(&self.output_schema)),
            format!("initial {initial}"),
            format!("runtime {runtime}"),
        ]
        .join("\n");
        use sha2::Digest;
        sha2::Sha256::digest(text.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

/// Registered function and its input/output stream binding.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessFunctionInfo {
    /// The descriptor.
    pub descriptor: ProcessFunctionDescriptor,
    /// Input stream name.
    pub input: String,
    /// Output stream name.
    pub output: String,
}

/// Immutable view of a declared value before one activation's transition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueState {
    /// No value was ever set (or it was cleared).
    Absent,
    /// A value is present and is null.
    Null,
    /// A signed 64-bit value.
    Int64(i64),
}

/// Explicit state transition; an output without a mutation leaves state unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueMutation {
    /// Set the value (None sets a present null).
    Set(Option<i64>),
    /// Make the value absent.
    Clear,
}

/// Named event-time timer operation, applied with its activation's state transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TimerOperation {
    /// Set (or move) the named timer to fire at `at_ms` event time.
    Set {
        /// Timer name, unique per key.
        name: String,
        /// Event time (ms) at which it fires.
        at_ms: i64,
    },
    /// Delete the named timer.
    Delete {
        /// Timer name.
        name: String,
    },
}

/// An input row or a named event-time timer callback.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessCallback {
    /// One input row (a one-row batch of the input schema).
    Input(RecordBatch),
    /// A timer fired.
    Timer {
        /// Its name.
        name: String,
        /// The time it was set for.
        at_ms: i64,
    },
}

/// One engine-assigned activation.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessActivation {
    /// Sequence number from the checkpointed operator sequence.
    pub id: u64,
    /// Canonical key encoding ([`crate::process::encode_key`]); never rehashed.
    pub key: Vec<u8>,
    /// The key's state before this activation.
    pub state: ValueState,
    /// The pipeline watermark at this activation.
    pub watermark: i64,
    /// What triggered it.
    pub callback: ProcessCallback,
}

/// Proposed result for one activation.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProcessActivationResult {
    /// The activation this answers.
    pub activation_id: u64,
    /// Output rows (the output schema), if any.
    pub output: Option<RecordBatch>,
    /// State transitions (at most the limit; usually zero or one).
    pub mutations: Vec<ValueMutation>,
    /// Timer operations.
    pub timers: Vec<TimerOperation>,
}

/// Trusted, synchronous native handler. A call contains at most one
/// activation per key; the handler must return one result per activation
/// (including ones producing nothing) and must not make one key's result
/// depend on other activations of the call. An error discards the call.
pub trait NativeProcessFunction: Send {
    /// Handle one call.
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String>;
}

impl NativeProcessFunction for Box<dyn NativeProcessFunction> {
    fn process(
        &mut self,
        activations: &[ProcessActivation],
    ) -> Result<Vec<ProcessActivationResult>, String> {
        (**self).process(activations)
    }
}
