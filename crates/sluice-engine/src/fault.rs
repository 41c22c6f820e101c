//! Fault injection for tests (cargo feature `fault-injection`).
//!
//! Tests arm a fault at a named component, and the component trips over it
//! when it reaches the armed batch or row: a source reader (before sending
//! a batch), a stream's operators (after a cycle produced its rows), a sink
//! (before writing a cycle's rows, or before committing an epoch) or the
//! subscription delivery of a stream. A fault panics, fails with an error,
//! or stalls for a while, once or every time from then on.
//!
//! Faults live in a process-wide registry keyed by component kind and name,
//! because the components that trip over them run on threads the test does
//! not own; tests running in parallel therefore use names of their own.
//! Without the feature every hook is an empty inline function and the
//! registry does not exist, so release builds carry none of this.

/// Where a fault is armed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultSite {
    /// A file source's reader thread, before it sends a batch.
    Source,
    /// A stream's operators, once a cycle produced the stream's rows.
    Stream,
    /// A sink, before it writes a cycle's rows.
    SinkWrite,
    /// A sink, before it commits its sealed epochs (counted per commit).
    SinkCommit,
    /// Delivery of a stream's rows to its subscribers.
    Subscription,
}

impl std::fmt::Display for FaultSite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FaultSite::Source => "source",
            FaultSite::Stream => "stream",
            FaultSite::SinkWrite => "sink write",
            FaultSite::SinkCommit => "sink commit",
            FaultSite::Subscription => "subscription",
        })
    }
}

#[cfg(feature = "fault-injection")]
pub use armed::*;

#[cfg(feature = "fault-injection")]
mod armed {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::Mutex;

    use super::FaultSite;

    /// What an armed fault does.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FaultAction {
        /// `panic!` with a message naming the site.
        Panic,
        /// Return an error naming the site.
        Fail,
        /// Sleep this long, then carry on.
        Stall(Duration),
    }

    /// When an armed fault trips (both counts start at 1).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum FaultTrigger {
        /// At the n-th batch (the n-th commit for [`FaultSite::SinkCommit`]).
        Batch(u64),
        /// At the batch that holds the n-th row.
        Row(u64),
    }

    /// A fault to arm.
    #[derive(Debug, Clone, Copy)]
    pub struct Fault {
        /// The kind of component.
        pub site: FaultSite,
        /// What it does.
        pub action: FaultAction,
        /// When it trips first.
        pub trigger: FaultTrigger,
        /// Trip only once (else at every batch from the trigger on).
        pub once: bool,
    }

    struct Armed {
        id: u64,
        name: String,
        fault: Fault,
        batches: u64,
        rows: u64,
        fired: Arc<AtomicU64>,
    }

    static REGISTRY: Mutex<Vec<Armed>> = Mutex::new(Vec::new());
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);

    /// Disarms its fault when dropped; tells how often it tripped.
    #[must_use = "the fault is disarmed when the guard is dropped"]
    pub struct FaultGuard {
        id: u64,
        fired: Arc<AtomicU64>,
    }

    impl FaultGuard {
        /// How many times the fault tripped so far.
        pub fn fired(&self) -> u64 {
            self.fired.load(Ordering::Acquire)
        }
    }

    impl Drop for FaultGuard {
        fn drop(&mut self) {
            REGISTRY.lock().retain(|a| a.id != self.id);
        }
    }

    /// Arm `fault` at the component called `name` (source, stream or sink
    /// name). Counting starts now.
    pub fn arm(name: &str, fault: Fault) -> FaultGuard {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let fired = Arc::new(AtomicU64::new(0));
        REGISTRY.lock().push(Armed {
            id,
            name: name.to_string(),
            fault,
            batches: 0,
            rows: 0,
            fired: Arc::clone(&fired),
        });
        FaultGuard { id, fired }
    }

    /// The component `name` of kind `site` reached a batch of `rows` rows.
    pub(crate) fn hit(
        site: FaultSite,
        name: &str,
        rows: u64,
    ) -> Result<(), crate::error::EngineError> {
        let action = {
            let mut registry = REGISTRY.lock();
            let mut action = None;
            for a in registry
                .iter_mut()
                .filter(|a| a.fault.site == site && a.name == name)
            {
                a.batches += 1;
                a.rows += rows;
                let due = match a.fault.trigger {
                    FaultTrigger::Batch(n) => a.batches >= n,
                    FaultTrigger::Row(n) => a.rows >= n,
                };
                let spent = a.fault.once && a.fired.load(Ordering::Acquire) > 0;
                if due && !spent && action.is_none() {
                    let n = a.fired.fetch_add(1, Ordering::AcqRel) + 1;
                    action = Some((a.fault.action, a.batches, a.rows, n));
                }
            }
            action
        };
        let Some((action, batch, rows, n)) = action else {
            return Ok(());
        };
        let what =
            format!("injected fault at {site} '{name}' (batch {batch}, row {rows}, trip {n})");
        tracing::debug!(%what, ?action, "fault injected");
        match action {
            FaultAction::Panic => panic!("{what}"),
            FaultAction::Fail => Err(crate::error::EngineError::Injected(what)),
            FaultAction::Stall(d) => {
                std::thread::sleep(d);
                Ok(())
            }
        }
    }
}

/// Without the feature no fault is ever armed.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn hit(
    _site: FaultSite,
    _name: &str,
    _rows: u64,
) -> Result<(), crate::error::EngineError> {
    Ok(())
}
