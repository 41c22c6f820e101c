//! DDL and lifecycle on the production callback: installing and dropping
//! sources, streams and sinks, turning checkpoints on, recovering, the
//! vnode transition of a (re)start, and starting the readers.

use std::sync::Arc;
use std::time::Instant;

use super::callback::{CheckpointLifecycle, ControlMsg, CycleError, RuntimeControl};
use super::connector::{ConnectorPipelineCallback, PendingTransition, SourceState};
use super::streams::InstalledStream;
use crate::catalog::SourceConnector;
use crate::error::EngineError;
use crate::options::Delivery;
use crate::output::sink::{SinkMode, SinkRuntime};
use crate::seam::{disposition_with, Disposition};
use crate::sources::SourceBarrierControl;
use crate::watermark::SourceWatermark;

impl RuntimeControl for ConnectorPipelineCallback {
    fn is_recovering(&mut self) -> bool {
        !self.started
    }

    fn forget_operator_state(&mut self) {
        for s in &mut self.streams {
            s.forget_state();
        }
    }

    fn apply_control(&mut self, msg: ControlMsg) -> Result<(), EngineError> {
        match msg {
            ControlMsg::AddSource(def) => {
                let name: Arc<str> = Arc::from(def.name.as_str());
                let delay = def.watermark.as_ref().map(|w| w.delay_ms);
                let pending_reader = def
                    .open_reader(None)
                    .map_err(|e| e.context(format!("source '{name}'")))?;
                let state = SourceState {
                    watermark: SourceWatermark::new(delay, def.idle_timeout, Instant::now()),
                    late_to: def.late_data_to.as_deref().map(Arc::from),
                    def: *def,
                    pending_reader,
                    control: SourceBarrierControl::default(),
                    reading: false,
                    final_offset: None,
                };
                self.sources.insert(Arc::clone(&name), state);
                if self.started {
                    if let Err(e) = self.start_reader(&name) {
                        // Refused: the source is not part of the pipeline.
                        self.sources.remove(&name);
                        return Err(e);
                    }
                }
            }
            ControlMsg::AddStream {
                name,
                producer,
                view,
            } => {
                let stream = InstalledStream {
                    name: Arc::from(name.as_str()),
                    producer: *producer,
                    view,
                    marks_wanted: false,
                };
                let mut stream = stream;
                if self.checkpoints.is_some() {
                    stream.gate_on_commits();
                }
                // A process function needs the marks of its input chain.
                if stream.is_process() {
                    let mut next = stream.marks_input().cloned();
                    while let Some(input) = next.take() {
                        if let Some(s) = self.streams.iter_mut().find(|s| s.name == input) {
                            s.marks_wanted = true;
                            next = s.marks_input().cloned();
                        }
                    }
                }
                self.streams.push(stream);
            }
            ControlMsg::AddSink(mut sink) => {
                // Opened before it joins: a sink whose file cannot be
                // created is refused, and the pipeline runs on without it.
                sink.set_relief(self.shared.subscriptions.relief());
                if self.started {
                    sink.begin(self.sink_mode, None)?;
                }
                self.sinks.push(*sink);
            }
            ControlMsg::Drop(name) => {
                if let Some(s) = self.sources.remove(name.as_str()) {
                    s.control.stop();
                }
                self.streams.retain(|s| &*s.name != name.as_str());
                // Its exchanges go too: they no longer hold the watermark
                // back, and the other nodes' channels to them are cut.
                if let Some(setup) = &self.exchanges {
                    setup.drop_stream(&name);
                }
                self.shared.subscriptions.close(&name);
                let mut dropped: Vec<SinkRuntime> = Vec::new();
                let mut kept = Vec::new();
                for s in self.sinks.drain(..) {
                    if s.name() == name {
                        dropped.push(s);
                    } else {
                        kept.push(s);
                    }
                }
                self.sinks = kept;
                for mut s in dropped {
                    if let Err(e) = s.close() {
                        tracing::warn!(sink = %name, error = %e, "closing dropped sink failed");
                    }
                }
                self.recompute_watermark();
            }
            ControlMsg::EnableCheckpoints(config) => {
                self.sink_mode = match config.delivery {
                    Delivery::ExactlyOnce => SinkMode::Transactional,
                    Delivery::AtLeastOnce => SinkMode::Direct,
                };
                self.shared
                    .subscriptions
                    .set_history(config.history_epochs, config.history_bytes);
                self.checkpoints = Some(*config);
                for s in self.streams.iter_mut() {
                    s.gate_on_commits();
                }
            }
            ControlMsg::Recover(checkpoint) => {
                let id = checkpoint.manifest.id;
                self.recover(&checkpoint)
                    .map_err(|e| e.context(format!("recovering from checkpoint {id} failed")))?;
            }
            ControlMsg::StageVnodeTransition { state, placement } => {
                if self.started {
                    return Err(EngineError::Conflict(format!(
                        "a vnode transition (from checkpoint {}) is staged only while the \
                         pipeline (re)starts; this one runs already",
                        state.cut()
                    )));
                }
                if let Some(staged) = &self.pending_transition {
                    return Err(EngineError::Conflict(format!(
                        "a vnode transition from checkpoint {} is staged already; a second \
                         (from checkpoint {}) would replace the keys the first takes",
                        staged.state.cut(),
                        state.cut()
                    )));
                }
                self.pending_transition = Some(PendingTransition { state, placement });
            }
            ControlMsg::LeaveUnread { source, columns } => {
                let Some(state) = self.sources.get_mut(source.as_str()) else {
                    return Ok(());
                };
                if state.reading {
                    tracing::warn!(%source, "source already reading; columns stay parsed");
                    return Ok(());
                }
                if let SourceConnector::File(cfg) = &mut state.def.connector {
                    let all = std::mem::replace(&mut cfg.unread_columns, columns);
                    // Not read from yet: reopen with the narrower projection
                    // (or keep every column if that fails).
                    match state.def.open_reader(None) {
                        Ok(reader) => state.pending_reader = reader,
                        Err(e) => {
                            if let SourceConnector::File(cfg) = &mut state.def.connector {
                                cfg.unread_columns = all;
                            }
                            return Err(e.context(format!("source '{source}'")));
                        }
                    }
                }
            }
            ControlMsg::Start => {
                if let Some(staged) = &self.pending_transition {
                    return Err(EngineError::Internal(format!(
                        "the vnode transition from checkpoint {} is staged but was not \
                         completed (complete_pending_vnode_transition) before Start",
                        staged.state.cut()
                    )));
                }
                self.started = true;
                let mode = self.sink_mode;
                for sink in self.sinks.iter_mut().filter(|s| !s.is_open()) {
                    sink.begin(mode, None)?;
                }
                let names: Vec<Arc<str>> = self.sources.keys().cloned().collect();
                for n in names {
                    self.start_reader(&n)?;
                }
            }
        }
        Ok(())
    }

    async fn complete_pending_vnode_transition(&mut self) -> Result<bool, CycleError> {
        let Some(staged) = self.pending_transition.take() else {
            return Ok(false);
        };
        self.adopt_moved_state(&staged.state, &staged.placement)
            .map_err(|e| {
                CycleError::Startup(e.context(format!(
                    "taking over the keyed state of this node's vnodes from checkpoint {}",
                    staged.state.cut()
                )))
            })?;
        Ok(true)
    }

    fn take_pipeline_halt(&mut self) -> Option<CycleError> {
        self.collect_sink_failures();
        let delivery = self.checkpoints.as_ref().map(|c| c.delivery);
        let halt = self.failures.iter().position(|e| {
            disposition_with(e, delivery, self.fault_on_cycle_error()) == Disposition::Halt
        })?;
        Some(self.failures.remove(halt))
    }

    fn take_pipeline_fault(&mut self) -> Option<CycleError> {
        self.collect_sink_failures();
        (!self.failures.is_empty()).then(|| self.failures.remove(0))
    }
}
