//! The delivery loop: sleeps until the earliest target (or a change), then delivers what is
//! due. One-shot reminders get a message each; the due recurring reminders of one session
//! share one message. A session that cannot take the message (deleted, its directory gone)
//! is retried a minute later; the failure is logged each time.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use dsh_llm::{ContentBlock, Message, MessageSource};
use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::rule::{self, Record};
use super::{ScheduleService, Task};
use crate::state::WebState;

/// Longest single sleep: the loop re-reads the store at least this often (a clock jump or
/// a file edited by hand is noticed within it).
const MAX_SLEEP: Duration = Duration::from_secs(300);
/// Wait before a failed delivery is tried again.
const RETRY: Duration = Duration::from_secs(60);
/// Missed occurrences walked through to find the latest (bounded against a rule that fires
/// every minute for years).
const MAX_WALK: usize = 100_000;

/// The message one reminder becomes (our own framing; the reminder text is JSON-quoted so
/// it cannot pose as the frame).
fn framing_one(r: &Record) -> String {
    format!(
        "[scheduled reminder]\nThe user scheduled this message earlier; it is due now.\nid: {}\ndue: {}\nreminder: {}",
        json!(r.id),
        rule::instant(r.scheduled_at),
        json!(r.prompt)
    )
}

fn framing_batch(items: &[(Record, Timestamp)]) -> String {
    let list: Vec<Value> = items
        .iter()
        .map(|(r, at)| json!({"id": r.id, "due": rule::instant(*at), "reminder": r.prompt}))
        .collect();
    format!(
        "[scheduled reminders]\nThe user scheduled these repeating messages earlier; they are due now.\nreminders: {}",
        Value::Array(list)
    )
}

/// The latest occurrence at or before `now`, and the first one after it.
fn catch_up(r: &Record, now: Timestamp) -> (Timestamp, Option<Timestamp>) {
    let mut occurrence = r.scheduled_at;
    // After long downtime, start from the last two days: a dense rule has its latest
    // occurrence there, and a sparse one has few to walk through.
    if let Ok(floor) = now.checked_sub(jiff::SignedDuration::from_hours(48))
        && floor > occurrence
        && let Some(n) = r.timing.next_after(occurrence, floor)
        && n <= now
    {
        occurrence = n;
    }
    for _ in 0..MAX_WALK {
        match r.timing.next_after(occurrence, occurrence) {
            Some(n) if n <= now => occurrence = n,
            _ => break,
        }
    }
    (occurrence, r.timing.next_after(occurrence, now))
}

async fn deliver(state: &WebState, session: &str, text: String) -> Result<String, String> {
    let agent = state
        .lifecycle()
        .ensure_live(session)
        .await
        .map_err(|e| e.message)?;
    if let Some(cwd) = agent.cwd()
        && !cwd.is_dir()
    {
        return Err(format!("its working directory {} is gone", cwd.display()));
    }
    let mut source = Map::new();
    source.insert("kind".into(), json!("schedule"));
    let message = Message::user(vec![ContentBlock::text(text)], MessageSource::Other(source));
    let id = message.id.clone();
    agent
        .followup(message)
        .map_err(|e| format!("the session did not take the message: {e}"))?;
    agent
        .session()
        .flush()
        .await
        .map_err(|e| format!("the session log was not written: {e}"))?;
    Ok(id)
}

/// A reminder in one message: the record, the occurrence delivered, the next target.
type Member = (Record, Timestamp, Option<Timestamp>);

/// Delivers what is due; failed ids wait in `failed` until their retry time.
async fn deliver_due(
    state: &WebState,
    service: &ScheduleService,
    failed: &mut HashMap<String, tokio::time::Instant>,
) {
    let now = Timestamp::now();
    let due = match service.due(now) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!("reminders: {e}");
            return;
        }
    };
    let waiting = |t: &Task| {
        failed
            .get(&t.record.id)
            .is_some_and(|until| *until > tokio::time::Instant::now())
    };
    let due: Vec<Task> = due.into_iter().filter(|t| !waiting(t)).collect();
    let mut sessions: Vec<String> = due.iter().map(|t| t.session_id.clone()).collect();
    sessions.dedup();
    sessions.sort();
    sessions.dedup();
    for session in sessions {
        let mine: Vec<&Task> = due.iter().filter(|t| t.session_id == session).collect();
        let mut sends: Vec<(String, Vec<Member>)> = Vec::new();
        let mut recurring = Vec::new();
        for t in &mine {
            if t.record.timing.recurring() {
                let (occurrence, next) = catch_up(&t.record, now);
                recurring.push((t.record.clone(), occurrence, next));
            } else {
                sends.push((
                    framing_one(&t.record),
                    vec![(t.record.clone(), t.record.scheduled_at, None)],
                ));
            }
        }
        if !recurring.is_empty() {
            let items: Vec<(Record, Timestamp)> = recurring
                .iter()
                .map(|(r, at, _)| (r.clone(), *at))
                .collect();
            sends.push((framing_batch(&items), recurring));
        }
        for (text, members) in sends {
            match deliver(state, &session, text).await {
                Ok(message_id) => {
                    let delivered = Timestamp::now();
                    for (record, occurrence, next) in members {
                        failed.remove(&record.id);
                        if let Err(e) =
                            service.delivered(&record.id, occurrence, delivered, &message_id, next)
                        {
                            tracing::warn!(
                                "reminders: \"{}\" was delivered but not recorded ({e}); it may be delivered again",
                                record.title
                            );
                        }
                    }
                }
                Err(e) => {
                    for (record, _, _) in members {
                        tracing::warn!(
                            "reminders: \"{}\" could not be delivered to session {session}: {e}; trying again in {} s",
                            record.title,
                            RETRY.as_secs()
                        );
                        failed.insert(record.id.clone(), tokio::time::Instant::now() + RETRY);
                    }
                }
            }
        }
    }
}

/// Runs until the web app shuts down.
pub(crate) async fn drive(state: Arc<WebState>, service: Arc<ScheduleService>) {
    let mut failed: HashMap<String, tokio::time::Instant> = HashMap::new();
    loop {
        deliver_due(&state, &service, &mut failed).await;
        let now = Timestamp::now();
        let instant_now = tokio::time::Instant::now();
        let mut sleep = MAX_SLEEP;
        for t in service
            .catalog()
            .unwrap_or_default()
            .iter()
            .filter(|t| t.active)
        {
            let wait = match failed.get(&t.record.id) {
                Some(until) if *until > instant_now => *until - instant_now,
                _ => Duration::from_millis(
                    (t.record.scheduled_at.as_millisecond() - now.as_millisecond()).max(0) as u64,
                ),
            };
            sleep = sleep.min(wait);
        }
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = service.wake.notified() => {}
            _ = state.shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::schedule::rule::{Cron, Timing, instant};

    #[test]
    fn after_a_month_off_a_dense_rule_delivers_only_its_latest_occurrence() {
        let r = Record {
            id: "s".into(),
            title: "t".into(),
            prompt: "p".into(),
            timing: Timing::Cron {
                cron: Cron::parse("* * * * *").unwrap(),
                zone: "Europe/Paris".into(),
            },
            scheduled_at: "2026-11-01T00:00:00Z".parse().unwrap(),
        };
        let now: Timestamp = "2026-12-04T10:30:30Z".parse().unwrap();
        let (occurrence, next) = catch_up(&r, now);
        assert_eq!(instant(occurrence), "2026-12-04T10:30:00.000Z");
        assert_eq!(instant(next.unwrap()), "2026-12-04T10:31:00.000Z");
        // A fixed rate keeps its grid across the gap.
        let every = Record {
            timing: Timing::Every { seconds: 3600 },
            ..r
        };
        let (occurrence, next) = catch_up(&every, now);
        assert_eq!(instant(occurrence), "2026-12-04T10:00:00.000Z");
        assert_eq!(instant(next.unwrap()), "2026-12-04T11:00:00.000Z");
    }
}
