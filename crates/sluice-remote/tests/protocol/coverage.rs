//! Every stable code of `sluice_remote::error::CODES` is produced by at
//! least one scenario of these tests: the table names the scenario, and the
//! test runs each one and checks the code it observes.

use sluice_remote::error::CODES;
use sluice_remote::{RemoteEndpoint, RemoteLimits, Worker};

use crate::common::*;
use crate::{engine, handshake};

fn endpoint(text: &str) -> Outcome {
    let e = text.parse::<RemoteEndpoint>().unwrap_err();
    Outcome::new(e.code(), e.to_string())
}

/// A worker that cannot bind its socket (its directory does not exist).
fn worker_cannot_listen() -> Outcome {
    block(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("w.sock");
        let e = Worker::new(descriptor(), handler)
            .limits(RemoteLimits::default())
            .serve(&RemoteEndpoint::Unix(path))
            .await
            .unwrap_err();
        Outcome::new(e.code(), e.to_string())
    })
}

/// A Python deployment whose package directory does not exist.
fn python_package_missing() -> Outcome {
    let d = sluice_remote::PythonDeployment::new("/nonexistent/package", "m:C");
    let e = sluice_remote::python::prepare(descriptor(), &d)
        .err()
        .unwrap();
    Outcome::new(e.code(), e.to_string())
}

/// No bubblewrap on the search path.
fn no_sandbox() -> Outcome {
    let interpreter = sluice_remote::python::interpreter::Interpreter {
        executable: "/usr/bin/python3".into(),
        description: "CPython 3".into(),
        sdk: "0.1.0".into(),
        read_paths: vec![],
    };
    let e = sluice_remote::python::sandbox::Sandbox::locate_in(
        Some("/nonexistent".into()),
        &interpreter,
    )
    .err()
    .unwrap();
    Outcome::new(e.code(), e.to_string())
}

/// A supervised worker that exits at once, before it is ready.
fn worker_never_ready() -> Outcome {
    use sluice_remote::python::supervisor::{Supervisor, SupervisorConfig};
    let s = Supervisor::start(SupervisorConfig {
        function: "f".into(),
        launch: Box::new(|| {
            let mut c = std::process::Command::new("sh");
            c.args(["-c", "echo 'cannot start' >&2; exit 3"]);
            c
        }),
        startup_timeout: std::time::Duration::from_secs(5),
        max_backoff: std::time::Duration::from_secs(1),
    })
    .unwrap();
    let e = s.wait_ready(std::time::Duration::from_secs(5)).unwrap_err();
    Outcome::new(e.code(), e.to_string())
}

type Scenario = (&'static str, &'static str, fn() -> Outcome);

const SCENARIOS: &[Scenario] = &[
    ("SLC-RMT-001", "endpoint: a host name", || {
        endpoint("localhost:9000")
    }),
    ("SLC-RMT-002", "endpoint: not loopback", || {
        endpoint("tcp://10.0.0.1:9000")
    }),
    (
        "SLC-RMT-003",
        "engine::an_unreachable_worker_cannot_be_reached",
        engine::unreachable_worker,
    ),
    (
        "SLC-RMT-004",
        "handshake::no_common_version_is_refused_naming_both_ranges",
        || handshake::versions(2, 3),
    ),
    (
        "SLC-RMT-005",
        "handshake::a_binding_that_differs_in_any_field_is_refused_naming_both",
        || handshake::wrong_binding(|b| b.version = 2),
    ),
    (
        "SLC-RMT-006",
        "engine::a_refusal_is_reported_with_the_workers_code_and_message",
        engine::refusal,
    ),
    (
        "SLC-RMT-007",
        "handshake::a_call_beyond_the_calls_in_flight_fails_at_once",
        handshake::calls_in_flight,
    ),
    (
        "SLC-RMT-007",
        "handshake::more_activations_than_the_function_allows_fail_before_decoding",
        || handshake::too_many_activations(true),
    ),
    (
        "SLC-RMT-008",
        "handshake::a_handler_slower_than_the_deadline_fails_with_the_shorter_deadline",
        || handshake::worker_deadline(100, 5_000),
    ),
    (
        "SLC-RMT-008",
        "engine::a_worker_that_never_answers_fails_the_call_at_the_engines_deadline",
        engine::no_answer,
    ),
    (
        "SLC-RMT-009",
        "handshake::a_declared_activation_count_that_disagrees_with_the_payload_is_malformed",
        || handshake::count_disagrees(1, 2),
    ),
    (
        "SLC-RMT-010",
        "handshake::garbage_activations_are_an_ipc_error",
        || handshake::bad_payload(b"garbage".to_vec()),
    ),
    (
        "SLC-RMT-011",
        "handshake::a_handler_error_or_panic_is_a_worker_failure_with_its_message",
        || handshake::handler_fails(handshake::Mode::Panic),
    ),
    (
        "SLC-RMT-012",
        "engine::a_worker_that_closes_the_stream_mid_call_ends_the_session",
        engine::closed_mid_call,
    ),
    (
        "SLC-RMT-013",
        "handshake::a_call_with_another_generation_fails_and_the_session_goes_on",
        handshake::stale_generation,
    ),
    (
        "SLC-RMT-013",
        "handshake::a_call_before_hello_is_a_protocol_violation",
        handshake::call_before_hello,
    ),
    (
        "SLC-RMT-014",
        "a worker that cannot listen",
        worker_cannot_listen,
    ),
    (
        "SLC-RMT-015",
        "a python package that does not exist",
        python_package_missing,
    ),
    ("SLC-RMT-016", "no bubblewrap", no_sandbox),
    (
        "SLC-RMT-017",
        "a python worker that exits before it is ready",
        worker_never_ready,
    ),
];

#[test]
fn every_code_is_produced_by_a_scenario() {
    for (code, name, _) in SCENARIOS {
        assert!(CODES.contains(code), "{name} claims {code}, not a code");
    }
    for code in CODES {
        let scenarios: Vec<_> = SCENARIOS.iter().filter(|s| s.0 == code).collect();
        assert!(!scenarios.is_empty(), "no scenario produces {code}");
        for (_, name, run) in scenarios {
            let o = run();
            assert_eq!(o.code, code, "{name}: {o:?}");
            assert!(!o.message.is_empty(), "{name}");
        }
    }
}
