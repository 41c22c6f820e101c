//! Subscriptions: consumers of a stream's output batches.
//!
//! Each subscriber has a queue bounded by a count (`subscription_buffer`
//! batches) and by bytes (`subscription_buffer_bytes`, full from 80% on,
//! see [`crate::budget`]). The coordinator never blocks inside a delivery;
//! what happens when a subscriber's queue is full is the subscriber's
//! choice ([`OnLag`]):
//!
//! - `Backpressure` (the default): the batch is still queued, and the
//!   registry reports pressure ([`SubscriptionRegistry::pressure`]). The
//!   coordinator checks it before each cycle and stops polling sources until
//!   the subscriber drains, so the queue exceeds its bound by at most one
//!   cycle's output (more during a checkpoint's alignment or the shutdown
//!   checkpoint, which drain the source channel whatever the pressure).
//! - `Disconnect`: the subscriber is dropped and its next read reports that
//!   it lagged, so a slow consumer never slows the pipeline.
//!
//! A subscription ends cleanly (`Ok(None)`) when its stream is dropped or
//! the pipeline shuts down; when the pipeline halts or faults, its reads
//! report that error (with its cause's code) instead, so a consumer can
//! tell a finished stream from a failed one.
//!
//! ```text
//!  coordinator ─ publish ─► [queue: batches + bytes] ─► Subscription::next
//!       ▲                        │ full?                       │ (ticket drop)
//!       └── pressure() ◄─────────┘        relief (Relief) ◄────┘
//! ```

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::budget::{BudgetTicket, ByteBudget, Relief};
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
    /// For a committed-only subscription, the checkpoint (epoch) whose
    /// commit published these rows.
    pub epoch: Option<u64>,
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
        Ok(Self {
            data,
            changes,
            epoch: None,
        })
    }

    /// The kind of row `i` (always Insert for append-only outputs).
    pub fn kind(&self, i: usize) -> ChangeKind {
        match &self.changes {
            Some(c) if c.is_valid(i) && c.value(i) == RETRACT => ChangeKind::Retract,
            _ => ChangeKind::Insert,
        }
    }
}

pub use crate::options::OnLag;

/// How a subscription behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SubscribeOptions {
    /// What happens when the subscriber falls behind.
    pub on_lag: OnLag,
    /// Batches queued before the subscriber counts as behind.
    pub buffer: usize,
    /// Bytes of queued batches; the subscriber counts as behind from 80% on.
    pub buffer_bytes: u64,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        Self {
            on_lag: OnLag::Backpressure,
            buffer: 1024,
            buffer_bytes: 64 << 20,
        }
    }
}

/// A queued batch and its bytes in the subscriber's budget.
struct Queued {
    batch: ChangeBatch,
    _ticket: BudgetTicket,
}

/// Why the pipeline stopped delivering, as every subscriber is told.
#[derive(Debug, Clone)]
pub enum DeliveryEnd {
    /// The pipeline halted for good because of this.
    Halted(Arc<EngineError>),
    /// A consistency fault stopped intake (recovery replays from the last
    /// committed checkpoint).
    Faulted(Arc<EngineError>),
}

/// Why one subscription ended other than cleanly; read by every later
/// `next()` once its queue is empty.
#[derive(Debug, Clone)]
enum EndReason {
    Lagged,
    Stopped(DeliveryEnd),
}

type EndSlot = Arc<Mutex<Option<EndReason>>>;

/// The consuming end of a subscription.
pub struct Subscription {
    rx: mpsc::UnboundedReceiver<Queued>,
    end: EndSlot,
    schema: SchemaRef,
}

impl Subscription {
    /// The next batch; `Ok(None)` once the stream is dropped or the pipeline
    /// shut down. An error, from then on, if this subscriber fell too far
    /// behind (`SubscriberLagged`) or the pipeline halted or faulted (that
    /// error, with its cause's code), after every batch delivered before.
    pub async fn next(&mut self) -> Result<Option<ChangeBatch>> {
        match self.rx.recv().await {
            Some(q) => Ok(Some(q.batch)),
            None => match self.end.lock().clone() {
                Some(EndReason::Lagged) => Err(EngineError::SubscriberLagged),
                Some(EndReason::Stopped(DeliveryEnd::Halted(c))) => Err(EngineError::halted(c)),
                Some(EndReason::Stopped(DeliveryEnd::Faulted(c))) => Err(EngineError::fault(c)),
                None => Ok(None),
            },
        }
    }

    /// A batch if one is ready now.
    pub fn try_next(&mut self) -> Option<ChangeBatch> {
        self.rx.try_recv().ok().map(|q| q.batch)
    }

    /// The user columns of delivered batches.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }
}

struct Subscriber {
    tx: mpsc::UnboundedSender<Queued>,
    end: EndSlot,
    /// Receives only output of committed checkpoints, tagged with the epoch.
    committed: bool,
    on_lag: OnLag,
    /// Batches queued before the subscriber counts as behind.
    buffer: u64,
    /// Bytes (and batches) queued for it.
    backlog: Arc<ByteBudget>,
}

impl Subscriber {
    /// Whether its queue is at its bound (count, or 80% of its bytes).
    fn is_full(&self) -> bool {
        self.backlog.items() >= self.buffer || self.backlog.is_over_high_water()
    }

    fn queue(&self, batch: ChangeBatch) -> std::result::Result<(), ()> {
        let ticket = self
            .backlog
            .charge(batch.data.get_array_memory_size() as u64);
        self.tx
            .send(Queued {
                batch,
                _ticket: ticket,
            })
            .map_err(|_| ())
    }
}

/// Output of one committed epoch.
type Epoch = (u64, Vec<RecordBatch>);

struct Topic {
    data_schema: SchemaRef,
    changelog: bool,
    subscribers: Vec<Subscriber>,
    /// The running cycle's output, delivered by
    /// [`SubscriptionRegistry::commit_staged`] once every consumer of the
    /// cycle accepted it; each batch with its subscriber form, built when
    /// staged (so a malformed batch fails the cycle there, and a
    /// subscriber that comes before the commit gets it too).
    staged: Vec<(RecordBatch, ChangeBatch)>,
    /// Output since the last checkpoint cut (only kept while checkpointing).
    pending: Vec<RecordBatch>,
    /// Output cut at a checkpoint attempt, published when it commits.
    sealed: Vec<Epoch>,
    /// The most recent committed epochs, for consumers that resume.
    history: VecDeque<Epoch>,
    /// Whether committed epochs are kept: from the first committed-only
    /// subscription on (so high-volume outputs nobody resumes cost nothing).
    retained: bool,
}

impl Topic {
    fn new(data_schema: SchemaRef, changelog: bool) -> Self {
        Self {
            data_schema,
            changelog,
            subscribers: Vec::new(),
            staged: Vec::new(),
            pending: Vec::new(),
            sealed: Vec::new(),
            history: VecDeque::new(),
            retained: false,
        }
    }

    /// Drop the oldest epochs beyond `epochs` or `bytes`.
    fn trim(&mut self, epochs: usize, bytes: usize) {
        let size = |e: &Epoch| e.1.iter().map(|b| b.get_array_memory_size()).sum::<usize>();
        let mut total: usize = self.history.iter().map(size).sum();
        while self.history.len() > epochs || (total > bytes && !self.history.is_empty()) {
            if let Some(e) = self.history.pop_front() {
                total -= size(&e);
            }
        }
    }

    fn send(&mut self, batch: &ChangeBatch, committed: bool, name: &str) {
        self.subscribers.retain(|s| {
            if s.committed != committed {
                return true;
            }
            if s.tx.is_closed() {
                return false;
            }
            if s.on_lag == OnLag::Disconnect && s.is_full() {
                tracing::warn!(stream = name, "subscriber lagged; disconnecting it");
                *s.end.lock() = Some(EndReason::Lagged);
                return false;
            }
            // A backpressure subscriber always gets the batch; a full queue
            // pauses source intake before the next cycle instead.
            s.queue(batch.clone()).is_ok()
        });
    }
}

/// Where a committed-only subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ResumeFrom {
    /// With the next committed epoch.
    #[default]
    Next,
    /// With this epoch (it must still be retained).
    Epoch(u64),
}

/// All subscriptions, by stream name.
#[derive(Default)]
pub struct SubscriptionRegistry {
    topics: Mutex<HashMap<String, Topic>>,
    /// Woken whenever a subscriber takes a batch.
    relief: Arc<Relief>,
    /// Committed epochs retained per stream; 0 while checkpointing is off.
    history_epochs: std::sync::atomic::AtomicUsize,
    /// Bytes of committed output retained per stream.
    history_bytes: std::sync::atomic::AtomicUsize,
}

impl SubscriptionRegistry {
    /// Woken whenever a subscriber takes a batch (a paused coordinator
    /// waits on it; sinks' writers wake it too).
    pub fn relief(&self) -> Arc<Relief> {
        Arc::clone(&self.relief)
    }

    /// Whether a backpressure subscriber's queue is full, and the bytes
    /// queued for all subscribers.
    pub fn pressure(&self) -> (bool, u64) {
        let topics = self.topics.lock();
        let subs = topics.values().flat_map(|t| t.subscribers.iter());
        let (mut full, mut bytes) = (false, 0);
        for s in subs {
            bytes += s.backlog.queued();
            full |= s.on_lag == OnLag::Backpressure && !s.tx.is_closed() && s.is_full();
        }
        (full, bytes)
    }

    fn subscriber(
        &self,
        options: SubscribeOptions,
        extra: usize,
        committed: bool,
    ) -> (Subscriber, mpsc::UnboundedReceiver<Queued>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let subscriber = Subscriber {
            tx,
            end: Arc::new(Mutex::new(None)),
            committed,
            on_lag: options.on_lag,
            buffer: (options.buffer.max(1) + extra) as u64,
            backlog: ByteBudget::with_relief(options.buffer_bytes, Some(self.relief())),
        };
        (subscriber, rx)
    }

    /// Add a subscriber to `name` with a queue of `buffer` batches and the
    /// default byte budget, which backpressures when full (see
    /// [`Self::subscribe_with`]).
    pub fn subscribe(
        &self,
        name: &str,
        data_schema: SchemaRef,
        changelog: bool,
        buffer: usize,
    ) -> Subscription {
        let options = SubscribeOptions {
            buffer,
            ..Default::default()
        };
        self.subscribe_with(name, data_schema, changelog, options)
    }

    /// Add a subscriber to `name`.
    pub fn subscribe_with(
        &self,
        name: &str,
        data_schema: SchemaRef,
        changelog: bool,
        options: SubscribeOptions,
    ) -> Subscription {
        let (subscriber, rx) = self.subscriber(options, 0, false);
        let end = Arc::clone(&subscriber.end);
        let mut topics = self.topics.lock();
        let topic = topics
            .entry(name.to_string())
            .or_insert_with(|| Topic::new(Arc::clone(&data_schema), changelog));
        topic.subscribers.push(subscriber);
        Subscription {
            rx,
            end,
            schema: data_schema,
        }
    }

    /// Deliver output batches of `name` at once: [`Self::stage`] and
    /// [`Self::commit_staged`].
    pub fn publish(&self, name: &str, batches: &[RecordBatch]) -> Result<()> {
        self.stage(name, batches)?;
        self.commit_staged();
        Ok(())
    }

    /// Stage output batches of `name` of the running cycle: nobody sees
    /// them before [`Self::commit_staged`] (every consumer of the cycle
    /// accepted its output), and [`Self::abort_staged`] drops them (the
    /// cycle failed). An error: a batch does not fit the stream's schema.
    pub fn stage(&self, name: &str, batches: &[RecordBatch]) -> Result<()> {
        let mut topics = self.topics.lock();
        let Some(topic) = topics.get_mut(name) else {
            return Ok(());
        };
        for b in batches {
            let cb = ChangeBatch::from_output(b, &topic.data_schema, topic.changelog)?;
            topic.staged.push((b.clone(), cb));
        }
        Ok(())
    }

    /// Deliver every stream's staged output to live subscribers, and keep
    /// it for the next checkpoint cut when committed epochs are retained.
    pub fn commit_staged(&self) {
        let keep = self.history_epochs.load(Ordering::Relaxed) > 0;
        let mut topics = self.topics.lock();
        for (name, topic) in topics.iter_mut() {
            for (b, cb) in std::mem::take(&mut topic.staged) {
                if topic.subscribers.iter().any(|s| !s.committed) {
                    topic.send(&cb, false, name);
                }
                if keep && topic.retained {
                    topic.pending.push(b);
                }
            }
        }
    }

    /// Drop every stream's staged output: its cycle failed, so no
    /// subscriber sees it and no checkpoint cut holds it.
    pub fn abort_staged(&self) {
        for topic in self.topics.lock().values_mut() {
            topic.staged.clear();
        }
    }

    /// Register a stream so its committed epochs are retained even before
    /// anyone subscribes.
    pub fn register(&self, name: &str, data_schema: SchemaRef, changelog: bool) {
        self.topics
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| Topic::new(data_schema, changelog));
    }

    /// Retain up to `epochs` committed epochs and `bytes` of their output
    /// per stream (0 epochs: committed delivery off).
    pub fn set_history(&self, epochs: usize, bytes: usize) {
        self.history_epochs.store(epochs, Ordering::Relaxed);
        self.history_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Cut every stream's pending output at checkpoint `epoch`.
    pub fn reserve_cut(&self, epoch: u64) {
        for topic in self.topics.lock().values_mut() {
            let cut = std::mem::take(&mut topic.pending);
            topic.sealed.push((epoch, cut));
        }
    }

    /// The checkpoint failed: its cut output goes back in front of pending.
    pub fn abort_cut(&self, epoch: u64) {
        for topic in self.topics.lock().values_mut() {
            if let Some(pos) = topic.sealed.iter().position(|(e, _)| *e == epoch) {
                let (_, mut batches) = topic.sealed.remove(pos);
                batches.append(&mut topic.pending);
                topic.pending = batches;
            }
        }
    }

    /// The checkpoint committed: deliver its cut to committed-only
    /// subscribers and retain it for consumers that resume.
    pub fn publish_cut(&self, epoch: u64) -> Result<()> {
        let retain = self.history_epochs.load(Ordering::Relaxed);
        let mut topics = self.topics.lock();
        for (name, topic) in topics.iter_mut() {
            let Some(pos) = topic.sealed.iter().position(|(e, _)| *e == epoch) else {
                continue;
            };
            let (_, batches) = topic.sealed.remove(pos);
            for b in &batches {
                let mut cb = ChangeBatch::from_output(b, &topic.data_schema, topic.changelog)?;
                cb.epoch = Some(epoch);
                topic.send(&cb, true, name);
            }
            topic.history.push_back((epoch, batches));
            topic.trim(retain, self.history_bytes.load(Ordering::Relaxed));
        }
        Ok(())
    }

    /// Subscribe to committed epochs only, starting at `from`. An epoch that
    /// is no longer retained is an error, never a silent gap.
    pub fn subscribe_committed(
        &self,
        name: &str,
        data_schema: SchemaRef,
        changelog: bool,
        options: SubscribeOptions,
        from: ResumeFrom,
    ) -> Result<Subscription> {
        if self.history_epochs.load(Ordering::Relaxed) == 0 {
            return Err(EngineError::Option(
                "committed-only subscriptions need checkpointing (a state directory and checkpoint_interval or delivery)".into(),
            ));
        }
        let mut topics = self.topics.lock();
        let topic = topics
            .entry(name.to_string())
            .or_insert_with(|| Topic::new(Arc::clone(&data_schema), changelog));
        topic.retained = true;
        let replay: Vec<&Epoch> = match from {
            ResumeFrom::Next => vec![],
            ResumeFrom::Epoch(e) => {
                let oldest = topic.history.front().map(|(id, _)| *id);
                let newest = topic.history.back().map(|(id, _)| *id);
                match (oldest, newest) {
                    (Some(o), _) if e < o => {
                        return Err(EngineError::Catalog(format!(
                            "epoch {e} of '{name}' is no longer retained (oldest retained epoch: {o}); resume from {o} or later"
                        )))
                    }
                    (None, _) if e > 0 => {
                        return Err(EngineError::Catalog(format!(
                            "epoch {e} of '{name}' is not retained (no committed epoch is)"
                        )))
                    }
                    (_, Some(n)) if e > n + 1 => {
                        return Err(EngineError::Catalog(format!(
                            "epoch {e} of '{name}' has not been committed yet (newest: {n})"
                        )))
                    }
                    _ => topic.history.iter().filter(|(id, _)| *id >= e).collect(),
                }
            }
        };
        // The replayed backlog comes on top of the buffer.
        let backlog: usize = replay.iter().map(|(_, b)| b.len()).sum();
        let (subscriber, rx) = self.subscriber(options, backlog, true);
        for (epoch, batches) in replay {
            for b in batches {
                let mut cb = ChangeBatch::from_output(b, &topic.data_schema, topic.changelog)?;
                cb.epoch = Some(*epoch);
                subscriber
                    .queue(cb)
                    .map_err(|()| EngineError::Internal("resume backlog lost".into()))?;
            }
        }
        let end = Arc::clone(&subscriber.end);
        topic.subscribers.push(subscriber);
        Ok(Subscription {
            rx,
            end,
            schema: data_schema,
        })
    }

    /// Each stream's retained committed epochs plus the cut being
    /// checkpointed as `epoch`, one part per stream (encoded by the checkpoint
    /// tail, off the compute thread; for the checkpoint, so
    /// consumers can resume after the database restarts too).
    pub fn snapshot_history(&self, epoch: u64) -> Result<Vec<(String, crate::state::StatePart)>> {
        let topics = self.topics.lock();
        let mut out = Vec::new();
        for (name, topic) in topics.iter().filter(|(_, t)| t.retained) {
            let mut w = crate::state::SnapshotWriter::default();
            let mut ids = Vec::new();
            let cut = topic.sealed.iter().filter(|(e, _)| *e == epoch);
            for (id, batches) in topic.history.iter().chain(cut) {
                ids.push(id.to_string());
                for b in batches {
                    let meta = HashMap::from([("epoch".to_string(), id.to_string())]);
                    let schema = b.schema().as_ref().clone().with_metadata(meta);
                    w.push(&b.clone().with_schema(Arc::new(schema))?)?;
                }
            }
            w.set("epochs", ids.join(","));
            out.push((name.clone(), w.finish_deferred()));
        }
        Ok(out)
    }

    /// Restore a stream's retained epochs from [`Self::snapshot_history`].
    pub fn restore_history(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let snap = crate::state::SnapshotReader::new(bytes)?;
        let ids: String = snap.get("epochs")?;
        let mut history: VecDeque<Epoch> = ids
            .split(',')
            .filter(|s| !s.is_empty())
            .filter_map(|s| s.parse().ok())
            .map(|id| (id, Vec::new()))
            .collect();
        for b in snap.parts() {
            let epoch: Option<u64> = b
                .schema()
                .metadata()
                .get("epoch")
                .and_then(|e| e.parse().ok());
            if let Some(slot) = history.iter_mut().find(|(id, _)| Some(*id) == epoch) {
                let plain = b.schema().as_ref().clone().with_metadata(HashMap::new());
                slot.1
                    .push(RecordBatch::try_new(Arc::new(plain), b.columns().to_vec())?);
            }
        }
        if let Some(topic) = self.topics.lock().get_mut(name) {
            topic.retained = !history.is_empty();
            topic.history = history;
            topic.trim(
                self.history_epochs.load(Ordering::Relaxed),
                self.history_bytes.load(Ordering::Relaxed),
            );
        }
        Ok(())
    }

    /// End every subscription of `name` (the stream was dropped).
    pub fn close(&self, name: &str) {
        self.topics.lock().remove(name);
    }

    /// End all subscriptions: cleanly at a shutdown (`None`), else with
    /// the reason every subscriber's reads report.
    pub fn close_all(&self, reason: Option<DeliveryEnd>) {
        let mut topics = self.topics.lock();
        if let Some(reason) = reason {
            for s in topics.values().flat_map(|t| t.subscribers.iter()) {
                s.end
                    .lock()
                    .get_or_insert_with(|| EndReason::Stopped(reason.clone()));
            }
        }
        topics.clear();
    }
}

#[cfg(test)]
#[path = "subscription_tests.rs"]
mod tests;
