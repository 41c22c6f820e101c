//! Versions, bindings and limits: what a session's handshake agrees on.

use std::time::Duration;

use sluice_engine::process::ProcessFunctionDescriptor;

use crate::error::{RemoteError, Result};
use crate::proto;

/// The oldest protocol version this build speaks.
pub const MIN_VERSION: u32 = 1;
/// The newest protocol version this build speaks.
pub const MAX_VERSION: u32 = 1;

/// The highest version in both `min..=max` and ours.
pub fn negotiate(min: u32, max: u32) -> Result<u32> {
    let chosen = max.min(MAX_VERSION);
    if chosen < min.max(MIN_VERSION) || min > max {
        return Err(RemoteError::Version {
            engine_min: min,
            engine_max: max,
            worker: format!("{MIN_VERSION}..={MAX_VERSION}"),
        });
    }
    Ok(chosen)
}

/// The binding both sides of a session must agree on.
pub fn binding(d: &ProcessFunctionDescriptor) -> proto::Binding {
    proto::Binding {
        name: d.name.clone(),
        version: d.version,
        binding_hash: d.binding_hash(),
        runtime: sluice_engine::catalog::runtime_name(&d.runtime).to_string(),
    }
}

/// `name v<version> (<runtime>, binding <hash>)`, for errors.
pub fn describe(b: &proto::Binding) -> String {
    format!(
        "'{}' version {} ({}, binding {})",
        b.name, b.version, b.runtime, b.binding_hash
    )
}

/// Refuse unless both bindings agree on every field.
pub fn check_binding(engine: &proto::Binding, worker: &proto::Binding) -> Result<()> {
    if engine == worker {
        Ok(())
    } else {
        Err(RemoteError::Binding {
            engine: describe(engine),
            worker: describe(worker),
        })
    }
}

/// Bounds one side enforces. Each is named in the error that enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteLimits {
    /// Largest frame accepted, in encoded bytes.
    pub max_message_bytes: usize,
    /// Most calls in flight on one session.
    pub max_calls_in_flight: u32,
    /// How long a call may take, measured on a monotonic clock from when
    /// it is sent (the engine) or received (the worker).
    pub call_deadline: Duration,
}

impl Default for RemoteLimits {
    fn default() -> Self {
        Self {
            max_message_bytes: 64 * 1024 * 1024,
            max_calls_in_flight: 1,
            call_deadline: Duration::from_secs(10),
        }
    }
}

impl RemoteLimits {
    pub(crate) fn to_proto(self) -> proto::Limits {
        proto::Limits {
            max_message_bytes: self.max_message_bytes as u64,
            max_calls_in_flight: self.max_calls_in_flight,
        }
    }

    pub(crate) fn deadline_ms(self) -> u32 {
        u32::try_from(self.call_deadline.as_millis()).unwrap_or(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn negotiation_picks_the_highest_common_version_or_names_both_ranges() {
        assert_eq!(negotiate(1, 1).ok(), Some(1));
        assert_eq!(negotiate(1, 7).ok(), Some(MAX_VERSION));
        for (min, max) in [(2, 9), (0, 0), (3, 2)] {
            let e = match negotiate(min, max) {
                Ok(v) => panic!("{min}..={max} agreed on {v}"),
                Err(e) => e,
            };
            assert_eq!(e.code(), "SLC-RMT-004");
            let text = e.to_string();
            assert!(text.contains(&format!("{min}..={max}")), "{text}");
            assert!(
                text.contains(&format!("{MIN_VERSION}..={MAX_VERSION}")),
                "{text}"
            );
        }
    }
}
