//! `llm-retry`: retries retryable provider failures inside the open step, with exponential
//! backoff and jitter, honouring `Retry-After`, logging `llm/retry` and `llm/retry-started`.

use std::time::Duration;

use dsh_agent::{RequestError, RequestErrorAction, RequestErrorPayload};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{RetryMode, RetryPolicy, codes};
use dsh_session::{Event, types};
use serde_json::{Value, json};

/// A uniform random number in [0, 1).
fn random_unit() -> f64 {
    (uuid::Uuid::new_v4().as_u128() >> 75) as f64 / (1u64 << 53) as f64
}

/// The backoff before retry number `retry` (1-based).
pub fn backoff_ms(policy: &RetryPolicy, retry: u32, unit: f64) -> u64 {
    let init = policy.initial_delay_ms as f64;
    let max = policy.max_delay_ms as f64;
    let exp = init * 2f64.powi(retry.saturating_sub(1) as i32);
    let j = policy.jitter_ratio;
    let jittered = exp.min(max) * (1.0 - j + 2.0 * j * unit);
    jittered.min(max).max(0.0).round() as u64
}

/// The previous `llm/retry` for the same turn/step/provider/policy, if any.
fn previous<'a>(
    events: &'a [std::sync::Arc<Event>],
    p: &RequestErrorPayload,
    key: &str,
) -> Option<&'a Value> {
    events
        .iter()
        .rev()
        .filter(|e| e.is(types::LLM_RETRY))
        .map(|e| e.data.as_value())
        .find(|d| {
            d["turn"] == json!(p.turn)
                && d["step"] == json!(p.step)
                && d["provider"] == json!(p.provider)
                && d["policyKey"] == json!(key)
        })
}

/// How many times one step retries a TIMEOUT under a normal policy: a provider that stops
/// answering fails the step after two idle periods, not after every retry waited one out.
pub const MAX_TIMEOUT_RETRIES: usize = 1;

/// How many earlier attempts of this step failed with TIMEOUT.
fn timeouts_so_far(events: &[std::sync::Arc<Event>], p: &RequestErrorPayload) -> usize {
    events
        .iter()
        .filter(|e| e.is(types::LLM_RETRY))
        .map(|e| e.data.as_value())
        .filter(|d| {
            d["turn"] == json!(p.turn)
                && d["step"] == json!(p.step)
                && d["provider"] == json!(p.provider)
                && d["failure"]["code"] == json!(codes::TIMEOUT)
        })
        .count()
}

async fn decide(p: &RequestErrorPayload) -> Result<Option<RequestErrorAction>, BoxError> {
    let Some(policy) = &p.retry_policy else {
        return Ok(None);
    };
    if policy.mode == RetryMode::Normal && !policy.retryable_codes.contains(&p.failure.code) {
        return Ok(None);
    }
    if policy.mode == RetryMode::Normal
        && p.failure.code == codes::TIMEOUT
        && timeouts_so_far(&p.agent.session().events(), p) >= MAX_TIMEOUT_RETRIES
    {
        return Ok(None);
    }
    let key = policy.policy_key();
    let session = p.agent.session().clone();
    let (retry, retry_id) = {
        let events = session.events();
        match previous(&events, p, &key) {
            Some(prev) => {
                let n = prev["retry"].as_u64().unwrap_or(0) as u32;
                if policy.mode == RetryMode::Normal && n >= policy.max_retries {
                    return Ok(None);
                }
                (
                    n + 1,
                    prev["retryId"]
                        .as_str()
                        .map(str::to_owned)
                        .unwrap_or_default(),
                )
            }
            None => {
                if policy.mode == RetryMode::Normal && policy.max_retries == 0 {
                    return Ok(None);
                }
                (1, uuid::Uuid::new_v4().to_string())
            }
        }
    };
    let delay = match p.failure.provider_retry_after_ms {
        Some(after) if after <= policy.max_delay_ms => after,
        Some(_) if policy.mode == RetryMode::Normal => return Ok(None),
        _ => backoff_ms(policy, retry, random_unit()),
    };
    let mut data = json!({
        "retryId": retry_id,
        "turn": p.turn,
        "step": p.step,
        "provider": p.provider,
        "mode": if policy.mode == RetryMode::Normal { "normal" } else { "always" },
        "policyKey": key,
        "retry": retry,
    });
    if policy.mode == RetryMode::Normal {
        data["maxRetries"] = json!(policy.max_retries);
    }
    data["delayMs"] = json!(delay);
    data["failure"] = serde_json::to_value(&p.failure)?;
    session.append(types::LLM_RETRY, data, None)?;
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(delay)) => {}
        _ = p.cancel.cancelled() => return Ok(None),
    }
    session.append(
        types::LLM_RETRY_STARTED,
        json!({"retryId": retry_id, "turn": p.turn, "step": p.step, "retry": retry}),
        None,
    )?;
    Ok(Some(RequestErrorAction::Retry))
}

/// `@deepseek-ai/dsh-llm-retry`.
pub struct RetryPlugin;

impl Plugin for RetryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-llm-retry"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        install(ctx)
    }
}

/// Installs the retry listener on `ctx`.
pub fn install(ctx: &Context) -> Result<(), BoxError> {
    ctx.on_waterfall::<RequestError>(ListenOptions::default(), |p, next| {
        Box::pin(async move {
            match decide(p).await? {
                Some(action) => Ok(Some(action)),
                None => next.run().await,
            }
        })
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let p = RetryPolicy::default();
        assert_eq!(backoff_ms(&p, 1, 0.5), 500);
        assert_eq!(backoff_ms(&p, 2, 0.5), 1000);
        assert_eq!(backoff_ms(&p, 6, 0.5), 10_000);
        assert_eq!(backoff_ms(&p, 1, 0.0), 450);
        assert_eq!(
            backoff_ms(&p, 6, 1.0),
            10_000,
            "jitter never exceeds the cap"
        );
        let strict = RetryPolicy {
            initial_delay_ms: 1,
            max_delay_ms: 1,
            jitter_ratio: 0.0,
            ..RetryPolicy::default()
        };
        assert_eq!(backoff_ms(&strict, 3, 0.9), 1);
    }
}
