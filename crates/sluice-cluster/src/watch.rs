//! A live local mirror of one etcd key or key prefix, kept current by an
//! etcd watch (never by polling).
//!
//! The mirror lists the range once, then watches from the revision after
//! that listing, so no event between the two is missed. If the watch breaks
//! (connection loss, or the start revision was compacted away) it lists
//! again and resumes; subscribers only ever see whole snapshots, each
//! labelled with the etcd revision it reflects.

use std::collections::BTreeMap;
use std::time::Duration;

use etcd_client::{Client, EventType, GetOptions, WatchOptions};
use tokio::sync::watch;

/// One key's value and revisions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The value.
    pub value: Vec<u8>,
    /// The revision that created the key (unchanged by later puts).
    pub create_revision: i64,
    /// The revision of the last put.
    pub mod_revision: i64,
    /// The lease the key is attached to (0 for none).
    pub lease: i64,
}

/// The range's content at one revision.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The etcd revision this snapshot reflects (0 before the first listing).
    pub revision: i64,
    /// Key (UTF-8, lossy) to entry.
    pub entries: BTreeMap<String, Entry>,
}

/// How long to wait before listing again after the watch broke.
const RETRY: Duration = Duration::from_millis(100);

/// Mirror `key` (or every key under it, if `prefix`). The task ends when
/// every receiver is dropped.
pub fn spawn(client: Client, key: String, prefix: bool) -> watch::Receiver<Snapshot> {
    let (tx, rx) = watch::channel(Snapshot::default());
    tokio::spawn(async move {
        let mut client = client;
        loop {
            tokio::select! {
                () = tx.closed() => return,
                broke = mirror(&mut client, &key, prefix, &tx) => {
                    tracing::debug!(key = %key, reason = %broke, "etcd watch broke; listing again");
                }
            }
            tokio::select! {
                () = tx.closed() => return,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    });
    rx
}

/// List, then apply watch events until the watch breaks; returns why.
async fn mirror(
    client: &mut Client,
    key: &str,
    prefix: bool,
    tx: &watch::Sender<Snapshot>,
) -> String {
    let get_options = prefix.then(|| GetOptions::new().with_prefix());
    let listing = match client.get(key, get_options).await {
        Ok(listing) => listing,
        Err(e) => return format!("list failed: {e}"),
    };
    let mut snapshot = Snapshot {
        revision: listing.header().map_or(0, |h| h.revision()),
        entries: BTreeMap::new(),
    };
    for kv in listing.kvs() {
        snapshot.entries.insert(
            String::from_utf8_lossy(kv.key()).into_owned(),
            Entry {
                value: kv.value().to_vec(),
                create_revision: kv.create_revision(),
                mod_revision: kv.mod_revision(),
                lease: kv.lease(),
            },
        );
    }
    tx.send_replace(snapshot.clone());
    let mut options = WatchOptions::new().with_start_revision(snapshot.revision + 1);
    if prefix {
        options = options.with_prefix();
    }
    let mut stream = match client.watch(key, Some(options)).await {
        Ok(stream) => stream,
        Err(e) => return format!("watch failed: {e}"),
    };
    loop {
        let response = match stream.message().await {
            Ok(Some(response)) => response,
            Ok(None) => return "watch stream ended".to_string(),
            Err(e) => return format!("watch stream error: {e}"),
        };
        if response.canceled() {
            return format!(
                "watch canceled (compacted at {}): {}",
                response.compact_revision(),
                response.cancel_reason()
            );
        }
        if response.events().is_empty() {
            continue;
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let name = String::from_utf8_lossy(kv.key()).into_owned();
            match event.event_type() {
                EventType::Put => {
                    snapshot.entries.insert(
                        name,
                        Entry {
                            value: kv.value().to_vec(),
                            create_revision: kv.create_revision(),
                            mod_revision: kv.mod_revision(),
                            lease: kv.lease(),
                        },
                    );
                }
                EventType::Delete => {
                    snapshot.entries.remove(&name);
                }
            }
            snapshot.revision = snapshot.revision.max(kv.mod_revision());
        }
        if let Some(h) = response.header() {
            snapshot.revision = snapshot.revision.max(h.revision());
        }
        tx.send_replace(snapshot.clone());
    }
}
