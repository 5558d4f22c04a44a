//! The model (and the working directory) a client chooses for a team session. A client names it with the input it
//! queues (`provider` and `model`, optionally `reasoningEffort` and `maxTokens`, beside
//! `text`); the gateway keeps it in the inbox body under `"route"`, and the worker runs the
//! turn on it. Input that names none runs on the route the session's last input named, or,
//! when none ever did, on the worker's default model.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The longest provider or model name accepted.
const MAX_NAME: usize = 200;
/// The longest reasoning effort accepted.
const MAX_EFFORT: usize = 64;

/// A model route: `provider` and `model` as the settings name them, optionally a reasoning
/// effort and an output limit.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Route {
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

fn name(value: &Value, key: &str, max: usize) -> Result<Option<String>, String> {
    match value.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.trim().is_empty() && s.len() <= max && !s.chars().any(char::is_control) =>
        {
            Ok(Some(s.clone()))
        }
        Some(_) => Err(format!(
            "\"{key}\" must be a non-empty string of at most {max} bytes without control characters"
        )),
    }
}

/// The longest working directory accepted.
const MAX_PATH: usize = 4096;

/// The working directory a request body names in `cwd`, if any: the session moves there
/// before the input runs (resolved against its current directory, and only to an existing
/// directory inside the worker's workspace).
pub fn directory(body: &Value) -> Result<Option<String>, String> {
    name(body, "cwd", MAX_PATH)
}

impl Route {
    /// The route a request body names in its top-level `provider`, `model`,
    /// `reasoningEffort` and `maxTokens`; `None` when it names none.
    pub fn from_request(body: &Value) -> Result<Option<Self>, String> {
        let provider = name(body, "provider", MAX_NAME)?;
        let model = name(body, "model", MAX_NAME)?;
        let reasoning_effort = name(body, "reasoningEffort", MAX_EFFORT)?;
        let max_tokens = match body.get("maxTokens") {
            None | Some(Value::Null) => None,
            Some(v) => match v.as_u64() {
                Some(n) if n > 0 && n < (1 << 53) => Some(n),
                _ => return Err("\"maxTokens\" must be a positive integer".into()),
            },
        };
        match (provider, model) {
            (Some(provider), Some(model)) => Ok(Some(Self {
                provider,
                model,
                reasoning_effort,
                max_tokens,
            })),
            (None, None) if reasoning_effort.is_none() && max_tokens.is_none() => Ok(None),
            (None, None) => {
                Err("\"reasoningEffort\" and \"maxTokens\" need \"provider\" and \"model\"".into())
            }
            _ => Err("\"provider\" and \"model\" go together: give both or neither".into()),
        }
    }

    /// The route kept in a queued input's body, if any.
    pub fn from_input(body: &Value) -> Result<Option<Self>, String> {
        match body.get("route") {
            None | Some(Value::Null) => Ok(None),
            Some(v) => Self::deserialize(v)
                .map(Some)
                .map_err(|e| format!("queued input has an invalid route: {e}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::Route;

    #[test]
    fn a_request_names_both_or_neither() {
        assert_eq!(Route::from_request(&json!({"text": "hi"})), Ok(None));
        let r = Route::from_request(
            &json!({"provider": "local", "model": "m", "reasoningEffort": "high", "maxTokens": 50}),
        )
        .unwrap()
        .unwrap();
        assert_eq!(r.model, "m");
        assert_eq!(r.max_tokens, Some(50));
        let kept = serde_json::to_value(&r).unwrap();
        assert_eq!(
            kept,
            json!({"provider": "local", "model": "m", "reasoningEffort": "high", "maxTokens": 50})
        );
        assert_eq!(Route::from_input(&json!({"route": kept})), Ok(Some(r)));
        for bad in [
            json!({"model": "m"}),
            json!({"provider": "p"}),
            json!({"maxTokens": 5}),
            json!({"provider": "p", "model": ""}),
            json!({"provider": "p", "model": 3}),
            json!({"provider": "p\n", "model": "m"}),
            json!({"provider": "p", "model": "m", "maxTokens": 0}),
            json!({"provider": "p", "model": "m", "maxTokens": "9"}),
        ] {
            assert!(Route::from_request(&bad).is_err(), "{bad}");
        }
        assert!(Route::from_input(&json!({"route": {"provider": "p"}})).is_err());
    }
}
