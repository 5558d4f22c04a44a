//! `@deepseek-ai/dsh-session-log-deepseek` (row `session-log-deepseek`): with `enabled: true`,
//! every request of a session to the official DeepSeek route carries the part of the
//! session's log the provider has not accepted yet, as the `dsh_session_log` field:
//!
//! `{version: 1, sessionFormatVersion: 4, session: <header>, afterSeq, throughSeq, events}`
//!
//! `events` are the session's format-v4 rows (the shape of its `session.jsonl`) after
//! `afterSeq` (-1 at first) through `throughSeq`, as many as fit in `maxBytes` bytes of field
//! (8 MiB). Once the provider answers a request 2xx, the session records
//! `session-log-deepseek/delivery-accepted {sessionId, sessionFormatVersion, throughSeq}` and
//! the next request starts after it. This is upstream 0.2.1's wire contract; unlike upstream
//! it is **off unless enabled**: nothing of a session leaves the machine unasked.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ExtensionField, ExtensionRequest, RequestExtension, RequestExtensions};
use dsh_session::v4::V4Encoder;
use dsh_session::{LiveSession, SESSION_FORMAT_V4, SessionDisposed, SessionStore, types};
use serde_json::{Map, Value, json};

pub const UPLOAD_PLUGIN_NAME: &str = "@deepseek-ai/dsh-session-log-deepseek";
/// The request field.
const FIELD: &str = "dsh_session_log";
/// The event a session records when the provider accepted a request carrying its log.
pub const DELIVERY_ACCEPTED: &str = "session-log-deepseek/delivery-accepted";
const DEFAULT_MAX_BYTES: u64 = 8 * 1024 * 1024;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct UploadConfig {
    #[serde(default)]
    enabled: bool,
    #[serde(default = "default_max_bytes")]
    max_bytes: u64,
}

fn default_max_bytes() -> u64 {
    DEFAULT_MAX_BYTES
}

pub struct SessionLogUploadPlugin;

impl Plugin for SessionLogUploadPlugin {
    fn name(&self) -> &'static str {
        UPLOAD_PLUGIN_NAME
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let parsed: UploadConfig = config.parse()?;
        if parsed.max_bytes == 0 {
            return Err("config key `maxBytes` must be at least 1".into());
        }
        let registry = ctx.require::<RequestExtensions>()?;
        let sessions = ctx.require::<SessionStore>()?;
        if !parsed.enabled {
            return Ok(());
        }
        let upload = Arc::new(SessionLogUpload {
            sessions,
            max_bytes: parsed.max_bytes,
            state: Mutex::new(HashMap::new()),
        });
        let forget = upload.clone();
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            forget
                .state
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&session.id());
            Ok(())
        })?;
        registry.register(ctx, FIELD, upload)?;
        Ok(())
    }
}

struct SessionLogUpload {
    sessions: Arc<SessionStore>,
    max_bytes: u64,
    state: Mutex<HashMap<String, Progress>>,
}

/// What one session's uploads have seen.
struct Progress {
    /// The session's events as v4 rows, continued as the session grows.
    encoder: V4Encoder,
    /// Rows not accepted yet: (disk seq, row JSON).
    pending: VecDeque<(u64, String)>,
    /// Rows encoded so far (the disk seq of the next one).
    rows: u64,
    /// In-memory events already scanned for acceptances.
    scanned: u64,
    /// The highest accepted row.
    accepted: Option<u64>,
    /// The row the upload was last reported stuck at (logged once).
    blocked_at: Option<u64>,
}

impl RequestExtension for SessionLogUpload {
    fn prepare(&self, request: &ExtensionRequest<'_>) -> Result<Option<ExtensionField>, String> {
        let Some(id) = request.session_id else {
            return Ok(None);
        };
        let Some(session) = self.sessions.get(id) else {
            return Ok(None);
        };
        let header = session.header();
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let progress = state.entry(id.to_string()).or_insert_with(|| Progress {
            encoder: V4Encoder::new(id, header.seed_length),
            pending: VecDeque::new(),
            rows: 0,
            scanned: 0,
            accepted: None,
            blocked_at: None,
        });
        progress.catch_up(&session)?;
        let Some(field) = progress.field(&session, self.max_bytes) else {
            return Ok(None);
        };
        let (json, through_memory) = field;
        let accepted_by = session.clone();
        let session_id = id.to_string();
        Ok(Some(ExtensionField {
            json,
            accept: Some(Box::new(move || {
                accepted_by
                    .append(
                        DELIVERY_ACCEPTED,
                        json!({
                            "sessionId": session_id,
                            "sessionFormatVersion": SESSION_FORMAT_V4,
                            "throughSeq": through_memory,
                        }),
                        None,
                    )
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })),
        }))
    }
}

impl Progress {
    /// Encodes the session's new events and folds in new acceptances.
    fn catch_up(&mut self, session: &LiveSession) -> Result<(), String> {
        let id = session.id();
        let mut fresh = session.events_from(self.encoder.events_seen());
        // A first step's system row takes its prompt from the step's request header: until
        // that is logged (a title request can run that early), the step waits, as the log
        // writer holds it.
        if !self.encoder.has_system_message()
            && let Some(start) = fresh.iter().position(|e| e.is(types::STEP_START))
            && !fresh[start..].iter().any(|e| e.is(types::REQUEST_HEADER))
        {
            fresh.truncate(start);
        }
        if !fresh.is_empty() {
            let mut text = String::new();
            let written = self
                .encoder
                .encode(&fresh, &mut text)
                .map_err(|e| e.to_string())?;
            for line in text.lines().take(written) {
                self.pending.push_back((self.rows, line.to_string()));
                self.rows += 1;
            }
        }
        for event in session.events_from(self.scanned) {
            self.scanned = event.seq + 1;
            if event.event_type.as_str() != DELIVERY_ACCEPTED {
                continue;
            }
            let data = event.data.as_value();
            let malformed = || format!("malformed {DELIVERY_ACCEPTED} event at seq {}", event.seq);
            let version = match data.get("sessionFormatVersion") {
                None => 0,
                Some(v) => v.as_u64().ok_or_else(malformed)?,
            };
            let through = data
                .get("throughSeq")
                .and_then(Value::as_u64)
                .filter(|t| *t < event.seq)
                .ok_or_else(malformed)?;
            let owner = data
                .get("sessionId")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .ok_or_else(malformed)?;
            // Another session's acceptances (inherited by a fork) and another format's
            // rows say nothing about this session's v4 rows.
            if version != SESSION_FORMAT_V4 || owner != id {
                continue;
            }
            if let Some(disk) = self.encoder.disk_seq(through)
                && self.accepted.is_none_or(|a| disk > a)
            {
                self.accepted = Some(disk);
            }
        }
        if let Some(accepted) = self.accepted {
            while self
                .pending
                .front()
                .is_some_and(|(seq, _)| *seq <= accepted)
            {
                self.pending.pop_front();
            }
        }
        Ok(())
    }

    /// The field's JSON and the in-memory seq its last row stands for; `None` when there is
    /// nothing new or the next row alone is over `max_bytes`.
    fn field(&mut self, session: &LiveSession, max_bytes: u64) -> Option<(String, u64)> {
        let (first, _) = self.pending.front()?;
        let first = *first;
        let after = self.accepted.map_or(-1, |a| a as i64);
        let prefix = format!(
            "{{\"version\":1,\"sessionFormatVersion\":{SESSION_FORMAT_V4},\"session\":{},\"afterSeq\":{after},\"throughSeq\":",
            dsh_kernel::json::to_string(&self.wire_header(session)),
        );
        const EVENTS: &str = ",\"events\":[";
        let fixed = (prefix.len() + EVENTS.len() + 2) as u64;
        let mut bytes = fixed;
        let mut taken = 0;
        for (i, (seq, row)) in self.pending.iter().enumerate() {
            let next = bytes + row.len() as u64 + u64::from(i > 0);
            if next + seq.to_string().len() as u64 > max_bytes {
                break;
            }
            bytes = next;
            taken += 1;
        }
        if taken == 0 {
            if self.blocked_at != Some(first) {
                self.blocked_at = Some(first);
                tracing::warn!(
                    "session-log-deepseek: event {first} of session \"{}\" does not fit in a dsh_session_log field of maxBytes {max_bytes}; the upload of this session waits at it until maxBytes is raised",
                    session.id()
                );
            }
            return None;
        }
        let through = self.pending[taken - 1].0;
        let through_memory = self.encoder.memory_seq_through(through)?;
        let mut json = String::with_capacity(bytes as usize + 20);
        json.push_str(&prefix);
        json.push_str(&through.to_string());
        json.push_str(EVENTS);
        for (i, (_, row)) in self.pending.iter().take(taken).enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(row);
        }
        json.push_str("]}");
        Some((json, through_memory))
    }

    /// The session's header as the field carries it: upstream's logical header (a seeded
    /// session says how many rows it inherited instead of `isSeeded`).
    fn wire_header(&self, session: &LiveSession) -> Value {
        let header = session.header();
        let mut v4 = match header.to_v4_value() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        v4.remove("type");
        v4.remove("isSeeded");
        let mut out = Map::new();
        for key in ["version", "id", "createdAt", "cwd", "parentSession"] {
            if let Some(v) = v4.remove(key) {
                out.insert(key.into(), v);
            }
        }
        if let Some(seed) = header.seed_length.and_then(|m| self.encoder.disk_seq(m)) {
            out.insert("seedLength".into(), Value::from(seed + 1));
        }
        out.extend(v4);
        Value::Object(out)
    }
}
