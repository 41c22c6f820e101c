//! `DatabaseBuilder::checkpoint_object_store`: checkpoints go to the given
//! store, and a `checkpoint_store` URL as well is refused.

use std::sync::Arc;

use sluice::object_store::memory::InMemory;
use sluice::object_store::ObjectStore;

use crate::common::{bounded, committed, objects, Fixture};

#[tokio::test]
async fn checkpoints_go_to_the_given_store() {
    let fx = Fixture::new();
    let mem = Arc::new(InMemory::new());
    let db = fx
        .open("exactly_once", Arc::clone(&mem) as Arc<dyn ObjectStore>)
        .await;
    bounded("start", db.start()).await.unwrap();
    let report = bounded("checkpoint", db.checkpoint()).await.unwrap();
    assert_eq!(committed(&db).await, vec![report.id]);
    let manifest = format!("checkpoints/{:020}/MANIFEST", report.id);
    assert!(
        objects(&mem).await.iter().any(|(k, _)| *k == manifest),
        "{:?}",
        objects(&mem).await
    );
    bounded("shutdown", db.shutdown()).await.unwrap();
}

#[tokio::test]
async fn a_checkpoint_store_url_as_well_is_refused() {
    let fx = Fixture::new();
    let db = fx
        .open(
            "at_least_once",
            Arc::new(InMemory::new()) as Arc<dyn ObjectStore>,
        )
        .await;
    db.execute("SET checkpoint_store = 'memory:///other'")
        .await
        .unwrap();
    let err = bounded("start", db.start()).await.unwrap_err();
    assert_eq!(err.code(), "SLC-ENG-003", "{err}");
    assert_eq!(
        err.to_string(),
        "invalid option: checkpoint_store = 'memory:///other' conflicts with the object store \
         InMemory given to DatabaseBuilder::checkpoint_object_store; use one of them"
    );
}
