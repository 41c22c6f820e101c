//! Aligning N input channels into one ordered stream: the receiver's pure
//! state machine (no I/O, so it is tested directly and by property tests).
//!
//! # Architecture
//!
//! ```text
//!  push(ch, item) ─▶ queue[ch] ─┐   per-channel checks at push:
//!  push(ch, item) ─▶ queue[ch] ─┼─▶ pop() ─▶ Data | Barrier | Watermark | End
//!  push(ch, item) ─▶ queue[ch] ─┘   barrier order, watermark regression,
//!                                   nothing after end of stream
//! ```
//!
//! Alignment is exactly the local rule: when a channel's barrier B is
//! popped, that channel is blocked (its queue is not drained past B) until
//! every channel that has not ended has popped B; then B is emitted once and
//! all channels unblock. A channel that ended counts as aligned. The output
//! watermark is the minimum over the channels that have not ended, emitted
//! only when it advances, and nothing until every channel has reported one.
//! End of stream is emitted once, when every channel has ended.
//!
//! Each popped item releases its charged bytes to the channel's credit
//! ([`Aligner::take_released`]): a blocked channel's queue stays full, so
//! its sender runs out of credit and stops, the shuffle's form of
//! alignment backpressure.

use std::collections::VecDeque;

use arrow::record_batch::RecordBatch;

use crate::error::Violation;

/// A checkpoint barrier: `(checkpoint_id, attempt)`, ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BarrierId {
    /// The checkpoint.
    pub checkpoint_id: u64,
    /// The attempt of that checkpoint.
    pub attempt: u32,
}

impl std::fmt::Display for BarrierId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "checkpoint {} attempt {}",
            self.checkpoint_id, self.attempt
        )
    }
}

/// One item of one channel, in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub enum ChannelItem {
    /// Rows.
    Data(RecordBatch),
    /// A checkpoint barrier.
    Barrier(BarrierId),
    /// The channel's event-time watermark, in milliseconds.
    Watermark(i64),
    /// The channel's end.
    EndOfStream,
}

/// What the consumer of an edge sees.
#[derive(Debug, Clone, PartialEq)]
pub enum ShuffleEvent {
    /// Rows from one channel.
    Data(RecordBatch),
    /// A barrier every live channel has delivered.
    Barrier(BarrierId),
    /// The minimum watermark over the live channels advanced to this.
    Watermark(i64),
    /// Every channel ended.
    EndOfStream,
}

/// A violation found while popping, with the channel that caused it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlignError {
    /// The channel index.
    pub channel: usize,
    /// What it did.
    pub violation: Violation,
}

#[derive(Debug, Default)]
struct Channel {
    queue: VecDeque<(ChannelItem, u64)>,
    /// Bytes popped and not yet returned as credit.
    released_bytes: u64,
    /// Frames popped and not yet returned as credit.
    released_frames: u64,
    blocked: bool,
    ended: bool,
    failed: bool,
    watermark: Option<i64>,
    // Push-side checks.
    last_barrier_pushed: Option<BarrierId>,
    last_watermark_pushed: Option<i64>,
    end_pushed: bool,
    queued_bytes: u64,
}

/// The alignment state of one edge's channels.
#[derive(Debug)]
pub struct Aligner {
    channels: Vec<Channel>,
    pending: Option<BarrierId>,
    emitted_watermark: Option<i64>,
    end_emitted: bool,
    cursor: usize,
}

impl Aligner {
    /// An aligner over `channels` inputs.
    pub fn new(channels: usize) -> Self {
        Self {
            channels: (0..channels).map(|_| Channel::default()).collect(),
            pending: None,
            emitted_watermark: None,
            end_emitted: false,
            cursor: 0,
        }
    }

    /// The channel count.
    pub fn channel_count(&self) -> usize {
        self.channels.len()
    }

    /// Queue an item of `channel` charged `bytes` of credit; refuses what
    /// breaks the channel's own order (the channel should then be cut).
    pub fn push(&mut self, channel: usize, item: ChannelItem, bytes: u64) -> Result<(), Violation> {
        let count = self.channels.len();
        let Some(ch) = self.channels.get_mut(channel) else {
            return Err(Violation::NoSuchChannel { channel, count });
        };
        if ch.end_pushed {
            return Err(Violation::FrameAfterEndOfStream);
        }
        match &item {
            ChannelItem::Barrier(b) => {
                if let Some(last) = ch.last_barrier_pushed {
                    if *b <= last {
                        return Err(Violation::BarrierOutOfOrder {
                            got: (b.checkpoint_id, b.attempt),
                            expected: format!("a barrier after {last}"),
                        });
                    }
                }
                ch.last_barrier_pushed = Some(*b);
            }
            ChannelItem::Watermark(ms) => {
                if let Some(previous) = ch.last_watermark_pushed {
                    if *ms < previous {
                        return Err(Violation::WatermarkRegressed { previous, got: *ms });
                    }
                }
                ch.last_watermark_pushed = Some(*ms);
            }
            ChannelItem::EndOfStream => ch.end_pushed = true,
            ChannelItem::Data(_) => {}
        }
        ch.queued_bytes += bytes;
        ch.queue.push_back((item, bytes));
        Ok(())
    }

    /// Mark `channel` failed: it is drained no further, never ends, and
    /// counts as neither aligned nor ended (the edge cannot finish).
    pub fn fail(&mut self, channel: usize) {
        if let Some(ch) = self.channels.get_mut(channel) {
            ch.failed = true;
            ch.released_bytes += ch.queued_bytes;
            ch.released_frames += ch.queue.len() as u64;
            ch.queued_bytes = 0;
            ch.queue.clear();
        }
    }

    /// Bytes queued over all channels (charged sizes).
    pub fn queued_bytes(&self) -> u64 {
        self.channels.iter().map(|c| c.queued_bytes).sum()
    }

    /// Frames queued over all channels.
    pub fn queued_frames(&self) -> u64 {
        self.channels.iter().map(|c| c.queue.len() as u64).sum()
    }

    /// Whether `channel` is blocked on an unaligned barrier.
    pub fn is_blocked(&self, channel: usize) -> bool {
        self.channels.get(channel).is_some_and(|c| c.blocked)
    }

    /// Frames and bytes popped from `channel` since the last call: credit to
    /// return to its sender.
    pub fn take_released(&mut self, channel: usize) -> (u64, u64) {
        match self.channels.get_mut(channel) {
            Some(ch) => (
                std::mem::take(&mut ch.released_frames),
                std::mem::take(&mut ch.released_bytes),
            ),
            None => (0, 0),
        }
    }

    fn min_watermark(&self) -> Option<i64> {
        let mut min: Option<i64> = None;
        for ch in self.channels.iter().filter(|c| !c.ended) {
            let wm = ch.watermark?;
            min = Some(min.map_or(wm, |m| m.min(wm)));
        }
        min
    }

    fn barrier_aligned(&self) -> bool {
        self.pending.is_some()
            && self
                .channels
                .iter()
                .all(|c| c.ended || (c.blocked && !c.failed))
    }

    /// The next event, if one is ready.
    pub fn pop(&mut self) -> Result<Option<ShuffleEvent>, AlignError> {
        let n = self.channels.len();
        loop {
            if self.barrier_aligned() {
                for ch in &mut self.channels {
                    ch.blocked = false;
                }
                if let Some(b) = self.pending.take() {
                    return Ok(Some(ShuffleEvent::Barrier(b)));
                }
            }
            if let Some(wm) = self.min_watermark() {
                if self.emitted_watermark.is_none_or(|e| wm > e) {
                    self.emitted_watermark = Some(wm);
                    return Ok(Some(ShuffleEvent::Watermark(wm)));
                }
            }
            if !self.end_emitted && self.channels.iter().all(|c| c.ended) {
                self.end_emitted = true;
                return Ok(Some(ShuffleEvent::EndOfStream));
            }
            let Some(i) = (0..n).map(|k| (self.cursor + k) % n).find(|&i| {
                let c = &self.channels[i];
                !c.blocked && !c.ended && !c.failed && !c.queue.is_empty()
            }) else {
                return Ok(None);
            };
            self.cursor = (i + 1) % n;
            let ch = &mut self.channels[i];
            let Some((item, bytes)) = ch.queue.pop_front() else {
                return Ok(None);
            };
            ch.queued_bytes -= bytes;
            ch.released_bytes += bytes;
            ch.released_frames += 1;
            match item {
                ChannelItem::Data(batch) => return Ok(Some(ShuffleEvent::Data(batch))),
                ChannelItem::Watermark(ms) => ch.watermark = Some(ms),
                ChannelItem::EndOfStream => ch.ended = true,
                ChannelItem::Barrier(b) => {
                    match self.pending {
                        None => self.pending = Some(b),
                        Some(p) if p == b => {}
                        Some(p) => {
                            return Err(AlignError {
                                channel: i,
                                violation: Violation::BarrierOutOfOrder {
                                    got: (b.checkpoint_id, b.attempt),
                                    expected: format!(
                                        "{p}, which the other channels are aligning on"
                                    ),
                                },
                            })
                        }
                    }
                    self.channels[i].blocked = true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn b(id: u64) -> BarrierId {
        BarrierId {
            checkpoint_id: id,
            attempt: 0,
        }
    }

    #[test]
    fn ended_channels_count_as_aligned_and_leave_the_watermark() {
        let mut a = Aligner::new(2);
        a.push(0, ChannelItem::Watermark(10), 1).unwrap();
        a.push(1, ChannelItem::Watermark(5), 1).unwrap();
        a.push(0, ChannelItem::Barrier(b(1)), 1).unwrap();
        a.push(1, ChannelItem::EndOfStream, 1).unwrap();
        let mut out = Vec::new();
        while let Some(e) = a.pop().unwrap() {
            out.push(e);
        }
        assert_eq!(
            out,
            vec![
                ShuffleEvent::Watermark(5),
                ShuffleEvent::Barrier(b(1)),
                ShuffleEvent::Watermark(10),
            ]
        );
        a.push(0, ChannelItem::EndOfStream, 1).unwrap();
        assert_eq!(a.pop().unwrap(), Some(ShuffleEvent::EndOfStream));
        assert_eq!(a.pop().unwrap(), None);
        assert_eq!(a.take_released(0), (3, 3));
    }

    #[test]
    fn push_refuses_channel_order_violations() {
        let mut a = Aligner::new(1);
        a.push(0, ChannelItem::Barrier(b(2)), 1).unwrap();
        assert!(matches!(
            a.push(0, ChannelItem::Barrier(b(2)), 1),
            Err(Violation::BarrierOutOfOrder { got: (2, 0), .. })
        ));
        a.push(0, ChannelItem::Watermark(7), 1).unwrap();
        assert_eq!(
            a.push(0, ChannelItem::Watermark(6), 1),
            Err(Violation::WatermarkRegressed {
                previous: 7,
                got: 6
            })
        );
        a.push(0, ChannelItem::EndOfStream, 1).unwrap();
        assert_eq!(
            a.push(0, ChannelItem::Watermark(8), 1),
            Err(Violation::FrameAfterEndOfStream)
        );
    }

    #[test]
    fn mismatched_barriers_across_channels_are_refused() {
        let mut a = Aligner::new(2);
        a.push(0, ChannelItem::Barrier(b(1)), 1).unwrap();
        a.push(1, ChannelItem::Barrier(b(2)), 1).unwrap();
        let err = a.pop().unwrap_err();
        assert_eq!(err.channel, 1);
        assert!(matches!(
            err.violation,
            Violation::BarrierOutOfOrder { got: (2, 0), .. }
        ));
    }
}
