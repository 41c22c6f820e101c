//! Every node's view of the assignment table, kept current by a watch.

use tokio::sync::watch;

use super::table::Assignment;
use crate::error::{ClusterError, Result};
use crate::session::Session;
use crate::watch as key_watch;

/// What the watch last saw at the assignment key.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// No listing yet, or no table written yet.
    Nothing,
    /// A decoded table.
    Table(Assignment),
    /// A value this version cannot read (key, reason).
    Unreadable(String, String),
}

/// A node's view of `/sluice/C/assignment`.
#[derive(Debug, Clone)]
pub struct AssignmentView {
    seen: watch::Receiver<Seen>,
}

impl AssignmentView {
    /// Start watching the cluster's assignment key.
    pub fn start(session: &Session) -> Self {
        let key = session.keys().assignment();
        let mut snapshots = key_watch::spawn(session.client(), key.clone(), false);
        let (tx, seen) = watch::channel(Seen::Nothing);
        tokio::spawn(async move {
            loop {
                let next = match snapshots.borrow_and_update().entries.get(&key) {
                    None => Seen::Nothing,
                    Some(entry) => {
                        let generation = u64::try_from(entry.mod_revision).unwrap_or(0);
                        match Assignment::decode(&key, &entry.value, generation) {
                            Ok(a) => Seen::Table(a),
                            Err(ClusterError::Corrupt { key, reason }) => {
                                Seen::Unreadable(key, reason)
                            }
                            Err(e) => Seen::Unreadable(key.clone(), e.to_string()),
                        }
                    }
                };
                tx.send_if_modified(|s| {
                    let changed = *s != next;
                    *s = next;
                    changed
                });
                tokio::select! {
                    () = tx.closed() => return,
                    changed = snapshots.changed() => if changed.is_err() { return },
                }
            }
        });
        Self { seen }
    }

    /// The current table, if one was written; an error if it is unreadable.
    pub fn current(&self) -> Result<Option<Assignment>> {
        match &*self.seen.borrow() {
            Seen::Nothing => Ok(None),
            Seen::Table(a) => Ok(Some(a.clone())),
            Seen::Unreadable(key, reason) => Err(ClusterError::Corrupt {
                key: key.clone(),
                reason: reason.clone(),
            }),
        }
    }

    /// The current generation (0 before the first table).
    pub fn generation(&self) -> u64 {
        match &*self.seen.borrow() {
            Seen::Table(a) => a.generation(),
            _ => 0,
        }
    }

    /// The vnodes `node` owns in the current table.
    pub fn owned_vnodes(&self, node: &str) -> Vec<u32> {
        match &*self.seen.borrow() {
            Seen::Table(a) => a.owned_vnodes(node),
            _ => Vec::new(),
        }
    }

    /// Wait until the table changes; false once the watch ended.
    pub async fn changed(&mut self) -> bool {
        self.seen.changed().await.is_ok()
    }
}
