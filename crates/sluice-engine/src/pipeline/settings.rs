//! `SET` on a pipeline that may already have objects.
//!
//! Every option is read at one or more moments of the pipeline's life
//! ([`OptionTiming`]). A `SET` that comes after such a moment would not
//! reach what was built then, so instead of applying only to objects
//! created afterwards (what it silently did), it is refused with an error
//! naming the option and every object it would not reach. A `SET` whose
//! every moment is still ahead applies. A closed pipeline takes no `SET`.

use super::{Lifecycle, Pipeline};
use crate::error::{EngineError, Result};
use crate::options::spec;

/// When an option is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionTiming {
    /// When the coordinator is built, at the first `CREATE`: it sizes it.
    Build,
    /// When a source is created, as the default of its own `WITH` option.
    SourceDefault,
    /// When a subscription is made: it sizes the subscription's queue.
    Subscription,
    /// When the pipeline starts.
    Start,
    /// Whenever it is needed (e.g. at a fault): a change always applies.
    Live,
}

/// When the pipeline option `name` (canonical, see [`spec`]) is read.
/// A new option must be added here; an unknown one is read at every
/// moment, so it is refused as soon as anything exists.
pub fn option_timing(name: &str) -> &'static [OptionTiming] {
    use OptionTiming::*;
    match name {
        "channel_capacity"
        | "max_batches_per_cycle"
        | "source_queue_bytes"
        | "sink_queue_bytes"
        | "process_held_input_bytes"
        | "watermark_max_drift" => &[Build],
        // The coordinator's idle check period is derived from it too.
        "idle_timeout" => &[Build, SourceDefault],
        "batch_size" => &[SourceDefault],
        "subscription_buffer" | "subscription_buffer_bytes" | "subscription_on_lag" => {
            &[Subscription]
        }
        "checkpoint_interval"
        | "delivery"
        | "checkpoint_store"
        | "checkpoint_retain"
        | "checkpoint_tail_share"
        | "checkpoint_alignment_timeout"
        | "checkpoint_timeout"
        | "checkpoint_store_lease"
        | "subscription_history"
        | "subscription_history_bytes" => &[Start],
        "restart_budget" | "restart_backoff" => &[Live],
        _ => &[Build, SourceDefault, Subscription, Start],
    }
}

impl Pipeline {
    /// `SET name = value`: the value is checked first (so a bad value is
    /// reported with its allowed range whenever it is set), then whether
    /// the option can still reach everything that reads it.
    pub fn set_option(&mut self, name: &str, value: &str) -> Result<()> {
        let mut next = self.options.clone();
        next.set(name, value)?;
        let name = spec(name)?.name;
        if self.lifecycle == Lifecycle::Closed {
            return Err(EngineError::NotRunning);
        }
        for timing in option_timing(name) {
            self.check_timing(name, *timing)?;
        }
        self.options = next;
        Ok(())
    }

    fn check_timing(&self, name: &str, timing: OptionTiming) -> Result<()> {
        match timing {
            OptionTiming::Build if self.coordinator.is_some() && name != "idle_timeout" => {
                Err(EngineError::Option(format!(
                    "option '{name}' sizes the pipeline and must be set before the first CREATE"
                )))
            }
            OptionTiming::Build | OptionTiming::SourceDefault => {
                let mut missed: Vec<String> = self
                    .catalog
                    .sources
                    .iter()
                    .filter(|s| {
                        self.inherited
                            .get(&s.name)
                            .is_some_and(|o| o.contains(&name))
                    })
                    .map(|s| format!("source '{}'", s.name))
                    .collect();
                if timing == OptionTiming::Build && self.coordinator.is_some() {
                    missed.push("the running pipeline's idle check".into());
                }
                if !missed.is_empty() {
                    return Err(EngineError::Option(format!(
                        "option '{name}' is read when objects are created; it would not reach {}; \
                         set it before the first CREATE, or per source with WITH ({name} = ...)",
                        missed.join(", ")
                    )));
                }
                if timing == OptionTiming::SourceDefault && self.lifecycle.is_sealed() {
                    return Err(EngineError::Sealed(format!(
                        "option '{name}' is read when a source is created, and no source can be \
                         created after seal()"
                    )));
                }
                Ok(())
            }
            OptionTiming::Subscription if !self.subscribed.is_empty() => {
                let names: Vec<String> = self.subscribed.iter().map(|s| format!("'{s}'")).collect();
                Err(EngineError::Option(format!(
                    "option '{name}' is read when each subscription is made; it would not reach \
                     the subscriptions to {}; set it before the first subscribe",
                    names.join(", ")
                )))
            }
            OptionTiming::Start if self.lifecycle.is_running() => Err(EngineError::Option(
                format!("option '{name}' is read when the pipeline starts; set it before start"),
            )),
            _ => Ok(()),
        }
    }
}
