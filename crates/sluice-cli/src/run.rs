//! `sluice run`: execute a script, run its file sources to the end, publish its sinks.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use sluice::arrow::record_batch::RecordBatch;
use sluice::arrow::util::pretty::pretty_format_batches;
use sluice::{Database, DatabaseBuilder, MetricsSnapshot};

use crate::error::CliError;
use crate::interrupt::Resume;
use crate::progress::{ProgressSlot, REFRESH};
use crate::signals::{Signal, Signals};
use crate::RunArgs;

/// Backoff before the first recovery, unless `--set restart_backoff=...`.
const RECOVERY_BACKOFF: &str = "10ms";

/// How `sluice run` ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// Every source was read to its end and the sinks were published.
    Completed,
    /// A signal stopped the run (cleanly; see [`crate::interrupt`]).
    Signalled(Signal),
}

/// Run the script named by `args`. On failure the database is still shut
/// down, so a halted pipeline discards its sink output. A consistency fault
/// (for example a checkpoint that failed under exactly-once delivery) is
/// recovered from inside the database, which restarts from its last
/// committed checkpoint up to `restart_budget` times (3, the database's
/// default, unless set).
/// SIGINT and SIGTERM stop the run cleanly at any point; a second one
/// aborts at once.
pub async fn run(args: RunArgs, progress: &ProgressSlot) -> Result<RunEnd, CliError> {
    let signals = Signals::install(progress)?;
    let started = Instant::now();
    let text = read_script(&args)?;
    // The process ends with this run: its state is left to the exit.
    let db = builder(&args)?.exits_after_shutdown().open().await?;
    crate::builtins::register(&db).await?;
    // The signal wins over a run that finishes at the same moment: the
    // stop it asks for is then a clean stop of a finished pipeline.
    let ran = tokio::select! {
        biased;
        signal = signals.first() => Err(signal),
        r = execute_and_run(&db, &text, progress, &signals) => Ok(r),
    };
    let outcome = match ran {
        Err(signal) => {
            // Checkpoints go to `--state` when both are given.
            let resume = if args.state.is_some() {
                Resume::Store
            } else {
                Resume::StateDir
            };
            crate::interrupt::stop(&db, signal, &signals, resume).await;
            return Ok(RunEnd::Signalled(signal));
        }
        Ok(Ok(cpu_at_start)) => db
            .shutdown()
            .await
            .map(|metrics| (metrics, process_cpu_secs() - cpu_at_start))
            .map_err(CliError::from),
        Ok(Err(e)) => Err(e),
    };
    match outcome {
        Ok((metrics, cpu)) => {
            print_summary(&metrics, started.elapsed().as_secs_f64(), cpu)?;
            // A signal that came while the finished run published its
            // sinks found nothing left to stop.
            Ok(match signals.received() {
                Some(signal) => {
                    signals.say(&format!(
                        "{}: the run had already finished; its output was published",
                        signal.name()
                    ));
                    RunEnd::Signalled(signal)
                }
                None => RunEnd::Completed,
            })
        }
        Err(e) => {
            if let Err(shutdown) = db.abort().await {
                // Usually the same halt reported a second time.
                tracing::debug!(error = %shutdown, "shutdown after a failure");
            }
            let is_fault = matches!(&e, CliError::Sluice(sluice::Error::Fault { .. }));
            let recoveries = db.restarts().await;
            // Say that recovery was tried, so "recover from the last
            // checkpoint" does not read as advice still to follow.
            Err(match e {
                CliError::Sluice(source) if is_fault && recoveries > 0 => {
                    CliError::Unrecovered { recoveries, source }
                }
                e => e,
            })
        }
    }
}

/// The script's text.
pub(crate) fn read_script(args: &RunArgs) -> Result<String, CliError> {
    std::fs::read_to_string(&args.file)
        .map_err(|e| CliError::io(format!("cannot read {}", args.file.display()), e))
}

/// The database as `args` describe it: base directory, restart backoff,
/// state directory or store, and every `--set`.
pub(crate) fn builder(args: &RunArgs) -> Result<DatabaseBuilder, CliError> {
    let options = parse_sets(&args.set)?;
    let mut builder = Database::builder()
        .base_dir(script_dir(&args.file))
        .set("restart_backoff", RECOVERY_BACKOFF)?;
    if let Some(dir) = &args.state_dir {
        builder = builder.state_dir(dir);
    }
    if let Some(url) = &args.state {
        builder = builder.set("checkpoint_store", url)?;
    }
    for (name, value) in &options {
        builder = builder.set(name, value)?;
    }
    Ok(builder)
}

/// `--set name=value` pairs, in order.
fn parse_sets(sets: &[String]) -> Result<Vec<(String, String)>, CliError> {
    sets.iter()
        .map(|s| match s.split_once('=') {
            Some((name, value)) if !name.trim().is_empty() => {
                Ok((name.trim().to_string(), value.trim().to_string()))
            }
            _ => Err(CliError::usage(format!(
                "--set '{s}': expected name=value, e.g. --set batch_size=1024"
            ))),
        })
        .collect()
}

/// The directory relative connector paths resolve against.
fn script_dir(file: &Path) -> PathBuf {
    match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Execute the script and run the pipeline to its end; returns the process
/// CPU time at which the pipeline started (the script executed).
async fn execute_and_run(
    db: &Database,
    text: &str,
    progress: &ProgressSlot,
    signals: &Signals,
) -> Result<f64, CliError> {
    execute_script(db, text).await?;
    run_to_end(db, progress, signals).await
}

/// Execute the script, print what its statements return, and seal it: the
/// script is the whole pipeline, so file sources may skip the columns no
/// statement reads. Refused when a source has no connector.
pub(crate) async fn execute_script(db: &Database, text: &str) -> Result<(), CliError> {
    let rows = db.execute(text).await?;
    print_tables(&rows)?;
    if let Some(name) = db.push_sources().await.into_iter().next() {
        return Err(CliError::script(format!(
            "source '{name}' has no connector; `sluice run` needs file sources \
             (add WITH (connector = 'file', path = '...', format = 'csv'))"
        )));
    }
    db.seal().await;
    Ok(())
}

/// Run the executed script's pipeline to its end, showing progress;
/// returns the process CPU time at which it started.
pub(crate) async fn run_to_end(
    db: &Database,
    progress: &ProgressSlot,
    signals: &Signals,
) -> Result<f64, CliError> {
    signals.watch_sinks(
        db.sink_outputs()
            .await
            .into_iter()
            .map(|s| s.path)
            .collect(),
    );
    let cpu_at_start = process_cpu_secs();
    let spinner = progress.start();
    let run = db.run_to_completion();
    tokio::pin!(run);
    let mut ticker = tokio::time::interval(REFRESH);
    let result = loop {
        tokio::select! {
            r = &mut run => break r,
            _ = ticker.tick() => spinner.update(&db.metrics()),
        }
    };
    drop(spinner);
    result?;
    Ok(cpu_at_start)
}

/// CPU seconds this process has used so far, all threads (exited ones
/// included).
pub(crate) fn process_cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// Print statement results (SHOW, DESCRIBE, EXPLAIN, SELECT) as tables,
/// one table per run of batches with the same columns.
pub(crate) fn print_tables(batches: &[RecordBatch]) -> Result<(), CliError> {
    if batches.is_empty() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    let mut start = 0;
    while start < batches.len() {
        let schema = batches[start].schema();
        let len = batches[start..]
            .iter()
            .take_while(|b| b.schema() == schema)
            .count();
        let table = pretty_format_batches(&batches[start..start + len])
            .map_err(|e| CliError::Sluice(e.into()))?;
        writeln!(out, "{table}").map_err(|e| CliError::io("writing to stdout", e))?;
        start += len;
    }
    out.flush()
        .map_err(|e| CliError::io("writing to stdout", e))
}

/// The last line of a run: rows, wall seconds of the whole run, and the CPU
/// seconds (all threads) of running the pipeline once the script was
/// executed.
pub(crate) fn print_summary(m: &MetricsSnapshot, secs: f64, cpu: f64) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "sluice: {} rows in, {} rows out, {} late rows dropped, {secs:.3}s, {cpu:.3}s CPU",
        m.rows_in(),
        m.rows_emitted(),
        m.late_rows()
    )
    .and_then(|()| match shuffle_summary(m) {
        // A node of a shuffled split: what crossed between the nodes.
        Some(line) => writeln!(out, "{line}"),
        None => Ok(()),
    })
    .and_then(|()| out.flush())
    .map_err(|e| CliError::io("writing to stdout", e))
}

/// The second summary line of a node with exchanges: rows kept on this
/// node, rows sent to and received from the others, and the bytes sent
/// (Arrow IPC frames, watermarks and barriers), over every exchange.
fn shuffle_summary(m: &MetricsSnapshot) -> Option<String> {
    if m.exchanges.is_empty() {
        return None;
    }
    let (mut kept, mut sent, mut received, mut bytes) = (0, 0, 0, 0);
    for c in m.exchanges.values() {
        kept += c.rows_kept;
        sent += c.rows_sent;
        received += c.rows_received;
        bytes += c.bytes_sent;
    }
    Some(format!(
        "sluice: shuffle: {kept} rows kept, {sent} rows sent ({bytes} bytes), {received} rows received"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shuffle_line_sums_every_exchange_and_only_on_a_shuffled_node() {
        let mut m = MetricsSnapshot::default();
        assert_eq!(shuffle_summary(&m), None);
        for (edge, n) in [("a#0", 1), ("b#0", 10)] {
            let c = sluice::split::ExchangeCounters {
                rows_kept: n,
                rows_sent: 2 * n,
                rows_received: 3 * n,
                bytes_sent: 100 * n,
            };
            m.exchanges.insert(edge.to_string(), c);
        }
        assert_eq!(
            shuffle_summary(&m).as_deref(),
            Some("sluice: shuffle: 11 rows kept, 22 rows sent (1100 bytes), 33 rows received")
        );
    }

    #[test]
    fn set_pairs() {
        let ok = parse_sets(&["batch_size=10".into(), "idle_timeout = 1s".into()]);
        assert_eq!(
            ok.ok(),
            Some(vec![
                ("batch_size".to_string(), "10".to_string()),
                ("idle_timeout".to_string(), "1s".to_string())
            ])
        );
        let e = parse_sets(&["batch_size".into()])
            .err()
            .map(|e| e.to_string());
        assert!(e.is_some_and(|e| e.contains("--set 'batch_size'")));
        assert!(parse_sets(&["=3".into()]).is_err());
    }

    #[test]
    fn script_dir_of_bare_and_nested_files() {
        assert_eq!(script_dir(Path::new("q.sql")), PathBuf::from("."));
        assert_eq!(
            script_dir(Path::new("examples/q.sql")),
            PathBuf::from("examples")
        );
    }
}
