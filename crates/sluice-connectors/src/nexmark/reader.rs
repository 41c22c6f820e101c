//! [`NexmarkReader`]: batches of one Nexmark stream, paced and replayable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::ArrayRef;
use arrow::compute::cast;
use arrow::record_batch::RecordBatch;
use nexmark::EventGenerator;

use super::columns::Columns;
use super::{NexmarkConfig, NexmarkStream, BASE_TIME_MS, PARTITION_ROWS, SEED_STRIDE};
use crate::error::{ConnectorError, Result};
use crate::reader::BatchReader;

/// Where a Nexmark reader stands: `produced` rows of `stream` were emitted
/// (or, for a node's share, skipped as other nodes' partitions).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct NexmarkPosition {
    pub stream: String,
    pub seed: u64,
    pub produced: u64,
    /// The identity of the share read (`None`: the whole stream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    /// Partitions after the one `produced` is in whose first rows were
    /// emitted before this share held them (see [`super::handover`]):
    /// partition number → rows of it emitted, from its first. The reader
    /// starts such a partition after them.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub ahead: BTreeMap<u64, u64>,
}

impl NexmarkPosition {
    /// Parse a checkpointed offset of `cfg`'s stream; refused when it is
    /// unreadable or of another stream or seed.
    pub(super) fn parse(cfg: &NexmarkConfig, offset: &str) -> Result<Self> {
        let pos: NexmarkPosition = serde_json::from_str(offset).map_err(|e| {
            ConnectorError::invalid_option(
                "offset",
                format!(
                    "checkpointed Nexmark offset '{}' is unreadable: {e}",
                    crate::quote::bounded(offset)
                ),
            )
        })?;
        if pos.stream != cfg.stream.name() || pos.seed != cfg.seed {
            return Err(ConnectorError::invalid_option(
                "offset",
                format!(
                    "checkpointed offset is for the {} stream with seed {}, but the source reads the {} stream with seed {}",
                    pos.stream, pos.seed, cfg.stream, cfg.seed
                ),
            ));
        }
        Ok(pos)
    }

    /// Rows of partition `block` (its first `len`) this position says were
    /// emitted: all of a partition before `produced`'s, those before
    /// `produced` in its own, and as [`Self::ahead`] says after it.
    pub(super) fn emitted_of(&self, block: u64, len: u64) -> u64 {
        let start = block.saturating_mul(PARTITION_ROWS);
        let passed = self.produced.saturating_sub(start).min(len);
        passed.max(self.ahead.get(&block).copied().unwrap_or(0).min(len))
    }
}

/// Most partitions a share's reader skips in a row before it takes the
/// share to hold none of this stream (a node left without vnodes) and
/// ends: 67 million rows, where a share holding even one vnode of 256
/// misses with a chance below 10^-100.
const MAX_SKIPPED_PARTITIONS: u64 = 65_536;

/// Wall-clock pacing of a throttled reader: global event `g` is due
/// `(g - first) / rate` seconds after the first batch was asked for.
#[derive(Debug)]
struct Pacing {
    rate: u64,
    started: Option<(Instant, u64)>,
}

/// Reads one Nexmark stream as Arrow batches of the declared columns.
pub struct NexmarkReader {
    cfg: NexmarkConfig,
    generator: EventGenerator,
    produced: u64,
    /// Rows of later partitions emitted before this share held them
    /// (see [`NexmarkPosition::ahead`]); an entry goes once it is passed.
    ahead: BTreeMap<u64, u64>,
    total: Option<u64>,
    pacing: Option<Pacing>,
}

impl std::fmt::Debug for NexmarkReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NexmarkReader")
            .field("stream", &self.cfg.stream)
            .field("produced", &self.produced)
            .field("total", &self.total)
            .finish()
    }
}

impl NexmarkReader {
    /// A reader at the start of the stream.
    pub fn open(cfg: NexmarkConfig) -> Result<Self> {
        cfg.validate()?;
        Ok(Self::open_at(cfg, 0))
    }

    /// The identity of the share a checkpointed offset of `cfg`'s stream
    /// was emitted under (`None`: the whole stream).
    pub fn share_of_offset(cfg: &NexmarkConfig, offset: &str) -> Result<Option<String>> {
        Ok(NexmarkPosition::parse(cfg, offset)?.share)
    }

    /// The identity of the share a checkpointed offset of any Nexmark
    /// stream was emitted under; `None` when the offset is not a Nexmark
    /// one or was emitted for the whole stream.
    pub fn share_of_any_offset(offset: &str) -> Option<String> {
        serde_json::from_str::<NexmarkPosition>(offset).ok()?.share
    }

    /// Reopen at an offset produced by [`BatchReader::offset`]: the rows
    /// that follow are identical to those the original reader emitted next.
    pub fn open_at_offset(cfg: NexmarkConfig, offset: &str) -> Result<Self> {
        cfg.validate()?;
        let pos = NexmarkPosition::parse(&cfg, offset)?;
        let share = cfg.share.as_ref().map(|s| s.identity().to_string());
        if pos.share != share {
            let read = |share: &Option<String>| match share {
                Some(identity) => format!("the partitions of share '{identity}'"),
                None => "the whole stream".to_string(),
            };
            return Err(ConnectorError::invalid_option(
                "offset",
                format!(
                    "checkpointed offset of the {} stream was read from {}, but the source now reads {}; a Nexmark source's partitions move to another share only through a handover (nexmark_handover), which starts the new share where the previous ones stopped",
                    cfg.stream,
                    read(&pos.share),
                    read(&share)
                ),
            ));
        }
        let mut reader = Self::open_at(cfg, pos.produced);
        reader.ahead = pos.ahead;
        Ok(reader)
    }

    fn open_at(cfg: NexmarkConfig, produced: u64) -> Self {
        let generator = generator(&cfg, produced);
        let pacing = (cfg.rate > 0).then_some(Pacing {
            rate: cfg.rate,
            started: None,
        });
        Self {
            total: cfg.total_rows(),
            cfg,
            generator,
            produced,
            ahead: BTreeMap::new(),
            pacing,
        }
    }

    /// Move past the partitions this reader's share does not hold, and
    /// past the rows of [`Self::ahead`]'s partitions emitted before it
    /// held them, to the next row it reads (or `total`). `false` when the
    /// share holds no partition within [`MAX_SKIPPED_PARTITIONS`]: it reads
    /// nothing more.
    fn skip_to_held(&mut self, total: u64) -> bool {
        let start = self.produced;
        let mut skipped = 0;
        while self.produced < total {
            let block = self.produced / PARTITION_ROWS;
            let next = (block + 1).saturating_mul(PARTITION_ROWS).min(total);
            let held = self
                .cfg
                .share
                .as_ref()
                .is_none_or(|s| s.holds(&super::partition_key(self.cfg.stream, self.produced)));
            if !held {
                if skipped == MAX_SKIPPED_PARTITIONS {
                    return false;
                }
                skipped += 1;
                self.produced = next;
                continue;
            }
            // Entries of partitions passed go: the position stays small.
            while self
                .ahead
                .first_key_value()
                .is_some_and(|(b, _)| *b < block)
            {
                self.ahead.pop_first();
            }
            let emitted = match self.ahead.get(&block) {
                Some(rows) => block.saturating_mul(PARTITION_ROWS).saturating_add(*rows),
                None => 0,
            };
            if self.produced >= emitted {
                break;
            }
            self.produced = emitted.min(next);
        }
        if self.produced != start {
            self.generator = generator(&self.cfg, self.produced);
        }
        true
    }
}

/// The generator of `cfg`'s stream at its row `produced`.
fn generator(cfg: &NexmarkConfig, produced: u64) -> EventGenerator {
    let mut base = nexmark::config::NexmarkConfig {
        base_time: BASE_TIME_MS.unsigned_abs(),
        // The generator's own clock stays at Nexmark's density whatever
        // `event_time_rate` is: its random draws depend on it (an
        // auction's length), so the rows stay the same and the columns
        // scale the lengths instead.
        first_rate: 10_000,
        next_rate: 10_000,
        ..Default::default()
    };
    base.first_event_id = usize::try_from(cfg.seed.saturating_mul(SEED_STRIDE)).unwrap_or(0);
    EventGenerator::new(base)
        .with_type_filter(cfg.stream.event_type())
        .with_offset(produced)
}

impl NexmarkReader {
    /// Rows of the stream emitted so far (including those before a reopen).
    pub fn produced(&self) -> u64 {
        self.produced
    }

    /// The configuration.
    pub fn config(&self) -> &NexmarkConfig {
        &self.cfg
    }

    /// Event time (ms since the epoch) of global event `g` under `cfg`.
    pub fn event_time(cfg: &NexmarkConfig, g: u64) -> i64 {
        let ms = u128::from(g) * 1000 / u128::from(cfg.event_time_rate.max(1));
        let nominal = BASE_TIME_MS.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX));
        if cfg.out_of_order_ms == 0 {
            return nominal;
        }
        let delay = mix(cfg.seed, g) % (cfg.out_of_order_ms + 1);
        nominal.saturating_sub(i64::try_from(delay).unwrap_or(0))
    }

    /// Rows the next batch may hold once pacing allows (sleeping if needed).
    fn due_rows(&mut self, wanted: u64) -> u64 {
        let stream = self.cfg.stream;
        let produced = self.produced;
        let Some(p) = self.pacing.as_mut() else {
            return wanted;
        };
        let (start, first) = *p
            .started
            .get_or_insert_with(|| (Instant::now(), stream.global_event(produced)));
        loop {
            let elapsed = start.elapsed().as_nanos();
            let due_global = first.saturating_add(
                u64::try_from(elapsed * u128::from(p.rate) / 1_000_000_000).unwrap_or(u64::MAX),
            );
            let due = stream.rows_in(due_global.saturating_add(1));
            if due > produced {
                return wanted.min(due - produced);
            }
            let next = stream.global_event(produced) - first;
            let at = Duration::from_nanos(
                u64::try_from(u128::from(next) * 1_000_000_000 / u128::from(p.rate))
                    .unwrap_or(u64::MAX),
            );
            std::thread::sleep(
                at.saturating_sub(start.elapsed())
                    .max(Duration::from_micros(50)),
            );
        }
    }

    fn position(&self) -> NexmarkPosition {
        NexmarkPosition {
            stream: self.cfg.stream.name().to_string(),
            seed: self.cfg.seed,
            produced: self.produced,
            share: self.cfg.share.as_ref().map(|s| s.identity().to_string()),
            ahead: self.ahead.clone(),
        }
    }
}

/// A well-mixed 64-bit hash of (seed, event number) (splitmix64 finalizer).
fn mix(seed: u64, g: u64) -> u64 {
    let mut z = g ^ seed.rotate_left(32) ^ 0x9E37_79B9_7F4A_7C15;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl BatchReader for NexmarkReader {
    fn next_batch(&mut self) -> Result<Option<RecordBatch>> {
        let total = self.total.unwrap_or(u64::MAX);
        if !self.skip_to_held(total) {
            return Ok(None);
        }
        let remaining = total.saturating_sub(self.produced);
        if remaining == 0 {
            return Ok(None);
        }
        let mut wanted = remaining.min(self.cfg.batch_size as u64);
        if self.cfg.share.is_some() || !self.ahead.is_empty() {
            // A batch ends with its partition: the next may be another's,
            // or begin with rows emitted before this share held it.
            wanted = wanted.min(PARTITION_ROWS - self.produced % PARTITION_ROWS);
        }
        let n = self.due_rows(wanted);
        let stream: NexmarkStream = self.cfg.stream;
        let what = format!("nexmark {stream} stream");
        let mut cols = Columns::new(stream, usize::try_from(n).unwrap_or(0));
        for _ in 0..n {
            let g = stream.global_event(self.produced);
            let event = self
                .generator
                .next()
                .ok_or_else(|| ConnectorError::schema(&what, "the generator ended"))?;
            if !cols.push(
                &event,
                Self::event_time(&self.cfg, g),
                self.cfg.event_time_rate,
            ) {
                return Err(ConnectorError::schema(
                    &what,
                    format!("the generator produced a {:?} event", event.event_type()),
                ));
            }
            self.produced += 1;
        }
        let full = cols.finish();
        let columns = self
            .cfg
            .projection()
            .iter()
            .zip(self.cfg.schema.fields())
            .map(|(i, field)| {
                let col = Arc::clone(&full[*i]);
                if col.data_type() == field.data_type() {
                    Ok(col)
                } else {
                    cast(&col, field.data_type()).map_err(|e| {
                        ConnectorError::arrow(format!("{what}: column '{}'", field.name()), e)
                    })
                }
            })
            .collect::<Result<Vec<ArrayRef>>>()?;
        let batch = RecordBatch::try_new(Arc::clone(&self.cfg.schema), columns)
            .map_err(|e| ConnectorError::arrow(format!("{what}: building a batch"), e))?;
        Ok(Some(batch))
    }

    fn offset(&self) -> Option<String> {
        serde_json::to_string(&self.position()).ok()
    }
}
