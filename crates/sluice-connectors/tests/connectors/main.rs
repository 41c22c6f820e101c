//! Integration tests for sluice-connectors (one test binary, split by
//! concern into modules).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod epoch_sink;
mod support;

mod csv_property;
mod csv_source;
mod fuzz_corpus;
mod fuzz_inputs;
mod fuzz_structured;
mod handover;
mod json_source;
mod limits;
mod parquet_source;
mod quoting;
mod reader;
mod resume_checks;
mod shares;
mod sink;
