//! `CREATE PROCESS FUNCTION`: turning a SQL declaration into a descriptor
//! and a worker registration (Python or remote Rust), option by option.
//!
//! Every option is either used or refused by name: an option of the other
//! runtime says which runtime it belongs to, an unknown one lists the
//! known ones, and a bad value names the option and what it expects.

use std::time::Duration;

use sluice_engine::process::{
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionLimits, ProcessRuntime,
    ValueState,
};
use sluice_remote::{PythonDeployment, RemoteLimits};
use sluice_sql::{CreateProcessFunction, SqlError, WithOptions};

use super::Database;
use crate::Result;

/// Options every worker runtime takes.
pub const COMMON_OPTIONS: &[&str] = &[
    "runtime",
    "determinism",
    "initial_state",
    "max_activations_per_call",
    "max_output_rows_per_activation",
    "max_output_rows_per_call",
    "max_timers_per_key",
    "max_timer_name_len",
    "max_state_changes_per_activation",
    "call_deadline",
    "max_message_bytes",
];
/// Options of `runtime = 'python'`.
pub const PYTHON_OPTIONS: &[&str] = &[
    "path",
    "entry",
    "package",
    "package_version",
    "python",
    "startup_timeout",
    "health_interval",
];
/// Options of `runtime = 'remote_rust'`.
pub const REMOTE_OPTIONS: &[&str] = &["endpoint"];

fn bad(option: &str, expected: &str, found: &str) -> SqlError {
    SqlError::Option(format!(
        "option '{option}' must be {expected}, found '{found}'"
    ))
}

fn count(o: &mut WithOptions, key: &str, default: usize) -> std::result::Result<usize, SqlError> {
    o.take(key).map_or(Ok(default), |v| {
        v.parse()
            .map_err(|_| bad(key, "a non-negative integer", &v))
    })
}

fn duration(
    o: &mut WithOptions,
    key: &str,
    default: Duration,
) -> std::result::Result<Duration, SqlError> {
    o.take(key).map_or(Ok(default), |v| {
        humantime::parse_duration(&v)
            .map_err(|_| bad(key, "a duration such as '10s' or '500ms'", &v))
    })
}

/// What a declaration asks for.
pub(super) enum Declared {
    Python(ProcessFunctionDescriptor, PythonDeployment, RemoteLimits),
    Remote(ProcessFunctionDescriptor, String, RemoteLimits),
}

/// Check a declaration's options and build what registering it needs.
pub(super) fn declaration(f: CreateProcessFunction) -> std::result::Result<Declared, SqlError> {
    let context = format!("process function '{}'", f.name);
    let mut o = f.options;
    let runtime = o.require("runtime", &context)?;
    let (own, other, other_name): (&[&str], &[&str], &str) = match runtime.as_str() {
        "python" => (PYTHON_OPTIONS, REMOTE_OPTIONS, "remote_rust"),
        "remote_rust" => (REMOTE_OPTIONS, PYTHON_OPTIONS, "python"),
        "native" => {
            return Err(SqlError::Option(format!(
                "{context}: runtime 'native' handlers are Rust code registered with Database::register_process_function; SQL declares 'python' or 'remote_rust' functions"
            )))
        }
        r => return Err(bad("runtime", "'python' or 'remote_rust'", r)),
    };
    if let Some((k, _)) = o
        .entries()
        .iter()
        .find(|(k, _)| other.contains(&k.as_str()))
    {
        return Err(SqlError::Option(format!(
            "{context}: option '{k}' applies to runtime '{other_name}', not '{runtime}'"
        )));
    }
    let determinism = match o.take("determinism").as_deref() {
        None | Some("replay_safe") => ProcessDeterminism::ReplaySafe,
        Some("non_deterministic") => ProcessDeterminism::NonDeterministic,
        Some(v) => {
            return Err(bad(
                "determinism",
                "'replay_safe' or 'non_deterministic'",
                v,
            ))
        }
    };
    let initial_state = match o.take("initial_state").as_deref() {
        None | Some("absent") => None,
        Some("null") => Some(ValueState::Null),
        Some(v) => {
            Some(ValueState::Int64(v.parse().map_err(|_| {
                bad("initial_state", "'absent', 'null' or a BIGINT", v)
            })?))
        }
    };
    let d = ProcessFunctionLimits::default();
    let limits = ProcessFunctionLimits {
        max_activations_per_call: count(
            &mut o,
            "max_activations_per_call",
            d.max_activations_per_call,
        )?,
        max_output_rows_per_activation: count(
            &mut o,
            "max_output_rows_per_activation",
            d.max_output_rows_per_activation,
        )?,
        max_output_rows_per_call: count(
            &mut o,
            "max_output_rows_per_call",
            d.max_output_rows_per_call,
        )?,
        max_timers_per_key: count(&mut o, "max_timers_per_key", d.max_timers_per_key)?,
        max_timer_name_len: count(&mut o, "max_timer_name_len", d.max_timer_name_len)?,
        max_state_changes_per_activation: count(
            &mut o,
            "max_state_changes_per_activation",
            d.max_state_changes_per_activation,
        )?,
    };
    let r = RemoteLimits::default();
    let remote_limits = RemoteLimits {
        call_deadline: duration(&mut o, "call_deadline", r.call_deadline)?,
        max_message_bytes: count(&mut o, "max_message_bytes", r.max_message_bytes)?,
        ..r
    };
    let descriptor = ProcessFunctionDescriptor {
        name: f.name,
        version: f.version,
        input_schema: f.input,
        key_columns: f.key,
        output_schema: f.output,
        initial_state,
        limits,
        determinism,
        runtime: ProcessRuntime::RemoteRust,
    };
    let declared = if runtime == "python" {
        let mut deployment =
            PythonDeployment::new(o.require("path", &context)?, o.require("entry", &context)?);
        deployment.package = o.take("package");
        deployment.version = o.take("package_version");
        deployment.python = o.take("python").map(Into::into);
        deployment.startup_timeout =
            duration(&mut o, "startup_timeout", deployment.startup_timeout)?;
        deployment.health_interval =
            duration(&mut o, "health_interval", deployment.health_interval)?;
        Declared::Python(descriptor, deployment, remote_limits)
    } else {
        Declared::Remote(descriptor, o.require("endpoint", &context)?, remote_limits)
    };
    let known: Vec<&str> = COMMON_OPTIONS.iter().chain(own).copied().collect();
    o.finish(&context, &known)?;
    Ok(declared)
}

impl Database {
    /// Register what a `CREATE PROCESS FUNCTION` statement declares.
    pub(super) async fn declare_process_function(&self, f: CreateProcessFunction) -> Result<()> {
        match declaration(f)? {
            Declared::Python(d, mut deployment, limits) => {
                // A relative package path resolves like a connector's path.
                if let Some(base) = &self.inner.base_dir {
                    if deployment.path.is_relative() {
                        deployment.path = base.join(&deployment.path);
                    }
                }
                self.register_python_process_function_with(d, deployment, limits)
                    .await
            }
            Declared::Remote(d, endpoint, limits) => {
                self.register_remote_process_function_with(d, &endpoint, limits)
                    .await
            }
        }
    }
}
