//! Process functions in pipelines: binding from SQL and Rust, downstream
//! consumption, ordering independent of cycle cuts (against the test
//! harness as oracle), admission, and the error policy.

mod admission;
mod binding;
mod common;
mod ordering;
mod policy;
mod python;
mod remote;
