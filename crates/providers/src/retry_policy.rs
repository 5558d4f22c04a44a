//! The provider-owned `retryPolicy` config value → [`RetryPolicy`], with upstream's checks
//! and messages (each prefixed with the owning path, e.g. `llm-deepseek: retryPolicy`).

use dsh_llm::{RetryMode, RetryPolicy};
use serde_json::{Map, Value};

/// The largest timer delay JavaScript accepts; upstream bounds every delay by it.
pub const MAX_TIMER_DELAY_MS: u64 = 2_147_483_647;

const POLICY_KEYS: [&str; 4] = ["mode", "maxRetries", "retryableCodes", "backoff"];
const BACKOFF_KEYS: [&str; 3] = ["initialDelayMs", "maxDelayMs", "jitterRatio"];

/// Validates and defaults one `retryPolicy` value; `None`/`null` is the normal default.
/// Delays must be whole milliseconds (upstream also accepts fractions).
pub fn resolve_retry_policy(value: Option<&Value>, path: &str) -> Result<RetryPolicy, String> {
    let defaults = RetryPolicy::default();
    let config = match value {
        None | Some(Value::Null) => return Ok(defaults),
        Some(Value::Object(map)) => map,
        Some(_) => return Err(format!("{path} must be an object")),
    };
    check_keys(config, &POLICY_KEYS, path)?;
    let mode = match config.get("mode").and_then(Value::as_str) {
        Some("normal") => RetryMode::Normal,
        Some("always") => RetryMode::Always,
        _ => return Err(format!("{path}.mode must be \"normal\" or \"always\"")),
    };
    let (initial_delay_ms, max_delay_ms, jitter_ratio) =
        resolve_backoff(config.get("backoff"), &format!("{path}.backoff"))?;
    let mut policy = RetryPolicy {
        mode,
        initial_delay_ms,
        max_delay_ms,
        jitter_ratio,
        ..defaults
    };
    if mode == RetryMode::Always {
        return Ok(policy);
    }
    if let Some(max) = config.get("maxRetries").filter(|v| !v.is_null()) {
        policy.max_retries = max
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("{path}.maxRetries must be a non-negative safe integer"))?;
    }
    if let Some(codes) = config.get("retryableCodes").filter(|v| !v.is_null()) {
        let Value::Array(items) = codes else {
            return Err(format!(
                "{path}.retryableCodes must contain only non-empty strings"
            ));
        };
        if items.is_empty() {
            return Err(format!("{path}.retryableCodes must not be empty"));
        }
        let mut codes = Vec::with_capacity(items.len());
        for item in items {
            match item.as_str() {
                Some(code) if !code.is_empty() => codes.push(code.to_owned()),
                _ => {
                    return Err(format!(
                        "{path}.retryableCodes must contain only non-empty strings"
                    ));
                }
            }
        }
        if (1..codes.len()).any(|i| codes[..i].contains(&codes[i])) {
            return Err(format!("{path}.retryableCodes must not contain duplicates"));
        }
        policy.retryable_codes = codes;
    }
    Ok(policy)
}

fn check_keys(map: &Map<String, Value>, allowed: &[&str], path: &str) -> Result<(), String> {
    match map.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(key) => Err(format!("{path}: unknown key \"{key}\"")),
        None => Ok(()),
    }
}

fn resolve_backoff(value: Option<&Value>, path: &str) -> Result<(u64, u64, f64), String> {
    let defaults = RetryPolicy::default();
    let config = match value {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => return Err(format!("{path} must be an object")),
    };
    check_keys(&config, &BACKOFF_KEYS, path)?;
    let delay = |key: &str, default: u64| -> Result<u64, String> {
        match config.get(key).filter(|v| !v.is_null()) {
            None => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|ms| (1..=MAX_TIMER_DELAY_MS).contains(ms))
                .ok_or_else(|| {
                    format!("{path}.{key} must be between 1 and {MAX_TIMER_DELAY_MS} milliseconds")
                }),
        }
    };
    let initial = delay("initialDelayMs", defaults.initial_delay_ms)?;
    let max = delay("maxDelayMs", defaults.max_delay_ms)?;
    if initial > max {
        return Err(format!(
            "{path}.initialDelayMs must be less than or equal to maxDelayMs"
        ));
    }
    let jitter = match config.get("jitterRatio").filter(|v| !v.is_null()) {
        None => defaults.jitter_ratio,
        Some(v) => v
            .as_f64()
            .filter(|j| (0.0..=1.0).contains(j))
            .ok_or_else(|| format!("{path}.jitterRatio must be between 0 and 1"))?,
    };
    Ok((initial, max, jitter))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    const PATH: &str = "llm-deepseek: retryPolicy";

    #[test]
    fn defaults_and_overrides() {
        assert_eq!(resolve_retry_policy(None, PATH), Ok(RetryPolicy::default()));
        let policy = resolve_retry_policy(
            Some(&json!({"mode": "normal", "maxRetries": 2, "backoff": {"initialDelayMs": 1, "maxDelayMs": 1, "jitterRatio": 0}})),
            PATH,
        )
        .expect("valid");
        assert_eq!(
            policy.policy_key(),
            r#"["normal",2,["EMPTY_RESPONSE","RATE_LIMIT","SERVER","STREAM_CLOSED","TIMEOUT","TRANSPORT"],1,1,0]"#
        );
        let always = resolve_retry_policy(Some(&json!({"mode": "always", "maxRetries": 9})), PATH)
            .expect("valid");
        assert_eq!(always.mode, RetryMode::Always);
    }

    #[test]
    fn upstream_messages() {
        let cases = [
            (
                json!({"mode": "sometimes"}),
                "llm-deepseek: retryPolicy.mode must be \"normal\" or \"always\"",
            ),
            (
                json!({"mode": "normal", "x": 1}),
                "llm-deepseek: retryPolicy: unknown key \"x\"",
            ),
            (
                json!({"mode": "normal", "backoff": {"y": 1}}),
                "llm-deepseek: retryPolicy.backoff: unknown key \"y\"",
            ),
            (
                json!({"mode": "normal", "maxRetries": -1}),
                "llm-deepseek: retryPolicy.maxRetries must be a non-negative safe integer",
            ),
            (
                json!({"mode": "normal", "retryableCodes": []}),
                "llm-deepseek: retryPolicy.retryableCodes must not be empty",
            ),
            (
                json!({"mode": "normal", "retryableCodes": ["A", ""]}),
                "llm-deepseek: retryPolicy.retryableCodes must contain only non-empty strings",
            ),
            (
                json!({"mode": "normal", "retryableCodes": ["A", "A"]}),
                "llm-deepseek: retryPolicy.retryableCodes must not contain duplicates",
            ),
            (
                json!({"mode": "normal", "backoff": {"maxDelayMs": 0}}),
                "llm-deepseek: retryPolicy.backoff.maxDelayMs must be between 1 and 2147483647 milliseconds",
            ),
            (
                json!({"mode": "normal", "backoff": {"initialDelayMs": 20000}}),
                "llm-deepseek: retryPolicy.backoff.initialDelayMs must be less than or equal to maxDelayMs",
            ),
            (
                json!({"mode": "always", "backoff": {"jitterRatio": 1.5}}),
                "llm-deepseek: retryPolicy.backoff.jitterRatio must be between 0 and 1",
            ),
        ];
        for (value, message) in cases {
            assert_eq!(
                resolve_retry_policy(Some(&value), PATH),
                Err(message.to_string()),
                "{value}"
            );
        }
    }
}
