//! One edge's inbox: the aligner over its channels, the credit each channel
//! is owed, and the failures waiting for the consumer. Channel tasks push
//! into it; [`crate::ShuffleReceiver`] pops from it.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::datatypes::SchemaRef;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::align::{AlignError, Aligner, ChannelItem, ShuffleEvent};
use crate::config::CreditBudget;
use crate::error::{Result, ShuffleError, Violation, CODE_PEER_GONE};
use crate::proto::Refused;

/// What a channel task must do next, taken from [`EdgeInbox::control`].
#[derive(Debug, Default)]
pub(crate) struct ControlUpdate {
    /// Credit to grant.
    pub frames: u64,
    /// Credit to grant.
    pub bytes: u64,
    /// Cut the channel with this refusal.
    pub cut: Option<Refused>,
}

#[derive(Debug)]
struct ChannelControl {
    attached: bool,
    grant_frames: u64,
    grant_bytes: u64,
    cut: Option<Refused>,
    notify: Arc<Notify>,
}

#[derive(Debug)]
struct State {
    aligner: Aligner,
    channels: Vec<ChannelControl>,
    failures: VecDeque<ShuffleError>,
    finished: bool,
    closed: bool,
}

/// The shared inbox of one edge.
#[derive(Debug)]
pub(crate) struct EdgeInbox {
    pub edge: String,
    pub schema: SchemaRef,
    pub budget: CreditBudget,
    pub senders: Vec<String>,
    state: Mutex<State>,
    wake: Arc<Notify>,
}

impl EdgeInbox {
    pub fn new(
        edge: &str,
        schema: SchemaRef,
        senders: Vec<String>,
        budget: CreditBudget,
        wake: Arc<Notify>,
    ) -> Self {
        let channels = senders
            .iter()
            .map(|_| ChannelControl {
                attached: false,
                grant_frames: 0,
                grant_bytes: 0,
                cut: None,
                notify: Arc::new(Notify::new()),
            })
            .collect();
        Self {
            edge: edge.to_string(),
            schema,
            budget,
            state: Mutex::new(State {
                aligner: Aligner::new(senders.len()),
                channels,
                failures: VecDeque::new(),
                finished: false,
                closed: false,
            }),
            senders,
            wake,
        }
    }

    /// The consumer's wake.
    pub fn wake(&self) -> Arc<Notify> {
        Arc::clone(&self.wake)
    }

    /// Attach the channel of `sender`: its index and its control wake.
    pub fn attach(&self, sender: &str) -> Result<(usize, Arc<Notify>)> {
        let unknown = |detail: String| ShuffleError::UnknownChannel { detail };
        let index = self
            .senders
            .iter()
            .position(|s| s == sender)
            .ok_or_else(|| {
                unknown(format!(
                    "edge '{}' expects no channel from node '{sender}'",
                    self.edge
                ))
            })?;
        let mut state = self.state.lock();
        if state.closed {
            return Err(unknown(format!("edge '{}' is closed", self.edge)));
        }
        let control = &mut state.channels[index];
        if control.attached {
            return Err(unknown(format!(
                "node '{sender}' already has a channel on edge '{}'",
                self.edge
            )));
        }
        control.attached = true;
        Ok((index, Arc::clone(&control.notify)))
    }

    /// Queue an item of `channel`.
    pub fn push(&self, channel: usize, item: ChannelItem, charge: u64) -> Result<(), Violation> {
        self.state.lock().aligner.push(channel, item, charge)?;
        self.wake.notify_one();
        Ok(())
    }

    /// Return credit for a frame that never reaches the consumer (schema,
    /// dictionary).
    pub fn release_now(&self, channel: usize, frames: u64, bytes: u64) {
        let mut state = self.state.lock();
        if let Some(control) = state.channels.get_mut(channel) {
            control.grant_frames += frames;
            control.grant_bytes += bytes;
            control.notify.notify_one();
        }
    }

    /// A channel failed: the consumer hears `error` before any further
    /// event, and the channel's queued frames are discarded (a failed
    /// channel means the pipeline recovers from its last checkpoint, so
    /// nothing after it may be folded into state).
    pub fn fail(&self, channel: usize, error: ShuffleError) {
        let mut state = self.state.lock();
        state.aligner.fail(channel);
        state.failures.push_back(error);
        drop(state);
        self.wake.notify_one();
    }

    /// Wake every channel task (after a generation change or close).
    pub fn poke_all(&self) {
        for control in &self.state.lock().channels {
            control.notify.notify_one();
        }
    }

    /// The consumer went away: every channel is cut as gone, unless the
    /// consumer saw end of stream (then every frame was delivered and the
    /// channels close normally).
    pub fn close(&self) {
        let mut state = self.state.lock();
        state.closed = true;
        if state.finished {
            return;
        }
        for control in &mut state.channels {
            control.cut.get_or_insert_with(|| Refused {
                code: CODE_PEER_GONE.to_string(),
                message: "the receiving operator closed the edge".to_string(),
                current_generation: 0,
            });
            control.notify.notify_one();
        }
    }

    /// What the task of `channel` must do.
    pub fn control(&self, channel: usize) -> ControlUpdate {
        let mut state = self.state.lock();
        match state.channels.get_mut(channel) {
            Some(control) => ControlUpdate {
                frames: std::mem::take(&mut control.grant_frames),
                bytes: std::mem::take(&mut control.grant_bytes),
                cut: control.cut.take(),
            },
            None => ControlUpdate::default(),
        }
    }

    /// A channel failure waiting for the consumer, without popping any
    /// event.
    pub fn take_failure(&self) -> Option<ShuffleError> {
        self.state.lock().failures.pop_front()
    }

    /// The next event or failure for the consumer, if one is ready.
    pub fn try_next(&self) -> Option<Result<ShuffleEvent>> {
        let mut state = self.state.lock();
        if let Some(failure) = state.failures.pop_front() {
            return Some(Err(failure));
        }
        let popped = state.aligner.pop();
        // Whatever was popped (including watermarks and barriers consumed
        // on the way) goes back to its sender as credit.
        let state = &mut *state;
        for (i, control) in state.channels.iter_mut().enumerate() {
            let (frames, bytes) = state.aligner.take_released(i);
            if frames > 0 || bytes > 0 {
                control.grant_frames += frames;
                control.grant_bytes += bytes;
                control.notify.notify_one();
            }
        }
        match popped {
            Ok(Some(event)) => {
                if event == ShuffleEvent::EndOfStream {
                    state.finished = true;
                }
                Some(Ok(event))
            }
            Ok(None) => None,
            Err(AlignError { channel, violation }) => {
                let error = ShuffleError::Protocol {
                    edge: self.edge.clone(),
                    sender: self.senders.get(channel).cloned().unwrap_or_default(),
                    violation,
                };
                state.aligner.fail(channel);
                if let Some(control) = state.channels.get_mut(channel) {
                    control.cut = Some(Refused {
                        code: error.code().to_string(),
                        message: error.to_string(),
                        current_generation: 0,
                    });
                    control.notify.notify_one();
                }
                Some(Err(error))
            }
        }
    }

    /// The senders that have not opened their channel yet.
    pub fn unattached(&self) -> Vec<String> {
        let state = self.state.lock();
        self.senders
            .iter()
            .zip(&state.channels)
            .filter(|(_, c)| !c.attached)
            .map(|(s, _)| s.clone())
            .collect()
    }

    /// Whether end of stream was delivered.
    pub fn finished(&self) -> bool {
        self.state.lock().finished
    }

    /// Queued frames and charged bytes.
    pub fn buffered(&self) -> (u64, u64) {
        let state = self.state.lock();
        (state.aligner.queued_frames(), state.aligner.queued_bytes())
    }
}
