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

/// The DeepSeek route's models as its adapter lists them (0.2's or 0.1's catalog, or the
/// user's own), the default model's id when the route is not registered.
fn deepseek_models(s: &WebState, default: &str) -> Vec<String> {
    let listed: Vec<String> = s
        .root
        .get::<dsh_llm::LlmRuntime>()
        .map(|llm| llm.models("deepseek-official"))
        .unwrap_or_default()
        .into_iter()
        .map(|m| m.id)
        .collect();
    if listed.is_empty() {
        vec![default.to_string()]
    } else {
        listed
    }
}

fn settings(s: &WebState) -> Result<Arc<dsh_policies::Settings>, ApiError> {
    s.root.get::<dsh_policies::Settings>().ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            "the settings row is disabled in this composition; models cannot be configured here",
        )
    })
}

fn compat_section(s: &WebState) -> Value {
    s.root
        .get::<dsh_policies::Settings>()
        .and_then(|st| st.live_section("openai-compatible"))
        .unwrap_or_else(|| json!({}))
}

/// The configured providers (DeepSeek and every OpenAI-compatible endpoint), their models,
/// whether their key is configured (never the key), and the default model.
pub fn providers(s: &WebState) -> ApiResult {
    let (provider, model) = crate::hosting::default_model(&s.root);
    let creds = s.credentials.as_deref();
    let mut items = vec![json!({
        "id": "deepseek-official",
        "name": "DeepSeek",
        "kind": "deepseek",
        "credentialRef": "DEEPSEEK_API_KEY",
        "credential": creds.map(|c| state_of(c, "DEEPSEEK_API_KEY")),
        "models": deepseek_models(s, &model),
    })];
    if let Some(Value::Object(map)) = compat_section(s).get("providers") {
        for (id, profile) in map {
            let key_ref = profile.get("apiKeyEnv").and_then(Value::as_str);
            items.push(json!({
                "id": id,
                "name": profile.get("displayName").and_then(Value::as_str).unwrap_or(id),
                "kind": "openai-compatible",
                "baseURL": profile.get("baseURL"),
                "credentialRef": key_ref,
                "credential": creds.zip(key_ref).map(|(c, r)| state_of(c, r)),
                "models": profile
                    .get("models")
                    .and_then(Value::as_array)
                    .map(|m| m.iter().filter_map(|x| x.get("id").cloned()).collect::<Vec<_>>())
                    .unwrap_or_default(),
            }));
        }
    }
    Ok(json!({"items": items, "default": {"provider": provider, "model": model}}))
}

fn announce(s: &WebState, namespace: &str) {
    s.root
        .emit::<dsh_policies::SettingsChanged>(&dsh_policies::SettingsChange {
            namespace: namespace.to_string(),
        });
    s.hub.send(Signal::Lists);
}

async fn replace_section(
    s: &WebState,
    namespace: &'static str,
    value: Value,
) -> Result<(), ApiError> {
    let st = settings(s)?;
    tokio::task::spawn_blocking(move || st.replace_section(namespace, value))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| {
            tracing::warn!("web: settings not saved: {e}");
            ApiError::new(ErrorCode::BadRequest, e.to_string())
        })?;
    announce(s, namespace);
    Ok(())
}

fn provider_id(text: &str) -> Result<String, ApiError> {
    let id = text.trim().to_ascii_lowercase();
    let ok = !id.is_empty()
        && id.len() <= 40
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        && !id.starts_with('-');
    if !ok || id == "deepseek-official" {
        return Err(ApiError::bad_request(
            "the provider id must be 1–40 letters, digits or dashes (and not deepseek-official)",
        ));
    }
    Ok(id)
}

/// `llm.saveProvider {id, name?, baseURL, apiKey?, model}`: an OpenAI-compatible endpoint,
/// usable at once (its routes are registered again) without restart.
pub async fn save_provider(s: &WebState, p: &Value) -> ApiResult {
    let args = Args(p);
    let id = provider_id(args.str("id")?)?;
    let base_url = args
        .str("baseURL")?
        .trim()
        .trim_end_matches('/')
        .to_string();
    if !(base_url.starts_with("http://") || base_url.starts_with("https://"))
        || base_url.contains(char::is_whitespace)
    {
        return Err(ApiError::bad_request(
            "baseURL must be an http(s) URL, e.g. https://api.example.com/v1",
        ));
    }
    let model = args.str("model")?.trim().to_string();
    if model.is_empty() || model.len() > 200 {
        return Err(ApiError::bad_request(
            "model must name the model id the endpoint serves",
        ));
    }
    let name = args
        .opt_str("name")?
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .unwrap_or(&id)
        .to_string();
    let key_ref = format!("DSH_{}_API_KEY", id.to_ascii_uppercase().replace('-', "_"));
    if let Some(key) = args.opt_str("apiKey")?.filter(|k| !k.trim().is_empty()) {
        let c = credentials(s)?;
        let (r, k) = (key_ref.clone(), key.to_string());
        tokio::task::spawn_blocking(move || c.set(&r, &k))
            .await
            .map_err(ApiError::internal)?
            .map_err(|e| rejected(&key_ref, e))?;
    }
    let mut section = compat_section(s);
    if !section.get("providers").is_some_and(Value::is_object) {
        section["providers"] = json!({});
    }
    section["providers"][&id] = json!({
        "baseURL": base_url,
        "apiKeyEnv": key_ref,
        "displayName": name,
        "models": [{"id": model}],
    });
    replace_section(s, "openai-compatible", section).await?;
    providers(s)
}

/// `llm.removeProvider {id}`.
pub async fn remove_provider(s: &WebState, p: &Value) -> ApiResult {
    let id = provider_id(Args(p).str("id")?)?;
    let mut section = compat_section(s);
    let removed = section
        .get_mut("providers")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove(&id));
    if removed.is_none() {
        return Err(ApiError::bad_request(format!("no provider {id}")));
    }
    replace_section(s, "openai-compatible", section).await?;
    let (provider, _) = crate::hosting::default_model(&s.root);
    if provider == id {
        replace_section(s, "agent-default-model", Value::Null).await?;
    }
    providers(s)
}

/// `llm.setDefault {provider, model}`: the model new sessions use.
pub async fn set_default(s: &WebState, p: &Value) -> ApiResult {
    let args = Args(p);
    let provider = args.str("provider")?.to_string();
    let model = args.str("model")?.to_string();
    let listed = providers(s)?;
    let known = listed["items"].as_array().is_some_and(|items| {
        items.iter().any(|i| {
            i["id"] == provider.as_str()
                && i["models"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|x| x == model.as_str()))
        })
    });
    if !known {
        return Err(ApiError::bad_request(format!(
            "{provider} / {model} is not a configured model"
        )));
    }
    replace_section(
        s,
        "agent-default-model",
        json!({"provider": provider, "model": model}),
    )
    .await?;
    providers(s)
}
