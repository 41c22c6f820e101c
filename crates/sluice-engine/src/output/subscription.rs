//! Subscriptions: consumers of a stream's output batches.
//!
//! Each subscriber has a bounded queue. The coordinator never waits on a
//! subscriber: one that falls more than its queue behind is disconnected and
//! told it lagged, so a slow consumer cannot grow memory without bound or
//! stall the pipeline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::error::{EngineError, Result};
use crate::operators::changelog::RETRACT;

/// The kind of one changelog row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChangeKind {
    /// The row was added to the result.
    Insert,
    /// The row was removed from the result.
    Retract,
}

/// One batch delivered to a subscriber.
#[derive(Debug, Clone)]
pub struct ChangeBatch {
    /// The rows (user columns only).
    pub data: RecordBatch,
    /// For a changelog, the kind of each row; None for append-only outputs.
    pub changes: Option<Arc<StringArray>>,
}

impl ChangeBatch {
    fn from_output(batch: &RecordBatch, data_schema: &SchemaRef, changelog: bool) -> Result<Self> {
        let n = data_schema.fields().len();
        let data = RecordBatch::try_new(Arc::clone(data_schema), batch.columns()[..n].to_vec())?;
        let changes = if changelog {
            let c = batch
                .columns()
                .get(n)
                .and_then(|c| c.as_string_opt::<i32>())
                .ok_or_else(|| {
                    EngineError::Internal("changelog batch without change column".into())
                })?;
            Some(Arc::new(c.clone()))
        } else {
            None
        };
        Ok(Self { data, changes })
    }

    /// The kind of row `i` (always Insert for append-only outputs).
    pub fn kind(&self, i: usize) -> ChangeKind {
        match &self.changes {
            Some(c) if c.is_valid(i) && c.value(i) == RETRACT => ChangeKind::Retract,
            _ => ChangeKind::Insert,
        }
    }
}

/// The consuming end of a subscription.
pub struct Subscription {
    rx: mpsc::Receiver<ChangeBatch>,
    lagged: Arc<AtomicBool>,
    schema: SchemaRef,
}

impl Subscription {
    /// The next batch; `Ok(None)` once the stream is dropped or the pipeline
    /// shut down, an error if this subscriber fell too far behind.
    pub async fn next(&mut self) -> Result<Option<ChangeBatch>> {
        match self.rx.recv().await {
            Some(b) => Ok(Some(b)),
            None if self.lagged.load(Ordering::Acquire) => Err(EngineError::Halted(
                "subscriber fell behind its queue (subscription_buffer) and was disconnected"
                    .into(),
            )),
            None => Ok(None),
        }
    }

    /// A batch if one is ready now.
    pub fn try_next(&mut self) -> Option<ChangeBatch> {
        self.rx.try_recv().ok()
    }

    /// The user columns of delivered batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

struct Subscriber {
    tx: mpsc::Sender<ChangeBatch>,
    lagged: Arc<AtomicBool>,
}

struct Topic {
    data_schema: SchemaRef,
    changelog: bool,
    subscribers: Vec<Subscriber>,
}

/// All subscriptions, by stream name.
#[derive(Default)]
pub struct SubscriptionRegistry {
    topics: Mutex<HashMap<String, Topic>>,
}

impl SubscriptionRegistry {
    /// Add a subscriber to `name`.
    pub fn subscribe(
        &self,
        name: &str,
        data_schema: SchemaRef,
        changelog: bool,
        buffer: usize,
    ) -> Subscription {
        let (tx, rx) = mpsc::channel(buffer.max(1));
        let lagged = Arc::new(AtomicBool::new(false));
        let mut topics = self.topics.lock();
        let topic = topics.entry(name.to_string()).or_insert_with(|| Topic {
            data_schema: Arc::clone(&data_schema),
            changelog,
            subscribers: Vec::new(),
        });
        topic.subscribers.push(Subscriber {
            tx,
            lagged: Arc::clone(&lagged),
        });
        Subscription {
            rx,
            lagged,
            schema: data_schema,
        }
    }

    /// Whether anyone listens to `name`.
    pub fn has_subscribers(&self, name: &str) -> bool {
        self.topics
            .lock()
            .get(name)
            .is_some_and(|t| !t.subscribers.is_empty())
    }

    /// Deliver output batches of `name`.
    pub fn publish(&self, name: &str, batches: &[RecordBatch]) -> Result<()> {
        let mut topics = self.topics.lock();
        let Some(topic) = topics.get_mut(name) else {
            return Ok(());
        };
        for b in batches {
            let cb = ChangeBatch::from_output(b, &topic.data_schema, topic.changelog)?;
            topic
                .subscribers
                .retain(|s| match s.tx.try_send(cb.clone()) {
                    Ok(()) => true,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        tracing::warn!(stream = name, "subscriber lagged; disconnecting it");
                        s.lagged.store(true, Ordering::Release);
                        false
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => false,
                });
        }
        Ok(())
    }

    /// End every subscription of `name` (the stream was dropped).
    pub fn close(&self, name: &str) {
        self.topics.lock().remove(name);
    }

    /// End all subscriptions (shutdown).
    pub fn close_all(&self) {
        self.topics.lock().clear();
    }
}
