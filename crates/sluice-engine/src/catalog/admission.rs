//! Which process-function pipelines a delivery guarantee admits, checked
//! when a checkpointed pipeline starts.
//!
//! Replay after a crash must hand every handler the same activations in the
//! same order, with the same ids. That holds only when:
//!
//! * delivery is at-least-once: exactly-once delivery of process functions
//!   is unsupported, because a handler's output cannot be rolled back;
//! * the handler is reviewed as [`ProcessDeterminism::ReplaySafe`];
//! * it runs natively, as a remote Rust worker, or as a Python worker that
//!   the engine supervises in its sandbox (an unprivileged worker in a
//!   read-only root: the only kind of Python the engine runs, so any
//!   registered Python function qualifies);
//! * the pipeline has exactly one source, which is replayable and cuts its
//!   input into the same batches every time (the file and Nexmark
//!   connectors do): the pipeline watermark of a merge of independent
//!   channels depends on their interleaving, so a merge is refused;
//! * the function reads that source directly or through filters and
//!   projections, so each input batch (and the watermark after it) maps to
//!   one source batch.
//!
//! In a checkpointed split whose rows cross between nodes, each node reads
//! its share of that one source, and a function's input merges its own
//! node's batches with the rows the other nodes send, interleaved
//! differently on every run. The function is admitted there under the same
//! rules because it runs its input only once the checkpoint that cut it
//! has committed (`process/commit_gate.rs`), which replays exactly.

use super::{Catalog, StreamKind};
use crate::error::ProcessError;
use crate::options::Delivery;
use crate::process::{ProcessDeterminism, ProcessFunctionInfo, ProcessRuntime};

fn refuse(info: &ProcessFunctionInfo, reason: String) -> ProcessError {
    ProcessError {
        function: info.descriptor.name.clone(),
        version: info.descriptor.version,
        key: "-".into(),
        reason: format!("bound as '{}': {reason}", info.output),
    }
}

/// Admit every bound process function of `catalog` under `delivery`.
pub fn admit(catalog: &Catalog, delivery: Delivery) -> Result<(), ProcessError> {
    for stream in &catalog.streams {
        let StreamKind::Process(info) = &stream.kind else {
            continue;
        };
        admit_one(catalog, info, delivery)?;
    }
    Ok(())
}

fn admit_one(
    catalog: &Catalog,
    info: &ProcessFunctionInfo,
    delivery: Delivery,
) -> Result<(), ProcessError> {
    let d = &info.descriptor;
    if delivery == Delivery::ExactlyOnce {
        return Err(refuse(
            info,
            "exactly-once delivery of process functions is unsupported; use delivery = 'at_least_once'".into(),
        ));
    }
    if d.determinism != ProcessDeterminism::ReplaySafe {
        return Err(refuse(
            info,
            "at-least-once delivery replays activations after a crash, which needs determinism ReplaySafe; this function is declared NonDeterministic".into(),
        ));
    }
    // Every runtime qualifies: native and remote Rust are trusted, and a
    // Python function only ever runs supervised in the engine's sandbox.
    match d.runtime {
        ProcessRuntime::Native | ProcessRuntime::RemoteRust | ProcessRuntime::Python(_) => {}
    }
    let sources: Vec<&str> = catalog.sources.iter().map(|s| s.name.as_str()).collect();
    let [only] = sources.as_slice() else {
        let has = match sources.len() {
            0 => "none".to_string(),
            n => format!("{n} ({})", sources.join(", ")),
        };
        return Err(refuse(
            info,
            format!(
                "at-least-once replay needs exactly one replayable source, but the pipeline has {has}; a merge of independent channels cannot be replayed in the same order"
            ),
        ));
    };
    if catalog
        .sources
        .iter()
        .any(|s| s.name == *only && !s.is_replayable())
    {
        return Err(refuse(
            info,
            format!("source '{only}' is a push source, which cannot replay its batches after a crash; read it from a file or generator connector"),
        ));
    }
    match catalog.batchwise_origin(&info.input) {
        Some(origin) if origin == *only => Ok(()),
        _ => Err(refuse(
            info,
            format!(
                "its input '{}' is not read batch by batch from source '{only}' (only filters and projections may sit in between; aggregates, unions and other process functions regroup batches)",
                info.input
            ),
        )),
    }
}

/// Admit the whole pipeline under `delivery` when checkpointing is on:
/// every bound process function (see [`admit`]) and, for exactly-once,
/// every source (it must replay) and sink (it must commit epochs). Checked
/// when the pipeline starts and again for every DDL statement while a
/// checkpointed pipeline runs, so a statement cannot break the guarantee
/// the running pipeline was admitted under.
pub fn admit_delivery(catalog: &Catalog, delivery: Delivery) -> crate::Result<()> {
    admit(catalog, delivery)?;
    if delivery != Delivery::ExactlyOnce {
        return Ok(());
    }
    for s in &catalog.sources {
        if !s.is_replayable() {
            return Err(crate::EngineError::Option(format!(
                "delivery = 'exactly_once' needs replayable sources, but source '{}' is a push source and cannot replay after a crash; use delivery = 'at_least_once'",
                s.name
            )));
        }
    }
    for s in &catalog.sinks {
        let crate::catalog::SinkConnector::File { format, .. } = &s.connector;
        if *format == sluice_connectors::FileFormat::Parquet {
            return Err(crate::EngineError::Option(format!(
                "delivery = 'exactly_once' needs transactional sinks, but sink '{}' writes parquet, which cannot commit epochs; use format = 'csv' or 'json'",
                s.name
            )));
        }
    }
    Ok(())
}
