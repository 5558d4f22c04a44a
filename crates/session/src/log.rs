//! The in-memory, append-only session log with its surface and derived caches.

use std::collections::HashMap;
use std::sync::Arc;

use dsh_llm::{Message, Role};
use serde::Deserialize;
use serde_json::Value;

use crate::data::{EpochHeader, RequestContext};
use crate::enclosure::Enclosure;
use crate::event::{Event, EventType, SurfaceKeyOrder, SurfaceOp, types};
use crate::header::SessionHeader;
use crate::payload::EventData;
use crate::surface::Surface;

/// The surface marker a surface event is appended with.
#[derive(Clone, Debug, PartialEq)]
pub struct SurfaceIntent {
    pub op: SurfaceOp,
    pub sources: Option<Vec<u64>>,
}

impl SurfaceIntent {
    pub fn append() -> Self {
        Self {
            op: SurfaceOp::Append,
            sources: None,
        }
    }

    pub fn append_citing(sources: Vec<u64>) -> Self {
        Self {
            op: SurfaceOp::Append,
            sources: Some(sources),
        }
    }
}

/// An append or seed event was refused; the log is unchanged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{0}")]
pub struct AppendError(pub String);

/// Why a fork could not be made.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ForkError {
    #[error("fork boundary {0} is not an event of the source session")]
    InvalidBoundary(u64),
    #[error("fork boundary {0} falls inside an open turn")]
    OpenTurn(u64),
}

/// A session: header plus the append-only log (`seq == index`, forever).
#[derive(Debug, Clone)]
pub struct Session {
    header: SessionHeader,
    log: Vec<Arc<Event>>,
    surface: Surface,
    enclosure: Enclosure,
    first_live_seq: u64,
    /// Parsed messages of surface events, by seq.
    messages: HashMap<u64, Arc<Message>>,
    derived: Vec<Arc<Message>>,
    derived_nodes: usize,
    derived_generation: u64,
    request_header: Option<EpochHeader>,
    request_context: Option<RequestContext>,
}

impl Session {
    /// A fresh session without seed.
    pub fn new(header: SessionHeader) -> Self {
        Self {
            header,
            log: Vec::new(),
            surface: Surface::default(),
            enclosure: Enclosure::default(),
            first_live_seq: 0,
            messages: HashMap::new(),
            derived: Vec::new(),
            derived_nodes: 0,
            derived_generation: 0,
            request_header: None,
            request_context: None,
        }
    }

    /// A session over `seed` (validated like appends: envelope, contiguity, surface). When a
    /// seed is given (even an empty one) and it does not already end with
    /// `session/end-seed`, one is appended at `time` — the durable seed boundary.
    pub fn with_seed(
        header: SessionHeader,
        seed: Vec<Arc<Event>>,
        time: i64,
    ) -> Result<Self, AppendError> {
        let mut s = Self::new(header);
        s.log.reserve_exact(seed.len() + 1);
        for (i, e) in seed.into_iter().enumerate() {
            if e.seq != i as u64 {
                return Err(AppendError(format!(
                    "seed event at index {i} has seq {}",
                    e.seq
                )));
            }
            s.admit(e, false)?;
        }
        s.first_live_seq = s.log.len() as u64;
        if s.log.last().is_none_or(|e| !e.is(types::END_SEED)) {
            s.append_at(
                types::END_SEED,
                Value::Object(Default::default()),
                None,
                time,
            )?;
        }
        Ok(s)
    }

    pub fn header(&self) -> &SessionHeader {
        &self.header
    }

    pub fn id(&self) -> &str {
        &self.header.id
    }

    pub fn events(&self) -> &[Arc<Event>] {
        &self.log
    }

    /// The next seq (= number of events).
    pub fn next_seq(&self) -> u64 {
        self.log.len() as u64
    }

    /// The first seq appended by this lifecycle (the seed length).
    pub fn first_live_seq(&self) -> u64 {
        self.first_live_seq
    }

    pub fn open_turn(&self) -> Option<u64> {
        self.enclosure.open_turn()
    }

    pub fn open_step(&self) -> Option<u64> {
        self.enclosure.open_step()
    }

    /// The number of the last `turn/start` in the log (0 if none).
    pub fn last_turn(&self) -> u64 {
        self.enclosure.last_turn()
    }

    pub fn surface(&self) -> &Surface {
        &self.surface
    }

    /// Builds and validates an event, then commits it.
    pub fn append_at(
        &mut self,
        event_type: &str,
        data: Value,
        surface: Option<SurfaceIntent>,
        time: i64,
    ) -> Result<Arc<Event>, AppendError> {
        let (surface_op, source_event_seqs) = match surface {
            Some(i) => (Some(i.op), i.sources),
            None => (None, None),
        };
        let event = Arc::new(Event {
            event_type: EventType::new(event_type),
            seq: self.next_seq(),
            time,
            data: EventData::new(data),
            source_event_seqs,
            surface_op,
            ignorable: types::OURS_IGNORABLE.contains(&event_type),
            key_order: SurfaceKeyOrder::SourcesFirst,
        });
        self.admit(event.clone(), true)?;
        Ok(event)
    }

    /// Appends an already-built event (restores, repair closers). Its seq must be next.
    pub fn push_event(&mut self, event: Arc<Event>) -> Result<(), AppendError> {
        if event.seq != self.next_seq() {
            return Err(AppendError(format!(
                "event seq {} is not the next seq {}",
                event.seq,
                self.next_seq()
            )));
        }
        self.admit(event, false)
    }

    /// Appends an already-built event, also enforcing the live-append invariant (turn/step
    /// nesting and numbering). Used to verify foreign logs.
    pub fn push_event_checked(&mut self, event: Arc<Event>) -> Result<(), AppendError> {
        if event.seq != self.next_seq() {
            return Err(AppendError(format!(
                "event seq {} is not the next seq {}",
                event.seq,
                self.next_seq()
            )));
        }
        self.admit(event, true)
    }

    /// Validates an event and commits it. `live` adds the enclosure invariant.
    fn admit(&mut self, event: Arc<Event>, live: bool) -> Result<(), AppendError> {
        let fail = |m: String| {
            AppendError(format!(
                "session \"{}\": event at seq {}: {m}",
                self.header.id, event.seq
            ))
        };
        if !event.data.is_lossless() {
            return Err(fail(format!(
                "session event \"{}\" carries non-JSON-serializable data",
                event.event_type
            )));
        }
        let message = validate_shape(&event).map_err(fail)?;
        let plan = self.surface.plan(&event, &self.log).map_err(fail)?;
        if live {
            self.enclosure.check(&event).map_err(fail)?;
        }
        self.enclosure.apply(&event);
        self.surface.apply(event.seq, &plan);
        match event.event_type.as_str() {
            types::REQUEST_HEADER => {
                if let Some(h) = event
                    .data
                    .get("header")
                    .and_then(|h| EpochHeader::deserialize(h).ok())
                {
                    self.request_header = Some(h.canonical());
                }
            }
            types::REQUEST_CONTEXT => {
                self.request_context = RequestContext::deserialize(event.data.as_value()).ok();
            }
            _ => {}
        }
        if let Some(m) = message {
            self.messages.insert(event.seq, Arc::new(m));
        }
        self.log.push(event);
        Ok(())
    }

    /// The latest `request/header`, canonical.
    pub fn request_header(&self) -> Option<&EpochHeader> {
        self.request_header.as_ref()
    }

    /// Whether `header` equals the latest `request/header`. When it does, `header`'s copy is
    /// kept as that baseline (the same content, holding the caller's shared tool schemas),
    /// so the next comparison against the same schemas is a pointer check per tool instead
    /// of a walk of every schema.
    pub fn request_header_matches(&mut self, header: &EpochHeader) -> bool {
        let Some(baseline) = &self.request_header else {
            return false;
        };
        if baseline != header {
            return false;
        }
        let shared = match (&baseline.tools, &header.tools) {
            (Some(a), Some(b)) => a
                .iter()
                .zip(b)
                .all(|(x, y)| Arc::ptr_eq(&x.parameters, &y.parameters)),
            _ => true,
        };
        if !shared {
            self.request_header = Some(header.clone());
        }
        true
    }

    /// The latest `request/context`.
    pub fn request_context(&self) -> Option<&RequestContext> {
        self.request_context.as_ref()
    }

    /// The model-visible history: every surface node's message, in surface order.
    /// Empty assistant messages are skipped.
    pub fn derive_messages(&mut self) -> Vec<Arc<Message>> {
        let generation = self.surface.replace_generation();
        if generation != self.derived_generation {
            self.derived.clear();
            self.derived_nodes = 0;
            self.derived_generation = generation;
        }
        let nodes = self.surface.nodes();
        for seq in &nodes[self.derived_nodes..] {
            if let Some(m) = self.messages.get(seq)
                && !(m.role == Role::Assistant && m.content.is_empty())
            {
                self.derived.push(m.clone());
            }
        }
        self.derived_nodes = nodes.len();
        self.derived.clone()
    }

    /// The events of a fork at `boundary` (inclusive; default: the last event). Refuses a
    /// boundary inside an open turn.
    pub fn fork_prefix(&self, boundary: Option<u64>) -> Result<Vec<Arc<Event>>, ForkError> {
        let Some(last) = self.log.last() else {
            return Ok(Vec::new());
        };
        let b = boundary.unwrap_or(last.seq);
        if b >= self.next_seq() {
            return Err(ForkError::InvalidBoundary(b));
        }
        let prefix = &self.log[..=b as usize];
        let last_bracket = prefix
            .iter()
            .rev()
            .find(|e| e.is(types::TURN_START) || e.is(types::TURN_END));
        if last_bracket.is_some_and(|e| e.is(types::TURN_START)) {
            return Err(ForkError::OpenTurn(b));
        }
        Ok(prefix.to_vec())
    }
}

/// Shape checks of known events; returns the parsed message of a surface event.
fn validate_shape(event: &Event) -> Result<Option<Message>, String> {
    let t = event.event_type.as_str();
    let message_value = match t {
        types::USER_MESSAGE => Some(event.data.as_value()),
        types::ASSISTANT_MESSAGE | types::TOOL_RESULT => Some(
            event
                .data
                .get("message")
                .ok_or_else(|| format!("\"{t}\" data has no message"))?,
        ),
        types::REQUEST_HEADER => {
            let config = event.data.pointer("/header/config");
            let non_empty = |k: &str| {
                config
                    .and_then(|c| c.get(k))
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
            };
            if !non_empty("provider") || !non_empty("model") {
                return Err(
                    "request/header needs a non-empty config.provider and config.model".into(),
                );
            }
            if event.data.get("reason").and_then(Value::as_str) == Some("fallback") {
                return Err("unsupported legacy request/header reason \"fallback\"".into());
            }
            None
        }
        "request/header-delta" => {
            return Err("unsupported legacy request/header-delta event".into());
        }
        _ => None,
    };
    let Some(value) = message_value else {
        return Ok(None);
    };
    let message = Message::from_json(value)?;
    match (t, &message.role, message.source.kind()) {
        (types::ASSISTANT_MESSAGE, Role::Assistant, "model") => {}
        (types::ASSISTANT_MESSAGE, _, _) => {
            return Err("assistant/message needs an assistant message from a model".into());
        }
        (types::TOOL_RESULT, Role::User, "tool") => {}
        (types::TOOL_RESULT, _, _) => {
            return Err("tool/result needs a user-role message with a tool source".into());
        }
        (_, Role::Assistant, _) => {
            return Err("user/message cannot carry an assistant message".into());
        }
        _ => {}
    }
    Ok(Some(message))
}
