use std::sync::{Arc, Mutex};

use super::*;
use dsh_llm::{ContentBlock, LlmCallConfig, LlmFailure, Message};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn adapter_with(config: DeepSeekConfig, key: Option<&'static str>) -> DeepSeekAdapter {
    let deps = ProviderDeps::new(Arc::new(move |reference: &str| {
        assert_eq!(reference, "DEEPSEEK_API_KEY");
        key.map(str::to_owned)
    }))
    .with_env(Arc::new(|_: &str| None));
    DeepSeekAdapter::new(config, deps).expect("valid config")
}

fn options(model: &str) -> GenerateOptions {
    GenerateOptions::new(
        LlmCallConfig::route(DEEPSEEK_ROUTE, model),
        vec![Arc::new(Message::user_text("hi"))],
    )
}

fn headers(call: &HttpCall) -> Vec<(String, String)> {
    call.headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                v.to_str().expect("ascii").to_string(),
            )
        })
        .collect()
}

fn prepare_error(adapter: &DeepSeekAdapter, options: &GenerateOptions) -> LlmFailure {
    match adapter.prepare(&adapter.current_config(), options) {
        Ok(_) => panic!("expected a failure"),
        Err(e) => e.failure,
    }
}

#[test]
fn request_headers_and_url() {
    let adapter = adapter_with(
        DeepSeekConfig {
            base_url: Some("http://gw/v1/".into()),
            ..Default::default()
        },
        Some(" sk-1 "),
    );
    let mut options = options("deepseek-v4-flash");
    options.session_id = Some("sess-1".into());
    options.purpose = CallPurpose::Compaction;
    let call = adapter
        .prepare(&adapter.current_config(), &options)
        .expect("prepares");
    assert_eq!(call.url, "http://gw/v1/chat/completions");
    assert_eq!(
        headers(&call),
        vec![
            ("authorization".to_string(), "Bearer sk-1".to_string()),
            ("content-type".into(), "application/json".into()),
            ("accept".into(), "text/event-stream".into()),
            (
                "user-agent".into(),
                format!(
                    "deepseek-harness/{} (+https://github.com/deepseek-ai/deepseek-harness)",
                    env!("CARGO_PKG_VERSION")
                )
            ),
            ("x-deepseek-harness-session-id".into(), "sess-1".into()),
            ("x-deepseek-harness-compact".into(), "1".into()),
        ]
    );
    assert_eq!(
        (call.idle_timeout_ms, call.request_timeout_ms),
        (120_000, 900_000)
    );
    assert_eq!(
        call.body,
        r#"{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#
    );
}

#[test]
fn user_id_header_when_a_source_is_given() {
    let deps = ProviderDeps::new(Arc::new(|_: &str| Some("k".into())))
        .with_user_id(Arc::new(|| Some("0f0e".into())));
    let adapter = DeepSeekAdapter::new(DeepSeekConfig::default(), deps).expect("valid");
    let call = adapter
        .prepare(&adapter.current_config(), &options("m"))
        .expect("prepares");
    assert_eq!(
        headers(&call)[4],
        ("x-deepseek-harness-user-id".to_string(), "0f0e".to_string())
    );
}

#[test]
fn credential_failures() {
    let missing = prepare_error(
        &adapter_with(DeepSeekConfig::default(), None),
        &options("m"),
    );
    assert_eq!(
        missing,
        LlmFailure::new(
            "MISSING_CREDENTIAL",
            "llm-deepseek: provider route \"deepseek-official\" has no API key because DEEPSEEK_API_KEY is not \
         set; save DEEPSEEK_API_KEY with the credentials service (the Models page of dsh web does that) or set it in \
         the environment dsh starts from"
        )
    );
    let blank = prepare_error(
        &adapter_with(DeepSeekConfig::default(), Some("  ")),
        &options("m"),
    );
    assert_eq!(blank.code, "INVALID_CREDENTIAL");
    let bad = prepare_error(
        &adapter_with(DeepSeekConfig::default(), Some("sk\n2")),
        &options("m"),
    );
    assert_eq!(bad.code, "INVALID_CREDENTIAL");
}

#[test]
fn credential_comes_before_effort_validation_and_bad_session_ids_are_transport_errors() {
    let mut opts = options("m");
    opts.config.reasoning_effort = Some("medium".into());
    assert_eq!(
        prepare_error(&adapter_with(DeepSeekConfig::default(), None), &opts).code,
        "MISSING_CREDENTIAL"
    );
    assert_eq!(
        prepare_error(&adapter_with(DeepSeekConfig::default(), Some("k")), &opts),
        LlmFailure::new(
            "UNSUPPORTED_REASONING_EFFORT",
            "DeepSeek does not support reasoning effort \"medium\""
        )
    );
    let mut opts = options("m");
    opts.session_id = Some("a\nb".into());
    assert_eq!(
        prepare_error(&adapter_with(DeepSeekConfig::default(), Some("k")), &opts),
        LlmFailure::new(
            "TRANSPORT",
            "DeepSeek API request to https://api.deepseek.com failed"
        )
    );
}

#[test]
fn images_are_rejected_before_the_key_is_resolved() {
    let image = ContentBlock::from_value(json!({"type": "image", "attachment": {"sha256": "ab"}}))
        .expect("block");
    let mut opts = options("deepseek-v4-pro");
    opts.messages = vec![Arc::new(Message::user(
        vec![image],
        dsh_llm::MessageSource::User,
    ))];
    let adapter = adapter_with(DeepSeekConfig::default(), None);
    assert_eq!(
        prepare_error(&adapter, &opts),
        LlmFailure::new(
            "UNSUPPORTED_CONTENT",
            "DeepSeek model \"deepseek-v4-pro\" does not accept image input."
        )
    );
    opts.config.model = "deepseek-v4-flash-vision-exp".into();
    assert_eq!(
        prepare_error(&adapter, &opts),
        LlmFailure::new(
            "UNSUPPORTED_CONTENT",
            "DeepSeek image conversion requires the durable attachment service."
        )
    );
}

#[test]
fn model_info_catalog_and_fallbacks() {
    let adapter = adapter_with(DeepSeekConfig::default(), Some("k"));
    let info = adapter
        .model_info(DEEPSEEK_ROUTE, "deepseek-v4-flash-vision-exp")
        .expect("info");
    assert_eq!(
        info,
        ModelInfo {
            id: "deepseek-v4-flash-vision-exp".into(),
            name: Some("DeepSeek-V4-Flash-Vision-Exp".into()),
            context_window: Some(1_000_000),
            default_max_tokens: Some(256_000),
            reasoning: Some(ReasoningInfo {
                efforts: vec!["off".into(), "low".into(), "high".into(), "max".into()],
                default_effort: Some("high".into()),
            }),
            input_modalities: vec!["text".into(), "image".into()],
        }
    );
    let config = DeepSeekConfig {
        thinking: Some(Thinking::Disabled),
        max_tokens: Some(8),
        default_context_window: Some(64),
        models: Some(vec![crate::DeepSeekModelEntry {
            id: "x".into(),
            max_tokens: Some(4),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let adapter = adapter_with(config, Some("k"));
    assert_eq!(
        adapter.model_info(DEEPSEEK_ROUTE, "x").expect("info"),
        ModelInfo {
            id: "x".into(),
            name: Some("x".into()),
            context_window: Some(64),
            default_max_tokens: Some(4),
            reasoning: Some(ReasoningInfo {
                efforts: vec!["off".into()],
                default_effort: Some("off".into())
            }),
            input_modalities: vec!["text".into()],
        }
    );
    let unlisted = adapter.model_info(DEEPSEEK_ROUTE, "other").expect("info");
    assert_eq!(
        (unlisted.name.as_deref(), unlisted.default_max_tokens),
        (Some("other"), Some(8))
    );
    assert_eq!(adapter.list_models().len(), 1);
    let low = adapter_with(
        DeepSeekConfig {
            reasoning_effort: Some(DeepSeekEffort::Low),
            ..Default::default()
        },
        Some("k"),
    );
    let info = low
        .model_info(DEEPSEEK_ROUTE, "deepseek-v4-pro")
        .expect("info");
    assert_eq!(
        info.reasoning.and_then(|r| r.default_effort).as_deref(),
        Some("low")
    );
}

#[test]
fn live_settings_are_layered_per_request_and_bad_snapshots_keep_the_last_good() {
    let section = Arc::new(Mutex::new(Value::Null));
    let source = section.clone();
    let deps = ProviderDeps::new(Arc::new(|_: &str| Some("k".into())))
        .with_env(Arc::new(|_: &str| None))
        .with_settings(Arc::new(move || source.lock().expect("lock").clone()));
    let adapter = DeepSeekAdapter::new(
        DeepSeekConfig {
            max_tokens: Some(100),
            ..Default::default()
        },
        deps,
    )
    .expect("valid");
    assert_eq!(adapter.current_config().max_tokens, 100);
    *section.lock().expect("lock") = json!({"baseURL": "http://live", "models": [{"id": "only"}],
        "retryPolicy": {"mode": "always"}});
    let config = adapter.current_config();
    assert_eq!(
        (
            config.base_url.as_str(),
            config.max_tokens,
            config.models.len()
        ),
        ("http://live", 100, 1)
    );
    assert_eq!(
        adapter.retry_policy(DEEPSEEK_ROUTE).mode,
        dsh_llm::RetryMode::Always
    );
    *section.lock().expect("lock") = json!({"maxTokens": 0});
    assert_eq!(adapter.current_config().max_tokens, 100);
    assert_eq!(adapter.current_config().base_url, "http://live");
}

#[test]
fn invalid_row_config_fails_construction() {
    let deps = ProviderDeps::new(Arc::new(|_: &str| None));
    let config = DeepSeekConfig {
        thinking: Some(Thinking::Disabled),
        reasoning_effort: Some(DeepSeekEffort::Max),
        ..Default::default()
    };
    let error = DeepSeekAdapter::new(config, deps).err().expect("invalid");
    assert_eq!(
        error.to_string(),
        "llm-deepseek: with thinking disabled, reasoningEffort can only be \"off\"; remove reasoningEffort or enable thinking"
    );
}
