//! The durable event envelope and the known event types.

use std::borrow::{Borrow, Cow};
use std::fmt;
use std::ops::Deref;

use serde_json::{Map, Value};

use crate::payload::EventData;

/// Surface operation of a surface event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SurfaceOp {
    Append,
    /// Replace the surface nodes from `start` to `end` (positional, inclusive).
    Replace {
        start: u64,
        end: u64,
    },
}

impl SurfaceOp {
    pub fn to_value(self) -> Value {
        match self {
            SurfaceOp::Append => Value::from("append"),
            SurfaceOp::Replace { start, end } => {
                let mut m = Map::new();
                m.insert("op".into(), Value::from("replace"));
                m.insert("start".into(), Value::from(start));
                m.insert("end".into(), Value::from(end));
                Value::Object(m)
            }
        }
    }

    pub fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::String(s) if s == "append" => Ok(SurfaceOp::Append),
            Value::Object(m) => {
                let ok = m.len() == 3 && m.get("op").and_then(Value::as_str) == Some("replace");
                match (
                    ok,
                    m.get("start").and_then(Value::as_u64),
                    m.get("end").and_then(Value::as_u64),
                ) {
                    (true, Some(start), Some(end)) => Ok(SurfaceOp::Replace { start, end }),
                    _ => Err("carries an invalid replace surfaceOp".into()),
                }
            }
            _ => Err("carries an invalid surfaceOp".into()),
        }
    }
}

/// Where the surface keys sit in the written envelope. Live appends write
/// `sourceEventSeqs` before `surfaceOp`; crash-repair closers write them the other way
/// round. Kept so a stored log re-serializes byte for byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SurfaceKeyOrder {
    #[default]
    SourcesFirst,
    OpFirst,
}

/// An event type name. Names of the known vocabulary ([`types::KNOWN`]) are interned (no
/// allocation, and [`EventType::is_known`] is free); others are owned strings. Reads like a
/// `&str`: it dereferences to one and compares with `&str` and `String`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventType(Cow<'static, str>);

impl EventType {
    /// The type named `name` (interned when known).
    pub fn new(name: &str) -> Self {
        match types::interned(name) {
            Some(known) => EventType(Cow::Borrowed(known)),
            None => EventType(Cow::Owned(name.to_owned())),
        }
    }

    /// A known type by its static name (no lookup). Only for names of [`types::KNOWN`].
    pub(crate) const fn known(name: &'static str) -> Self {
        EventType(Cow::Borrowed(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this build knows the type (it is one of [`types::KNOWN`]).
    pub fn is_known(&self) -> bool {
        matches!(self.0, Cow::Borrowed(_))
    }
}

impl Deref for EventType {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for EventType {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for EventType {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for EventType {
    fn from(name: &str) -> Self {
        Self::new(name)
    }
}

impl From<String> for EventType {
    fn from(name: String) -> Self {
        match types::interned(&name) {
            Some(known) => EventType(Cow::Borrowed(known)),
            None => EventType(Cow::Owned(name)),
        }
    }
}

impl From<&String> for EventType {
    fn from(name: &String) -> Self {
        Self::new(name)
    }
}

impl From<EventType> for String {
    fn from(t: EventType) -> Self {
        t.0.into_owned()
    }
}

impl serde::Serialize for EventType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for EventType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(EventType::from)
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq<str> for EventType {
    fn eq(&self, other: &str) -> bool {
        *self.0 == *other
    }
}

impl PartialEq<&str> for EventType {
    fn eq(&self, other: &&str) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<String> for EventType {
    fn eq(&self, other: &String) -> bool {
        *self.0 == **other
    }
}

impl PartialEq<EventType> for str {
    fn eq(&self, other: &EventType) -> bool {
        *self == *other.0
    }
}

impl PartialEq<EventType> for &str {
    fn eq(&self, other: &EventType) -> bool {
        **self == *other.0
    }
}

impl PartialEq<EventType> for String {
    fn eq(&self, other: &EventType) -> bool {
        **self == *other.0
    }
}

/// One durable session event. Immutable once in a log (held as `Arc<Event>`).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub event_type: EventType,
    pub seq: u64,
    pub time: i64,
    pub data: EventData,
    pub source_event_seqs: Option<Vec<u64>>,
    pub surface_op: Option<SurfaceOp>,
    /// Only ever `true` when present; unknown ignorable events may be skipped by readers.
    pub ignorable: bool,
    pub key_order: SurfaceKeyOrder,
}

impl Event {
    pub fn is(&self, event_type: &str) -> bool {
        self.event_type == event_type
    }

    /// `data.turn` when it is a number.
    pub fn turn(&self) -> Option<u64> {
        match self.data.delta() {
            Some(d) => Some(d.turn),
            None => self
                .data
                .json()
                .and_then(|v| v.get("turn"))
                .and_then(Value::as_u64),
        }
    }

    /// `data.step` when it is a number.
    pub fn step(&self) -> Option<u64> {
        match self.data.delta() {
            Some(d) => Some(d.step),
            None => self
                .data
                .json()
                .and_then(|v| v.get("step"))
                .and_then(Value::as_u64),
        }
    }
}

/// The event types this build knows (upstream's 48-type vocabulary). A stored event of any
/// other type loads only when marked `ignorable`.
pub mod types {
    pub const TURN_START: &str = "turn/start";
    pub const TURN_END: &str = "turn/end";
    pub const STEP_START: &str = "step/start";
    pub const STEP_END: &str = "step/end";
    pub const USER_MESSAGE: &str = "user/message";
    pub const ASSISTANT_CHUNK: &str = "assistant/chunk";
    pub const ASSISTANT_MESSAGE: &str = "assistant/message";
    pub const TOOL_CALL: &str = "tool/call";
    pub const TOOL_RESULT: &str = "tool/result";
    pub const TODO_WRITE: &str = "todo/write";
    /// A frontend moved the session to another working directory (`{cwd}`).
    pub const WORKING_DIRECTORY_CHANGE: &str = "working-directory/change";
    pub const REQUEST_HEADER: &str = "request/header";
    pub const REQUEST_CONTEXT: &str = "request/context";
    pub const END_SEED: &str = "session/end-seed";
    pub const INBOX_SPLICED: &str = "agent/inbox/spliced";
    pub const SESSION_TITLE: &str = "session/title";
    pub const LLM_RETRY: &str = "llm/retry";
    pub const LLM_RETRY_STARTED: &str = "llm/retry-started";

    /// Every known type.
    pub const KNOWN: [&str; 64] = [
        TURN_START,
        TURN_END,
        STEP_START,
        STEP_END,
        USER_MESSAGE,
        ASSISTANT_CHUNK,
        ASSISTANT_MESSAGE,
        TOOL_CALL,
        TOOL_RESULT,
        TODO_WRITE,
        REQUEST_HEADER,
        REQUEST_CONTEXT,
        END_SEED,
        INBOX_SPLICED,
        "agent-preset/selected",
        "approval/asked",
        "approval/decided",
        "approval/policy",
        "command/run",
        "command/done",
        "compaction/start",
        "compaction/summary",
        "compaction/end",
        "compaction/prune",
        "feedback/record",
        "goal/change",
        "hook/invoked",
        "hook/result",
        LLM_RETRY,
        LLM_RETRY_STARTED,
        "permission/preset",
        "plan/mode",
        "sandbox/mode",
        "schedule/change",
        SESSION_TITLE,
        "session/title-llm-request",
        "subagent/descriptor",
        "team/member",
        "team/task",
        "team/message/queued",
        "team/message/delivered",
        "tool/code-dispatch-start",
        "tool/code-dispatch",
        "tool-workflow/run-start",
        "tool-workflow/agent-start",
        "tool-workflow/agent-end",
        "tool-workflow/run-end",
        "web/deepseek-search-llm-request",
        // Format v4 (upstream 0.2.x) vocabulary; inert in this build's model.
        "system/message",
        "developer/message",
        "assistant/attempt",
        "job/registered",
        "job/settled",
        "session-log-deepseek/delivery-accepted",
        "subagent/catalog",
        "subagent/model-selection-policy",
        "model/selection",
        "working-directory/change",
        "workspace/changes",
        "image/offload",
        "deliverables/presented",
        "feedback/message-put",
        "feedback/message-delete",
        "tool/ptc-dispatch",
    ];

    /// Types only this build writes (memory across sessions). They are written `ignorable`,
    /// so upstream's readers (and older builds) skip them and still open the log.
    pub const OURS_IGNORABLE: [&str; 2] = ["memory/change", "memory/suggest"];

    /// The three surface (model-visible) types.
    pub const SURFACE: [&str; 3] = [USER_MESSAGE, ASSISTANT_MESSAGE, TOOL_RESULT];

    pub fn is_known(t: &str) -> bool {
        KNOWN.contains(&t)
    }

    /// The static name of a known type.
    pub(crate) fn interned(t: &str) -> Option<&'static str> {
        KNOWN.iter().find(|k| **k == t).copied()
    }

    pub fn is_surface(t: &str) -> bool {
        SURFACE.contains(&t)
    }
}
