//! Keyed process functions with engine-owned state and timers.
//!
//! The engine owns every value and timer. A handler receives immutable
//! [`ProcessActivation`] snapshots and returns a proposed
//! [`ProcessActivationResult`] per activation; the engine validates the
//! complete response of a call against the function's
//! [`ProcessFunctionLimits`] before applying any of it, so a rejected call
//! changes nothing.
//!
//! * [`keyed`] owns state, timers, the activation sequence and the ordering
//!   rules; the pipeline [`ProcessOperator`] and the
//!   [`ProcessFunctionTestHarness`] both drive handlers through it.
//! * [`key`] documents the canonical key encoding (a stable byte format).
//! * [`placement`] places keys on vnodes and numbers a placed processor's
//!   activations per vnode (the cluster execution hooks).
//! * `commit_gate` holds a function's input in a checkpointed split whose
//!   rows cross between nodes until the checkpoint that cut it commits,
//!   which is what makes its replay exact there; `operator_state` reads a
//!   function's checkpoint part back, and moves its keys and held input
//!   with their vnodes.
//! * [`admission`] holds the delivery-guarantee rules checked at start.

pub mod benchmark;
mod capture;
mod commit_gate;
mod harness;
pub use crate::partition::key;
pub mod keyed;
mod operator;
pub use crate::partition::placement;
mod types;
mod validate;

pub use harness::ProcessFunctionTestHarness;
pub use key::{decode_int64_key, encode_key, encode_keys};
pub use keyed::{KeyedProcessor, LoggedActivation, ProcessSnapshot};
pub use operator::{input_projection, ProcessOperator};
pub use placement::VnodePlacement;
pub use types::{
    NativeProcessFunction, ProcessActivation, ProcessActivationResult, ProcessCallback,
    ProcessDeterminism, ProcessFunctionDescriptor, ProcessFunctionInfo, ProcessFunctionLimits,
    ProcessRuntime, PythonEnvironmentBinding, TimerOperation, ValueMutation, ValueState,
};
pub use validate::{validate_call, ProcessError};
