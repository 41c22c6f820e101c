//! Refusals at the front door: option ranges, declarations that would
//! destroy data, and the SQL front end's messages.

use std::time::Duration;

mod accumulators;
mod conflicts;
mod late_set;
mod options;
mod show_cluster;
mod sql;

/// Every test here is bounded: a refusal that wedged the pipeline must fail,
/// not hang.
pub const LIMIT: Duration = Duration::from_secs(60);
