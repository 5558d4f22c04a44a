//! Storage metadata of a session (outside the event log).

use serde_json::{Map, Value};

/// The log format version of upstream 0.1.x (`session.jsonl[.zstd]`).
pub const SESSION_FORMAT_VERSION: u64 = 0;
/// The log format version of upstream 0.2.x (`session.v4.jsonl[.zstd]`).
pub const SESSION_FORMAT_V4: u64 = 4;

/// Header keys a v4 header may carry.
const V4_KEYS: [&str; 10] = [
    "type",
    "version",
    "id",
    "createdAt",
    "cwd",
    "parentSession",
    "isSeeded",
    "origin",
    "delegationDepth",
    "agentPreset",
];

/// `{type:"session", version, id, createdAt, cwd?, parentSession?, seedLength?, origin?,
/// delegationDepth, agentPreset?}` — the first record of every stored log.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionHeader {
    pub version: u64,
    pub id: String,
    pub created_at: u64,
    pub cwd: Option<String>,
    pub parent_session: Option<String>,
    /// The durable fork boundary: events below it were inherited.
    pub seed_length: Option<u64>,
    pub origin: Option<String>,
    pub delegation_depth: u64,
    pub agent_preset: Option<String>,
}

impl SessionHeader {
    pub fn new(id: impl Into<String>, created_at: u64) -> Self {
        Self {
            version: SESSION_FORMAT_VERSION,
            id: id.into(),
            created_at,
            cwd: None,
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: 0,
            agent_preset: None,
        }
    }

    pub fn to_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), Value::from("session"));
        m.insert("version".into(), Value::from(self.version));
        m.insert("id".into(), Value::from(self.id.clone()));
        m.insert("createdAt".into(), Value::from(self.created_at));
        if let Some(cwd) = &self.cwd {
            m.insert("cwd".into(), Value::from(cwd.clone()));
        }
        if let Some(p) = &self.parent_session {
            m.insert("parentSession".into(), Value::from(p.clone()));
        }
        if let Some(s) = self.seed_length {
            m.insert("seedLength".into(), Value::from(s));
        }
        if let Some(o) = &self.origin {
            m.insert("origin".into(), Value::from(o.clone()));
        }
        m.insert("delegationDepth".into(), Value::from(self.delegation_depth));
        if let Some(a) = &self.agent_preset {
            m.insert("agentPreset".into(), Value::from(a.clone()));
        }
        Value::Object(m)
    }

    /// The v4 header (`isSeeded` instead of `seedLength`; `delegationDepth` always; key
    /// order as upstream writes it).
    pub fn to_v4_value(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), Value::from("session"));
        m.insert("version".into(), Value::from(SESSION_FORMAT_V4));
        m.insert("id".into(), Value::from(self.id.clone()));
        m.insert("createdAt".into(), Value::from(self.created_at));
        if let Some(cwd) = &self.cwd {
            m.insert("cwd".into(), Value::from(cwd.clone()));
        }
        if let Some(p) = &self.parent_session {
            m.insert("parentSession".into(), Value::from(p.clone()));
        }
        m.insert("isSeeded".into(), Value::from(self.seed_length.is_some()));
        if let Some(o) = &self.origin {
            m.insert("origin".into(), Value::from(o.clone()));
        }
        m.insert("delegationDepth".into(), Value::from(self.delegation_depth));
        if let Some(a) = &self.agent_preset {
            m.insert("agentPreset".into(), Value::from(a.clone()));
        }
        Value::Object(m)
    }

    /// Parses a v4 header strictly: exactly upstream's keys, `isSeeded` and
    /// `delegationDepth` required, an absolute `cwd`. Returns the header (its seed length
    /// is known only once the log's inherited end-seed is read) and whether it is seeded.
    pub fn from_v4_value(value: &Value) -> Result<(Self, bool), HeaderError> {
        let Value::Object(m) = value else {
            return Err(HeaderError::Shape(
                "first line is not a session header".into(),
            ));
        };
        if m.get("type").and_then(Value::as_str) != Some("session")
            || m.get("version").and_then(Value::as_u64) != Some(SESSION_FORMAT_V4)
        {
            return Err(HeaderError::Shape(
                "first line is not a v4 session header".into(),
            ));
        }
        if let Some(k) = m.keys().find(|k| !V4_KEYS.contains(&k.as_str())) {
            return Err(HeaderError::Shape(format!(
                "format v4 header has unexpected field \"{k}\""
            )));
        }
        let field = |k: &str, what: &str| {
            HeaderError::Shape(format!("format v4 header field `{k}` {what}"))
        };
        let id = m
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(|| field("id", "must be a string"))?
            .to_string();
        let created_at = m
            .get("createdAt")
            .and_then(Value::as_u64)
            .ok_or_else(|| field("createdAt", "must be a non-negative integer"))?;
        let seeded = m
            .get("isSeeded")
            .and_then(Value::as_bool)
            .ok_or_else(|| field("isSeeded", "must be a boolean"))?;
        let delegation_depth = m
            .get("delegationDepth")
            .and_then(Value::as_u64)
            .ok_or_else(|| field("delegationDepth", "must be a non-negative integer"))?;
        let text = |k: &str| -> Result<Option<String>, HeaderError> {
            match m.get(k) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(field(k, "must be a string")),
            }
        };
        let cwd = text("cwd")?;
        if cwd.as_deref().is_some_and(|c| !c.starts_with('/')) {
            return Err(field("cwd", "must be an absolute path"));
        }
        let origin = text("origin")?;
        if origin.as_deref().is_some_and(|o| o != "subagent") {
            return Err(field("origin", "must be \"subagent\""));
        }
        Ok((
            Self {
                version: SESSION_FORMAT_V4,
                id,
                created_at,
                cwd,
                parent_session: text("parentSession")?,
                seed_length: None,
                origin,
                delegation_depth,
                agent_preset: text("agentPreset")?,
            },
            seeded,
        ))
    }

    /// Parses a header record. Returns `Err(HeaderError::Version)` for a foreign format
    /// version before checking the shape (so a newer log is refused, not called corrupt).
    pub fn from_value(value: &Value) -> Result<Self, HeaderError> {
        if value.get("version").and_then(Value::as_u64) == Some(SESSION_FORMAT_V4) {
            return Self::from_v4_value(value).map(|(h, _)| h);
        }
        let Value::Object(m) = value else {
            return Err(HeaderError::Shape(
                "first line is not a session header".into(),
            ));
        };
        if m.get("type").and_then(Value::as_str) != Some("session") {
            return Err(HeaderError::Shape(
                "first line is not a session header".into(),
            ));
        }
        let version = m.get("version").and_then(Value::as_f64);
        if let Some(v) = version
            && v != SESSION_FORMAT_VERSION as f64
        {
            return Err(HeaderError::Version {
                id: m
                    .get("id")
                    .map(|v| {
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string())
                    })
                    .unwrap_or_default(),
                version: v,
            });
        }
        if m.contains_key("sandboxMode") || m.contains_key("approvalPolicy") {
            return Err(HeaderError::Shape(
                "session header uses retired policy baseline fields".into(),
            ));
        }
        let shape = || HeaderError::Shape("first line is not a session header".into());
        let id = m
            .get("id")
            .and_then(Value::as_str)
            .ok_or_else(shape)?
            .to_string();
        let created_at = m
            .get("createdAt")
            .and_then(Value::as_u64)
            .ok_or_else(shape)?;
        let delegation_depth = match m.get("delegationDepth") {
            None => 0,
            Some(v) => v.as_u64().ok_or_else(shape)?,
        };
        let opt_str = |key: &str| -> Result<Option<String>, HeaderError> {
            match m.get(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(HeaderError::Shape(format!(
                    "session header field `{key}` must be a string"
                ))),
            }
        };
        let seed_length = match m.get("seedLength") {
            None => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                HeaderError::Shape(
                    "session header field `seedLength` must be a non-negative integer".into(),
                )
            })?),
        };
        let origin = opt_str("origin")?;
        if origin.as_deref().is_some_and(|o| o != "subagent") {
            return Err(shape());
        }
        Ok(Self {
            version: SESSION_FORMAT_VERSION,
            id,
            created_at,
            cwd: opt_str("cwd")?,
            parent_session: opt_str("parentSession")?,
            seed_length,
            origin,
            delegation_depth,
            agent_preset: opt_str("agentPreset")?,
        })
    }
}

/// Why a header record was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HeaderError {
    #[error("{0}")]
    Shape(String),
    #[error("{}", version_refusal(.id, *.version))]
    Version { id: String, version: f64 },
}

/// The refusal text for a log written in another format version.
pub fn version_refusal(id: &str, version: f64) -> String {
    let mut v = String::new();
    dsh_kernel::json::write_f64(&mut v, version);
    if version > SESSION_FORMAT_V4 as f64 {
        format!(
            "session \"{id}\" uses log format v{v}, but this harness reads only v{SESSION_FORMAT_VERSION} and v{SESSION_FORMAT_V4}; a newer harness wrote it, so open it with an up-to-date dsh"
        )
    } else {
        format!(
            "session \"{id}\" uses log format v{v}, an intermediate format this build reads no upgrade path for (it reads v{SESSION_FORMAT_VERSION} and v{SESSION_FORMAT_V4})"
        )
    }
}
