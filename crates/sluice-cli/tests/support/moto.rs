//! A real S3-compatible server for tests: `moto_server` (PyPI
//! `moto[server]`, which `scripts/test.sh` installs) on a free loopback
//! port, killed on drop. Tests that need it fail, not skip, without it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto server.
pub struct Moto {
    child: Child,
    port: u16,
}

impl Moto {
    /// Start `moto_server` (or `$SLUICE_MOTO`) and wait until it answers.
    pub fn start() -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let binary = std::env::var("SLUICE_MOTO").unwrap_or_else(|_| "moto_server".into());
        let child = Command::new(&binary)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run '{binary}' ({e}); install it with \
                     `pip install 'moto[server]'` (scripts/test.sh does) or set SLUICE_MOTO"
                )
            });
        let moto = Moto { child, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while moto.request("GET", "/").is_none() {
            assert!(Instant::now() < deadline, "moto_server did not answer");
            std::thread::sleep(Duration::from_millis(50));
        }
        moto
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Create a bucket.
    pub fn create_bucket(&self, name: &str) {
        let status = self.request("PUT", &format!("/{name}"));
        assert_eq!(status, Some(200), "create bucket {name}");
    }

    /// The environment `object_store` reads for an `s3://` URL on this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "test".into()),
            ("AWS_SECRET_ACCESS_KEY", "test".into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// One HTTP/1.0 request; the status code, or None if nothing answered.
    fn request(&self, method: &str, path: &str) -> Option<u16> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n"
        )
        .ok()?;
        let mut head = [0u8; 12];
        s.read_exact(&mut head).ok()?;
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
