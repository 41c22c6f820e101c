//! Small helpers shared by the checkpoint transactions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{KeyValue, TxnOpResponse, TxnResponse};

/// The first key-value of the `index`-th operation of `response`, if that
/// operation was a read that found a key.
pub(crate) fn first_kv(response: &TxnResponse, index: usize) -> Option<KeyValue> {
    match response.op_responses().into_iter().nth(index) {
        Some(TxnOpResponse::Get(get)) => get.kvs().first().cloned(),
        _ => None,
    }
}

/// The mod revision of the key the `index`-th read found (0: absent).
pub(crate) fn mod_revision_at(response: &TxnResponse, index: usize) -> u64 {
    first_kv(response, index)
        .and_then(|kv| u64::try_from(kv.mod_revision()).ok())
        .unwrap_or(0)
}

/// Wall-clock now in Unix milliseconds (0 if the clock is before 1970).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The monotonic instant of wall-clock deadline `deadline_ms`, measured
/// from now: a deadline already past is now, never "never". Waits use
/// this so a deadline comparison cannot keep them alive forever.
pub(crate) fn instant_of(deadline_ms: u64) -> tokio::time::Instant {
    let left = Duration::from_millis(deadline_ms.saturating_sub(now_ms()));
    tokio::time::Instant::now() + left.min(MAX_WAIT)
}

/// No checkpoint wait is longer than this, whatever deadline it is given.
pub(crate) const MAX_WAIT: Duration = Duration::from_secs(3600);
