//! Which turn accounts for the work an agent consumed: the fold upstream calls
//! `foldConsumedWork`, used to read how a delegated child ended.

use std::sync::Arc;

use dsh_session::{Event, TurnEndReason, types};
use serde_json::Value;

/// The accounting of a stretch of a session log.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ConsumedWork {
    /// The reason of the last turn that ran a step, or that claimed input and ended
    /// other than `completed`.
    pub end: Option<TurnEndReason>,
    /// Input was cancelled out of the inbox unrun after that turn.
    pub dropped_unrun: bool,
}

/// Whether a turn that claimed input but ran no step ended in a way that accounts for it.
fn accounts_for_claim(reason: &TurnEndReason) -> bool {
    !matches!(reason, TurnEndReason::Completed)
}

/// Folds `events` (a session's own suffix) into the turn that accounts for its work.
pub fn fold_consumed_work(events: &[Arc<Event>]) -> ConsumedWork {
    let mut stepped: Vec<u64> = Vec::new();
    let mut claimed: Vec<u64> = Vec::new();
    let mut open: Option<u64> = None;
    let mut out = ConsumedWork::default();
    for e in events {
        let data = e.data.as_value();
        match e.event_type.as_str() {
            types::TURN_START => open = data.get("turn").and_then(Value::as_u64),
            types::STEP_START => {
                if let Some(t) = data.get("turn").and_then(Value::as_u64) {
                    stepped.push(t);
                }
            }
            types::INBOX_SPLICED => {
                if data.get("removedCount").is_none() {
                    continue;
                }
                if data.get("outcome").and_then(Value::as_str) == Some("canceled") {
                    let none_inserted = data
                        .get("inserted")
                        .and_then(Value::as_array)
                        .is_none_or(Vec::is_empty);
                    out.dropped_unrun |= none_inserted;
                } else if let Some(t) = open {
                    claimed.push(t);
                }
            }
            types::TURN_END => {
                open = None;
                let Some(turn) = data.get("turn").and_then(Value::as_u64) else {
                    continue;
                };
                let Some(reason) = data.get("reason").and_then(TurnEndReason::from_value) else {
                    continue;
                };
                let had_step = remove(&mut stepped, turn);
                let had_claim = remove(&mut claimed, turn);
                if had_step || (had_claim && accounts_for_claim(&reason)) {
                    out.end = Some(reason);
                    out.dropped_unrun = false;
                }
            }
            _ => {}
        }
    }
    out
}

fn remove(list: &mut Vec<u64>, turn: u64) -> bool {
    let before = list.len();
    list.retain(|t| *t != turn);
    list.len() != before
}
