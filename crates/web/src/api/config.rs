//! `credentials.*` and `llm.providers`: keys are write-only — the page learns whether a
//! ref is configured and from where, never its value.

use std::sync::Arc;

use dsh_policies::{CredentialWriteError, Credentials};
use serde_json::{Map, Value, json};

use crate::hub::Signal;
use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;

fn credentials(s: &WebState) -> Result<Arc<Credentials>, ApiError> {
    s.credentials.clone().ok_or_else(|| {
        ApiError::new(
            ErrorCode::CredentialRejected,
            "the credentials row is disabled in this composition; keys cannot be stored",
        )
    })
}

fn state_of(c: &Credentials, name: &str) -> Value {
    let st = c.describe(name);
    json!({
        "configured": st.source.is_some(),
        "source": st.source.map(|s| s.as_str()),
        "writable": st.writable,
    })
}

fn rejected(name: &str, e: CredentialWriteError) -> ApiError {
    tracing::warn!("web: credential {name} not stored: {e}");
    let code = match e {
        CredentialWriteError::Io { .. } => ErrorCode::Internal,
        CredentialWriteError::InvalidName(_)
        | CredentialWriteError::InvalidValue(_)
        | CredentialWriteError::ShadowedByEnvironment(_)
        | CredentialWriteError::Unreadable(_) => ErrorCode::CredentialRejected,
    };
    ApiError::new(code, e.to_string()).with(json!({"ref": name}))
}

pub fn describe(s: &WebState, p: &Value) -> ApiResult {
    let refs = Args(p).strings("refs")?;
    let c = credentials(s)?;
    let mut out = Map::new();
    for name in refs.into_iter().take(64) {
        let v = state_of(&c, &name);
        out.insert(name, v);
    }
    Ok(json!({"credentials": out}))
}

pub async fn set(s: &WebState, p: &Value) -> ApiResult {
    let args = Args(p);
    let name = args.str("ref")?.to_string();
    let value = args.str("value")?.to_string();
    let c = credentials(s)?;
    let owned = name.clone();
    let result = tokio::task::spawn_blocking(move || c.set(&owned, &value))
        .await
        .map_err(ApiError::internal)?;
    result.map_err(|e| rejected(&name, e))?;
    s.hub.send(Signal::Lists);
    Ok(json!({"credential": state_of(credentials(s)?.as_ref(), &name)}))
}

pub async fn unset(s: &WebState, p: &Value) -> ApiResult {
    let name = Args(p).str("ref")?.to_string();
    let c = credentials(s)?;
    let owned = name.clone();
    let removed = tokio::task::spawn_blocking(move || c.unset(&owned))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| rejected(&name, e))?;
    Ok(json!({"removed": removed, "credential": state_of(credentials(s)?.as_ref(), &name)}))
}

/// The providers a key can be saved for.
pub fn providers(s: &WebState) -> ApiResult {
    let model = s.root.get::<dsh_policies::DefaultModel>();
    let default_provider = model.as_ref().map(|m| m.provider.clone());
    let mut items = vec![json!({
        "id": "deepseek-official",
        "name": "DeepSeek",
        "credentialRef": "DEEPSEEK_API_KEY",
        "default": default_provider.as_deref() == Some("deepseek-official"),
        "credential": s.credentials.as_deref().map(|c| state_of(c, "DEEPSEEK_API_KEY")),
    })];
    if let Some(p) = default_provider.filter(|p| p != "deepseek-official") {
        items.push(json!({"id": p, "name": p, "credentialRef": Value::Null, "default": true}));
    }
    Ok(json!({
        "items": items,
        "default": model.map(|m| json!({"provider": m.provider, "model": m.model})),
    }))
}
