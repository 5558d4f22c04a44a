//! A session's model, reasoning effort and permission mode, chosen in the page:
//! `session.options` says what is offered and current; `session.setModel`,
//! `session.setEffort` and `session.setMode` change them for the session's next request.
//! `session.commands` lists the slash commands the composer's `/` menu offers.

use dsh_agent::AgentRef;
use dsh_policies::presets::PermissionPresets;
use serde_json::{Value, json};

use super::sessions::{require_known, session_id};
use crate::hosting::{Choice, default_effort, default_model};
use crate::rpc::{ApiError, ApiResult, Args};
use crate::state::WebState;

/// The route the session's next request takes: the page's choice, else the one its last
/// request logged (a session reopened after a restart keeps its model), else the default.
fn current(s: &WebState, id: &str, agent: Option<&AgentRef>) -> Choice {
    if let Some(choice) = s.hosting.get(id).and_then(|h| h.choice()) {
        return choice;
    }
    if let Some(header) = agent.and_then(|a| a.session().read(|l| l.request_header().cloned())) {
        let defaulted = header
            .adapter_defaults
            .as_ref()
            .is_some_and(|d| d.reasoning_effort);
        return Choice {
            provider: header.config.provider,
            model: header.config.model,
            effort: header.config.reasoning_effort.filter(|_| !defaulted),
        };
    }
    let (provider, model) = default_model(&s.root);
    let effort = default_effort(&s.root, &provider, &model);
    Choice {
        provider,
        model,
        effort,
    }
}

/// Every configured model: `[{provider, providerName, model}]`.
fn models(s: &WebState) -> Result<Vec<Value>, ApiError> {
    let listed = super::config::providers(s)?;
    let mut out = Vec::new();
    for item in listed["items"].as_array().into_iter().flatten() {
        for model in item["models"].as_array().into_iter().flatten() {
            out.push(json!({"provider": item["id"], "providerName": item["name"], "model": model}));
        }
    }
    Ok(out)
}

/// The efforts `provider`/`model` offers and the one it uses when none is chosen.
fn efforts(s: &WebState, provider: &str, model: &str) -> Option<(Vec<String>, Option<String>)> {
    let llm = s.root.get::<dsh_llm::LlmRuntime>()?;
    let reasoning = llm.model_info(provider, model).ok()?.reasoning?;
    (!reasoning.efforts.is_empty()).then_some((reasoning.efforts, reasoning.default_effort))
}

/// The live agent, when the session can run here (a session another process holds, or one
/// that cannot be opened, answers without a mode).
async fn live(s: &WebState, id: &str) -> Option<AgentRef> {
    s.lifecycle().ensure_live(id).await.ok()
}

async fn describe(s: &WebState, id: &str, agent: Option<AgentRef>) -> ApiResult {
    let choice = current(s, id, agent.as_ref());
    let mut models = models(s)?;
    if !models
        .iter()
        .any(|m| m["provider"] == choice.provider.as_str() && m["model"] == choice.model.as_str())
    {
        models.insert(
            0,
            json!({"provider": choice.provider, "providerName": choice.provider, "model": choice.model}),
        );
    }
    let effort = efforts(s, &choice.provider, &choice.model).map(|(list, default)| {
        let current = choice
            .effort
            .clone()
            .or(default)
            .or_else(|| list.first().cloned());
        json!({"current": current, "options": list})
    });
    let mode = match (s.root.get::<PermissionPresets>(), agent.as_ref()) {
        (Some(presets), Some(agent)) => {
            let options: Vec<Value> = presets
                .list()
                .into_iter()
                .map(|(id, description)| json!({"id": id, "description": description}))
                .collect();
            json!({"current": presets.current(agent.session()), "options": options})
        }
        _ => Value::Null,
    };
    // The agent preset: changeable until the first turn starts.
    let preset = match (s.root.get::<crate::presets::AgentPresets>(), agent.as_ref()) {
        (Some(presets), Some(agent)) => {
            let started = agent.session().read(|log| {
                log.events()
                    .iter()
                    .any(|e| e.is(dsh_session::types::TURN_START))
            });
            let mut roster = presets.roster();
            roster["current"] = json!(presets.of(id));
            roster["locked"] = json!(started);
            roster
        }
        _ => Value::Null,
    };
    Ok(json!({
        "sessionId": id,
        "model": {"provider": choice.provider, "model": choice.model},
        "models": models,
        "effort": effort,
        "mode": mode,
        "agentPreset": preset,
    }))
}

pub async fn options(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    require_known(s, id).await?;
    let agent = live(s, id).await;
    describe(s, id, agent).await
}

pub async fn set_model(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let args = Args(p);
    let provider = args.str("provider")?;
    let model = args.str("model")?;
    require_known(s, id).await?;
    let offered = models(s)?
        .iter()
        .any(|m| m["provider"] == provider && m["model"] == model);
    if !offered {
        return Err(ApiError::bad_request(format!(
            "{provider} / {model} is not a configured model; add it in Settings → Models"
        )));
    }
    let agent = live(s, id).await;
    s.hosting.entry(id).choose(Choice {
        provider: provider.to_string(),
        model: model.to_string(),
        effort: None,
    });
    describe(s, id, agent).await
}

pub async fn set_effort(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let effort = Args(p).str("effort")?;
    require_known(s, id).await?;
    let agent = live(s, id).await;
    let mut choice = current(s, id, agent.as_ref());
    let Some((list, _)) = efforts(s, &choice.provider, &choice.model) else {
        return Err(ApiError::bad_request(format!(
            "{} takes no reasoning effort",
            choice.model
        )));
    };
    if !list.iter().any(|e| e == effort) {
        return Err(ApiError::bad_request(format!(
            "{effort} is not an effort of {} (offered: {})",
            choice.model,
            list.join(", ")
        )));
    }
    choice.effort = Some(effort.to_string());
    s.hosting.entry(id).choose(choice);
    describe(s, id, agent).await
}

pub async fn set_mode(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let mode = Args(p).str("mode")?;
    require_known(s, id).await?;
    let presets = s
        .root
        .get::<PermissionPresets>()
        .ok_or_else(|| ApiError::bad_request("this dsh offers no permission modes"))?;
    if !presets.list().iter().any(|(name, _)| name == mode) {
        return Err(ApiError::bad_request(format!(
            "unknown permission mode {mode} (offered: {})",
            presets
                .list()
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    let agent = s.lifecycle().ensure_live(id).await?;
    presets
        .apply(&agent, mode)
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    describe(s, id, Some(agent)).await
}

/// `session.commands`: `{items: [{name, description, hint?}]}`, sorted by name.
pub async fn commands(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    require_known(s, id).await?;
    let mut items: Vec<Value> = s
        .root
        .get::<dsh_commands::CommandRegistry>()
        .map(|r| r.list())
        .unwrap_or_default()
        .into_iter()
        .map(|c| {
            let mut item = json!({"name": c.name, "description": c.description});
            if let Some(hint) = c.hint {
                item["hint"] = json!(hint);
            }
            item
        })
        .collect();
    // /help is answered by the dispatcher itself, not registered.
    if !items.iter().any(|i| i["name"] == "help") {
        items.push(json!({"name": "help", "description": "List the commands this session offers"}));
    }
    items.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    Ok(json!({"items": items}))
}
