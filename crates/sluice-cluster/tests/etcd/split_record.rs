//! The split's member list by generation and its nodes' commit records:
//! a list is replaced only from the revision it was read at and while its
//! old members are gone, and a node records checkpoints only while the
//! list it runs under stands.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;

use sluice_cluster::split_record::{self, SplitCommitRecord, SplitRecord};
use sluice_cluster::status::connect;
use sluice_cluster::ClusterKeys;
use sluice_storage::{CommitAuthority, StorageError};

use crate::etcd;

fn record(generation: u64, members: &[&str]) -> SplitRecord {
    SplitRecord {
        generation,
        members: members.iter().map(|m| m.to_string()).collect(),
        previous: None,
        shuffle: None,
    }
}

#[tokio::test]
async fn a_node_records_checkpoints_only_while_its_list_stands() {
    let etcd = etcd().await;
    let client = connect(&etcd.endpoints()).await.unwrap();
    let keys = ClusterKeys::new("split").unwrap();
    assert_eq!(split_record::read(&client, &keys).await.unwrap(), (None, 0));
    let first = split_record::replace(&client, &keys, &record(1, &["a", "b"]), 0, &[])
        .await
        .unwrap()
        .expect("the first list is recorded");
    // A replace from a stale revision is refused.
    assert_eq!(
        split_record::replace(&client, &keys, &record(1, &["x"]), 0, &[])
            .await
            .unwrap(),
        None
    );
    let (read, at) = split_record::read(&client, &keys).await.unwrap();
    assert_eq!((read, at), (Some(record(1, &["a", "b"])), first));
    let commits = SplitCommitRecord::new(client.clone(), keys.clone(), "a", first).unwrap();
    let reader = SplitCommitRecord::reader(client.clone(), keys.clone(), "a").unwrap();
    assert_eq!(reader.committed().await.unwrap(), None);
    for id in [1, 2, 3] {
        commits
            .record_commit(id, None, &crate::part(id))
            .await
            .unwrap();
    }
    assert_eq!(
        reader.committed().await.unwrap(),
        Some(BTreeSet::from([1, 2, 3]))
    );
    commits.forget_below(3).await.unwrap();
    assert_eq!(reader.committed().await.unwrap(), Some(BTreeSet::from([3])));
    // A reader records nothing.
    let e = reader
        .record_commit(4, None, &crate::part(4))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Fenced { id: 4, .. }), "{e}");
    // The list changes: the node's next checkpoint is refused, and does
    // not count for readers.
    let second = split_record::replace(&client, &keys, &record(2, &["b", "c"]), first, &[])
        .await
        .unwrap()
        .expect("the next list is recorded");
    assert!(second > first);
    let e = commits
        .record_commit(4, None, &crate::part(4))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Fenced { id: 4, .. }), "{e}");
    assert!(e.to_string().contains("member list changed"), "{e}");
    assert_eq!(reader.committed().await.unwrap(), Some(BTreeSet::from([3])));
}

#[tokio::test]
async fn a_list_is_replaced_only_while_its_old_members_are_gone() {
    let etcd = etcd().await;
    let client = connect(&etcd.endpoints()).await.unwrap();
    let keys = ClusterKeys::new("live").unwrap();
    let first = split_record::replace(&client, &keys, &record(1, &["a"]), 0, &[])
        .await
        .unwrap()
        .unwrap();
    let node = crate::start_node(&etcd, "live", "a").await;
    assert_eq!(
        split_record::replace(&client, &keys, &record(2, &["b"]), first, &["a".into()])
            .await
            .unwrap(),
        None,
        "a is a live member"
    );
    node.shutdown().await.unwrap();
    assert!(
        split_record::replace(&client, &keys, &record(2, &["b"]), first, &["a".into()])
            .await
            .unwrap()
            .is_some()
    );
}

/// Once its node joined, a record counts a checkpoint only while the
/// node holds its member key under the lease it joined with: a process
/// paused past its lease (here: whose lease is gone) and woken with a
/// checkpoint in hand records nothing, though the list it runs under
/// still stands, and the process started in its place records its own.
#[tokio::test]
async fn a_node_records_checkpoints_only_while_it_holds_its_member_key() {
    let etcd = etcd().await;
    let client = connect(&etcd.endpoints()).await.unwrap();
    let keys = ClusterKeys::new("held").unwrap();
    let at = split_record::replace(&client, &keys, &record(1, &["a"]), 0, &[])
        .await
        .unwrap()
        .unwrap();
    let reader = SplitCommitRecord::reader(client.clone(), keys.clone(), "a").unwrap();
    let old = SplitCommitRecord::new(client.clone(), keys.clone(), "a", at).unwrap();
    let first = crate::start_node(&etcd, "held", "a").await;
    old.bind_member_lease(first.session().lease_id());
    old.record_commit(1, None, &crate::part(1)).await.unwrap();
    first.shutdown().await.unwrap();
    let e = old
        .record_commit(2, None, &crate::part(2))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Fenced { id: 2, .. }), "{e}");
    assert!(e.to_string().contains("etcd lease lapsed"), "{e}");
    let again = crate::start_node(&etcd, "held", "a").await;
    let e = old
        .record_commit(2, None, &crate::part(2))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::Fenced { id: 2, .. }), "{e}");
    let new = SplitCommitRecord::new(client.clone(), keys.clone(), "a", at).unwrap();
    new.bind_member_lease(again.session().lease_id());
    new.record_commit(3, None, &crate::part(3)).await.unwrap();
    assert_eq!(
        reader.committed().await.unwrap(),
        Some(BTreeSet::from([1, 3]))
    );
    again.shutdown().await.unwrap();
}
