//! Attempt reservation under concurrency: several stores over one backing
//! store (as two processes over one bucket or directory would have),
//! reserving from several threads at once, never get the same id.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};

use object_store::memory::InMemory;
use object_store::path::Path as ObjectPath;
use object_store::ObjectStore;

use crate::backend::{Backend, LocalBackend, ObjectStoreBackend};
use crate::store::CheckpointStore;

/// Eight reservers in lockstep: without the random backoff between lost
/// races, they leapfrogged each other out of tries in 7 runs of 8.
const THREADS: usize = 8;
const PER_THREAD: usize = 40;

/// Reserve `PER_THREAD` ids on each of `THREADS` stores (one thread and one
/// runtime each, started together); every id handed out, in order.
fn reserve_concurrently(make: impl Fn() -> Box<dyn Backend>) -> Vec<u64> {
    let start = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let store = CheckpointStore::new(make());
            let start = Arc::clone(&start);
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap();
                start.wait();
                rt.block_on(async {
                    let mut ids = Vec::new();
                    for _ in 0..PER_THREAD {
                        ids.push(store.reserve().await.unwrap());
                    }
                    ids
                })
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

fn assert_unique(ids: &[u64]) {
    let distinct: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(
        distinct.len(),
        THREADS * PER_THREAD,
        "an id was handed out twice: {ids:?}"
    );
}

#[test]
fn concurrent_reservations_on_one_memory_store_never_share_an_id() {
    for _ in 0..10 {
        let shared: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let ids = reserve_concurrently(|| {
            Box::new(ObjectStoreBackend::new(
                Arc::clone(&shared),
                ObjectPath::default(),
                "memory:///",
            ))
        });
        assert_unique(&ids);
    }
}

#[test]
fn concurrent_reservations_on_one_local_directory_never_share_an_id() {
    for _ in 0..2 {
        let dir = tempfile::tempdir().unwrap();
        let ids = reserve_concurrently(|| Box::new(LocalBackend::new(dir.path()).unwrap()));
        assert_unique(&ids);
    }
}

#[test]
fn concurrent_reservations_on_one_file_url_never_share_an_id() {
    for _ in 0..2 {
        // As a `checkpoint_store = 'file:///...'` URL opens it.
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        let ids =
            reserve_concurrently(|| Box::new(ObjectStoreBackend::from_url(url.as_str()).unwrap()));
        assert_unique(&ids);
    }
}
