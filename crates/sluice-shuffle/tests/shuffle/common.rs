//! Shared helpers: the test schema, batches, servers and raw channels.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Int64Array, UInt32Array};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::record_batch::RecordBatch;
use sluice_shuffle::proto::{
    frame, receiver_message, shuffle_client::ShuffleClient, Frame, Handshake, ReceiverMessage,
    Refused,
};
use sluice_shuffle::{
    ChannelIdentity, OwnerTable, ShuffleEvent, ShuffleReceiver, ShuffleSender, ShuffleServer,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub const PIPELINE: &str = "pipe-1";
pub const EDGE: &str = "edge-agg";

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("vnode", DataType::UInt32, false),
    ]))
}

pub fn batch(keys: Vec<i64>, vnodes: Vec<u32>) -> RecordBatch {
    RecordBatch::try_new(
        schema(),
        vec![
            Arc::new(Int64Array::from(keys)),
            Arc::new(UInt32Array::from(vnodes)),
        ],
    )
    .unwrap()
}

/// The `k` column of a batch.
pub fn keys(batch: &RecordBatch) -> Vec<i64> {
    batch
        .column(0)
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .values()
        .to_vec()
}

pub async fn server(node: &str, generation: u64) -> ShuffleServer {
    ShuffleServer::bind("127.0.0.1:0".parse().unwrap(), PIPELINE, node, generation)
        .await
        .unwrap()
}

pub fn identity(node: &str, generation: u64) -> ChannelIdentity {
    ChannelIdentity {
        pipeline_id: PIPELINE.to_string(),
        sender_node: node.to_string(),
        edge_id: EDGE.to_string(),
        generation,
    }
}

/// A sender on `node` whose only remote destination is `to` (every vnode
/// of a 4-vnode table is owned by `to`).
pub async fn sender_to(
    node: &str,
    to: &ShuffleServer,
    to_node: &str,
    generation: u64,
) -> sluice_shuffle::Result<ShuffleSender> {
    let table = OwnerTable::new(vec![to_node.to_string(), node.to_string()], vec![0; 4]).unwrap();
    let endpoints = HashMap::from([(to_node.to_string(), to.endpoint())]);
    ShuffleSender::connect(identity(node, generation), schema(), 1, table, &endpoints).await
}

/// The next event within 5 s (panics on a timeout, `None` or an error).
pub async fn next_event(receiver: &ShuffleReceiver) -> ShuffleEvent {
    tokio::time::timeout(Duration::from_secs(5), receiver.next())
        .await
        .expect("no event within 5 s")
        .expect("the edge ended")
        .expect("the edge failed")
}

/// The next failure within 5 s.
pub async fn next_error(receiver: &ShuffleReceiver) -> sluice_shuffle::ShuffleError {
    loop {
        match tokio::time::timeout(Duration::from_secs(5), receiver.next())
            .await
            .expect("no failure within 5 s")
        {
            Some(Err(error)) => return error,
            Some(Ok(_)) => continue,
            None => panic!("the edge ended without a failure"),
        }
    }
}

/// Poll until `f` holds (up to 5 s).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

/// A channel driven frame by frame, bypassing the sender's checks.
pub struct RawChannel {
    pub frames: mpsc::Sender<Frame>,
    pub responses: tonic::Streaming<ReceiverMessage>,
}

impl RawChannel {
    pub async fn open(server: &ShuffleServer, first: frame::Kind) -> Self {
        let mut client = ShuffleClient::connect(server.endpoint()).await.unwrap();
        let (frames, rx) = mpsc::channel(16);
        frames.send(Frame { kind: Some(first) }).await.unwrap();
        let responses = client
            .exchange(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        Self { frames, responses }
    }

    pub fn handshake(node: &str, generation: u64) -> frame::Kind {
        frame::Kind::Handshake(Handshake {
            pipeline_id: PIPELINE.to_string(),
            sender_node: node.to_string(),
            edge_id: EDGE.to_string(),
            generation,
        })
    }

    pub async fn send(&self, kind: frame::Kind) {
        // The receiver may already have cut the stream; what it answered is
        // what the tests check.
        let _ = self.frames.send(Frame { kind: Some(kind) }).await;
    }

    /// Read responses until a refusal (panics if the stream ends first).
    pub async fn refusal(&mut self) -> Refused {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(5), self.responses.message())
                .await
                .expect("no refusal within 5 s")
                .unwrap()
                .expect("the stream ended without a refusal");
            if let Some(receiver_message::Kind::Refused(refused)) = message.kind {
                return refused;
            }
        }
    }
}
