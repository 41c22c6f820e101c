//! A small file pipeline (a pass-through stream with a division and a
//! windowed count), run the way `sluice run` runs it: to completion, then
//! shut down, or aborted after a failure; reopened on the same state
//! directory to recover.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sluice::{Database, Error, MetricsSnapshot};
use sluice_engine::fault::{arm, Fault, FaultAction, FaultGuard, FaultSite, FaultTrigger};

/// Longest any single run may take before the test fails as hung.
pub const RUN_LIMIT: Duration = Duration::from_secs(120);

/// Delivery setups under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No state directory, no checkpoints.
    Plain,
    /// State directory, periodic checkpoints, at-least-once.
    AtLeastOnce,
    /// State directory, periodic checkpoints, exactly-once.
    ExactlyOnce,
}

pub const MODES: [Mode; 3] = [Mode::Plain, Mode::AtLeastOnce, Mode::ExactlyOnce];

impl Mode {
    pub fn checkpointed(self) -> bool {
        self != Mode::Plain
    }
}

/// `id,d,ts` rows 1..=n; `d` is 0 at `zero_at`; at `bad_at` the id's last
/// digit is an `x` (malformed), so repairing the file keeps every offset.
pub fn write_input(path: &Path, n: usize, zero_at: Option<usize>, bad_at: Option<usize>) {
    let mut s = String::from("id,d,ts\n");
    for i in 1..=n {
        let d = if Some(i) == zero_at { 0 } else { 1 + i % 7 };
        let mut id = i.to_string();
        if Some(i) == bad_at {
            id.pop();
            id.push('x');
        }
        s.push_str(&format!("{id},{d},{}\n", i * 10));
    }
    std::fs::write(path, s).unwrap();
}

/// One pipeline: its directory, names and files.
pub struct Pipeline {
    pub tag: String,
    pub mode: Mode,
    pub dir: PathBuf,
    pub input: PathBuf,
    pub extra: Vec<(String, String)>,
}

impl Pipeline {
    /// `tag` must be unique in the test binary: faults are armed by name.
    pub fn new(root: &Path, tag: &str, mode: Mode) -> Self {
        // SQL folds unquoted names to lower case.
        let tag = tag.to_lowercase();
        let dir = root.join(&tag);
        std::fs::create_dir_all(dir.join("out")).unwrap();
        Self {
            tag,
            mode,
            input: dir.join("in.csv"),
            dir,
            // A fault ends the run and the next run recovers by reopening
            // (in-process restarts are `restart.rs`'s, which set a budget).
            extra: vec![("restart_budget".into(), "0".into())],
        }
    }
    pub fn source(&self) -> String {
        format!("{}_src", self.tag)
    }
    pub fn stream(&self) -> String {
        format!("{}_q", self.tag)
    }
    pub fn sink(&self) -> String {
        format!("{}_q_out", self.tag)
    }
    pub fn q_file(&self) -> PathBuf {
        self.dir.join("out/q.csv")
    }
    pub fn w_file(&self) -> PathBuf {
        self.dir.join("out/w.csv")
    }

    pub async fn open(&self) -> Database {
        let mut b = Database::builder();
        if self.mode.checkpointed() {
            b = b
                .state_dir(self.dir.join("state"))
                .set("checkpoint_interval", "20ms")
                .unwrap();
        }
        if self.mode == Mode::ExactlyOnce {
            b = b.set("delivery", "exactly_once").unwrap();
        }
        for (k, v) in &self.extra {
            b = b.set(k, v).unwrap();
        }
        let db = b.open().await.unwrap();
        let t = &self.tag;
        db.execute(&format!(
            "CREATE SOURCE {t}_src (id BIGINT, d BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
               WITH (connector = 'file', path = '{input}', format = 'csv', batch_size = '100');
             CREATE STREAM {t}_q AS SELECT id, 100 / d AS q FROM {t}_src;
             CREATE STREAM {t}_w AS SELECT tumble(ts, INTERVAL '1' SECOND) AS w, COUNT(*) AS n,
               SUM(id) AS s FROM {t}_src GROUP BY tumble(ts, INTERVAL '1' SECOND);
             CREATE SINK {t}_q_out FROM {t}_q WITH (connector = 'file', path = '{q}', format = 'csv');
             CREATE SINK {t}_w_out FROM {t}_w WITH (connector = 'file', path = '{w}', format = 'csv');",
            input = self.input.display(),
            q = self.q_file().display(),
            w = self.w_file().display(),
        ))
        .await
        .unwrap();
        db
    }

    /// One run as `sluice run` does it: to completion and a clean
    /// shutdown, or, on failure, an abort; the first error is returned.
    pub async fn run_once(&self) -> Result<MetricsSnapshot, Error> {
        let db = self.open().await;
        run_db(&db).await
    }
}

/// Run an opened database to completion and shut it down (abort on failure).
pub async fn run_db(db: &Database) -> Result<MetricsSnapshot, Error> {
    let outcome = bounded(async {
        db.run_to_completion().await?;
        db.shutdown().await
    })
    .await;
    if outcome.is_err() {
        let _ = bounded(db.abort()).await;
    }
    outcome
}

/// Fail the test instead of hanging.
pub async fn bounded<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(RUN_LIMIT, f)
        .await
        .expect("the pipeline hung")
}

/// The output of an uninterrupted run of the same pipeline on the same
/// input: (q.csv, w.csv).
pub async fn reference(root: &Path, tag: &str, input: &Path) -> (String, String) {
    let p = Pipeline::new(root, tag, Mode::Plain);
    std::fs::copy(input, &p.input).unwrap();
    p.run_once().await.expect("the reference run completes");
    (read(&p.q_file()), read(&p.w_file()))
}

pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Lines of a CSV file after its header, sorted.
pub fn sorted_rows(text: &str) -> Vec<String> {
    let mut rows: Vec<String> = text.lines().skip(1).map(str::to_string).collect();
    rows.sort();
    rows
}

/// At-least-once: every expected row is there (some possibly twice), and
/// nothing else. Exactly-once: the file is byte-for-byte the expected one.
pub fn assert_delivered(mode: Mode, got: &str, expected: &str, what: &str) {
    if mode == Mode::ExactlyOnce {
        assert_eq!(got, expected, "{what}: exactly-once output");
        return;
    }
    assert_eq!(
        got.lines().next(),
        expected.lines().next(),
        "{what}: header"
    );
    let mut distinct = sorted_rows(got);
    distinct.dedup();
    let want = sorted_rows(expected);
    assert_eq!(distinct.len(), want.len(), "{what}: distinct rows");
    assert!(
        distinct == want,
        "{what}: the rows differ from the reference"
    );
}

/// Names in `dir` starting with '.': temp and staged files.
pub fn hidden_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// A transient fault: `action` once, at row `row` of stream `stream`.
pub fn once_at_row(stream: &str, action: FaultAction, row: u64) -> FaultGuard {
    arm(
        stream,
        Fault {
            site: FaultSite::Stream,
            action,
            trigger: FaultTrigger::Row(row),
            once: true,
        },
    )
}
