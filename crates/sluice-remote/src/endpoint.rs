//! Where a worker listens: a loopback TCP address or a Unix domain socket.
//!
//! Remote workers run on the database's own host. A TCP endpoint must be a
//! loopback IP literal (a host name could resolve anywhere), and the engine
//! checks the peer address of every connection it makes as well, so a
//! redirect cannot take a call off the host. A Unix socket is the better
//! channel: its file permissions decide who may connect, and a sandboxed
//! worker needs no network at all.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint};

use crate::error::{RemoteError, Result};

/// A worker's address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteEndpoint {
    /// A loopback TCP address.
    Tcp(SocketAddr),
    /// A Unix domain socket.
    Unix(PathBuf),
}

impl fmt::Display for RemoteEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteEndpoint::Tcp(a) => write!(f, "tcp://{a}"),
            RemoteEndpoint::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

impl std::str::FromStr for RemoteEndpoint {
    type Err = RemoteError;

    /// `unix:/path/to.sock` (or `unix:///path`), or `tcp://IP:PORT`,
    /// `http://IP:PORT` or `IP:PORT` with a loopback IP.
    fn from_str(text: &str) -> Result<Self> {
        let invalid = |reason: &str| RemoteError::InvalidEndpoint {
            endpoint: text.to_string(),
            reason: reason.to_string(),
        };
        if let Some(path) = text.strip_prefix("unix:") {
            let path = path.strip_prefix("//").unwrap_or(path);
            if path.is_empty() {
                return Err(invalid("a unix: endpoint needs a socket path"));
            }
            if !path.starts_with('/') {
                return Err(invalid("a unix: socket path must be absolute"));
            }
            return Ok(RemoteEndpoint::Unix(PathBuf::from(path)));
        }
        let addr = text
            .strip_prefix("tcp://")
            .or_else(|| text.strip_prefix("http://"))
            .unwrap_or(text);
        let addr: SocketAddr = addr.parse().map_err(|_| {
            invalid("expected unix:/path, or tcp://IP:PORT with a loopback IP literal (127.0.0.1 or [::1]); host names are not resolved")
        })?;
        RemoteEndpoint::tcp(addr)
    }
}

impl RemoteEndpoint {
    /// A TCP endpoint, refused unless `addr` is a loopback address.
    pub fn tcp(addr: SocketAddr) -> Result<Self> {
        if !addr.ip().is_loopback() {
            return Err(RemoteError::NotLoopback {
                endpoint: addr.to_string(),
            });
        }
        Ok(RemoteEndpoint::Tcp(addr))
    }

    /// A channel to the worker. Connects lazily-free: the connection is made
    /// here, and its peer address checked.
    pub(crate) async fn connect(&self) -> Result<Channel> {
        let me = self.to_string();
        let connect_error = |e: Box<dyn std::error::Error + Send + Sync>| RemoteError::Connect {
            endpoint: me.clone(),
            source: e,
        };
        // The URI is required by tonic but unused: the connector below
        // decides where the connection goes.
        let endpoint = Endpoint::from_static("http://sluice-worker.invalid");
        let channel = match self.clone() {
            RemoteEndpoint::Tcp(addr) => {
                endpoint
                    .connect_with_connector(tower::service_fn(move |_| async move {
                        let stream = tokio::net::TcpStream::connect(addr).await?;
                        let peer = stream.peer_addr()?;
                        if !peer.ip().is_loopback() {
                            return Err(std::io::Error::new(
                                std::io::ErrorKind::PermissionDenied,
                                RemoteError::NotLoopback {
                                    endpoint: peer.to_string(),
                                },
                            ));
                        }
                        stream.set_nodelay(true)?;
                        Ok::<_, std::io::Error>(TokioIo::new(stream))
                    }))
                    .await
            }
            RemoteEndpoint::Unix(path) => {
                endpoint
                    .connect_with_connector(tower::service_fn(move |_| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(stream))
                        }
                    }))
                    .await
            }
        };
        channel.map_err(|e| connect_error(Box::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_accepted_and_refused_form() {
        let ok = [
            (
                "unix:/tmp/w.sock",
                RemoteEndpoint::Unix("/tmp/w.sock".into()),
            ),
            (
                "unix:///tmp/w.sock",
                RemoteEndpoint::Unix("/tmp/w.sock".into()),
            ),
            (
                "tcp://127.0.0.1:7000",
                RemoteEndpoint::Tcp("127.0.0.1:7000".parse().unwrap_or_else(|e| panic!("{e}"))),
            ),
            (
                "http://[::1]:7000",
                RemoteEndpoint::Tcp("[::1]:7000".parse().unwrap_or_else(|e| panic!("{e}"))),
            ),
            (
                "127.0.0.2:1",
                RemoteEndpoint::Tcp("127.0.0.2:1".parse().unwrap_or_else(|e| panic!("{e}"))),
            ),
        ];
        for (text, want) in ok {
            assert_eq!(text.parse::<RemoteEndpoint>().ok(), Some(want), "{text}");
        }
        let refused = [
            ("unix:", "SLC-RMT-001", "needs a socket path"),
            ("unix:relative.sock", "SLC-RMT-001", "must be absolute"),
            (
                "localhost:7000",
                "SLC-RMT-001",
                "host names are not resolved",
            ),
            (
                "tcp://10.0.0.1:7000",
                "SLC-RMT-002",
                "not a loopback address",
            ),
            ("0.0.0.0:7000", "SLC-RMT-002", "not a loopback address"),
            (
                "[2001:db8::1]:7000",
                "SLC-RMT-002",
                "not a loopback address",
            ),
            ("tcp://127.0.0.1", "SLC-RMT-001", "expected unix:/path"),
        ];
        for (text, code, words) in refused {
            let e = match text.parse::<RemoteEndpoint>() {
                Ok(e) => panic!("{text} was accepted as {e}"),
                Err(e) => e,
            };
            assert_eq!(e.code(), code, "{text}: {e}");
            assert!(e.to_string().contains(words), "{text}: {e}");
            assert!(
                e.to_string().contains(text.trim_start_matches("tcp://")),
                "{text}: {e}"
            );
        }
    }
}
