//! A real etcd for tests: [`EtcdServer`] starts the `etcd` binary on
//! loopback with free ports and a temporary data directory, waits until it
//! answers, and kills it when dropped.
//!
//! Tests that need etcd must fail, not skip, when the binary is missing:
//! `scripts/test.sh` installs Debian's `etcd-server`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::error::{ClusterError, Result};

/// How long etcd may take to answer its first request.
const STARTUP: Duration = Duration::from_secs(20);

/// How many times etcd is started on new ports when a port it was given is
/// taken before it binds it.
const BIND_ATTEMPTS: u32 = 5;

/// How long a SIGSTOP may take to stop every thread of etcd.
const STOP_TAKES_EFFECT: Duration = Duration::from_secs(5);

/// Whether every thread of process `pid` is stopped (state `T` or `t` in
/// `/proc/PID/task/TID/stat`). False when a thread's state cannot be read,
/// so the caller keeps waiting and its own limit decides.
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    let mut any = false;
    for task in tasks {
        let Ok(task) = task else { return false };
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            return false;
        };
        // The state follows the command name, which is in parentheses and
        // may itself contain spaces or parentheses.
        let state = stat
            .rfind(')')
            .and_then(|end| stat[end + 1..].split_whitespace().next());
        if !matches!(state, Some("T" | "t")) {
            return false;
        }
        any = true;
    }
    any
}

/// A running etcd, killed on drop.
#[derive(Debug)]
pub struct EtcdServer {
    child: Child,
    endpoint: String,
    dir: tempfile::TempDir,
}

impl EtcdServer {
    /// Start etcd (the `etcd` on `PATH`, or `$SLUICE_ETCD`).
    ///
    /// Its heartbeat is 50 ms and election timeout 500 ms so that etcd's
    /// minimum lease TTL (1.5 election timeouts) allows 1 s test leases.
    pub async fn start() -> Result<Self> {
        let mut attempt = 1;
        loop {
            let mut server = Self::spawn()?;
            match server.wait_healthy().await {
                Ok(()) => return Ok(server),
                // The ports were free when picked but another process (a
                // test running alongside) bound one before etcd did: pick
                // new ports rather than fail the test on a race.
                Err(e) if attempt < BIND_ATTEMPTS && server.lost_port_race() => {
                    tracing::debug!(attempt, error = %e, "etcd lost its port, restarting");
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Spawn etcd on ports free now, in a new temporary directory.
    fn spawn() -> Result<Self> {
        let binary = std::env::var("SLUICE_ETCD").unwrap_or_else(|_| "etcd".to_string());
        let dir = tempfile::tempdir().map_err(|e| harness(format!("temp dir: {e}")))?;
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let endpoint = format!("http://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.path().join("etcd.log"))
            .map_err(|e| harness(format!("log file: {e}")))?;
        let log_err = log
            .try_clone()
            .map_err(|e| harness(format!("log file: {e}")))?;
        let child = Command::new(&binary)
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={endpoint}"))
            .arg(format!("--advertise-client-urls={endpoint}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--heartbeat-interval=50")
            .arg("--election-timeout=500")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| {
                harness(format!(
                    "cannot run '{binary}' ({e}); install etcd (Debian: apt-get install \
                     etcd-server) or set SLUICE_ETCD"
                ))
            })?;
        Ok(Self {
            child,
            endpoint,
            dir,
        })
    }

    /// Whether etcd exited because one of its ports was taken.
    fn lost_port_race(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
            && std::fs::read_to_string(self.dir.path().join("etcd.log"))
                .is_ok_and(|log| log.contains("address already in use"))
    }

    /// The client endpoint (`http://127.0.0.1:PORT`).
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// The endpoint as the list node configs take.
    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint.clone()]
    }

    /// Freeze etcd (SIGSTOP): its sockets stay open but nothing answers,
    /// as with a hung or partitioned server. Undone by [`Self::resume`]
    /// (and by the kill on drop).
    ///
    /// Returns once every thread of etcd is stopped: kill(2) only queues
    /// the signal, and a thread already running could otherwise still
    /// answer a request sent right after this returns.
    pub fn pause(&self) -> Result<()> {
        self.signal(libc::SIGSTOP, "SIGSTOP")?;
        let started = Instant::now();
        while !all_threads_stopped(self.child.id()) {
            if started.elapsed() > STOP_TAKES_EFFECT {
                return Err(harness(format!(
                    "etcd (pid {}) not stopped {STOP_TAKES_EFFECT:?} after SIGSTOP",
                    self.child.id()
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Let a paused etcd run again (SIGCONT).
    pub fn resume(&self) -> Result<()> {
        self.signal(libc::SIGCONT, "SIGCONT")
    }

    fn signal(&self, signal: libc::c_int, name: &str) -> Result<()> {
        let pid = libc::pid_t::try_from(self.child.id())
            .map_err(|_| harness(format!("etcd pid {} out of range", self.child.id())))?;
        // SAFETY: kill(2) with the pid of a child this value owns and has
        // not reaped (it is reaped only in `drop`), so it names that etcd.
        let rc = unsafe { libc::kill(pid, signal) };
        if rc != 0 {
            return Err(harness(format!(
                "{name} to etcd: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    async fn wait_healthy(&mut self) -> Result<()> {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < STARTUP {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(harness(format!(
                    "etcd exited with {status}: {}",
                    self.log()
                )));
            }
            match etcd_client::Client::connect([&self.endpoint], None).await {
                Ok(mut client) => match client.status().await {
                    Ok(_) => return Ok(()),
                    Err(e) => last = e.to_string(),
                },
                Err(e) => last = e.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(harness(format!(
            "etcd did not answer within {STARTUP:?} ({last}): {}",
            self.log()
        )))
    }

    fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn harness(reason: String) -> ClusterError {
    ClusterError::Harness(reason)
}

/// A port the OS considers free now (etcd binds it right after).
fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| harness(format!("free port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| harness(format!("free port: {e}")))
}
