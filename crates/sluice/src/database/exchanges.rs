//! `SHOW EXCHANGES`: what each exchange of a shuffled split carried
//! between this node and the others, from the pipeline's metrics (the
//! same counters as [`MetricsSnapshot::exchanges`]). A database without a
//! shuffle has no exchange, and the statement is refused saying so.
//!
//! [`MetricsSnapshot::exchanges`]: sluice_engine::metrics::MetricsSnapshot::exchanges

use std::collections::BTreeMap;
use std::sync::Arc;

use arrow::array::{Float64Array, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use sluice_engine::exchange::{ExchangeCounters, ShuffleHandle};

use crate::{Error, Result};

/// `SHOW EXCHANGES` as a table: one row per exchange, by name. Before
/// the pipeline starts (or before a keyed stream exists) the table is
/// empty. Bytes are counted as frames go out, so rows routed but still
/// queued count no bytes yet; the per-row figure is null until a row was
/// routed to another node. `columns_sent` names the input columns the
/// exchange carries to the other nodes (an aggregation's, only those it
/// reads).
pub(super) fn show(
    shuffle: Option<&ShuffleHandle>,
    exchanges: &BTreeMap<String, ExchangeCounters>,
) -> Result<Vec<RecordBatch>> {
    let Some(shuffle) = shuffle else {
        return Err(Error::Option(
            "SHOW EXCHANGES: this database exchanges no rows with other nodes (a node of a \
             split gets a shuffle with DatabaseBuilder::shuffle)"
                .into(),
        ));
    };
    let node = shuffle.0.node();
    let schema = Arc::new(Schema::new(vec![
        Field::new("exchange", DataType::Utf8, false),
        Field::new("node", DataType::Utf8, false),
        Field::new("rows_kept", DataType::UInt64, false),
        Field::new("rows_sent", DataType::UInt64, false),
        Field::new("rows_received", DataType::UInt64, false),
        Field::new("bytes_sent", DataType::UInt64, false),
        Field::new("bytes_per_row_sent", DataType::Float64, true),
        Field::new("columns_sent", DataType::Utf8, true),
    ]));
    // The columns each edge carries (null for one not made yet).
    let carried = shuffle.0.columns_sent();
    let columns_sent = exchanges
        .keys()
        .map(|edge| carried.get(edge).map(|names| names.join(", ")));
    let counters: Vec<&ExchangeCounters> = exchanges.values().collect();
    let column = |f: fn(&ExchangeCounters) -> u64| {
        Arc::new(UInt64Array::from_iter_values(counters.iter().map(|c| f(c))))
    };
    let per_row = counters
        .iter()
        .map(|c| (c.rows_sent > 0).then(|| c.bytes_sent as f64 / c.rows_sent as f64));
    Ok(vec![RecordBatch::try_new(
        schema,
        vec![
            Arc::new(StringArray::from_iter_values(exchanges.keys())),
            Arc::new(StringArray::from_iter_values(std::iter::repeat_n(
                node,
                counters.len(),
            ))),
            column(|c| c.rows_kept),
            column(|c| c.rows_sent),
            column(|c| c.rows_received),
            column(|c| c.bytes_sent),
            Arc::new(Float64Array::from_iter(per_row)),
            Arc::new(StringArray::from_iter(columns_sent)),
        ],
    )?])
}
