//! The pipeline, the stores and the checks the full-disk tests share.

use std::fmt::Write as _;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use sluice::object_store::memory::InMemory;
use sluice::object_store::ObjectStore;
use sluice::Database;
use sluice_storage::testing::FaultyStore;

/// Both checkpointed delivery modes.
pub const MODES: [&str; 2] = ["at_least_once", "exactly_once"];

/// Rows of the input file.
const ROWS: i64 = 3_000;

/// Fail the test instead of hanging.
pub async fn bounded<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(60), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out"))
}

/// A folder with the input file; sinks write under `out/`.
pub struct Fixture {
    pub dir: tempfile::TempDir,
}

impl Fixture {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::from("k,v,ts\n");
        for i in 0..ROWS {
            writeln!(text, "{},{},{}", i % 7, i, i * 10).unwrap();
        }
        std::fs::write(dir.path().join("in.csv"), text).unwrap();
        std::fs::create_dir_all(dir.path().join("out")).unwrap();
        Self { dir }
    }

    pub fn out(&self, sink: &str) -> PathBuf {
        self.dir.path().join("out").join(format!("{sink}.csv"))
    }

    /// The final files of both sinks ("" for one that does not exist).
    pub fn outputs(&self) -> [String; 2] {
        ["rows", "windows"].map(|s| std::fs::read_to_string(self.out(s)).unwrap_or_default())
    }

    /// Remove the sinks' files (hidden staged files too) for a fresh run.
    pub fn clear_outputs(&self) {
        let out = self.dir.path().join("out");
        std::fs::remove_dir_all(&out).unwrap();
        std::fs::create_dir_all(&out).unwrap();
    }

    /// A database in `mode` on `store`, with the pipeline declared. Only
    /// manual and shutdown checkpoints happen (the interval is an hour).
    pub async fn open(&self, mode: &str, store: Arc<dyn ObjectStore>) -> Database {
        self.open_every(mode, store, "1h").await
    }

    /// As [`Self::open`], with periodic checkpoints every `interval`.
    pub async fn open_every(
        &self,
        mode: &str,
        store: Arc<dyn ObjectStore>,
        interval: &str,
    ) -> Database {
        let db = Database::builder()
            .base_dir(self.dir.path())
            .checkpoint_object_store(store)
            .set("delivery", mode)
            .unwrap()
            .set("checkpoint_interval", interval)
            .unwrap()
            .open()
            .await
            .unwrap();
        db.execute(&format!(
            "CREATE SOURCE s (k BIGINT, v BIGINT, ts TIMESTAMP, WATERMARK FOR ts AS ts)
                 WITH (connector = 'file', path = '{}', format = 'csv');
             CREATE STREAM picked AS SELECT k, v FROM s WHERE v % 3 = 0;
             CREATE STREAM counted AS
                 SELECT k, tumble(ts, INTERVAL '1' SECOND) AS ws, COUNT(*) AS n
                 FROM s GROUP BY k, tumble(ts, INTERVAL '1' SECOND);
             CREATE SINK rows FROM picked WITH (connector = 'file', path = '{}', format = 'csv');
             CREATE SINK windows FROM counted WITH (connector = 'file', path = '{}', format = 'csv');",
            self.dir.path().join("in.csv").display(),
            self.out("rows").display(),
            self.out("windows").display(),
        ))
        .await
        .unwrap();
        db
    }

    /// The sinks' files of an uninterrupted run in `mode` on a sound store.
    pub async fn reference(&self, mode: &str) -> [String; 2] {
        let db = self.open(mode, Arc::new(InMemory::new())).await;
        bounded("reference run", db.run_to_completion())
            .await
            .unwrap();
        bounded("reference shutdown", db.shutdown()).await.unwrap();
        let out = self.outputs();
        assert!(out[0].lines().count() > 100, "{}", out[0]);
        assert!(out[1].lines().count() > 10, "{}", out[1]);
        self.clear_outputs();
        out
    }
}

/// A fresh faulty store over memory, and the memory under it.
pub fn faulty() -> (FaultyStore, Arc<InMemory>) {
    let mem = Arc::new(InMemory::new());
    (
        FaultyStore::new(Arc::clone(&mem) as Arc<dyn ObjectStore>),
        mem,
    )
}

/// Every object the store holds, with its size.
pub async fn objects(mem: &InMemory) -> Vec<(String, u64)> {
    let mut out: Vec<(String, u64)> = mem
        .list(None)
        .map_ok(|m| (m.location.to_string(), m.size))
        .try_collect()
        .await
        .unwrap();
    out.sort();
    out
}

/// Objects under `checkpoints/` that belong to no committed checkpoint.
pub async fn leftovers(mem: &InMemory, committed: &[u64]) -> Vec<String> {
    objects(mem)
        .await
        .into_iter()
        .map(|(k, _)| k)
        .filter(|k| {
            let id = k
                .strip_prefix("checkpoints/")
                .and_then(|r| r.split('/').next())
                .and_then(|id| id.parse::<u64>().ok());
            id.is_some_and(|id| !committed.contains(&id))
        })
        .collect()
}

/// Ids of the committed checkpoints, as the Database lists them.
pub async fn committed(db: &Database) -> Vec<u64> {
    db.checkpoints()
        .await
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect()
}

/// Sorted lines, header excluded, for at-least-once comparisons.
pub fn rows(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text.lines().skip(1).collect();
    lines.sort_unstable();
    lines
}

/// Hidden files the sinks left in `out/` (staged epochs, temp files).
pub fn hidden_sink_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir.join("out"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect()
}
