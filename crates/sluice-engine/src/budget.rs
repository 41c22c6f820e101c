//! Byte budgets for the queues between pipeline stages (source to
//! coordinator, sink writer queues, subscription queues), and the
//! [`Relief`] a coordinator paused on a full output waits for.
//!
//! They live in `sluice-sync`, whose loom model checks that neither a
//! waiting producer nor a paused coordinator ever misses a release; see
//! its `byte_budget` module for the architecture. Producers stop waiting
//! when their channel closes too (see `SourceSender`), so a stopped
//! coordinator never leaves a reader blocked on a budget.

pub use sluice_sync::{BudgetTicket, ByteBudget, Relief, HIGH_WATER_PERCENT};

/// The bytes `batch`'s rows occupy: their slices of its Arrow buffers,
/// what a copy holding just these rows would take. Byte budgets over rows
/// that cross between nodes count this, because it is the same for the
/// rows a sender built and for the rows a receiver decoded from them;
/// buffer sizes would count a decoded frame once per column (every column
/// of a decoded batch shares the frame's one buffer).
pub fn row_bytes(batch: &arrow::record_batch::RecordBatch) -> u64 {
    batch
        .columns()
        .iter()
        .map(|c| {
            let data = c.to_data();
            data.get_slice_memory_size()
                .unwrap_or_else(|_| data.get_buffer_memory_size()) as u64
        })
        .sum()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use sluice_shuffle::ipc::{IpcDecoder, IpcEncoder};

    use super::row_bytes;

    /// Rows weigh the same on the node that sent them and on the node
    /// that decoded them from the exchange's frames, whose columns all
    /// share one buffer (their buffer sizes count it once per column).
    #[test]
    fn rows_weigh_the_same_sent_and_received() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, false),
            Field::new("v", DataType::Int64, true),
            Field::new("s", DataType::Utf8, true),
        ]));
        let sent = RecordBatch::try_new(
            Arc::clone(&schema),
            vec![
                Arc::new(Int64Array::from_iter_values(0..100)),
                Arc::new(Int64Array::from_iter(
                    (0..100).map(|v| (v % 3 > 0).then_some(v)),
                )),
                Arc::new(StringArray::from_iter_values(
                    (0..100).map(|v| format!("row {v}")),
                )),
            ],
        )
        .unwrap();
        let mut encoder = IpcEncoder::new("e", Arc::clone(&schema));
        let mut decoder = IpcDecoder::new("e", "n2", Arc::clone(&schema));
        let mut received = None;
        for frame in encoder.encode(&sent).unwrap() {
            received = decoder.decode(frame).unwrap().or(received);
        }
        let received = received.unwrap();
        assert_eq!(received, sent);
        assert_eq!(row_bytes(&received), row_bytes(&sent));
        assert!(
            received.get_array_memory_size() > 2 * sent.get_array_memory_size(),
            "buffer sizes count the frame per column: {} against {}",
            received.get_array_memory_size(),
            sent.get_array_memory_size()
        );
        // Slices weigh their rows only.
        assert!(row_bytes(&sent.slice(0, 10)) < row_bytes(&sent) / 5);
    }
}
