//! Pure folds over a session log. The mode in force is always derived from the log, so
//! resume, fork and compaction recover it without a live mirror.

use std::sync::Arc;

use dsh_session::{Event, types};

use crate::PLAN_MODE_EVENT;

/// Whether plan mode is active after `events`: the last `plan/mode` wins; none → inactive.
/// A `plan/mode` whose `active` is not a boolean is ignored.
pub fn fold_plan_mode(events: &[Arc<Event>]) -> bool {
    events
        .iter()
        .rev()
        .filter(|e| e.is(PLAN_MODE_EVENT))
        .find_map(|e| e.data["active"].as_bool())
        .unwrap_or(false)
}

/// Whether the log holds a `turn/start` without its `turn/end`.
pub fn has_open_turn(events: &[Arc<Event>]) -> bool {
    events
        .iter()
        .rev()
        .find(|e| e.is(types::TURN_START) || e.is(types::TURN_END))
        .is_some_and(|e| e.is(types::TURN_START))
}

/// The mode in force when the last `request/header` was logged; `None` before the first.
pub fn mode_at_last_header(events: &[Arc<Event>]) -> Option<bool> {
    let last = events.iter().rposition(|e| e.is(types::REQUEST_HEADER))?;
    Some(fold_plan_mode(&events[..=last]))
}
