use std::sync::Arc;

use super::*;
use dsh_llm::{LlmCallConfig, LlmFailure, Message};
use pretty_assertions::assert_eq;
use serde_json::json;

fn adapter(config: serde_json::Value) -> OpenAiCompatAdapter {
    let config = OpenAiCompatConfig::from_value(&config).expect("parses");
    let deps = ProviderDeps::new(Arc::new(|reference: &str| match reference {
        "LOCAL_KEY" => Some("sk-local".into()),
        "EMPTY_KEY" => Some(String::new()),
        _ => None,
    }));
    OpenAiCompatAdapter::new(config, deps).expect("valid")
}

fn two_routes() -> OpenAiCompatAdapter {
    adapter(json!({"providers": {
        "local": {"baseURL": "http://127.0.0.1:1/v1", "models": [
            {"id": "qwen", "contextWindow": 32000, "reasoningEfforts": ["low", "high"], "defaultReasoningEffort": "low"},
            {"id": "tiny", "name": "Tiny"},
        ]},
        "hosted": {"baseURL": "https://h.example", "apiKeyEnv": "LOCAL_KEY", "displayName": "Hosted",
            "headers": {"X-Title": "dsh", "User-Agent": "spoof"},
            "compat": {"maxTokensField": "max_completion_tokens", "supportsUsageInStreaming": false,
                "supportsReasoningEffort": true, "supportsDeveloperRole": true, "reasoningPassback": true},
            "models": [{"id": "gpt"}]},
        "locked": {"baseURL": "http://x", "apiKeyEnv": "EMPTY_KEY", "models": [{"id": "m"}]},
    }}))
}

fn options(provider: &str, model: &str) -> GenerateOptions {
    let mut o = GenerateOptions::new(
        LlmCallConfig::route(provider, model),
        vec![Arc::new(Message::user_text("hi"))],
    );
    o.system = Some("sys".into());
    o.config.max_tokens = Some(5);
    o
}

fn prepared(
    adapter: &OpenAiCompatAdapter,
    options: &GenerateOptions,
) -> Result<HttpCall, LlmFailure> {
    let config = adapter.live.current();
    let profile = config.get(&options.config.provider).expect("route");
    adapter
        .prepare(profile, &options.config.provider, options)
        .map_err(|e| e.failure)
}

#[test]
fn routes_and_model_info() {
    let adapter = two_routes();
    assert_eq!(adapter.routes(), vec!["local", "hosted", "locked"]);
    assert_eq!(
        adapter.model_info("local", "qwen").expect("info"),
        ModelInfo {
            id: "qwen".into(),
            name: Some("qwen".into()),
            context_window: Some(32_000),
            default_max_tokens: Some(32_768),
            reasoning: Some(ReasoningInfo {
                efforts: vec!["low".into(), "high".into()],
                default_effort: Some("low".into())
            }),
            input_modalities: vec!["text".into()],
        }
    );
    let tiny = adapter.model_info("local", "tiny").expect("info");
    assert_eq!(
        (tiny.name.as_deref(), tiny.context_window, tiny.reasoning),
        (Some("Tiny"), Some(262_144), None)
    );
    assert_eq!(
        adapter.model_info("local", "nope").map_err(|e| e.failure),
        Err(LlmFailure::new(
            "UNKNOWN_MODEL",
            "openai-compatible provider \"local\" has no configured model \"nope\""
        ))
    );
    assert_eq!(
        adapter
            .model_info("elsewhere", "x")
            .map_err(|e| e.code().to_string()),
        Err("NO_ADAPTER".to_string())
    );
    assert_eq!(adapter.list_models("local").len(), 2);
}

#[test]
fn plain_route_sends_no_authorization() {
    let adapter = two_routes();
    let call = prepared(&adapter, &options("local", "qwen")).expect("prepares");
    assert_eq!(call.url, "http://127.0.0.1:1/v1/chat/completions");
    let names: Vec<&str> = call.headers.keys().map(|k| k.as_str()).collect();
    assert_eq!(names, ["content-type", "accept", "user-agent"]);
    assert_eq!(call.vendor, "local");
    assert_eq!(
        call.body,
        r#"{"model":"qwen","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":5}"#
    );
}

#[test]
fn compat_switches_and_configured_headers() {
    let adapter = two_routes();
    let mut options = options("hosted", "gpt");
    options.config.reasoning_effort = Some("high".into());
    let call = prepared(&adapter, &options).expect("prepares");
    let headers: Vec<(String, String)> = call
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                v.to_str().expect("ascii").to_string(),
            )
        })
        .collect();
    assert_eq!(
        headers,
        vec![
            ("authorization".to_string(), "Bearer sk-local".to_string()),
            ("content-type".into(), "application/json".into()),
            ("accept".into(), "text/event-stream".into()),
            ("x-title".into(), "dsh".into()),
            ("user-agent".into(), crate::user_agent()),
        ]
    );
    assert_eq!(call.vendor, "Hosted");
    assert_eq!(
        call.body,
        r#"{"model":"gpt","messages":[{"role":"developer","content":"sys"},{"role":"user","content":"hi"}],"stream":true,"reasoning_effort":"high","max_completion_tokens":5}"#
    );
}

#[test]
fn request_time_failures() {
    let adapter = two_routes();
    assert_eq!(
        prepared(&adapter, &options("locked", "m")).map(|_| ()),
        Err(LlmFailure::new(
            "MISSING_CREDENTIAL",
            "openai-compatible: provider route \"locked\" has no credential because its profile names EMPTY_KEY, \
         which is not set; save EMPTY_KEY with the credentials service (the Models page of dsh web does that) or set \
         it in the environment. If the endpoint needs no authentication, remove apiKeyEnv from the profile instead"
        ))
    );
    assert_eq!(
        prepared(&adapter, &options("local", "gpt"))
            .map(|_| ())
            .map_err(|f| f.code),
        Err("UNKNOWN_MODEL".into())
    );
}
