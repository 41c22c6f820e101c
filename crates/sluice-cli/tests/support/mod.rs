//! Helpers shared by the crash, fault, signal and soak tests of the `sluice`
//! binary: generated input, a child process with its stderr collected as it
//! comes, signals, and what a directory holds.

#![allow(dead_code)]

pub mod keyed_split;
pub mod moto;
pub mod owners;
pub mod shuffled;
pub mod sinks;

/// A current-thread runtime for the few async calls a test makes (etcd).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// What etcd says of cluster `cluster` now (`SHOW CLUSTER`'s source).
pub fn cluster_status(
    etcd: &sluice_cluster::testing::EtcdServer,
    cluster: &str,
) -> sluice_cluster::status::ClusterStatus {
    rt().block_on(async {
        let client = sluice_cluster::status::connect(&etcd.endpoints())
            .await
            .unwrap();
        sluice_cluster::status::read(&client, &sluice_cluster::ClusterKeys::new(cluster).unwrap())
            .await
            .unwrap()
    })
}

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A small deterministic generator, so every run sees the same input.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// `files` files `in/part-NN.csv` of `rows` events `id,k,v,ts` each
/// (`keys` keys, values below 1000), about 10 ms apart, each file a later
/// stretch of time, disordered by less than 1.5 s: with a watermark delay
/// of 2 s no row is late on one node or on a split.
pub fn write_rising_parts(dir: &Path, files: u64, rows: u64, keys: u64, seed: u64) {
    std::fs::create_dir_all(dir.join("in")).unwrap();
    let mut rng = Lcg(seed);
    for f in 0..files {
        let mut out = String::from("id,k,v,ts\n");
        for r in 0..rows {
            let id = f * rows + r;
            let ts = 1_700_000_000_000 + id as i64 * 10 - (rng.next() % 1500) as i64;
            out.push_str(&format!(
                "{id},{},{},{ts}\n",
                rng.next() % keys,
                rng.next() % 1000
            ));
        }
        std::fs::write(dir.join(format!("in/part-{f:02}.csv")), out).unwrap();
    }
}

/// `events.csv`: `rows` events `id,k,v,ts` about 10 ms apart with up to
/// 1.5 s of disorder and a late straggler now and then.
pub fn write_events(dir: &Path, rows: u64, seed: u64) {
    let mut rng = Lcg(seed);
    let mut out = String::with_capacity(rows as usize * 40);
    out.push_str("id,k,v,ts\n");
    for id in 0..rows {
        let k = rng.next() % 100;
        let v = rng.next() % 1000;
        let base = 1_700_000_000_000 + id as i64 * 10;
        let jitter = (rng.next() % 1500) as i64;
        let ts = if id % 997 == 0 {
            base - 6_000
        } else {
            base - jitter
        };
        out.push_str(&format!("{id},{k},{v},{ts}\n"));
    }
    std::fs::write(dir.join("events.csv"), out).unwrap();
}

/// The `events` source over `events.csv`.
pub const EVENTS_SOURCE: &str =
    "CREATE SOURCE events (id BIGINT, k BIGINT, v BIGINT, ts TIMESTAMP, \
         WATERMARK FOR ts AS ts - INTERVAL '2' SECOND) \
     WITH (connector = 'file', path = 'events.csv', format = 'csv', batch_size = '500');";

/// A filter, a tumbling window and session windows, each into a sink.
pub const WINDOWS: &str = "
    CREATE STREAM sevens AS SELECT id, k, v, ts FROM events WHERE v % 7 = 0;
    CREATE STREAM per_key AS SELECT k, tumble(ts, INTERVAL '5' SECOND) AS ws, \
        COUNT(*) AS n, SUM(v) AS total, MAX(v) AS hi \
        FROM events GROUP BY k, tumble(ts, INTERVAL '5' SECOND);
    CREATE STREAM sessions AS SELECT k, session(ts, INTERVAL '300' MILLISECOND) AS s, COUNT(*) AS n \
        FROM events WHERE k < 5 GROUP BY k, session(ts, INTERVAL '300' MILLISECOND);
    CREATE SINK sevens_out FROM sevens WITH (connector = 'file', path = 'out/sevens.csv');
    CREATE SINK agg_out FROM per_key WITH (connector = 'file', path = 'out/agg.csv');
    CREATE SINK sessions_out FROM sessions WITH (connector = 'file', path = 'out/sessions.json');";

/// The sink files of [`WINDOWS`], sorted by name.
pub const WINDOW_FILES: &[&str] = &["agg.csv", "sessions.json", "sevens.csv"];

/// `sluice run [args] pipeline.sql` in `dir`, stdout discarded, stderr piped.
pub fn sluice(dir: &Path, args: &[String]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sluice"));
    c.current_dir(dir)
        .env_remove("RUST_LOG")
        .arg("run")
        .args(args)
        .arg("pipeline.sql")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    c
}

/// A running `sluice` whose stderr is collected as it is written.
pub struct Run {
    child: Child,
    stderr: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Run {
    pub fn spawn(mut cmd: Command) -> Run {
        let mut child = cmd.spawn().unwrap();
        let mut pipe = child.stderr.take().unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        // A debugging aid: SLUICE_TEST_STDERR_DIR keeps every child's
        // stderr in DIR/PID.log (headed by its arguments), also of the
        // children that succeed, whose stderr a test does not print.
        let mut tee = std::env::var_os("SLUICE_TEST_STDERR_DIR").map(|dir| {
            let path = Path::new(&dir).join(format!("{}.log", child.id()));
            let mut file = std::fs::File::create(path).unwrap();
            writeln!(file, "{:?}", cmd.get_args().collect::<Vec<_>>()).unwrap();
            file
        });
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Some(file) = tee.as_mut() {
                    let _ = file.write_all(&buf[..n]);
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Run {
            child,
            stderr,
            reader: Some(reader),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Send `signal` (a `libc::SIG*` number).
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of our own child, which we have not
        // reaped yet (so the pid cannot have been reused).
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal})", self.pid());
    }

    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Wait until stderr contains `needle`; false on timeout or exit.
    pub fn wait_for_stderr(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.stderr().contains(needle) {
                return true;
            }
            if !self.running() {
                std::thread::sleep(Duration::from_millis(20));
                return self.stderr().contains(needle);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }

    /// Wait for the exit; a run still alive after `timeout` is killed and
    /// the test fails (the watchdog that keeps a hang from blocking CI).
    pub fn wait(mut self, timeout: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                if let Some(r) = self.reader.take() {
                    r.join().unwrap();
                }
                return (status, self.stderr());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "sluice did not exit within {timeout:?}; stderr:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A test that fails (panics) while its processes run must not leave them
/// running: a cluster node whose etcd the failed test took down would wait
/// for it forever.
impl Drop for Run {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Names in a directory, sorted (empty if it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

/// Every file under `root` whose name marks a sink's temporary file.
pub fn temp_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let path = e.path();
            if path.is_dir() {
                dirs.push(path);
            } else if e.file_name().to_string_lossy().contains(".tmp-") {
                found.push(path);
            }
        }
    }
    found
}

/// The temporary files under `root` that process `pid` wrote (sinks name
/// theirs `.NAME.tmp-PID-N`, the checkpoint store `.NAME.tmp-PID`).
pub fn temp_files_of(root: &Path, pid: u32) -> Vec<PathBuf> {
    let mark = format!(".tmp-{pid}");
    temp_files(root)
        .into_iter()
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.split_once(&mark)
                .is_some_and(|(_, rest)| rest.is_empty() || rest.starts_with('-'))
        })
        .collect()
}

/// The folder of the newest committed checkpoint in a state directory
/// (checkpoint folders are named by their zero-padded id, so the largest
/// name is the newest).
pub fn newest_checkpoint_dir(state: &Path) -> Option<PathBuf> {
    let root = state.join("checkpoints").join("checkpoints");
    std::fs::read_dir(root)
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.join("MANIFEST").exists())
        .max()
}

/// The id of the newest committed checkpoint in a state directory.
pub fn newest_checkpoint(state: &Path) -> Option<u64> {
    newest_checkpoint_dir(state)?
        .file_name()?
        .to_string_lossy()
        .parse()
        .ok()
}

/// The contents of `files` in `dir/out`, in order.
pub fn outputs(dir: &Path, files: &[&str]) -> Vec<(String, String)> {
    files
        .iter()
        .map(|f| {
            let p = dir.join("out").join(f);
            let body =
                std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (f.to_string(), body)
        })
        .collect()
}

/// Whether a sink file holds at least one row (CSV files start with a header).
pub fn has_rows(path: &Path) -> bool {
    let Ok(body) = std::fs::read_to_string(path) else {
        return false;
    };
    let header = usize::from(path.extension().is_some_and(|e| e == "csv"));
    body.lines().count() > header
}

/// Every line of `want` is a line of `have` (duplicates allowed).
pub fn assert_nothing_missing(name: &str, want: &str, have: &str, context: &str) {
    let have: std::collections::HashSet<&str> = have.lines().collect();
    for line in want.lines() {
        assert!(have.contains(line), "{name}: row missing {context}: {line}");
    }
}

/// `sluice cluster rescale --cluster etcd=... --cluster-id CLUSTER ARGS`:
/// whether it succeeded, and its stdout and stderr.
pub fn rescale_with(
    etcd: &sluice_cluster::testing::EtcdServer,
    cluster: &str,
    args: &[&str],
) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sluice"))
        .args(["cluster", "rescale", "--cluster"])
        .arg(format!("etcd={}", etcd.endpoint()))
        .args(["--cluster-id", cluster])
        .args(args)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    (out.status.success(), said.into_owned())
}
