//! [`EventData`]: an event's `data` — a JSON value, held compactly when it is a stream
//! delta.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, OnceLock};

use serde::{Serialize, Serializer};
use serde_json::Value;

use crate::delta::{ChunkDelta, DeltaRun};

/// The `data` of a session event: one lossless JSON value.
///
/// It dereferences to `serde_json::Value`, so `data.get(..)`, `data["turn"]` and
/// `data.pointer(..)` read it as before. Stream deltas (the bulk of a long log) are held in
/// a compact form ([`EventData::delta`]); their `Value` is built on first dereference and
/// then kept with the event. Code that walks many chunk events should read them through
/// [`EventData::delta`] (no JSON built) and use [`EventData::to_value`] for an owned copy.
///
/// Immutable in meaning: the lazily built `Value` is a cache of a fixed value.
pub struct EventData(Repr);

enum Repr {
    Json {
        value: Box<Value>,
        /// Known to hold no `-0` (parsed from text without a `-` before a digit), so
        /// the lossless check can be skipped.
        lossless: bool,
    },
    Delta {
        run: Arc<DeltaRun>,
        member: usize,
        json: OnceLock<Box<Value>>,
    },
}

/// Whether a value parsed from JSON text may hold a `-0` — the only number JSON text can
/// hold that is not lossless (non-finite numbers cannot be written in JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NegativeZero {
    /// Unknown: the lossless check must walk the value.
    Possible,
    /// The text has no `-` before a digit, so no number in it is negative.
    Impossible,
}

impl NegativeZero {
    /// What JSON text can hold: any `-` followed by a digit may be a number that parses to
    /// `-0` (`-0`, `-0.0`, or a negative number that underflows, such as `-1e-400`).
    pub fn in_text(text: &str) -> Self {
        match text
            .as_bytes()
            .windows(2)
            .any(|w| w[0] == b'-' && w[1].is_ascii_digit())
        {
            true => NegativeZero::Possible,
            false => NegativeZero::Impossible,
        }
    }
}

impl EventData {
    /// Wraps a value; stream-delta-shaped values take the compact form.
    pub fn new(value: Value) -> Self {
        Self::from_json(value, NegativeZero::Possible)
    }

    /// Wraps a value parsed from JSON text of which `negative_zero` is known.
    pub(crate) fn from_json(value: Value, negative_zero: NegativeZero) -> Self {
        if let Some(delta) = ChunkDelta::from_value(&value) {
            return Self::from_run(Arc::new(DeltaRun::single(&delta)), 0);
        }
        let lossless = negative_zero == NegativeZero::Impossible;
        EventData(Repr::Json {
            value: Box::new(value),
            lossless,
        })
    }

    /// Member `member` of a shared run.
    pub(crate) fn from_run(run: Arc<DeltaRun>, member: usize) -> Self {
        EventData(Repr::Delta {
            run,
            member,
            json: OnceLock::new(),
        })
    }

    /// The stream delta this data is, without building its JSON.
    pub fn delta(&self) -> Option<ChunkDelta<'_>> {
        match &self.0 {
            Repr::Delta { run, member, .. } => Some(run.member(*member)),
            Repr::Json { .. } => None,
        }
    }

    /// The run and member index of a compact delta (for packing without copying text).
    pub(crate) fn delta_member(&self) -> Option<(&Arc<DeltaRun>, usize)> {
        match &self.0 {
            Repr::Delta { run, member, .. } => Some((run, *member)),
            Repr::Json { .. } => None,
        }
    }

    /// The value when it is held as JSON (never builds a delta's JSON).
    pub(crate) fn json(&self) -> Option<&Value> {
        match &self.0 {
            Repr::Json { value, .. } => Some(value),
            Repr::Delta { .. } => None,
        }
    }

    /// The value (built and kept on first call for a compact delta).
    pub fn as_value(&self) -> &Value {
        match &self.0 {
            Repr::Json { value, .. } => value,
            Repr::Delta { run, member, json } => {
                json.get_or_init(|| Box::new(run.member(*member).to_value()))
            }
        }
    }

    /// An owned copy of the value (a compact delta's JSON is built, not kept).
    pub fn to_value(&self) -> Value {
        match &self.0 {
            Repr::Json { value, .. } => Value::clone(value),
            Repr::Delta { run, member, json } => match json.get() {
                Some(v) => Value::clone(v),
                None => run.member(*member).to_value(),
            },
        }
    }

    pub fn into_value(self) -> Value {
        match self.0 {
            Repr::Json { value, .. } => *value,
            Repr::Delta { run, member, json } => match json.into_inner() {
                Some(v) => *v,
                None => run.member(member).to_value(),
            },
        }
    }

    /// Whether the value is lossless JSON (no `-0`; see `dsh_kernel::json::is_lossless`).
    pub fn is_lossless(&self) -> bool {
        match &self.0 {
            Repr::Json { lossless: true, .. } | Repr::Delta { .. } => true,
            Repr::Json {
                value,
                lossless: false,
            } => dsh_kernel::json::is_lossless(value),
        }
    }

    /// Appends the value's `JSON.stringify` text.
    pub fn write_json(&self, out: &mut String) {
        match &self.0 {
            Repr::Json { value, .. } => dsh_kernel::json::write_value(out, value),
            Repr::Delta { run, member, .. } => run.member(*member).write_json(out),
        }
    }
}

impl Deref for EventData {
    type Target = Value;

    fn deref(&self) -> &Value {
        self.as_value()
    }
}

/// Mutable access to an owned copy (an event in a log is shared and cannot be changed). A
/// compact delta becomes a plain value first.
impl DerefMut for EventData {
    fn deref_mut(&mut self) -> &mut Value {
        json_mut(&mut self.0)
    }
}

fn json_mut(repr: &mut Repr) -> &mut Value {
    match repr {
        Repr::Json { value, lossless } => {
            *lossless = false;
            value
        }
        Repr::Delta { run, member, json } => {
            let value = json
                .take()
                .unwrap_or_else(|| Box::new(run.member(*member).to_value()));
            *repr = Repr::Json {
                value,
                lossless: false,
            };
            json_mut(repr)
        }
    }
}

impl AsRef<Value> for EventData {
    fn as_ref(&self) -> &Value {
        self.as_value()
    }
}

impl From<Value> for EventData {
    fn from(value: Value) -> Self {
        Self::new(value)
    }
}

impl From<EventData> for Value {
    fn from(data: EventData) -> Self {
        data.into_value()
    }
}

impl Default for EventData {
    fn default() -> Self {
        Self::new(Value::Null)
    }
}

impl Clone for EventData {
    fn clone(&self) -> Self {
        match &self.0 {
            Repr::Json { value, lossless } => EventData(Repr::Json {
                value: value.clone(),
                lossless: *lossless,
            }),
            Repr::Delta { run, member, .. } => Self::from_run(run.clone(), *member),
        }
    }
}

impl PartialEq for EventData {
    fn eq(&self, other: &Self) -> bool {
        match (self.delta(), other.delta()) {
            (Some(a), Some(b)) => a == b,
            (None, None) => self.json() == other.json(),
            // Not produced by the constructors (delta-shaped values are always compact),
            // but equal in meaning if the values are.
            _ => self.to_value() == other.to_value(),
        }
    }
}

impl PartialEq<Value> for EventData {
    fn eq(&self, other: &Value) -> bool {
        match self.json() {
            Some(v) => v == other,
            None => &self.to_value() == other,
        }
    }
}

impl PartialEq<EventData> for Value {
    fn eq(&self, other: &EventData) -> bool {
        other == self
    }
}

impl fmt::Debug for EventData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.json() {
            Some(v) => v.fmt(f),
            None => self.to_value().fmt(f),
        }
    }
}

impl Serialize for EventData {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.json() {
            Some(v) => v.serialize(s),
            None => self.to_value().serialize(s),
        }
    }
}
