//! Small helpers shared by the checkpoint transactions.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{KeyValue, TxnOpResponse, TxnResponse};
use serde::de::DeserializeOwned;

use super::record::{decode_kv, parse_id, Formatted, Stored};
use crate::error::{ClusterError, Result};
use crate::session::Session;

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

/// Read the one key `key` (`what` names it in an error).
pub(crate) async fn get_one(session: &Session, key: &str, what: &str) -> Result<Option<KeyValue>> {
    let got = session
        .client()
        .get(key, None)
        .await
        .map_err(|e| ClusterError::etcd(format!("read of {what}"), e))?;
    Ok(got.kvs().first().cloned())
}

/// Read and decode the record at `key`, if it exists.
pub(crate) async fn read_record<T: DeserializeOwned + Formatted>(
    session: &Session,
    key: &str,
    what: &str,
) -> Result<Option<Stored<T>>> {
    get_one(session, key, what)
        .await?
        .as_ref()
        .map(decode_kv)
        .transpose()
}

/// Read a key holding an attempt id: the id and the revision that wrote
/// it, `(0, 0)` if the key was never written.
pub(crate) async fn read_id(session: &Session, key: &str, what: &str) -> Result<(u64, i64)> {
    match get_one(session, key, what).await? {
        Some(kv) => Ok((parse_id(key, kv.value())?, kv.mod_revision())),
        None => Ok((0, 0)),
    }
}
