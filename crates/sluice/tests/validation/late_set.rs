//! Late `SET`s: every pipeline option, set at every stage of the
//! pipeline's life, is either applied (the database reports the new value)
//! or refused with the exact code and the names of what it would not
//! reach. Before, `SET idle_timeout / batch_size / subscription_buffer`
//! were accepted and silently applied only to objects created afterwards.

use sluice::{Database, PipelineOptions};
use sluice_engine::options::{OptionKind, OptionSpec, PIPELINE_OPTION_SPECS};

use crate::LIMIT;

/// Where the pipeline is when the option is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing declared.
    Fresh,
    /// Nothing declared, sealed.
    SealedEmpty,
    /// A push source `p` and a file source `f`, both inheriting the defaults.
    Declared,
    /// Declared, and `p` subscribed to.
    Subscribed,
    /// Subscribed and started.
    Running,
    /// Shut down.
    Closed,
}

const STAGES: [Stage; 6] = [
    Stage::Fresh,
    Stage::SealedEmpty,
    Stage::Declared,
    Stage::Subscribed,
    Stage::Running,
    Stage::Closed,
];

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Applied,
    /// The code, and text the message must contain.
    Refused(&'static str, &'static [&'static str]),
}

/// What setting `name` at `stage` must do. A new option fails here until
/// someone decides when it is read.
fn expected(name: &str, stage: Stage) -> Outcome {
    use Outcome::{Applied, Refused};
    use Stage::*;
    const SIZES: &[&str] = &["sizes the pipeline and must be set before the first CREATE"];
    const IDLE: &[&str] = &[
        "option 'idle_timeout' is read when objects are created",
        "source 'p', source 'f', the running pipeline's idle check",
    ];
    const BATCH: &[&str] =
        &["option 'batch_size' is read when objects are created; it would not reach source 'f';"];
    const SEALED: &[&str] =
        &["is read when a source is created, and no source can be created after seal()"];
    const SUB: &[&str] = &[
        "is read when each subscription is made",
        "the subscriptions to 'p'",
    ];
    const START: &[&str] = &["is read when the pipeline starts; set it before start"];
    if stage == Closed {
        return Refused("SLC-ENG-006", &["pipeline is not running"]);
    }
    match (name, stage) {
        (
            "channel_capacity"
            | "max_batches_per_cycle"
            | "source_queue_bytes"
            | "sink_queue_bytes"
            | "process_held_input_bytes"
            | "watermark_max_drift",
            Declared | Subscribed | Running,
        ) => Refused("SLC-ENG-003", SIZES),
        (
            "channel_capacity"
            | "max_batches_per_cycle"
            | "source_queue_bytes"
            | "sink_queue_bytes"
            | "process_held_input_bytes"
            | "watermark_max_drift",
            _,
        ) => Applied,
        ("idle_timeout", Declared | Subscribed | Running) => Refused("SLC-ENG-003", IDLE),
        ("idle_timeout", SealedEmpty) => Refused("SLC-ENG-011", SEALED),
        ("batch_size", Declared | Subscribed | Running) => Refused("SLC-ENG-003", BATCH),
        ("batch_size", SealedEmpty) => Refused("SLC-ENG-011", SEALED),
        ("idle_timeout" | "batch_size", Fresh) => Applied,
        (
            "subscription_buffer" | "subscription_buffer_bytes" | "subscription_on_lag",
            Subscribed | Running,
        ) => Refused("SLC-ENG-003", SUB),
        ("subscription_buffer" | "subscription_buffer_bytes" | "subscription_on_lag", _) => Applied,
        (
            "checkpoint_interval"
            | "delivery"
            | "checkpoint_store"
            | "checkpoint_retain"
            | "checkpoint_tail_share"
            | "checkpoint_alignment_timeout"
            | "checkpoint_timeout"
            | "checkpoint_store_lease"
            | "subscription_history"
            | "subscription_history_bytes",
            Running,
        ) => Refused("SLC-ENG-003", START),
        (
            "checkpoint_interval"
            | "delivery"
            | "checkpoint_store"
            | "checkpoint_retain"
            | "checkpoint_tail_share"
            | "checkpoint_alignment_timeout"
            | "checkpoint_timeout"
            | "checkpoint_store_lease"
            | "subscription_history"
            | "subscription_history_bytes",
            _,
        ) => Applied,
        ("restart_budget" | "restart_backoff", _) => Applied,
        (other, _) => panic!("option '{other}': decide when it is read and add it here"),
    }
}

/// A valid value other than the default.
fn value(spec: &OptionSpec) -> String {
    match spec.kind {
        OptionKind::Duration { max, .. } => format!("{}ms", max.as_millis()),
        OptionKind::Count { max, .. } => max.to_string(),
        OptionKind::Choice(words) => words[words.len() - 1].to_string(),
        OptionKind::Text => "memory://late-set".to_string(),
    }
}

async fn at(stage: Stage, dir: &std::path::Path) -> Database {
    let db = Database::builder().base_dir(dir).open().await.unwrap();
    if stage == Stage::SealedEmpty {
        db.seal().await;
        return db;
    }
    if stage == Stage::Fresh {
        return db;
    }
    db.execute("CREATE SOURCE p (k BIGINT)").await.unwrap();
    db.execute("CREATE SOURCE f (k BIGINT) WITH (connector = 'file', path = 'in.csv')")
        .await
        .unwrap();
    if stage == Stage::Declared {
        return db;
    }
    // Kept alive by the database's registry; the test only needs it made.
    drop(db.subscribe("p").await.unwrap());
    if stage == Stage::Subscribed {
        return db;
    }
    db.start().await.unwrap();
    if stage == Stage::Running {
        return db;
    }
    db.shutdown().await.unwrap();
    db
}

#[tokio::test]
async fn every_option_at_every_stage_is_applied_or_refused_naming_what_it_misses() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("in.csv"), "k\n1\n").unwrap();
    tokio::time::timeout(LIMIT, async {
        for spec in PIPELINE_OPTION_SPECS {
            for stage in STAGES {
                let db = at(stage, dir.path()).await;
                let before = db.options().await;
                let v = value(spec);
                let sql = format!("SET {} = '{v}'", spec.name);
                let got = db.execute(&sql).await;
                let after = db.options().await;
                match (expected(spec.name, stage), got) {
                    (Outcome::Applied, Ok(_)) => {
                        let mut want: PipelineOptions = before.clone();
                        want.set(spec.name, &v).unwrap();
                        assert_ne!(want, before, "{sql}: the test value is the default");
                        assert_eq!(after, want, "{sql} at {stage:?}: not applied");
                    }
                    (Outcome::Refused(code, texts), Err(e)) => {
                        assert_eq!(e.code(), code, "{sql} at {stage:?}: {e}");
                        let msg = e.to_string();
                        for t in texts {
                            assert!(msg.contains(t), "{sql} at {stage:?}: {msg:?} lacks {t:?}");
                        }
                        assert_eq!(after, before, "{sql} at {stage:?}: refused but changed");
                    }
                    (want, got) => panic!("{sql} at {stage:?}: want {want:?}, got {got:?}"),
                }
                let _ = db.shutdown().await;
            }
        }
    })
    .await
    .expect("timed out");
}
