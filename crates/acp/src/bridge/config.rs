//! Modes and configuration options: what a session answer offers and how `session/set_mode` and
//! `session/set_config_option` change it.

use super::*;

impl Bridge {
    /// The permission presets as ACP session modes, with the session's current one.
    pub(super) fn modes(&self, agent: &AgentRef) -> Option<Value> {
        let presets = self.root.get::<PermissionPresets>()?;
        let available: Vec<Value> = presets
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
                json!({"id": id, "name": name, "description": description})
            })
            .collect();
        Some(
            json!({"currentModeId": presets.current(agent.session()), "availableModes": available}),
        )
    }

    /// The answer to `session/new|load|resume` in the rich projection.
    pub(super) fn session_answer(&self, agent: &AgentRef, mut answer: Map<String, Value>) -> Value {
        if let Some(modes) = self.modes(agent) {
            answer.insert("modes".into(), modes);
        }
        answer.insert(
            "configOptions".into(),
            Value::Array(self.config_options(&agent.session().id())),
        );
        Value::Object(answer)
    }

    /// The session's model choice (the route's catalog) and, when the model reasons, its
    /// reasoning effort.
    pub(super) fn config_options(&self, session_id: &str) -> Vec<Value> {
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
        let mut models: Vec<Value> = llm
            .models(provider)
            .into_iter()
            .map(|m| json!({"value": m.id, "name": m.name.unwrap_or_else(|| m.id.clone())}))
            .collect();
        if !models.iter().any(|m| m["value"] == model.as_str()) {
            models.insert(0, json!({"value": model, "name": model}));
        }
        let mut options = vec![json!({
            "id": "model", "name": "Model", "category": "model", "type": "select",
            "currentValue": model, "options": models,
        })];
        if let Some(reasoning) = llm
            .model_info(provider, &model)
            .ok()
            .and_then(|i| i.reasoning)
            .filter(|r| !r.efforts.is_empty())
        {
            let current = effort
                .or(reasoning.default_effort)
                .unwrap_or_else(|| reasoning.efforts[0].clone());
            let values: Vec<Value> = reasoning
                .efforts
                .iter()
                .map(|e| json!({"value": e, "name": e}))
                .collect();
            options.push(json!({
                "id": "reasoning_effort", "name": "Reasoning effort", "category": "thought_level",
                "type": "select", "currentValue": current, "options": values,
            }));
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
            .find(|o| o["id"] == config_id)
            .ok_or_else(|| {
                RpcError::invalid_params(format!("unknown config option {config_id}"))
            })?;
        let valid = offered["options"]
            .as_array()
            .is_some_and(|o| o.iter().any(|v| v["value"] == value));
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
        Ok(json!({"configOptions": self.config_options(id)}))
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
