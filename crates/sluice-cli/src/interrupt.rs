//! The clean stop after SIGINT or SIGTERM: what happens to sink output
//! depends on the delivery mode, and the user is told which it was.
//!
//! - Checkpointing off: nothing is published. Sinks write to temporary
//!   files that become visible only when a run completes, so the stop
//!   discards them and no partial file appears under a final name.
//! - Exactly-once: a final checkpoint commits what was processed (sink
//!   epochs become visible with it), and a rerun on the same state
//!   directory resumes from it and ends with the bytes of an uninterrupted
//!   run.
//! - At-least-once with checkpoints: a final checkpoint records where the
//!   sources stood; the rows already appended to the sinks stay, and a
//!   rerun resumes from the checkpoint.

use sluice::{Database, Delivery, SinkOutput};

use crate::signals::{Signal, Signals};

/// Where the checkpoints a resumed run starts from are kept, which decides
/// what the user is told to do to resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// A local state directory (`--state-dir`).
    StateDir,
    /// A checkpoint store URL (`--state`).
    Store,
    /// The store of a cluster (`--cluster ... --state`): another node
    /// takes over as leader and resumes without the user.
    Cluster,
    /// One node of a static split (`--cluster ... --split`): its share
    /// waits for it, and the same node started again resumes it.
    SplitNode,
}

impl Resume {
    /// What resumes the run, ending with "resume" / "resumes" so that
    /// "from ..." can follow.
    fn how(self) -> &'static str {
        match self {
            Self::StateDir => "rerun with the same --state-dir to resume",
            Self::Store => "rerun with the same --state to resume",
            Self::Cluster => {
                "the next leader (a standby, or any node started again with the same \
                 --state) resumes"
            }
            Self::SplitNode => {
                "this node started again with the same --node-id, --split and --state resumes"
            }
        }
    }
}

/// Stop `db` after `signal` and report on stderr what became of the output.
/// An error of the stop itself (a final checkpoint that did not commit) is
/// printed too; the exit status stays the signal's either way.
pub async fn stop(db: &Database, signal: Signal, signals: &Signals, resume: Resume) {
    let sinks = db.sink_outputs().await;
    let delivery = db.checkpoint_delivery().await;
    // A signal while the script was still being declared: nothing ran.
    let started = db.status().await.is_some();
    let stopped = match delivery {
        None => db.abort().await,
        Some(_) => db.shutdown().await,
    };
    let checkpoint = match delivery {
        None => None,
        Some(_) => match db.checkpoints().await {
            Ok(list) => list.last().map(|c| c.id),
            Err(e) => {
                tracing::warn!(error = %e, "listing checkpoints after the stop");
                None
            }
        },
    };
    if let Err(e) = &stopped {
        signals.say(&format!("error[{}]: {e}", e.code()));
    }
    if !started {
        signals.say(&report_before_start(signal, delivery, resume));
        return;
    }
    signals.say(&report(
        signal,
        delivery,
        &sinks,
        checkpoint,
        stopped.is_ok(),
        resume,
    ));
}

/// The line that tells the user what the stop did to each sink's output.
pub fn report(
    signal: Signal,
    delivery: Option<Delivery>,
    sinks: &[SinkOutput],
    checkpoint: Option<u64>,
    clean: bool,
    resume: Resume,
) -> String {
    let name = signal.name();
    let how = resume.how();
    let sinks = sink_list(sinks);
    let at = match checkpoint {
        Some(id) => format!("checkpoint {id}"),
        None => "no committed checkpoint".to_string(),
    };
    match (delivery, clean) {
        (None, _) => format!(
            "{name}: stopped; checkpointing is off, so the output of {sinks} was discarded \
             and no sink file was published; a rerun starts over"
        ),
        (Some(Delivery::ExactlyOnce), true) => format!(
            "{name}: stopped at {at}; the output of {sinks} is exactly what it committed \
             (exactly_once); {how}"
        ),
        (Some(Delivery::AtLeastOnce), true) => format!(
            "{name}: stopped at {at}; the output delivered so far stays in {sinks} \
             (at_least_once); {how}"
        ),
        (Some(Delivery::ExactlyOnce), false) => format!(
            "{name}: stopped without a final checkpoint; output not committed by {at} \
             was discarded from {sinks} (exactly_once); {how} from it"
        ),
        (Some(Delivery::AtLeastOnce), false) => format!(
            "{name}: stopped without a final checkpoint; the output delivered so far \
             stays in {sinks} (at_least_once); {how} from {at} (rows after it may repeat)"
        ),
    }
}

/// The line for a signal that came before the pipeline started (while the
/// script was being declared): nothing was read, no output was written,
/// and any earlier run's checkpoints and output are as they were.
pub fn report_before_start(signal: Signal, delivery: Option<Delivery>, resume: Resume) -> String {
    let name = signal.name();
    match delivery {
        None => format!(
            "{name}: stopped before the pipeline started; nothing was read and no sink file \
             was written; a rerun starts over"
        ),
        Some(_) => format!(
            "{name}: stopped before the pipeline started; nothing was read and no sink \
             output was written; {}",
            resume.how()
        ),
    }
}

/// `sink 'a'`, `sinks 'a', 'b'`, or `no sink`.
fn sink_list(sinks: &[SinkOutput]) -> String {
    let names: Vec<String> = sinks.iter().map(|s| format!("'{}'", s.name)).collect();
    match names.len() {
        0 => "no sink".to_string(),
        1 => format!("sink {}", names[0]),
        _ => format!("sinks {}", names.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sinks(names: &[&str]) -> Vec<SinkOutput> {
        names
            .iter()
            .map(|n| SinkOutput {
                name: n.to_string(),
                path: format!("out/{n}.csv").into(),
            })
            .collect()
    }

    /// Every mode, clean or not, names the signal, the sinks and what a
    /// rerun does.
    #[test]
    fn every_mode_names_the_signal_the_sinks_and_the_rerun() {
        let modes = [
            None,
            Some(Delivery::AtLeastOnce),
            Some(Delivery::ExactlyOnce),
        ];
        let resumes = [
            (Resume::StateDir, "rerun with the same --state-dir"),
            (Resume::Store, "rerun with the same --state "),
            (Resume::Cluster, "the next leader"),
            (
                Resume::SplitNode,
                "this node started again with the same --node-id",
            ),
        ];
        for signal in [Signal::Interrupt, Signal::Terminate] {
            for delivery in modes {
                for clean in [true, false] {
                    for (resume, hint) in resumes {
                        let line = report(
                            signal,
                            delivery,
                            &sinks(&["a", "b"]),
                            Some(4),
                            clean,
                            resume,
                        );
                        assert!(line.starts_with(signal.name()), "{line}");
                        assert!(line.contains("sinks 'a', 'b'"), "{line}");
                        if delivery.is_some() {
                            assert!(line.contains("checkpoint 4"), "{line}");
                            assert!(line.contains(hint), "{resume:?}: {line}");
                            assert!(line.contains("resume"), "{line}");
                        } else {
                            assert!(line.contains("discarded"), "{line}");
                            assert!(line.contains("a rerun starts over"), "{line}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn a_signal_before_the_start_says_nothing_ran_in_every_mode() {
        assert_eq!(
            report_before_start(Signal::Terminate, None, Resume::StateDir),
            "SIGTERM: stopped before the pipeline started; nothing was read and no sink file \
             was written; a rerun starts over"
        );
        for delivery in [Delivery::AtLeastOnce, Delivery::ExactlyOnce] {
            assert_eq!(
                report_before_start(Signal::Interrupt, Some(delivery), Resume::Store),
                "SIGINT: stopped before the pipeline started; nothing was read and no sink \
                 output was written; rerun with the same --state to resume"
            );
        }
    }

    #[test]
    fn exact_lines() {
        assert_eq!(
            report(
                Signal::Terminate,
                None,
                &sinks(&["a"]),
                None,
                true,
                Resume::StateDir
            ),
            "SIGTERM: stopped; checkpointing is off, so the output of sink 'a' was discarded \
             and no sink file was published; a rerun starts over"
        );
        assert_eq!(
            report(
                Signal::Interrupt,
                Some(Delivery::ExactlyOnce),
                &sinks(&["a", "b"]),
                Some(12),
                true,
                Resume::StateDir
            ),
            "SIGINT: stopped at checkpoint 12; the output of sinks 'a', 'b' is exactly what it \
             committed (exactly_once); rerun with the same --state-dir to resume"
        );
        assert_eq!(
            report(
                Signal::Terminate,
                Some(Delivery::AtLeastOnce),
                &sinks(&["a"]),
                Some(3),
                false,
                Resume::Cluster
            ),
            "SIGTERM: stopped without a final checkpoint; the output delivered so far stays in \
             sink 'a' (at_least_once); the next leader (a standby, or any node started again \
             with the same --state) resumes from checkpoint 3 (rows after it may repeat)"
        );
    }
}
