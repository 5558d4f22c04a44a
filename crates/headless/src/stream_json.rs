//! `--json` / `--output-format stream-json`: the session's events on stdout, one JSON line
//! each, in seq order — each printed only once the session log holds it durably.
//!
//! A consumer can therefore trust every line it read: a crash or `kill -9` right after a
//! line was printed cannot take that event out of the log. The signal is the session
//! writer's durable length (`SessionWriter::wait_durable`); lines lag the live session by at
//! most the write batching window, and the barriers the loop already has (before each model
//! request and tool run, and at the end of the run) push them out at once. Without a
//! persistence row nothing is ever durable, so events are printed as they are appended.
//!
//! Stream chunks need one more condition. A v4 log has no chunk rows: chunks are written
//! inside the `assistant/message` (or `assistant/attempt`) they form, when that event is
//! written, and until then they exist only in memory even though the writer counts them
//! as written. So a chunk is printed only once a later event that closes its stream
//! (`assistant/message`, `step/end`, `turn/end`, `llm/retry`, `llm/retry-started`) is
//! durable too — in `--json` output a message's chunks arrive together with the message.
//!
//! When stdout breaks the printer stops for good and says so through
//! [`StreamJson::closed`]; the caller ends the run.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_persistence::{SessionWriter, SessionWriters};
use dsh_session::{Event, LiveSession, RecordFormat, SessionAppended, types, write_event};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::run_events::RunEvents;
use dsh_app::stdout::StdoutError;

/// What the printed lines are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// Every session event as the log records it (`--output-format stream-json`).
    Log,
    /// Upstream 0.2's run events (`--json`, see `run_events`).
    Run,
}

/// The running printer of one session.
pub struct StreamJson {
    stop: CancellationToken,
    closed: CancellationToken,
    task: tokio::task::JoinHandle<Option<StdoutError>>,
}

/// Where the printer learns that more events may be printed.
enum Source {
    /// The session's log writer: events below its durable length are printed.
    Durable(SessionWriter),
    /// No log: every appended event is printed (woken per append).
    Appended(Arc<Notify>),
}

impl StreamJson {
    /// Starts printing `session`'s events from its stored prefix on (a resumed log's
    /// stored events are not repeated).
    pub fn start(
        root: &Context,
        session: &Arc<LiveSession>,
        style: Style,
    ) -> Result<Self, BoxError> {
        let writer = root
            .get::<SessionWriters>()
            .and_then(|w| w.get(&session.id()));
        let source = match writer {
            Some(writer) => Source::Durable(writer),
            None => {
                let notify = Arc::new(Notify::new());
                let wake = notify.clone();
                let id = session.id();
                root.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
                    if p.session.id() == id {
                        wake.notify_one();
                    }
                    Ok(())
                })?;
                Source::Appended(notify)
            }
        };
        let stop = CancellationToken::new();
        let closed = CancellationToken::new();
        let task = tokio::spawn(run(
            session.clone(),
            source,
            style,
            stop.clone(),
            closed.clone(),
        ));
        Ok(Self { stop, closed, task })
    }

    /// Cancelled once stdout took no more output.
    pub fn closed(&self) -> CancellationToken {
        self.closed.clone()
    }

    /// Prints what is durable by now and stops; returns the stdout failure, if any.
    pub async fn finish(self) -> Option<StdoutError> {
        self.stop.cancel();
        self.task.await.ok().flatten()
    }
}

async fn run(
    session: Arc<LiveSession>,
    source: Source,
    style: Style,
    stop: CancellationToken,
    closed: CancellationToken,
) -> Option<StdoutError> {
    let mut next = session.stored_len();
    let mut mapper = (style == Style::Run).then(RunEvents::default);
    loop {
        let stopping = stop.is_cancelled();
        let (upto, known) = match &source {
            Source::Durable(writer) => {
                let durable = writer.durable_len();
                (on_disk(&session.events_from(next), durable), durable)
            }
            Source::Appended(_) => {
                let appended = session.next_seq();
                (appended, appended)
            }
        };
        if upto > next {
            if let Err(e) = print_range(&session, next, upto, mapper.as_mut()) {
                closed.cancel();
                return Some(e);
            }
            next = upto;
        }
        if stopping {
            return None;
        }
        tokio::select! {
            () = stop.cancelled() => {}
            () = wait_for_more(&source, known) => {}
        }
    }
}

/// The end of the prefix of `events` that is on disk when events below `durable` were
/// written: it stops at the first stream chunk no durable event has closed yet.
fn on_disk(events: &[Arc<Event>], durable: u64) -> u64 {
    let mut open_chunk = None;
    for e in events.iter().take_while(|e| e.seq < durable) {
        let t = e.event_type.as_str();
        if t == types::ASSISTANT_CHUNK {
            open_chunk.get_or_insert(e.seq);
        } else if matches!(
            t,
            types::ASSISTANT_MESSAGE
                | types::STEP_END
                | types::TURN_END
                | types::LLM_RETRY
                | types::LLM_RETRY_STARTED
        ) {
            open_chunk = None;
        }
    }
    open_chunk.unwrap_or(durable)
}

/// Waits until more than `known` events are durable (or appended).
async fn wait_for_more(source: &Source, known: u64) {
    match source {
        Source::Durable(writer) => writer.wait_durable(known + 1).await,
        Source::Appended(notify) => notify.notified().await,
    }
}

/// Prints events `[from, upto)` as one write: as logged, or as run events through `mapper`.
fn print_range(
    session: &LiveSession,
    from: u64,
    upto: u64,
    mut mapper: Option<&mut RunEvents>,
) -> Result<(), StdoutError> {
    let mut text = String::new();
    let mut lines = Vec::new();
    for event in session
        .events_from(from)
        .into_iter()
        .take_while(|e| e.seq < upto)
    {
        match mapper.as_deref_mut() {
            Some(m) => {
                lines.clear();
                m.map(&event, &mut lines);
                for line in &lines {
                    text.push_str(&line.to_string());
                    text.push('\n');
                }
            }
            None => {
                write_event(&mut text, &event, RecordFormat::Full);
                text.push('\n');
            }
        }
    }
    if text.is_empty() {
        return Ok(());
    }
    dsh_app::stdout::write(&text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{Session, SessionHeader};
    use serde_json::json;

    fn log(kinds: &[&str]) -> Vec<Arc<Event>> {
        let mut s = Session::new(SessionHeader::new("s", 0));
        s.append_at(types::TURN_START, json!({"turn": 1}), None, 0)
            .unwrap();
        let mut step = 0;
        for kind in kinds {
            if *kind == types::STEP_START {
                step += 1;
            }
            let data = match *kind {
                types::ASSISTANT_CHUNK => json!({"turn": 1, "step": step,
                    "chunk": {"type": "text-delta", "index": 0, "text": "x"}}),
                _ => json!({"turn": 1, "step": step}),
            };
            s.append_at(kind, data, None, 0).unwrap();
        }
        s.events().to_vec()
    }

    #[test]
    fn chunks_wait_for_the_event_that_closes_their_stream() {
        let events = log(&[
            types::STEP_START,
            types::ASSISTANT_CHUNK,
            types::ASSISTANT_CHUNK,
            "test/note",
            types::STEP_END,
            types::STEP_START,
            types::ASSISTANT_CHUNK,
        ]);
        // Seqs: 0 turn/start, 1 step/start, 2-3 chunks, 4 note, 5 step/end, 6 step/start,
        // 7 chunk.
        assert_eq!(on_disk(&events, 2), 2);
        assert_eq!(on_disk(&events, 4), 2, "the chunks are not on disk yet");
        assert_eq!(on_disk(&events, 5), 2, "another event does not close them");
        assert_eq!(on_disk(&events, 6), 6, "step/end wrote them");
        assert_eq!(on_disk(&events, 8), 7, "a new open chunk holds again");
        assert_eq!(on_disk(&events[3..], 6), 6, "a scan may start anywhere");
    }
}
