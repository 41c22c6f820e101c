//! The one way this crate connects to etcd: every call bounded in time.
//!
//! etcd-client's defaults wait forever: a request to an etcd that is
//! paused, partitioned or overloaded never returns, and a watch or lease
//! keep-alive stream on a dead connection never ends. A node stuck in such
//! a call would neither notice that its lease is gone nor let a standby
//! know it is alive. So every client is built here with
//!
//! - a connect timeout ([`CONNECT_TIMEOUT`]) for the TCP connection;
//! - a per-call timeout ([`CALL_TIMEOUT`]) on every unary request and on
//!   the opening of every stream (until etcd's response headers arrive);
//!   a call that passes it fails with the request's context, and its
//!   caller retries or gives up as it would on any etcd error;
//! - HTTP/2 keep-alive pings ([`PING_EVERY`], answered within
//!   [`PING_TIMEOUT`]) while a call or stream is open, so a connection
//!   whose peer stopped answering is closed and the streams on it end with
//!   an error: watches re-list (`watch.rs`) and the session's keep-alive
//!   loop reopens its stream or marks the lease lost (`session.rs`).
//!
//! The timeouts are far above an etcd round trip on a healthy network
//! (milliseconds) and below the default node lease (5 s), so a node learns
//! that etcd is unreachable before its lease could have run out.
//!
//! The pings are rarer: etcd refuses a client that pings more often than
//! its `--grpc-keepalive-min-time` (5 s by default) — after three early
//! pings it answers `GOAWAY too_many_pings` and closes the connection,
//! breaking every watch and the lease keep-alive on it, again and again.
//! A node idle between keep-alives then lost its lease while healthy.
//! [`PING_EVERY`] is gRPC's own lower bound for clients (10 s). Pings
//! while no call is open would count against the same rule and detect
//! nothing a call would need, so there are none.
//! The lease does not depend on the pings: the keep-alive loop bounds each
//! renewal by the lease's own deadline.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

use crate::error::{ClusterError, Result};

/// Longest wait for the TCP connection to an etcd endpoint.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Longest wait for an etcd call's response (for a stream: its opening).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// How often a connection with open calls is pinged when nothing arrives.
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// How long a ping may go unanswered before the connection is closed.
pub const PING_TIMEOUT: Duration = Duration::from_secs(5);

/// The options every client of this crate uses (see the module docs).
pub fn options() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(CONNECT_TIMEOUT)
        .with_timeout(CALL_TIMEOUT)
        .with_keep_alive(PING_EVERY, PING_TIMEOUT)
        .with_keep_alive_while_idle(false)
}

/// Connect to etcd at `endpoints` with bounded calls.
pub async fn connect(endpoints: &[String]) -> Result<Client> {
    Client::connect(endpoints, Some(options()))
        .await
        .map_err(|e| ClusterError::etcd(format!("connect to {}", endpoints.join(",")), e))
}
