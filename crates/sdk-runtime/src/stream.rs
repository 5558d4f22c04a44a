//! How `session.event` notifications spell a session's events: as its log records them.
//! A format-v4 log (upstream 0.2's, the default) is streamed as its rows: dense seqs,
//! `system/message` rows, `role:"tool"` results, stream chunks folded into the message they
//! form (no `assistant/chunk` notifications), which is what 0.2's runtime sends and its
//! Python SDK reads. A format-v0 log (0.1's) is streamed event by event, chunks included.

use std::collections::HashMap;
use std::sync::Arc;

use dsh_session::v4::V4Encoder;
use dsh_session::{Event, LiveSession, RecordFormat, types, write_event};

/// One session's v4 rows so far.
pub(crate) struct Rows {
    encoder: V4Encoder,
    /// A first step's events, held until its request header names the system prompt.
    held: Vec<Arc<Event>>,
    /// The encoder refused an event: the rest of the session is sent event by event.
    broken: bool,
}

pub(crate) enum EventStream {
    V0,
    V4(HashMap<String, Rows>),
}

impl EventStream {
    pub(crate) fn new(format_version: u64) -> Self {
        if format_version == 0 {
            Self::V0
        } else {
            Self::V4(HashMap::new())
        }
    }

    /// The notification bodies (one event each) that `event` of `session` releases.
    pub(crate) fn push(&mut self, session: &LiveSession, event: &Arc<Event>) -> Vec<String> {
        self.push_with(&session.id(), session.header().seed_length, event, |from| {
            session.events_from(from)
        })
    }

    /// [`EventStream::push`] for a session known only by its events, each given in order from
    /// the first (a session a team gateway streams).
    pub(crate) fn push_ordered(&mut self, session: &str, event: &Arc<Event>) -> Vec<String> {
        self.push_with(session, None, event, |_| Vec::new())
    }

    fn push_with(
        &mut self,
        id: &str,
        seed_length: Option<u64>,
        event: &Arc<Event>,
        events_from: impl FnOnce(u64) -> Vec<Arc<Event>>,
    ) -> Vec<String> {
        let Self::V4(sessions) = self else {
            return vec![v0(event)];
        };
        let rows = sessions.entry(id.to_string()).or_insert_with(|| Rows {
            encoder: V4Encoder::new(id, seed_length),
            held: Vec::new(),
            broken: false,
        });
        if rows.broken {
            return vec![v0(event)];
        }
        let next = rows.encoder.events_seen() + rows.held.len() as u64;
        if event.seq < next {
            return Vec::new();
        }
        let mut out = Vec::new();
        if event.seq > next {
            // Events the session holds without publishing them (a seeded prefix, a restored
            // log): the encoder takes them so seqs and references match the log's.
            rows.release(&mut out);
            let earlier: Vec<_> = events_from(rows.encoder.events_seen())
                .into_iter()
                .take_while(|e| e.seq < event.seq)
                .collect();
            if let Err(e) = rows.encoder.encode(&earlier, &mut String::new()) {
                tracing::warn!("sdk: session {id}: {e}; its events are sent unconverted");
                rows.broken = true;
            }
        }
        if rows.broken {
            out.push(v0(event));
            return out;
        }
        rows.held.push(event.clone());
        let waiting_for_header = !rows.encoder.has_system_message()
            && rows.held.iter().any(|e| e.is(types::STEP_START))
            && !(event.is(types::REQUEST_HEADER)
                || event.is(types::STEP_END)
                || event.is(types::TURN_END));
        if !waiting_for_header {
            rows.release(&mut out);
        }
        out
    }
}

impl Rows {
    fn release(&mut self, out: &mut Vec<String>) {
        if self.held.is_empty() {
            return;
        }
        let held = std::mem::take(&mut self.held);
        let mut text = String::new();
        match self.encoder.encode(&held, &mut text) {
            Ok(_) => out.extend(text.lines().map(str::to_owned)),
            Err(e) => {
                tracing::warn!("sdk: {e}; the session's events are sent unconverted from here");
                self.broken = true;
                out.extend(held.iter().map(|e| v0(e)));
            }
        }
    }
}

fn v0(event: &Event) -> String {
    let mut text = String::new();
    write_event(&mut text, event, RecordFormat::Full);
    text.truncate(text.trim_end().len());
    text
}
