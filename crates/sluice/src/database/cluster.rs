//! The database's view of the cluster it runs in: what `SHOW CLUSTER`
//! shows, and the catalog identity a cluster seals.
//!
//! The database does not join a cluster itself; whatever runs it in one
//! (the `sluice` binary's `--cluster` mode, or an embedding program)
//! hands it a [`ClusterInfo`] through
//! [`DatabaseBuilder::cluster_info`](super::DatabaseBuilder::cluster_info).
//! Without one, `SHOW CLUSTER` is refused with how to start a cluster.

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{BooleanArray, Int64Array, StringArray, UInt32Array, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use async_trait::async_trait;

use crate::{Error, Result};

/// Supplies `SHOW CLUSTER`'s rows.
#[async_trait]
pub trait ClusterInfo: Send + Sync {
    /// The cluster's live members now, one row each, read at one moment
    /// (etcd revision). An error is the statement's error, as is.
    async fn members(&self) -> Result<Vec<ClusterMember>>;
}

/// One row of `SHOW CLUSTER`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMember {
    /// The node id.
    pub node: String,
    /// `leader` or `standby`.
    pub role: String,
    /// Whether the row is the node answering.
    pub is_self: bool,
    /// Vnodes it owns in the current assignment.
    pub vnodes: u32,
    /// The assignment generation (etcd revision that wrote the table).
    pub generation: u64,
    /// Rows read so far, if it runs the pipeline and reported.
    pub rows_in: Option<u64>,
    /// Rows written so far.
    pub rows_out: Option<u64>,
    /// Its watermark (ms since the epoch; `i64::MIN`, before its sources
    /// set one, shows as no value).
    pub watermark_ms: Option<i64>,
    /// Its newest committed checkpoint id.
    pub checkpoint: Option<u64>,
    /// How long ago it reported (ms; its clock against the answering node's).
    pub report_age_ms: Option<i64>,
    /// Whether it asks the leader for checkpoints: its process functions
    /// hold input that only a committed checkpoint releases.
    pub asks_for_checkpoints: bool,
}
// `SHOW CLUSTER` adds `watermark_lag_ms`, each member's watermark behind
// the most advanced member's, computed from the rows (`watermark_lags`).

/// A catalog's identity: what a cluster seals and compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogFingerprints {
    /// The whole catalog's fingerprint (also what checkpoints carry).
    pub whole: String,
    /// Each object's fingerprint, keyed `kind name` (`stream totals`).
    pub objects: BTreeMap<String, String>,
}

/// `SHOW CLUSTER` as a table.
pub(super) async fn show(info: Option<&Arc<dyn ClusterInfo>>) -> Result<Vec<RecordBatch>> {
    let Some(info) = info else {
        return Err(Error::Catalog(
            "SHOW CLUSTER: this database does not run in a cluster (start it with \
             `sluice run --cluster etcd=http://HOST:2379 --node-id NAME --state URL FILE.sql`)"
                .into(),
        ));
    };
    let rows = info.members().await?;
    let lags = watermark_lags(&rows);
    let schema = Arc::new(Schema::new(vec![
        Field::new("node", DataType::Utf8, false),
        Field::new("role", DataType::Utf8, false),
        Field::new("is_self", DataType::Boolean, false),
        Field::new("vnodes", DataType::UInt32, false),
        Field::new("generation", DataType::UInt64, false),
        Field::new("rows_in", DataType::UInt64, true),
        Field::new("rows_out", DataType::UInt64, true),
        Field::new("watermark_ms", DataType::Int64, true),
        Field::new("checkpoint", DataType::UInt64, true),
        Field::new("report_age_ms", DataType::Int64, true),
        Field::new("watermark_lag_ms", DataType::Int64, true),
        Field::new("asks_for_checkpoints", DataType::Boolean, false),
    ]));
    let strings =
        |f: fn(&ClusterMember) -> &str| Arc::new(StringArray::from_iter_values(rows.iter().map(f)));
    Ok(vec![RecordBatch::try_new(
        schema,
        vec![
            strings(|r| &r.node),
            strings(|r| &r.role),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| Some(r.is_self)),
            )),
            Arc::new(UInt32Array::from_iter_values(rows.iter().map(|r| r.vnodes))),
            Arc::new(UInt64Array::from_iter_values(
                rows.iter().map(|r| r.generation),
            )),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.rows_in))),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.rows_out))),
            Arc::new(Int64Array::from_iter(rows.iter().map(watermark_set))),
            Arc::new(UInt64Array::from_iter(rows.iter().map(|r| r.checkpoint))),
            Arc::new(Int64Array::from_iter(rows.iter().map(|r| r.report_age_ms))),
            Arc::new(Int64Array::from(lags)),
            Arc::new(BooleanArray::from_iter(
                rows.iter().map(|r| Some(r.asks_for_checkpoints)),
            )),
        ],
    )?])
}

/// How far each member's watermark trails the most advanced member's
/// (ms; 0 for the most advanced): the member holding a cluster's windows
/// back shows the largest lag. `None` for a member that reported no
/// watermark yet (none, or `i64::MIN`: its sources have not set one),
/// and for every member while none has.
fn watermark_lags(rows: &[ClusterMember]) -> Vec<Option<i64>> {
    let front = rows.iter().filter_map(watermark_set).max();
    rows.iter()
        .map(|r| Some(front?.saturating_sub(watermark_set(r)?)))
        .collect()
}

/// A member's watermark, if its sources set one (`i64::MIN`, what a
/// pipeline reports before any, shows as no value).
fn watermark_set(r: &ClusterMember) -> Option<i64> {
    r.watermark_ms.filter(|w| *w != i64::MIN)
}
