//! Payload encodings: activations and results as Arrow record batches, and
//! each batch as one bounded Arrow IPC stream.

pub mod activations;
pub mod ipc;
pub mod results;
