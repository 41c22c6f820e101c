//! A remote Rust worker serving the fraud detector fixture (the same
//! handler `sluice run` has built in as `fraud_detector`) as the function
//! `remote_fraud`, over the Sluice remote protocol.
//!
//! ```text
//! cargo run -p sluice-remote --example remote_fraud_worker -- unix:/tmp/fraud.sock
//! ```
//!
//! An engine then declares the function with the same descriptor and the
//! runtime `RemoteRust`, and that endpoint (`Database::register_remote_process_function`).

use sluice_engine::process::benchmark::{descriptor, FraudDetector};
use sluice_engine::process::ProcessRuntime;
use sluice_remote::{RemoteEndpoint, Worker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoint: RemoteEndpoint = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "unix:/tmp/sluice-fraud.sock".into())
        .parse()?;
    let mut d = descriptor("remote_fraud");
    d.runtime = ProcessRuntime::RemoteRust;
    eprintln!(
        "serving '{}' (binding {}) on {endpoint}",
        d.name,
        d.binding_hash()
    );
    let worker = Worker::new(d, || FraudDetector {
        threshold: 1000,
        window_ms: 10_000,
    });
    worker
        .serve_until(&endpoint, async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}
