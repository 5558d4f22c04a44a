//! `agentPresets.list` (0.2.1's roster: `{presets: [{id, isDefault, name?, description?}]}`)
//! and `agentPresets.select {sessionId, agentPreset}` (before the session's first turn;
//! refused with `agent-preset-locked` after it).

use serde_json::{Value, json};

use super::sessions::session_id;
use crate::presets::{AgentPresets, PresetError};
use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;

fn service(s: &WebState) -> Result<std::sync::Arc<AgentPresets>, ApiError> {
    s.root.get::<AgentPresets>().ok_or_else(|| {
        ApiError::bad_request(
            "agent presets are off in this profile (no agent-preset-registry row)",
        )
    })
}

pub async fn list(s: &WebState) -> ApiResult {
    match s.root.get::<AgentPresets>() {
        Some(p) => Ok(p.roster()),
        None => Ok(json!({"presets": []})),
    }
}

/// Selects a preset for a session that has not started.
pub async fn select(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let wanted = Args(p).str("agentPreset")?.to_string();
    let presets = service(s)?;
    let agent = s.lifecycle().ensure_live(id).await?;
    let chosen = apply(&presets, &agent, &wanted)?;
    Ok(json!({"agentPreset": chosen}))
}

/// The preset of `agent`'s session after selecting `wanted`.
pub fn apply(
    presets: &AgentPresets,
    agent: &dsh_agent::AgentRef,
    wanted: &str,
) -> Result<String, ApiError> {
    presets
        .select(agent.session(), wanted)
        .map_err(|e| match e {
            PresetError::NotFound(..) => {
                ApiError::new(ErrorCode::AgentPresetNotFound, e.to_string())
            }
            PresetError::Locked => ApiError::new(ErrorCode::AgentPresetLocked, e.to_string())
                .with(json!({"sessionId": agent.id().to_string(), "agentPreset": wanted})),
            PresetError::Write(_) => ApiError::internal(e),
        })
}
