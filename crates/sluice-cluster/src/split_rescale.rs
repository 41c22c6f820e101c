//! A request to change a running split's member list
//! (`/sluice/C/split-rescale`).
//!
//! A split's list otherwise changes only between runs: every node is
//! stopped and started again with the new list (`split_record`). A
//! rescale request (`sluice cluster rescale`) names the generation it
//! changes and the new list; one request per generation (a second is
//! refused). Each node running that generation sees it and, once it has a
//! checkpoint of the generation, stops without another checkpoint (its
//! last committed checkpoint is the cut the next generation starts from,
//! as after a kill) and starts again in the same process with the new
//! list; a node started with the new list waits for them. The next
//! generation is then recorded as for any list change.
//!
//! ```text
//!   gen 1 runs n1,n2 ── request { from 1, n1,n2,n3 } ──► n1, n2 stop
//!      └─► n1, n2 (again) and n3 start with n1,n2,n3 ──► gen 2: n1,n2,n3
//! ```
//!
//! The request names its generation, so a request that was carried out
//! (or overtaken by a change between runs) is ignored by every later one.

use etcd_client::{Client, Compare, CompareOp, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::keys::ClusterKeys;
use crate::status::{encode, read_json};

/// Start the nodes of generation `from_generation` again with `members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RescaleRequest {
    /// The generation whose nodes start again.
    pub from_generation: u64,
    /// The new member list, sorted.
    pub members: Vec<String>,
    /// For a split whose keyed rows cross between its nodes: where each
    /// new member's shuffle listens (`NODE=IP:PORT,...`), since the nodes
    /// that start again were given the old list's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shuffle: Option<String>,
}

/// Record `request` in place of the request read at etcd revision
/// `request_revision` (0: none), only while the split's record is still
/// the one read at `split_revision`. Whether it was recorded (`false`:
/// another request or a change of the list came first).
pub async fn request(
    client: &Client,
    keys: &ClusterKeys,
    request: &RescaleRequest,
    (split_revision, request_revision): (i64, i64),
) -> Result<bool> {
    let key = keys.split_rescale();
    let value = encode(&key, request)?;
    let txn = Txn::new()
        .when([
            Compare::mod_revision(keys.split(), CompareOp::Equal, split_revision),
            Compare::mod_revision(key.clone(), CompareOp::Equal, request_revision),
        ])
        .and_then([TxnOp::put(key, value, None)]);
    let response = client
        .clone()
        .txn(txn)
        .await
        .map_err(|e| ClusterError::etcd("write of the rescale request", e))?;
    Ok(response.succeeded())
}

/// The request recorded now, whatever its generation, and the etcd
/// revision it was written at (0: none).
pub async fn read_any(
    client: &Client,
    keys: &ClusterKeys,
) -> Result<(Option<RescaleRequest>, i64)> {
    read_json(client, keys.split_rescale(), "read of the rescale request").await
}

/// The request for generation `generation`, if one was made (a request for
/// another generation is none).
pub async fn read(
    client: &Client,
    keys: &ClusterKeys,
    generation: u64,
) -> Result<Option<RescaleRequest>> {
    let (request, _) = read_any(client, keys).await?;
    Ok(request.filter(|r| r.from_generation == generation))
}
