//! The disposition of every failure: each stage a [`CycleError`] can have,
//! with every [`EngineError`] variant inside, under each checkpoint mode.

use std::sync::Arc;

use super::*;

/// One error of every variant. [`variant`] matches without a wildcard, so
/// a new variant does not compile until it is listed here too.
fn every_engine_error() -> Vec<EngineError> {
    let io = || std::io::Error::other("disk gone");
    vec![
        EngineError::Sql(sluice_sql::SqlError::Syntax("x".into())),
        EngineError::Connector(sluice_connectors::ConnectorError::Malformed {
            file: "in.csv".into(),
            line: 3,
            column: "v".into(),
            message: "not a number".into(),
        }),
        EngineError::Catalog("no such".into()),
        EngineError::Worker {
            code: "SLC-RMT-003",
            source: Box::new(std::io::Error::other("worker gone")),
        },
        EngineError::Cluster {
            code: "SLC-CLU-002",
            source: Box::new(std::io::Error::other("etcd unreachable")),
        },
        EngineError::Schema("bad shape".into()),
        EngineError::Option("bad".into()),
        EngineError::exec("op", datafusion::error::DataFusionError::Plan("p".into())),
        EngineError::halted(Arc::new(EngineError::Internal("h".into()))),
        EngineError::fault(Arc::new(EngineError::Internal("f".into()))),
        EngineError::Internal("i".into()).context("stream 's'"),
        EngineError::Shared(Arc::new(EngineError::Internal("s".into()))),
        EngineError::Panicked("sink 'k' panicked: boom".into()),
        EngineError::Injected("injected".into()),
        EngineError::SubscriberLagged,
        EngineError::Checkpoint("alignment timed out".into()),
        EngineError::CheckpointFailed {
            source: Box::new(std::io::Error::other("tail worker gone")),
        },
        EngineError::Storage(sluice_storage::StorageError::Io {
            path: "state".into(),
            source: io(),
        }),
        EngineError::Shuffle(sluice_shuffle::ShuffleError::UnknownChannel {
            detail: "edge 's#0' expects no channel from node 'n9'".into(),
        }),
        EngineError::NotRunning,
        EngineError::Sealed("sealed".into()),
        EngineError::Process(crate::process::ProcessError {
            function: "f".into(),
            version: 1,
            key: "-".into(),
            reason: "limit".into(),
        }),
        EngineError::Conflict("two sinks".into()),
        EngineError::Overflow(sluice_sql::checked::ArithmeticOverflow {
            column: None,
            detail: "1 + 1".into(),
        }),
        EngineError::CoordinatorPanicked("loop".into()),
        EngineError::Lookup(sluice_connectors::LookupError::failed(
            "dim",
            std::io::Error::other("refused"),
        )),
    ]
}

fn variant(e: &EngineError) -> &'static str {
    match e {
        EngineError::Sql(_) => "Sql",
        EngineError::Connector(_) => "Connector",
        EngineError::Lookup(_) => "Lookup",
        EngineError::Catalog(_) => "Catalog",
        EngineError::Worker { .. } => "Worker",
        EngineError::Cluster { .. } => "Cluster",
        EngineError::Schema(_) => "Schema",
        EngineError::Option(_) => "Option",
        EngineError::Execution { .. } => "Execution",
        EngineError::Halted { .. } => "Halted",
        EngineError::Fault { .. } => "Fault",
        EngineError::Context { .. } => "Context",
        EngineError::Shared(_) => "Shared",
        EngineError::Panicked(_) => "Panicked",
        EngineError::Injected(_) => "Injected",
        EngineError::SubscriberLagged => "SubscriberLagged",
        EngineError::Checkpoint(_) => "Checkpoint",
        EngineError::CheckpointFailed { .. } => "CheckpointFailed",
        EngineError::Storage(_) => "Storage",
        EngineError::Shuffle(_) => "Shuffle",
        EngineError::NotRunning => "NotRunning",
        EngineError::Sealed(_) => "Sealed",
        EngineError::Process(_) => "Process",
        EngineError::Conflict(_) => "Conflict",
        EngineError::Overflow(_) => "Overflow",
        EngineError::Internal(_) => "Internal",
        EngineError::CoordinatorPanicked(_) => "CoordinatorPanicked",
    }
}

/// Every stage, wrapping `e`.
fn every_stage(e: impl Fn() -> EngineError) -> Vec<(&'static str, CycleError)> {
    vec![
        ("Source", CycleError::Source(e())),
        ("Execution", CycleError::Execution(e())),
        ("Process", CycleError::Process(e())),
        ("Output", CycleError::Output(e())),
        ("Panicked", CycleError::Panicked(e())),
        ("Checkpoint", CycleError::Checkpoint(e())),
        ("CheckpointAborted", CycleError::CheckpointAborted(e())),
        ("Fenced", CycleError::Fenced(e())),
        ("AfterDurable", CycleError::AfterDurable(e())),
        ("FollowerState", CycleError::FollowerState(e())),
        ("Startup", CycleError::Startup(e())),
        ("Control", CycleError::Control(e())),
    ]
}

/// The table the coordinator follows: (stage, off, at-least-once, exactly-once).
const TABLE: [(&str, Disposition, Disposition, Disposition); 12] = {
    use Disposition::{Fault, Halt, Refuse};
    [
        ("Source", Halt, Halt, Halt),
        ("Execution", Halt, Fault, Fault),
        ("Process", Halt, Fault, Fault),
        ("Output", Halt, Fault, Fault),
        ("Panicked", Halt, Fault, Fault),
        ("Checkpoint", Refuse, Refuse, Fault),
        ("CheckpointAborted", Refuse, Refuse, Refuse),
        ("Fenced", Halt, Halt, Halt),
        ("AfterDurable", Fault, Fault, Fault),
        ("FollowerState", Fault, Fault, Fault),
        ("Startup", Halt, Halt, Halt),
        ("Control", Refuse, Refuse, Refuse),
    ]
};

#[test]
fn every_stage_and_every_error_has_the_disposition_of_its_stage() {
    let errors = every_engine_error();
    let mut names: Vec<&str> = errors.iter().map(variant).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), errors.len(), "one error per variant");
    let modes = [
        None,
        Some(Delivery::AtLeastOnce),
        Some(Delivery::ExactlyOnce),
    ];
    for (i, held) in errors.iter().enumerate() {
        let stages = every_stage(|| {
            // A fresh error of the same variant for each stage.
            every_engine_error().swap_remove(i)
        });
        assert_eq!(stages.len(), TABLE.len());
        for ((stage, error), (row, off, alo, eo)) in stages.iter().zip(TABLE) {
            assert_eq!(*stage, row);
            let got: Vec<Disposition> = modes.iter().map(|m| disposition(error, *m)).collect();
            assert_eq!(
                got,
                vec![off, alo, eo],
                "{stage} stage holding {}",
                variant(held)
            );
        }
    }
}

#[test]
fn the_error_told_keeps_its_code_through_every_stage() {
    for (stage, e) in every_stage(|| {
        EngineError::Connector(sluice_connectors::ConnectorError::Malformed {
            file: "in.csv".into(),
            line: 3,
            column: "v".into(),
            message: "not a number".into(),
        })
        .context("source 'events'")
    }) {
        let told = e.into_error();
        assert_eq!(told.code(), "SLC-CONN-002", "{stage}");
        let halted = EngineError::halted(Arc::new(told));
        assert_eq!(halted.code(), "SLC-CONN-002", "{stage}");
        assert!(
            halted.to_string().starts_with("pipeline halted: "),
            "{halted}"
        );
        assert!(
            halted.to_string().contains("source 'events': in.csv"),
            "{halted}"
        );
    }
    let output = CycleError::Output(EngineError::Internal("x".into())).into_error();
    assert_eq!(output.to_string(), "output: internal error: x");
    assert_eq!(output.code(), "SLC-ENG-007");
}

#[test]
fn a_status_reports_panics_before_halts_before_faults() {
    let cause = || Arc::new(EngineError::Catalog("c".into()));
    let mut s = PipelineStatus {
        fault: Some(cause()),
        ..Default::default()
    };
    assert!(matches!(s.error(), Some(EngineError::Fault { .. })));
    s.halted = Some(cause());
    assert!(matches!(s.error(), Some(EngineError::Halted { .. })));
    s.panicked = Some(Arc::new(EngineError::CoordinatorPanicked("p".into())));
    let e = s.error().map(|e| (e.code(), e.to_string()));
    assert_eq!(
        e,
        Some((
            "SLC-ENG-014",
            "the pipeline's coordinator thread panicked (p); reopen the database to recover \
             from the last checkpoint"
                .to_string()
        ))
    );
}
