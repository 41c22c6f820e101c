//! Source runtimes: messages into the coordinator, file readers, push handles.
//!
//! Every source feeds one channel into the coordinator, bounded twice: by a
//! count of messages (`channel_capacity`) and by the bytes of the batches
//! queued (`source_queue_bytes`, see [`crate::budget`]). A full channel, or
//! one holding 80% of its byte budget, blocks the reader (or the pushing
//! caller): that is the pipeline's backpressure. When an output is full the
//! coordinator stops taking from this channel, so the pressure reaches the
//! readers through it.

use std::sync::Arc;
use std::thread::JoinHandle;

use arrow::datatypes::SchemaRef;
use arrow::record_batch::RecordBatch;
use sluice_connectors::BatchReader;
use sluice_sync::{ReaderGate, Step};
use tokio::sync::mpsc;

use crate::budget::{BudgetTicket, ByteBudget};
use crate::error::{EngineError, Result};
use crate::metrics::PipelineMetrics;
use crate::operators::check_batch_schema;

/// What a source tells the coordinator.
#[derive(Debug)]
pub enum SourceEvent {
    /// Rows.
    Batch(RecordBatch),
    /// A hand-advanced watermark (ms).
    Watermark(i64),
    /// No more rows; `offset` is the reader's final replay position.
    Finished {
        /// Replay offset at the end.
        offset: Option<String>,
    },
    /// The checkpoint barrier of `attempt`: every batch before it belongs
    /// to the checkpoint, and `offset` is where a replay resumes.
    Barrier {
        /// Checkpoint attempt id.
        attempt: u64,
        /// Replay offset after the last batch before the barrier.
        offset: Option<String>,
    },
    /// The source failed (its error names the source and keeps the
    /// connector's code, e.g. `SLC-CONN-002` for a malformed row); the
    /// pipeline halts with it.
    Failed(EngineError),
    /// The reader panicked ([`EngineError::Panicked`], naming the source and
    /// carrying the panic's message): a halt without checkpoints, a fault
    /// with them.
    Panicked(EngineError),
}

/// A message on the source channel.
#[derive(Debug)]
pub struct SourceMessage {
    /// Source name.
    pub source: Arc<str>,
    /// The event.
    pub event: SourceEvent,
    /// The batch's bytes in the channel's byte budget, released when the
    /// message is dropped (None for messages sent outside a budget).
    pub ticket: Option<BudgetTicket>,
}

impl SourceMessage {
    /// A message outside any byte budget.
    pub fn new(source: Arc<str>, event: SourceEvent) -> Self {
        Self {
            source,
            event,
            ticket: None,
        }
    }
}

/// The sending side of the source channel: a count-bounded tokio channel
/// plus the byte budget of the batches in it.
#[derive(Clone, Debug)]
pub struct SourceSender {
    tx: mpsc::Sender<SourceMessage>,
    budget: Option<Arc<ByteBudget>>,
}

impl From<mpsc::Sender<SourceMessage>> for SourceSender {
    /// A sender bounded by count only.
    fn from(tx: mpsc::Sender<SourceMessage>) -> Self {
        Self { tx, budget: None }
    }
}

/// The source channel: at most `capacity` messages and (from 80% on)
/// `bytes` of batches queued.
pub fn source_channel(
    capacity: usize,
    bytes: u64,
) -> (SourceSender, mpsc::Receiver<SourceMessage>) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let budget = Some(ByteBudget::new(bytes));
    (SourceSender { tx, budget }, rx)
}

impl SourceSender {
    /// The byte budget, if the channel has one.
    pub fn budget(&self) -> Option<&Arc<ByteBudget>> {
        self.budget.as_ref()
    }

    /// Wait for room in the byte budget, then charge a batch's bytes.
    /// Waiting ends early when the coordinator closed the channel.
    async fn admit(&self, source: Arc<str>, event: SourceEvent) -> SourceMessage {
        let mut message = SourceMessage::new(source, event);
        if let (Some(budget), SourceEvent::Batch(b)) = (&self.budget, &message.event) {
            tokio::select! {
                _ = budget.admit() => {}
                _ = self.tx.closed() => {}
            }
            message.ticket = Some(budget.charge(b.get_array_memory_size() as u64));
        }
        message
    }

    /// Send, waiting while the channel is full (by count or bytes).
    /// `Err(Closed)`: the coordinator is gone and the message was dropped.
    pub async fn send(
        &self,
        source: Arc<str>,
        event: SourceEvent,
    ) -> std::result::Result<(), Closed> {
        let message = self.admit(source, event).await;
        self.tx.send(message).await.map_err(|_| Closed)
    }

    /// [`Self::send`] from a thread outside any runtime (a reader).
    pub fn blocking_send(
        &self,
        source: Arc<str>,
        event: SourceEvent,
    ) -> std::result::Result<(), Closed> {
        futures::executor::block_on(self.send(source, event))
    }
}

/// The coordinator closed the source channel: nobody takes input any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

/// Lets the coordinator ask a reader thread for a checkpoint barrier, hold
/// it back (watermark alignment) and stop it: a shared handle on the
/// reader's [`ReaderGate`], whose handshake is model-checked with loom
/// (crate `sluice-sync`).
#[derive(Clone, Default)]
pub struct SourceBarrierControl {
    gate: Arc<ReaderGate>,
}

impl SourceBarrierControl {
    /// Ask for the barrier of `attempt` after the reader's current batch.
    pub fn inject(&self, attempt: u64) {
        self.gate.request_barrier(attempt);
    }

    /// Withdraw a barrier request (attempt abandoned).
    pub fn withdraw(&self) {
        self.gate.withdraw();
    }

    /// Make the reader thread exit at its next step.
    pub fn stop(&self) {
        self.gate.stop();
    }

    /// Hold the reader before its next batch (`true`) or let it read
    /// again (`false`). A held reader still answers barrier requests and
    /// stops when asked. Returns whether the state changed.
    pub fn hold(&self, held: bool) -> bool {
        self.gate.hold(held)
    }
}

/// Drive a connector's reader on its own thread until the end of its input
/// or until the coordinator goes away. Between batches the thread answers
/// barrier requests with a [`SourceEvent::Barrier`] carrying its offset.
pub fn spawn_reader(
    name: Arc<str>,
    mut reader: Box<dyn BatchReader>,
    tx: SourceSender,
    metrics: Arc<PipelineMetrics>,
    control: SourceBarrierControl,
) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new()
        .name(format!("sluice-source-{name}"))
        .spawn(move || {
            let send = |event: SourceEvent| {
                !control.gate.is_stopped() && tx.blocking_send(Arc::clone(&name), event).is_ok()
            };
            // A panicking reader must still tell the coordinator, or the
            // pipeline would wait for its Finished message forever.
            let read = crate::panic::contain(
                || format!("source '{name}': the reader"),
                || read_until_done(&name, reader.as_mut(), &metrics, &control, &send),
            );
            if let Err(e) = read {
                tracing::error!(source = %name, error = %e, "source reader panicked");
                send(SourceEvent::Panicked(e));
            }
        })
}

/// The reader loop: batches, barriers when asked, then Finished or Failed.
fn read_until_done(
    name: &Arc<str>,
    reader: &mut dyn BatchReader,
    metrics: &PipelineMetrics,
    control: &SourceBarrierControl,
    send: &dyn Fn(SourceEvent) -> bool,
) {
    let mut answered = 0u64;
    loop {
        match control.gate.next_step(&mut answered) {
            Step::Barrier(attempt) => {
                let offset = reader.offset();
                if !send(SourceEvent::Barrier { attempt, offset }) {
                    return;
                }
                continue;
            }
            Step::Stop => return,
            Step::Read => {}
        }
        let event = match reader.next_batch() {
            Ok(Some(b)) => {
                match crate::fault::hit(crate::fault::FaultSite::Source, name, b.num_rows() as u64)
                {
                    Ok(()) => SourceEvent::Batch(b),
                    Err(e) => SourceEvent::Failed(e.context(format!("source '{name}'"))),
                }
            }
            Ok(None) => SourceEvent::Finished {
                offset: reader.offset(),
            },
            Err(e) => SourceEvent::Failed(EngineError::from(e).context(format!("source '{name}'"))),
        };
        let skipped = reader.skipped_rows();
        metrics.source(name, |c| c.skipped_rows = skipped);
        let last = !matches!(event, SourceEvent::Batch(_));
        if !send(event) || last {
            return;
        }
    }
}

/// The Rust handle of a push source.
#[derive(Clone)]
pub struct PushSource {
    name: Arc<str>,
    schema: SchemaRef,
    tx: SourceSender,
    /// Shared by every handle of the source: set by `finish`.
    finished: Arc<std::sync::atomic::AtomicBool>,
    /// Why the coordinator died, if it did (reported instead of "not running").
    death: crate::seam::CoordinatorDeath,
}

impl PushSource {
    /// A handle feeding `tx`; `finished` is shared by all handles of the
    /// source, so a finished source refuses rows from any of them.
    pub fn new(
        name: Arc<str>,
        schema: SchemaRef,
        tx: impl Into<SourceSender>,
        finished: Arc<std::sync::atomic::AtomicBool>,
    ) -> Self {
        Self {
            name,
            schema,
            tx: tx.into(),
            finished,
            death: Default::default(),
        }
    }

    /// Report `death` (the coordinator's panic) when a push finds the
    /// pipeline gone.
    pub fn watching(mut self, death: crate::seam::CoordinatorDeath) -> Self {
        self.death = death;
        self
    }

    fn check_open(&self) -> Result<()> {
        if self.finished.load(std::sync::atomic::Ordering::Acquire) {
            return Err(EngineError::Catalog(format!(
                "source '{}' was finished; it accepts no more rows or watermarks",
                self.name
            )));
        }
        Ok(())
    }

    /// The source's declared columns.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    async fn send(&self, event: SourceEvent) -> Result<()> {
        self.tx
            .send(Arc::clone(&self.name), event)
            .await
            .map_err(|_| self.death.not_running())
    }

    /// Push a batch; waits while the pipeline is backpressured (the source
    /// channel is full by count, or holds 80% of `source_queue_bytes`). The batch
    /// must have exactly the declared columns and types.
    pub async fn push(&self, batch: RecordBatch) -> Result<()> {
        self.check_open()?;
        check_batch_schema(&format!("source '{}'", self.name), &self.schema, &batch)?;
        if batch.num_rows() == 0 {
            return Ok(());
        }
        self.send(SourceEvent::Batch(batch)).await
    }

    /// Advance the source's watermark to `ts_ms` (milliseconds since the epoch).
    pub async fn advance_watermark(&self, ts_ms: i64) -> Result<()> {
        self.check_open()?;
        self.send(SourceEvent::Watermark(ts_ms)).await
    }

    /// Declare that no more rows will come: the source stops holding the
    /// watermark, and later pushes are refused. Finishing twice is fine.
    pub async fn finish(&self) -> Result<()> {
        if self
            .finished
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return Ok(());
        }
        self.send(SourceEvent::Finished { offset: None }).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    use arrow::array::Int64Array;
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;

    /// An endless reader that counts the batches asked of it.
    struct Counting(Arc<AtomicUsize>);

    impl BatchReader for Counting {
        fn next_batch(&mut self) -> sluice_connectors::Result<Option<RecordBatch>> {
            let n = self.0.fetch_add(1, Ordering::SeqCst);
            let schema = Arc::new(Schema::new(vec![Field::new("n", DataType::Int64, false)]));
            let column = Arc::new(Int64Array::from(vec![i64::try_from(n).unwrap_or(0)]));
            Ok(RecordBatch::try_new(schema, vec![column]).ok())
        }

        fn offset(&self) -> Option<String> {
            Some(self.0.load(Ordering::SeqCst).to_string())
        }
    }

    type Test = std::result::Result<(), Box<dyn std::error::Error>>;

    fn next(rx: &mut mpsc::Receiver<SourceMessage>) -> std::result::Result<SourceEvent, String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match rx.try_recv() {
                Ok(m) => return Ok(m.event),
                Err(mpsc::error::TryRecvError::Empty) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => return Err(format!("no message from the reader: {e}")),
            }
        }
    }

    /// Drain whatever the reader sent so far.
    fn drain(rx: &mut mpsc::Receiver<SourceMessage>) -> usize {
        let mut n = 0;
        while rx.try_recv().is_ok() {
            n += 1;
        }
        n
    }

    /// A held reader reads nothing, still answers a barrier and a stop, and
    /// reads on when released.
    #[test]
    fn a_held_reader_waits_answers_barriers_and_stops() -> Test {
        let (tx, mut rx) = source_channel(4, 1 << 20);
        let count = Arc::new(AtomicUsize::new(0));
        let control = SourceBarrierControl::default();
        assert!(control.hold(true), "holding changes the state");
        assert!(!control.hold(true), "holding twice does not");
        let thread = spawn_reader(
            Arc::from("s"),
            Box::new(Counting(Arc::clone(&count))),
            tx,
            Arc::new(PipelineMetrics::new()),
            control.clone(),
        )?;
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            count.load(Ordering::SeqCst),
            0,
            "a held reader reads nothing"
        );
        assert_eq!(drain(&mut rx), 0);

        control.inject(7);
        match next(&mut rx)? {
            SourceEvent::Barrier { attempt: 7, offset } => {
                assert_eq!(offset.as_deref(), Some("0"))
            }
            other => return Err(format!("expected barrier 7, got {other:?}").into()),
        }
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            count.load(Ordering::SeqCst),
            0,
            "answering a barrier reads nothing"
        );

        assert!(control.hold(false));
        assert!(matches!(next(&mut rx)?, SourceEvent::Batch(_)));
        assert!(count.load(Ordering::SeqCst) >= 1, "released, it reads");

        control.hold(true);
        // What it read before it saw the hold: at most the channel's room
        // plus the batch in hand.
        std::thread::sleep(Duration::from_millis(150));
        drain(&mut rx);
        std::thread::sleep(Duration::from_millis(150));
        let held_at = count.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            count.load(Ordering::SeqCst),
            held_at,
            "held again, it stops"
        );
        assert!(drain(&mut rx) <= 1);

        control.stop();
        let started = Instant::now();
        while !thread.is_finished() {
            if started.elapsed() > Duration::from_secs(10) {
                return Err("a held reader did not stop".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        thread.join().map_err(|_| "reader thread panicked")?;
        Ok(())
    }
}
