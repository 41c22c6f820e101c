//! A request to change a running split's member list
//! (`/sluice/C/split-rescale`).
//!
//! A split's list otherwise changes only between runs: every node is
//! stopped and started again with the new list (`split_record`). A
//! rescale request (`sluice cluster rescale`) names the generation it
//! changes and the new list. Each node running that generation sees it,
//! stops at once without a checkpoint of its own (its last committed
//! checkpoint is the cut the next generation starts from, as after a
//! kill), and starts again in the same process with the new list; a node
//! started with the new list waits for them. The next generation is then
//! recorded as for any list change.
//!
//! ```text
//!   gen 1 runs n1,n2 ── request { from 1, n1,n2,n3 } ──► n1, n2 stop
//!      └─► n1, n2 (again) and n3 start with n1,n2,n3 ──► gen 2: n1,n2,n3
//! ```
//!
//! The request names its generation, so a request that was carried out
//! (or overtaken by a change between runs) is ignored by every later one.

use etcd_client::Client;
use serde::{Deserialize, Serialize};

use crate::error::{ClusterError, Result};
use crate::keys::ClusterKeys;
use crate::status::{decode, encode};

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

/// Record `request` (in place of any earlier one).
pub async fn request(client: &Client, keys: &ClusterKeys, request: &RescaleRequest) -> Result<()> {
    let key = keys.split_rescale();
    let value = encode(&key, request)?;
    client
        .clone()
        .put(key, value, None)
        .await
        .map_err(|e| ClusterError::etcd("write of the rescale request", e))?;
    Ok(())
}

/// The request for generation `generation`, if one was made (a request for
/// another generation is none).
pub async fn read(
    client: &Client,
    keys: &ClusterKeys,
    generation: u64,
) -> Result<Option<RescaleRequest>> {
    let key = keys.split_rescale();
    let got = client
        .clone()
        .get(key.clone(), None)
        .await
        .map_err(|e| ClusterError::etcd("read of the rescale request", e))?;
    let Some(kv) = got.kvs().first() else {
        return Ok(None);
    };
    let request: RescaleRequest = decode(&key, kv.value())?;
    Ok((request.from_generation == generation).then_some(request))
}
