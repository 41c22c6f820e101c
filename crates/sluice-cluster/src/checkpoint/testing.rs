//! Builders for this module's unit tests.

use super::record::{CheckpointAssignmentFence, CheckpointAttempt, CheckpointPrepare};
use crate::assignment::table::Table;
use crate::assignment::Assignment;
use crate::vnodes::VnodeCount;

/// The Prepare of `attempt` over a 64-vnode table of `members` at
/// generation 10, due at `deadline_ms`.
pub(crate) fn prepare_over(
    attempt: CheckpointAttempt,
    members: &[&str],
    deadline_ms: u64,
) -> CheckpointPrepare {
    let members: Vec<String> = members.iter().map(|m| (*m).to_string()).collect();
    let count = VnodeCount::new(64).expect("count");
    let table = Table::place("c", attempt.term, count, &members).expect("members");
    let fence = CheckpointAssignmentFence {
        assignment: Assignment::new(10, table),
    };
    CheckpointPrepare::new(attempt, &fence, deadline_ms)
}
