//! Modes and configuration options: what a session answer offers and how `session/set_mode` and
//! `session/set_config_option` change it.

use super::*;
use crate::protocol::{
    ConfigOption, ConfigOptions, ConfigValue, SessionAnswer, SessionMode, SessionModes,
};

impl Bridge {
    /// The permission presets as ACP session modes, with the session's current one.
    pub(super) fn modes(&self, agent: &AgentRef) -> Option<SessionModes> {
        let presets = self.root.get::<PermissionPresets>()?;
        let available: Vec<SessionMode> = presets
            .list()
            .into_iter()
            .map(|(id, description)| {
                let name = id
                    .split('-')
                    .enumerate()
                    .map(|(i, w)| {
                        let mut w = w.to_string();
                        if i == 0
                            && let Some(first) = w.get_mut(..1)
                        {
                            first.make_ascii_uppercase();
                        }
                        w
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                SessionMode {
                    id,
                    name,
                    description,
                }
            })
            .collect();
        Some(SessionModes {
            current_mode_id: presets.current(agent.session()),
            available_modes: available,
        })
    }

    /// The answer to `session/new` (`new_id`), `session/load` and `session/resume` in the
    /// rich projection.
    pub(super) fn session_answer(&self, agent: &AgentRef, new_id: Option<String>) -> Value {
        protocol::to_value(&SessionAnswer {
            session_id: new_id,
            modes: self.modes(agent),
            config_options: self.config_options(&agent.session().id()),
        })
    }

    /// The session's model choice (the route's catalog) and, when the model reasons, its
    /// reasoning effort.
    pub(super) fn config_options(&self, session_id: &str) -> Vec<ConfigOption> {
        let (model, effort) = self
            .choices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(session_id)
            .cloned()
            .unwrap_or_default();
        let model = model.unwrap_or_else(|| self.config.model.clone());
        let Some(llm) = self.root.get::<dsh_llm::LlmRuntime>() else {
            return Vec::new();
        };
        let provider = &self.config.provider;
        let mut models: Vec<ConfigValue> = llm
            .models(provider)
            .into_iter()
            .map(|m| ConfigValue {
                name: m.name.unwrap_or_else(|| m.id.clone()),
                value: m.id,
            })
            .collect();
        if !models.iter().any(|m| m.value == model) {
            models.insert(
                0,
                ConfigValue {
                    value: model.clone(),
                    name: model.clone(),
                },
            );
        }
        let mut options = vec![ConfigOption {
            id: "model",
            name: "Model",
            category: "model",
            kind: "select",
            current_value: model.clone(),
            options: models,
        }];
        if let Some(reasoning) = llm
            .model_info(provider, &model)
            .ok()
            .and_then(|i| i.reasoning)
            .filter(|r| !r.efforts.is_empty())
        {
            let current = effort
                .or(reasoning.default_effort)
                .unwrap_or_else(|| reasoning.efforts[0].clone());
            let values: Vec<ConfigValue> = reasoning
                .efforts
                .iter()
                .map(|e| ConfigValue {
                    value: e.clone(),
                    name: e.clone(),
                })
                .collect();
            options.push(ConfigOption {
                id: "reasoning_effort",
                name: "Reasoning effort",
                category: "thought_level",
                kind: "select",
                current_value: current,
                options: values,
            });
        }
        options
    }

    pub(super) fn set_config_option(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[
                ("sessionId", "string"),
                ("configId", "string"),
                ("value", "string"),
            ],
        )?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        let config_id = p.get("configId").and_then(Value::as_str).unwrap_or("");
        let value = p.get("value").and_then(Value::as_str).unwrap_or("");
        if self.session(id).is_none() {
            return Err(RpcError::invalid_params(format!("unknown session: {id}")));
        }
        let offered = self
            .config_options(id)
            .into_iter()
            .find(|o| o.id == config_id)
            .ok_or_else(|| {
                RpcError::invalid_params(format!("unknown config option {config_id}"))
            })?;
        let valid = offered.options.iter().any(|v| v.value == value);
        if !valid {
            return Err(RpcError::invalid_params(format!(
                "{value} is not a value of {config_id}"
            )));
        }
        {
            let mut choices = self.choices.lock().unwrap_or_else(|e| e.into_inner());
            let entry = choices.entry(id.to_string()).or_default();
            match config_id {
                "model" => {
                    entry.0 = Some(value.to_string());
                    // An effort of the old model may not exist on the new one.
                    entry.1 = None;
                }
                _ => entry.1 = Some(value.to_string()),
            }
        }
        Ok(protocol::to_value(&ConfigOptions {
            config_options: self.config_options(id),
        }))
    }

    pub(super) fn set_mode(&self, params: Option<Value>) -> Result<Value, RpcError> {
        let p = check_params(
            params.as_ref(),
            &[("sessionId", "string"), ("modeId", "string")],
        )?;
        let id = p.get("sessionId").and_then(Value::as_str).unwrap_or("");
        let mode = p.get("modeId").and_then(Value::as_str).unwrap_or("");
        let Some(session) = self.session(id) else {
            return Err(RpcError::invalid_params(format!("unknown session: {id}")));
        };
        let presets = self
            .root
            .get::<PermissionPresets>()
            .ok_or_else(|| RpcError::invalid_params("this agent offers no session modes"))?;
        if !presets.list().iter().any(|(name, _)| name == mode) {
            return Err(RpcError::invalid_params(format!("unknown mode {mode}")));
        }
        presets
            .apply(&session.agent, mode)
            .map_err(RpcError::internal)?;
        update(
            &self.peer,
            id,
            SessionUpdate::CurrentModeUpdate {
                current_mode_id: mode.to_string(),
            },
        );
        Ok(json!({}))
    }
}
