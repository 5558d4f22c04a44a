//! Unary JSON RPC over `POST /api/<method>` in upstream 0.1's envelope: request
//! `{type: "client-request", rpcId, method, payload}`, answer (HTTP 200 for every business
//! outcome) `{type: "server-response", rpcId, result: {ok: true, value} | {ok: false,
//! error: {code, message, details}}}`.

use serde_json::{Value, json};

/// The closed set of error codes (upstream's names where upstream has one).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    BadRequest,
    SessionNotFound,
    SessionLocked,
    SessionUnreadable,
    WorkspaceNotFound,
    WorkspaceInvalidPath,
    WorkspaceNameConflict,
    DirectoryUnreadable,
    AgentBusy,
    QueueItemNotFound,
    /// No reminder has this id.
    ScheduleNotFound,
    /// No agent preset has this id.
    AgentPresetNotFound,
    /// The session started; its agent preset is fixed.
    AgentPresetLocked,
    TitleInvalid,
    ForkUnavailable,
    CredentialRejected,
    /// An image was refused or could not be stored or read (`details.reason` says why).
    AttachmentError,
    Forbidden,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad-request",
            ErrorCode::SessionNotFound => "session-not-found",
            ErrorCode::SessionLocked => "session-locked",
            ErrorCode::SessionUnreadable => "session-unreadable",
            ErrorCode::WorkspaceNotFound => "workspace-not-found",
            ErrorCode::WorkspaceInvalidPath => "workspace-invalid-path",
            ErrorCode::WorkspaceNameConflict => "workspace-name-conflict",
            ErrorCode::DirectoryUnreadable => "directory-unreadable",
            ErrorCode::AgentBusy => "agent-busy",
            ErrorCode::QueueItemNotFound => "queue-item-not-found",
            ErrorCode::ScheduleNotFound => "schedule-not-found",
            ErrorCode::AgentPresetNotFound => "agent-preset-not-found",
            ErrorCode::AgentPresetLocked => "agent-preset-locked",
            ErrorCode::TitleInvalid => "title-invalid",
            ErrorCode::ForkUnavailable => "fork-unavailable",
            ErrorCode::CredentialRejected => "credential-rejected",
            ErrorCode::AttachmentError => "attachment-error",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::Internal => "internal",
        }
    }
}

/// A failed call: shown to the user as `message`.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub details: Value,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            details: json!({}),
        }
    }

    pub fn with(mut self, details: Value) -> Self {
        self.details = details;
        self
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Internal, message.to_string())
    }
}

pub type ApiResult = Result<Value, ApiError>;

/// A decoded request envelope.
#[derive(Debug, PartialEq)]
pub struct Call {
    pub rpc_id: String,
    pub payload: Value,
}

/// Decodes the envelope of a call to `path_method`. `Err` carries the answer to send
/// (a `bad-request` with the rpcId echoed when it was readable).
pub fn decode(body: &Value, path_method: &str) -> Result<Call, Value> {
    let rpc_id = body.get("rpcId").and_then(Value::as_str).map(str::to_owned);
    let fail = |rpc: Option<&str>, msg: String| {
        respond(
            rpc.unwrap_or("invalid-request"),
            Err(ApiError::bad_request(msg)),
        )
    };
    let Some(rpc_id) = rpc_id.filter(|r| !r.is_empty() && r.len() <= 200) else {
        return Err(fail(None, "the request has no rpcId".into()));
    };
    if body.get("type").and_then(Value::as_str) != Some("client-request") {
        return Err(fail(
            Some(&rpc_id),
            "the request type must be \"client-request\"".into(),
        ));
    }
    match body.get("method").and_then(Value::as_str) {
        Some(m) if m == path_method => {}
        Some(m) => {
            return Err(fail(
                Some(&rpc_id),
                format!("method \"{m}\" does not match path \"{path_method}\""),
            ));
        }
        None => return Err(fail(Some(&rpc_id), "the request has no method".into())),
    }
    let payload = match body.get("payload") {
        None | Some(Value::Null) => json!({}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => return Err(fail(Some(&rpc_id), "payload must be an object".into())),
    };
    Ok(Call { rpc_id, payload })
}

/// The response envelope.
pub fn respond(rpc_id: &str, result: ApiResult) -> Value {
    let result = match result {
        Ok(value) => json!({"ok": true, "value": value}),
        Err(e) => {
            json!({"ok": false, "error": {"code": e.code.as_str(), "message": e.message, "details": e.details}})
        }
    };
    json!({"type": "server-response", "rpcId": rpc_id, "result": result})
}

/// Typed access to payload fields with `bad-request` errors that name the field.
pub struct Args<'a>(pub &'a Value);

impl<'a> Args<'a> {
    pub fn str(&self, name: &str) -> Result<&'a str, ApiError> {
        match self.0.get(name) {
            Some(Value::String(s)) => Ok(s),
            Some(_) => Err(ApiError::bad_request(format!("{name} must be a string"))),
            None => Err(ApiError::bad_request(format!("{name} is required"))),
        }
    }

    pub fn opt_str(&self, name: &str) -> Result<Option<&'a str>, ApiError> {
        match self.0.get(name) {
            Some(Value::String(s)) => Ok(Some(s)),
            None | Some(Value::Null) => Ok(None),
            Some(_) => Err(ApiError::bad_request(format!("{name} must be a string"))),
        }
    }

    pub fn opt_u64(&self, name: &str) -> Result<Option<u64>, ApiError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => v.as_u64().map(Some).ok_or_else(|| {
                ApiError::bad_request(format!("{name} must be a non-negative integer"))
            }),
        }
    }

    pub fn flag(&self, name: &str) -> Result<bool, ApiError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(ApiError::bad_request(format!("{name} must be a boolean"))),
        }
    }

    pub fn strings(&self, name: &str) -> Result<Vec<String>, ApiError> {
        let err = || ApiError::bad_request(format!("{name} must be a list of strings"));
        match self.0.get(name) {
            Some(Value::Array(a)) => a
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(err))
                .collect(),
            None => Err(ApiError::bad_request(format!("{name} is required"))),
            Some(_) => Err(err()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn envelopes_decode_and_errors_name_the_problem() {
        let ok = decode(
            &json!({"type": "client-request", "rpcId": "r1", "method": "session.list", "payload": {"a": 1}}),
            "session.list",
        );
        assert_eq!(
            ok,
            Ok(Call {
                rpc_id: "r1".into(),
                payload: json!({"a": 1})
            })
        );
        let err = |body: Value| decode(&body, "session.list").err();
        assert_eq!(
            err(json!({"type": "client-request", "method": "session.list"})),
            Some(
                json!({"type": "server-response", "rpcId": "invalid-request", "result": {"ok": false, "error": {"code": "bad-request", "message": "the request has no rpcId", "details": {}}}})
            )
        );
        assert_eq!(
            err(json!({"type": "client-request", "rpcId": "r", "method": "x"}))
                .map(|v| v["result"]["error"]["message"].clone()),
            Some(json!("method \"x\" does not match path \"session.list\""))
        );
        assert!(err(json!({"type": "client-request", "rpcId": "r", "method": "session.list", "payload": []})).is_some());
        assert!(err(json!({"rpcId": "r", "method": "session.list"})).is_some());
        assert_eq!(
            respond("r", Ok(json!(1))),
            json!({"type": "server-response", "rpcId": "r", "result": {"ok": true, "value": 1}})
        );
    }
}
