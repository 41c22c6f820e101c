//! An etcd that stops answering (SIGSTOP: sockets open, nothing replies)
//! makes calls fail within their timeout instead of hanging, and a node's
//! lease is known lost within one TTL; once etcd answers again, so do the
//! calls. Without the bounds of `sluice_cluster::client` each read below
//! waits forever and the outer limit fails the test.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_cluster::client::{CALL_TIMEOUT, CONNECT_TIMEOUT};
use sluice_cluster::{status, ClusterKeys, Session};

use super::{etcd, eventually, TTL};

/// Slack for scheduling on a loaded 2-core machine.
const SLACK: Duration = Duration::from_secs(3);

/// Run `f`, failing the test if it takes longer than `limit`.
async fn within<F: std::future::Future>(what: &str, limit: Duration, f: F) -> F::Output {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what} still waiting after {limit:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_to_a_paused_etcd_fail_in_time_and_work_again_after() {
    let etcd = etcd().await;
    let eps = etcd.endpoints();
    let session = Arc::new(
        Session::connect(&eps, "u1", "a", TTL)
            .await
            .expect("session"),
    );
    let client = status::connect(&eps).await.expect("client");
    let keys = ClusterKeys::new("u1").expect("keys");
    status::read(&client, &keys)
        .await
        .expect("read while etcd runs");

    etcd.pause().expect("pause etcd");
    let started = Instant::now();
    let err = within("a read from a paused etcd", CALL_TIMEOUT + SLACK, async {
        status::read(&client, &keys).await
    })
    .await
    .expect_err("a paused etcd cannot answer");
    assert_eq!(err.code(), "SLC-CLU-002", "{err}");
    assert!(err.to_string().starts_with("SLC-CLU-002: etcd "), "{err}");
    assert!(
        started.elapsed() >= CALL_TIMEOUT - Duration::from_millis(100),
        "failed after {:?}, before the call timeout: {err}",
        started.elapsed()
    );

    // A new client cannot get an answer either.
    within(
        "connect and read on a paused etcd",
        CONNECT_TIMEOUT + CALL_TIMEOUT + SLACK,
        async {
            match status::connect(&eps).await {
                Ok(fresh) => status::read(&fresh, &keys).await.map(|_| ()),
                Err(e) => Err(e),
            }
        },
    )
    .await
    .expect_err("a paused etcd cannot answer a new client");

    // The node's lease cannot be renewed: it is known lost within a TTL
    // (plus the keep-alive loop's own wait).
    let lost = session.lost();
    eventually("the lease known lost", TTL + CALL_TIMEOUT + SLACK, || {
        *lost.borrow()
    })
    .await;

    etcd.resume().expect("resume etcd");
    let limit = Instant::now() + CALL_TIMEOUT + 2 * SLACK;
    loop {
        match status::read(&client, &keys).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < limit, "etcd answers again: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
