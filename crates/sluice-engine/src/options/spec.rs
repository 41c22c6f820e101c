//! The allowed values of every option, checked where the option is set.
//!
//! Each option has one [`OptionSpec`]: the builder, `--set`, SQL `SET` and a
//! source's `WITH (...)` all parse through it, so an out-of-range value is
//! refused with the same message wherever it comes from, before it can reach
//! a timer (a zero period panics tokio), an `Instant` addition (a century
//! overflows it) or a channel (a huge capacity exceeds tokio's semaphore).

use std::time::Duration;

use crate::error::{EngineError, Result};

/// One day: the longest interval or timeout any option accepts. Longer
/// values are never what an operator means, and anything shorter than a
/// century keeps `Instant + duration` far from overflow.
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// What values an option takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OptionKind {
    /// A duration such as `250ms` or `5s`, within `min..=max`. With `off`,
    /// the words `off`, `none` and `0` turn the feature off.
    Duration {
        /// Shortest accepted.
        min: Duration,
        /// Longest accepted.
        max: Duration,
        /// Whether `off` / `none` / `0` are accepted.
        off: bool,
    },
    /// A whole number within `min..=max`.
    Count {
        /// Smallest accepted.
        min: u64,
        /// Largest accepted.
        max: u64,
    },
    /// One of a fixed list of words.
    Choice(&'static [&'static str]),
    /// Free text that must not be empty.
    Text,
}

/// An option's name and allowed values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    /// The name used by `SET`, `--set` and the builder.
    pub name: &'static str,
    /// Allowed values.
    pub kind: OptionKind,
}

const fn duration(name: &'static str, min: Duration, max: Duration) -> OptionSpec {
    OptionSpec {
        name,
        kind: OptionKind::Duration {
            min,
            max,
            off: false,
        },
    }
}

const fn count(name: &'static str, min: u64, max: u64) -> OptionSpec {
    OptionSpec {
        name,
        kind: OptionKind::Count { min, max },
    }
}

/// Every pipeline option with its allowed values, in the order of
/// [`super::PIPELINE_OPTIONS`].
///
/// The count maxima are far below anything that could overflow a tokio
/// channel (`usize::MAX >> 3` permits) or make an up-front allocation fail,
/// and well above any value a benchmark or test uses.
pub const PIPELINE_OPTION_SPECS: &[OptionSpec] = &[
    OptionSpec {
        name: "checkpoint_interval",
        kind: OptionKind::Duration {
            min: Duration::from_millis(10),
            max: DAY,
            off: true,
        },
    },
    OptionSpec {
        name: "delivery",
        kind: OptionKind::Choice(&["at_least_once", "exactly_once"]),
    },
    OptionSpec {
        name: "checkpoint_store",
        kind: OptionKind::Text,
    },
    count("checkpoint_retain", 1, 10_000),
    count("checkpoint_tail_share", 1, 100),
    duration(
        "checkpoint_alignment_timeout",
        Duration::from_millis(10),
        DAY,
    ),
    duration("checkpoint_timeout", Duration::from_millis(10), DAY),
    // A lease is renewed every third of it: below a second the renewals
    // alone would keep an object store busy.
    duration(
        "checkpoint_store_lease",
        Duration::from_secs(1),
        Duration::from_secs(3600),
    ),
    duration("idle_timeout", Duration::from_millis(1), DAY),
    OptionSpec {
        name: "watermark_max_drift",
        kind: OptionKind::Duration {
            min: Duration::from_millis(1),
            max: DAY,
            off: true,
        },
    },
    count("batch_size", 1, 1 << 20),
    count("channel_capacity", 1, 1 << 16),
    count("subscription_buffer", 1, 1 << 24),
    count("subscription_history", 1, 1 << 16),
    count("subscription_history_bytes", 1, 1 << 40),
    count("max_batches_per_cycle", 1, 1 << 16),
    count("restart_budget", 0, 1000),
    duration(
        "restart_backoff",
        Duration::from_millis(1),
        Duration::from_secs(60),
    ),
    // Byte budgets: at least 1 KiB (smaller only ever blocks on every
    // batch), at most 1 TiB.
    count("source_queue_bytes", 1 << 10, 1 << 40),
    count("sink_queue_bytes", 1 << 10, 1 << 40),
    count("subscription_buffer_bytes", 1 << 10, 1 << 40),
    OptionSpec {
        name: "subscription_on_lag",
        kind: OptionKind::Choice(&["backpressure", "disconnect"]),
    },
    count("process_held_input_bytes", 1 << 10, 1 << 40),
];

/// The spec of the pipeline option `name` (case-insensitive), or the
/// unknown-option error listing every known name.
pub fn spec(name: &str) -> Result<&'static OptionSpec> {
    PIPELINE_OPTION_SPECS
        .iter()
        .find(|s| s.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            EngineError::Option(format!(
                "unknown option '{name}' (known options: {})",
                super::PIPELINE_OPTIONS.join(", ")
            ))
        })
}

impl OptionSpec {
    /// The allowed values as the errors and the docs print them, e.g.
    /// `10ms to 1day` or `1 to 65536`.
    pub fn allowed(&self) -> String {
        match self.kind {
            OptionKind::Duration { min, max, off } => {
                let range = format!(
                    "{} to {}",
                    humantime::format_duration(min),
                    humantime::format_duration(max)
                );
                if off {
                    format!("{range}, or off")
                } else {
                    range
                }
            }
            OptionKind::Count { min, max } => format!("{min} to {max}"),
            OptionKind::Choice(words) => format!("one of {}", words.join(", ")),
            OptionKind::Text => "any non-empty text".to_string(),
        }
    }

    fn out_of_range(&self, value: &str) -> EngineError {
        EngineError::Option(format!(
            "option '{}': '{value}' is out of range ({})",
            self.name,
            self.allowed()
        ))
    }

    /// Parse a duration option. `Ok(None)` is "off" (only where allowed).
    pub fn duration(&self, value: &str) -> Result<Option<Duration>> {
        let OptionKind::Duration { min, max, off } = self.kind else {
            return Err(self.wrong_kind("a duration"));
        };
        let v = value.trim();
        if off
            && ["off", "none", "0"]
                .iter()
                .any(|w| v.eq_ignore_ascii_case(w))
        {
            return Ok(None);
        }
        let d = match humantime::parse_duration(v) {
            Ok(d) => d,
            // A number of units too large to represent is out of range, not garbage.
            Err(humantime::DurationError::NumberOverflow) => return Err(self.out_of_range(value)),
            Err(e) => {
                return Err(EngineError::Option(format!(
                    "option '{}': '{value}' is not a duration ({e}); use e.g. 5s or 250ms ({})",
                    self.name,
                    self.allowed()
                )))
            }
        };
        if d < min || d > max {
            return Err(self.out_of_range(value));
        }
        Ok(Some(d))
    }

    /// Parse a duration option that cannot be turned off.
    pub fn required_duration(&self, value: &str) -> Result<Duration> {
        self.duration(value)?
            .ok_or_else(|| self.out_of_range(value))
    }

    /// Parse a count option.
    pub fn count(&self, value: &str) -> Result<usize> {
        let OptionKind::Count { min, max } = self.kind else {
            return Err(self.wrong_kind("a count"));
        };
        let v = value.trim();
        let digits = v.strip_prefix(['-', '+']).unwrap_or(v);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(EngineError::Option(format!(
                "option '{}': '{value}' is not a whole number ({})",
                self.name,
                self.allowed()
            )));
        }
        // Digits only: the parse fails only on overflow (out of range).
        let n = match v.parse::<i128>() {
            Ok(n) => n,
            Err(_) => return Err(self.out_of_range(value)),
        };
        if n < i128::from(min) || n > i128::from(max) {
            return Err(self.out_of_range(value));
        }
        usize::try_from(n).map_err(|_| self.out_of_range(value))
    }

    /// Parse a choice option, returning the matching word.
    pub fn choice(&self, value: &str) -> Result<&'static str> {
        let OptionKind::Choice(words) = self.kind else {
            return Err(self.wrong_kind("a choice"));
        };
        let v = value.trim();
        words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(v))
            .copied()
            .ok_or_else(|| {
                EngineError::Option(format!(
                    "option '{}': '{value}' is not {}",
                    self.name,
                    self.allowed()
                ))
            })
    }

    /// Parse a text option.
    pub fn text(&self, value: &str) -> Result<String> {
        if !matches!(self.kind, OptionKind::Text) {
            return Err(self.wrong_kind("text"));
        }
        let v = value.trim();
        if v.is_empty() {
            return Err(EngineError::Option(format!(
                "option '{}': the value must not be empty",
                self.name
            )));
        }
        Ok(v.to_string())
    }

    /// Parse and check `value` whatever the kind, for callers that only
    /// validate (e.g. before deciding whether the option may change now).
    pub fn validate(&self, value: &str) -> Result<()> {
        match self.kind {
            OptionKind::Duration { .. } => self.duration(value).map(|_| ()),
            OptionKind::Count { .. } => self.count(value).map(|_| ()),
            OptionKind::Choice(_) => self.choice(value).map(|_| ()),
            OptionKind::Text => self.text(value).map(|_| ()),
        }
    }

    fn wrong_kind(&self, wanted: &str) -> EngineError {
        EngineError::Internal(format!(
            "option '{}' was read as {wanted}, but it is {:?}",
            self.name, self.kind
        ))
    }
}
