//! The connection to etcd survives a quiet node, and a campaign whose
//! answer was lost still knows it won.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{PutOptions, WatchOptions};
use sluice_cluster::{client, Election, Session};

use super::{etcd, eventually, TTL};

/// Longer than three of the old one-second pings plus etcd's reaction:
/// long enough for etcd to close a connection that pings too often.
const QUIET: Duration = Duration::from_secs(14);

/// etcd closes a connection that pings more often than its
/// `--grpc-keepalive-min-time` (5 s by default) with `GOAWAY
/// too_many_pings`, which ends every stream on it. A node between two
/// keep-alives sends nothing else, so its watches and its lease renewal
/// broke every few seconds; this watch, quiet for 14 s, would have ended
/// with an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_connection_keeps_its_streams() {
    let etcd = etcd().await;
    let mut client = client::connect(&etcd.endpoints()).await.expect("client");
    let mut stream = client
        .watch("/quiet", Some(WatchOptions::new()))
        .await
        .expect("watch");
    tokio::time::sleep(QUIET).await;
    client.put("/quiet", "still here", None).await.expect("put");
    // The first answer may be the watch's creation, without events.
    let mut values: Vec<Vec<u8>> = Vec::new();
    while values.is_empty() {
        let answer = tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .expect("the watch answers")
            .expect("the watch stream is intact after a quiet spell")
            .expect("the watch stream is open");
        values = answer
            .events()
            .iter()
            .filter_map(|e| e.kv().map(|kv| kv.value().to_vec()))
            .collect();
    }
    assert_eq!(values, vec![b"still here".to_vec()]);
}

/// A campaign's create went through in etcd but its answer never arrived
/// (a timeout, a reset connection, a paused process). The leader key is
/// on the node's own lease, so the node leads at that key's revision;
/// before, it waited as a follower of itself until its lease lapsed, and
/// the cluster ran nothing meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_whose_answer_was_lost_still_leads() {
    let etcd = etcd().await;
    let session = Arc::new(
        Session::connect(&etcd.endpoints(), "lost-answer", "a", TTL)
            .await
            .expect("session"),
    );
    let mut client = session.client();
    let key = session.keys().leader();
    let put = client
        .put(
            key.as_str(),
            "a",
            Some(PutOptions::new().with_lease(session.lease_id())),
        )
        .await
        .expect("put");
    let term = u64::try_from(put.header().expect("header").revision()).expect("revision");
    let election = Election::start(Arc::clone(&session));
    eventually("the node leads", Duration::from_secs(5), || {
        election.is_leader()
    })
    .await;
    assert_eq!(election.term(), Some(term));

    // A key on another lease (the same node id in an earlier session) is
    // someone else's: that node waits.
    let other = Arc::new(
        Session::connect(&etcd.endpoints(), "lost-answer", "a", TTL)
            .await
            .expect("second session"),
    );
    let follower = Election::start(Arc::clone(&other));
    let mut state = follower.state();
    tokio::time::timeout(
        Duration::from_secs(5),
        state.wait_for(|s| s.leader.is_some()),
    )
    .await
    .expect("the follower sees the leader")
    .expect("state");
    assert!(!follower.is_leader());
    assert_eq!(follower.state().borrow().term, term);
}
