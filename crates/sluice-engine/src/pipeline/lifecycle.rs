//! The lifecycle of a pipeline, one enum with every transition checked here.
//!
//! ```text
//!   Declaring ──seal()──▶ Sealed
//!       │                   │
//!       └──start()──▶ Running { sealed } ◀──┘      (seal() while running sets `sealed`)
//!                         │
//!   any state ──stop()──▶ Closed
//! ```
//!
//! Before, the facade kept `started`, `sealed` and `closed` booleans and
//! each method tested the ones it thought of; a statement on a closed
//! pipeline could change the catalog and only then find the coordinator
//! gone. Now every entry point asks this enum first.

use crate::error::{EngineError, Result};

/// Where a pipeline is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// Statements may add and drop objects; nothing reads files yet.
    Declaring,
    /// Declared complete (`seal()`): no more objects, not started.
    Sealed,
    /// Started: file sources read, checkpoints (if on) are taken.
    Running {
        /// Whether `seal()` was called (before or after the start).
        sealed: bool,
    },
    /// Shut down or aborted: every later call is refused.
    Closed,
}

impl Lifecycle {
    /// Whether the pipeline started (and is not closed).
    pub fn is_running(self) -> bool {
        matches!(self, Lifecycle::Running { .. })
    }

    /// Whether no object can be created any more because of `seal()`.
    pub fn is_sealed(self) -> bool {
        matches!(
            self,
            Lifecycle::Sealed | Lifecycle::Running { sealed: true }
        )
    }

    /// May an object named `name` be created now?
    pub fn check_create(self, name: &str) -> Result<()> {
        match self {
            Lifecycle::Closed => Err(EngineError::NotRunning),
            s if s.is_sealed() => Err(EngineError::Sealed(format!(
                "cannot create '{name}' after seal(); declare every source, stream and sink first"
            ))),
            _ => Ok(()),
        }
    }

    /// May the catalog change (DROP, function registration) now?
    pub fn check_open(self) -> Result<()> {
        match self {
            Lifecycle::Closed => Err(EngineError::NotRunning),
            _ => Ok(()),
        }
    }

    /// The state after `seal()`; sealing twice or a closed pipeline is a no-op.
    pub fn sealed(self) -> Lifecycle {
        match self {
            Lifecycle::Declaring | Lifecycle::Sealed => Lifecycle::Sealed,
            Lifecycle::Running { .. } => Lifecycle::Running { sealed: true },
            Lifecycle::Closed => Lifecycle::Closed,
        }
    }

    /// The state after a successful start, or why the pipeline cannot start.
    /// `Ok(None)`: already running, nothing to do.
    pub fn start(self) -> Result<Option<Lifecycle>> {
        match self {
            Lifecycle::Declaring => Ok(Some(Lifecycle::Running { sealed: false })),
            Lifecycle::Sealed => Ok(Some(Lifecycle::Running { sealed: true })),
            Lifecycle::Running { .. } => Ok(None),
            Lifecycle::Closed => Err(EngineError::NotRunning),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions() {
        use Lifecycle::*;
        assert_eq!(Declaring.sealed(), Sealed);
        assert_eq!(Running { sealed: false }.sealed(), Running { sealed: true });
        assert_eq!(Closed.sealed(), Closed);
        assert_eq!(
            Declaring.start().ok(),
            Some(Some(Running { sealed: false }))
        );
        assert_eq!(Sealed.start().ok(), Some(Some(Running { sealed: true })));
        assert_eq!(Running { sealed: true }.start().ok(), Some(None));
        assert_eq!(
            Closed.start().map_err(|e| e.code()).err(),
            Some("SLC-ENG-006")
        );
        assert_eq!(
            Sealed.check_create("s").map_err(|e| e.code()).err(),
            Some("SLC-ENG-011")
        );
        assert_eq!(
            Closed.check_create("s").map_err(|e| e.code()).err(),
            Some("SLC-ENG-006")
        );
        assert!(Running { sealed: false }.check_create("s").is_ok());
    }
}
