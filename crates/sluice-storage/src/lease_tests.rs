//! The store lease on a store with conditional update (memory) and on one
//! without (the local file system behind `file://` URLs).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::error::StorageError;
use crate::lease::{LeaseRecord, StoreLease, LEASE_KEY};

const LONG: Duration = Duration::from_secs(60);

fn memory() -> Arc<dyn ObjectStore> {
    Arc::new(InMemory::new())
}

fn local(dir: &tempfile::TempDir) -> Arc<dyn ObjectStore> {
    Arc::new(LocalFileSystem::new_with_prefix(dir.path()).unwrap())
}

async fn acquire(store: &Arc<dyn ObjectStore>, ttl: Duration) -> crate::Result<StoreLease> {
    StoreLease::acquire(
        Arc::clone(store),
        &ObjectPath::default(),
        "test://store",
        ttl,
    )
    .await
}

async fn stored(store: &Arc<dyn ObjectStore>) -> LeaseRecord {
    let bytes = store
        .get(&ObjectPath::from(LEASE_KEY))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

/// The refusal: SLC-STO-006, naming the store and the holder's owner id.
fn assert_refused(err: StorageError, holder: &str) {
    assert_eq!(err.code(), "SLC-STO-006");
    let text = err.to_string();
    assert!(
        text.starts_with("checkpoint store test://store is in use by another pipeline (owner "),
        "{text}"
    );
    assert!(text.contains(holder), "{text} names {holder}");
    assert!(
        text.contains(&format!("pid {}", std::process::id())),
        "{text}"
    );
}

async fn second_is_refused_until_the_first_releases(store: Arc<dyn ObjectStore>) {
    let first = acquire(&store, LONG).await.unwrap();
    let err = acquire(&store, LONG).await.unwrap_err();
    assert_refused(err, first.owner());
    first.release().await.unwrap();
    let second = acquire(&store, LONG).await.unwrap();
    assert_eq!(stored(&store).await.owner, second.owner());
}

#[tokio::test]
async fn memory_second_holder_is_refused_until_release() {
    second_is_refused_until_the_first_releases(memory()).await;
}

#[tokio::test]
async fn local_second_holder_is_refused_until_release() {
    let dir = tempfile::tempdir().unwrap();
    second_is_refused_until_the_first_releases(local(&dir)).await;
}

/// A lease past its expiry is taken over; the old holder's next renewal
/// reports it lost (SLC-STO-006), and its release leaves the new lease.
async fn expired_lease_is_taken_over(store: Arc<dyn ObjectStore>) {
    let old = acquire(&store, Duration::from_millis(1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let new = acquire(&store, LONG).await.unwrap();
    assert_eq!(stored(&store).await.owner, new.owner());
    let err = old.renew().await.unwrap_err();
    assert_eq!(err.code(), "SLC-STO-006");
    assert!(
        err.to_string().contains("this process's lease was lost")
            && err.to_string().contains(new.owner()),
        "{err}"
    );
    assert_eq!(old.ensure_held().unwrap_err().code(), "SLC-STO-006");
    old.release().await.unwrap();
    assert_eq!(stored(&store).await.owner, new.owner());
    new.ensure_held().unwrap();
}

#[tokio::test]
async fn memory_expired_lease_is_taken_over() {
    expired_lease_is_taken_over(memory()).await;
}

#[tokio::test]
async fn local_expired_lease_is_taken_over() {
    let dir = tempfile::tempdir().unwrap();
    expired_lease_is_taken_over(local(&dir)).await;
}

/// A renewal pushes the expiry forward and keeps the owner.
#[tokio::test]
async fn renewal_extends_the_expiry() {
    for store in [memory(), {
        let dir = tempfile::tempdir().unwrap();
        let s = local(&dir);
        std::mem::forget(dir);
        s
    }] {
        let lease = acquire(&store, LONG).await.unwrap();
        let before = stored(&store).await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        lease.renew().await.unwrap();
        let after = stored(&store).await;
        assert_eq!(after.owner, before.owner);
        assert!(after.expires_ms > before.expires_ms, "{before:?} {after:?}");
        lease.release().await.unwrap();
    }
}

/// A holder on this host whose process is gone is taken over at once,
/// before its expiry (a crashed pipeline restarted on the same machine).
#[tokio::test]
async fn lease_of_a_dead_process_on_this_host_is_taken_over() {
    if !cfg!(target_os = "linux") {
        return;
    }
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let store = memory();
    let probe = acquire(&store, LONG).await.unwrap();
    let mut record = stored(&store).await;
    probe.release().await.unwrap();
    record.owner = "crashed".into();
    record.pid = dead;
    store
        .put(
            &ObjectPath::from(LEASE_KEY),
            PutPayload::from_bytes(Bytes::from(serde_json::to_vec(&record).unwrap())),
        )
        .await
        .unwrap();
    let lease = acquire(&store, LONG).await.unwrap();
    assert_eq!(stored(&store).await.owner, lease.owner());
}

/// Several takers of one expired lease on a store with conditional update:
/// exactly one wins, the others are refused naming the winner's host.
#[test]
fn one_of_many_concurrent_takers_wins() {
    for _ in 0..10 {
        let store = memory();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stale = rt
            .block_on(acquire(&store, Duration::from_millis(1)))
            .unwrap();
        std::mem::forget(stale);
        std::thread::sleep(Duration::from_millis(5));
        let start = Arc::new(std::sync::Barrier::new(4));
        let takers: Vec<_> = (0..4)
            .map(|_| {
                let store = Arc::clone(&store);
                let start = Arc::clone(&start);
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    start.wait();
                    rt.block_on(async {
                        acquire(&store, LONG).await.map(|l| {
                            let owner = l.owner().to_string();
                            std::mem::forget(l);
                            owner
                        })
                    })
                })
            })
            .collect();
        let results: Vec<_> = takers.into_iter().map(|t| t.join().unwrap()).collect();
        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(winners.len(), 1, "{results:?}");
        for r in &results {
            if let Err(e) = r {
                assert_eq!(e.code(), "SLC-STO-006");
            }
        }
    }
}

/// A holder that has not renewed within its ttl (a paused process) stops
/// trusting its lease until a renewal succeeds; on either kind of store.
#[tokio::test]
async fn a_lease_not_renewed_within_its_ttl_is_not_trusted() {
    let dir = tempfile::tempdir().unwrap();
    for store in [memory(), local(&dir)] {
        let ttl = Duration::from_millis(300);
        let lease = acquire(&store, ttl).await.unwrap();
        lease.ensure_held().unwrap();
        tokio::time::sleep(ttl + Duration::from_millis(50)).await;
        let e = lease.ensure_held().unwrap_err();
        assert_eq!(e.code(), "SLC-STO-006");
        assert!(
            e.to_string().contains("was not renewed within its ttl"),
            "{e}"
        );
        // Nobody took it over: a renewal restores trust.
        lease.renew().await.unwrap();
        lease.ensure_held().unwrap();
        lease.release().await.unwrap();
    }
}

/// On a store without conditional update, a holder paused between reading
/// its own live lease and overwriting it wakes to a lease a taker replaced
/// meanwhile: it must not overwrite the taker's lease (nor remove it when
/// it closes). CI saw this in the cluster's paused-leader test: the old
/// leader's overwrite and release removed the new leader's lease.
#[tokio::test]
async fn a_holder_paused_mid_renewal_does_not_overwrite_the_taker() {
    let dir = tempfile::tempdir().unwrap();
    let store = local(&dir);
    let ttl = Duration::from_millis(300);
    let old = Arc::new(acquire(&store, ttl).await.unwrap());
    let gate = old.pause_next_renewal_after_read();
    let renewal = tokio::spawn({
        let old = Arc::clone(&old);
        async move { old.renew().await }
    });
    gate.reached.notified().await;
    // Paused past its expiry; a taker replaces the lapsed lease.
    tokio::time::sleep(ttl + Duration::from_millis(50)).await;
    let taker = acquire(&store, LONG).await.unwrap();
    gate.resume.notify_one();
    let e = renewal.await.unwrap().unwrap_err();
    assert_eq!(e.code(), "SLC-STO-006");
    assert!(e.to_string().contains("it is now held by"), "{e}");
    assert_eq!(stored(&store).await.owner, taker.owner());
    old.release().await.unwrap();
    assert_eq!(stored(&store).await.owner, taker.owner());
    taker.renew().await.unwrap();
    taker.ensure_held().unwrap();
    taker.release().await.unwrap();
}
