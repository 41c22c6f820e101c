//! Keyed process functions with engine-owned state and timers.
//!
//! The engine owns every value and timer. A handler receives immutable
//! [`ProcessActivation`] snapshots and returns a proposed
//! [`ProcessActivationResult`] per activation; the engine validates the
//! complete response of a call against the function's
//! [`ProcessFunctionLimits`] before applying any of it, so a rejected call
//! changes nothing. This first slice provides the contract, the canonical key
//! encoding, call validation and a test harness for native handlers; binding
//! functions into pipelines from SQL comes next.

pub mod benchmark;
mod harness;
mod key;
mod types;
mod validate;

pub use harness::ProcessFunctionTestHarness;
pub use key::encode_key;
pub use types::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionInfo, ProcessFunctionLimits,
    ProcessRuntime, PythonEnvironmentBinding, TimerOperation, ValueMutation, ValueState,
};
pub use validate::{validate_call, ProcessError};
