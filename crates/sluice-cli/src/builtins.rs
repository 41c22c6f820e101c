//! Native process functions that every `sluice run` script can bind with
//! `CREATE STREAM out AS PROCESS <name> FROM <input>`: the fixtures of
//! `sluice::process::benchmark`. Each reads the columns `key BIGINT` and
//! `amount BIGINT` of its input and is keyed by `key`. Programs that link
//! Sluice register their own functions with
//! `Database::register_process_function`.

use sluice::process::benchmark::{
    activation_log_descriptor, descriptor, ActivationLog, FraudDetector, KeyedCounter,
};
use sluice::Database;

use crate::error::CliError;

/// Register the built-in functions on `db`.
pub async fn register(db: &Database) -> Result<(), CliError> {
    db.register_process_function(descriptor("keyed_counter"), || KeyedCounter)
        .await?;
    db.register_process_function(descriptor("fraud_detector"), || FraudDetector {
        threshold: 1000,
        window_ms: 10_000,
    })
    .await?;
    db.register_process_function(activation_log_descriptor("activation_log"), || {
        ActivationLog { window_ms: 1_000 }
    })
    .await?;
    Ok(())
}
