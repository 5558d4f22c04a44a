//! Agent presets (0.2.1's `@deepseek-ai/dsh-agent-preset-registry` row and its
//! `@deepseek-ai/dsh-agent-preset` rows): a session runs one preset — `standard`, `ptc`
//! (tools presented as code) or `minimal` (a shell and image reading) — chosen before its
//! first turn and fixed from then on (`agent-preset/selected {agentPreset}`, or the
//! header's `agentPreset`; none recorded means the registry's default).
//!
//! 0.2.1 mounts each preset's plugin list as a plugin tree per agent. This build loads one
//! tree and narrows it per session instead: a preset's `plugins` entries (nested
//! `cordis:group` lists included) name the rows whose tools the session sees. Rows that no
//! preset names (MCP servers, reminders' host rows) stay visible to every preset; a
//! `@deepseek-ai/dsh-tool-fs` entry's `read`/`write`/`edit`/`readImage: false` hide those
//! tools; an `@deepseek-ai/dsh-agent-tool-presentation` entry with `mode: ptc` presents
//! the tools as code. Other entry configuration (a persona, prompt text) is not applied
//! per session.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_session::{LiveSession, SessionStore};
use dsh_tools::{ToolRegistry, ToolView, ToolsMode};
use serde::Deserialize;
use serde_json::{Value, json};

/// The durable event of a selection.
pub const SELECTED: &str = "agent-preset/selected";

/// 0.2.1's preset entry ids whose rows have another id here.
const ALIASES: [(&str, &str); 2] = [
    ("present", "tool-present"),
    ("persistent-bash", "tool-bash"),
];

/// One declared preset.
#[derive(Clone, Debug)]
pub struct Preset {
    pub id: String,
    pub order: Option<f64>,
    pub name: Option<String>,
    pub description: Option<String>,
    /// Row ids whose tools the preset keeps.
    rows: HashSet<String>,
    /// Tool names hidden although their row is kept.
    hidden: HashSet<String>,
    mode: Option<ToolsMode>,
}

/// Why a selection was refused.
#[derive(Debug, thiserror::Error)]
pub enum PresetError {
    #[error("no agent preset \"{0}\" (the profile declares {1})")]
    NotFound(String, String),
    #[error("the session has already started; its agent preset is fixed")]
    Locked,
    #[error("the selection was not recorded: {0}")]
    Write(String),
}

/// The registry service: declared presets, the default, each session's preset.
pub struct AgentPresets {
    default: String,
    presets: RwLock<Vec<Preset>>,
    /// Session id → preset id, learnt from the log once.
    sessions: Mutex<HashMap<String, String>>,
    store: Option<Arc<SessionStore>>,
}

impl AgentPresets {
    /// Every preset, by `order` then id.
    pub fn list(&self) -> Vec<Preset> {
        let mut all = self
            .presets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        all.sort_by(|a, b| {
            a.order
                .unwrap_or(f64::INFINITY)
                .total_cmp(&b.order.unwrap_or(f64::INFINITY))
                .then_with(|| a.id.cmp(&b.id))
        });
        all
    }

    /// `{presets: [{id, isDefault, name?, description?, order?}]}` (0.2.1's roster).
    pub fn roster(&self) -> Value {
        let presets: Vec<Value> = self
            .list()
            .into_iter()
            .map(|p| {
                let mut v = json!({"id": p.id, "isDefault": p.id == self.default});
                if let Some(n) = p.name {
                    v["name"] = json!(n);
                }
                if let Some(d) = p.description {
                    v["description"] = json!(d);
                }
                v
            })
            .collect();
        json!({"presets": presets})
    }

    /// `f` of preset `id`, read in place (the tool view asks per tool and step).
    fn with_preset<R>(&self, id: &str, f: impl FnOnce(&Preset) -> R) -> Option<R> {
        self.presets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|p| p.id == id)
            .map(f)
    }

    /// The preset `session` recorded (the header's, then the last selection), if any.
    fn recorded(session: &LiveSession) -> Option<String> {
        let own = session.read(|log| {
            log.events()
                .iter()
                .rev()
                .find(|e| e.is(SELECTED))
                .and_then(|e| {
                    e.data
                        .get("agentPreset")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
        });
        own.or_else(|| session.header().agent_preset)
    }

    /// The preset `session` runs: its own, else its parent's (a delegated child joins its
    /// parent's preset), else the default.
    pub fn of(&self, session: &str) -> String {
        if let Some(id) = self
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(session)
        {
            return id.clone();
        }
        let mut id = None;
        let mut current = self.store.as_ref().and_then(|s| s.get(session));
        for _ in 0..8 {
            let Some(live) = current else { break };
            if let Some(found) = Self::recorded(&live) {
                id = Some(found);
                break;
            }
            current = live
                .header()
                .parent_session
                .and_then(|p| self.store.as_ref().and_then(|s| s.get(&p)));
        }
        let id = id.unwrap_or_else(|| self.default.clone());
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session.to_string(), id.clone());
        id
    }

    /// Selects `preset` for `session` before its first turn (nothing is written when it
    /// already runs that preset).
    pub fn select(&self, session: &Arc<LiveSession>, preset: &str) -> Result<String, PresetError> {
        if self.with_preset(preset, |_| ()).is_none() {
            let known: Vec<String> = self.list().into_iter().map(|p| p.id).collect();
            return Err(PresetError::NotFound(preset.into(), known.join(", ")));
        }
        let started = session.read(|log| {
            log.events()
                .iter()
                .any(|e| e.is(dsh_session::types::TURN_START))
        });
        let id = session.id();
        let current = Self::recorded(session).unwrap_or_else(|| self.default.clone());
        if current == preset {
            return Ok(current);
        }
        if started {
            return Err(PresetError::Locked);
        }
        session
            .append(SELECTED, json!({"agentPreset": preset}), None)
            .map_err(|e| PresetError::Write(e.to_string()))?;
        self.sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id, preset.to_string());
        Ok(preset.to_string())
    }

    /// Whether some preset names row `owner` (the rows presets decide about).
    fn managed(&self, owner: &str) -> bool {
        self.presets
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|p| p.rows.contains(owner))
    }
}

impl ToolView for AgentPresets {
    fn admits(&self, session: &str, owner: &str, name: &str) -> bool {
        if !self.managed(owner) {
            return true;
        }
        // A preset that went away (a profile edit): its sessions see everything.
        self.with_preset(&self.of(session), |p| {
            p.rows.contains(owner) && !p.hidden.contains(name)
        })
        .unwrap_or(true)
    }

    fn mode(&self, session: &str) -> Option<ToolsMode> {
        self.with_preset(&self.of(session), |p| p.mode).flatten()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RegistryRow {
    default: String,
    selected_default: Option<String>,
}

/// `@deepseek-ai/dsh-agent-preset-registry` (config `{default, selectedDefault?}`).
pub struct PresetRegistryPlugin;

impl Plugin for PresetRegistryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-agent-preset-registry"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: RegistryRow = config.parse()?;
        let default = row.selected_default.unwrap_or(row.default);
        if default.trim().is_empty() {
            return Err("agent-preset-registry: default must name a preset".into());
        }
        let service = Arc::new(AgentPresets {
            default,
            presets: RwLock::default(),
            sessions: Mutex::default(),
            store: ctx.get::<SessionStore>(),
        });
        ctx.provide(service.clone())?;
        ctx.require::<ToolRegistry>()?.set_view(ctx, service)?;
        Ok(())
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PresetRow {
    id: String,
    order: Option<f64>,
    name: Option<String>,
    description: Option<String>,
    plugins: Vec<Value>,
}

/// Collects the kept rows, hidden tools and mode of a plugin entry list.
fn collect(entries: &[Value], preset: &mut Preset) -> Result<(), String> {
    for entry in entries {
        let obj = entry
            .as_object()
            .ok_or("every plugins entry must be an object with an id")?;
        let id = obj
            .get("id")
            .and_then(Value::as_str)
            .ok_or("every plugins entry needs a string id")?;
        if obj.get("disabled").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        let name = obj.get("name").and_then(Value::as_str).unwrap_or_default();
        let config = obj.get("config");
        if name == "cordis:group" {
            if let Some(list) = config.and_then(Value::as_array) {
                collect(list, preset)?;
            }
            continue;
        }
        let row = ALIASES
            .iter()
            .find(|(theirs, _)| *theirs == id)
            .map_or(id, |(_, ours)| ours);
        preset.rows.insert(row.to_string());
        match name {
            "@deepseek-ai/dsh-tool-fs" => {
                for (key, tool) in [
                    ("read", "read"),
                    ("write", "write"),
                    ("edit", "edit"),
                    ("readImage", "read_image"),
                ] {
                    if config.and_then(|c| c.get(key)).and_then(Value::as_bool) == Some(false) {
                        preset.hidden.insert(tool.to_string());
                    }
                }
            }
            "@deepseek-ai/dsh-agent-tool-presentation" => {
                preset.mode = match config.and_then(|c| c.get("mode")).and_then(Value::as_str) {
                    Some("ptc") | Some("code") => Some(ToolsMode::Code),
                    Some("both") => Some(ToolsMode::Both),
                    _ => Some(ToolsMode::Native),
                };
            }
            _ => {}
        }
    }
    Ok(())
}

/// `@deepseek-ai/dsh-agent-preset` (config `{id, order?, name?, description?, plugins}`).
pub struct PresetPlugin;

impl Plugin for PresetPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-agent-preset"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: PresetRow = config.parse()?;
        if row.id.trim().is_empty() {
            return Err("agent-preset: id must not be empty".into());
        }
        let registry = ctx
            .require::<AgentPresets>()
            .map_err(|_| "agent-preset: needs the agent-preset-registry row")?;
        let mut preset = Preset {
            id: row.id.clone(),
            order: row.order,
            name: row.name,
            description: row.description,
            rows: HashSet::new(),
            hidden: HashSet::new(),
            mode: None,
        };
        collect(&row.plugins, &mut preset).map_err(|e| format!("agent preset {}: {e}", row.id))?;
        {
            let mut all = registry.presets.write().unwrap_or_else(|p| p.into_inner());
            if all.iter().any(|p| p.id == preset.id) {
                return Err(format!("duplicate agent preset: {}", preset.id).into());
            }
            all.push(preset);
        }
        let id = row.id;
        let weak = Arc::downgrade(&registry);
        ctx.effect("agent preset", move || {
            if let Some(r) = weak.upgrade() {
                r.presets
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|p| p.id != id);
            }
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn entries_name_rows_groups_switches_and_the_code_mode() {
        let mut p = Preset {
            id: "x".into(),
            order: None,
            name: None,
            description: None,
            rows: HashSet::new(),
            hidden: HashSet::new(),
            mode: None,
        };
        let entries = serde_json::json!([
            {"id": "tool-fs", "name": "@deepseek-ai/dsh-tool-fs", "config": {"read": false, "readImage": true}},
            {"id": "shell", "name": "cordis:group", "group": true, "config": [
                {"id": "persistent-bash", "name": "@deepseek-ai/dsh-tool-bash-persistent"},
                {"id": "terminal-pwsh", "name": "@deepseek-ai/dsh-terminal-bash", "disabled": true}
            ]},
            {"id": "tool-presentation", "name": "@deepseek-ai/dsh-agent-tool-presentation", "config": {"mode": "ptc"}},
            {"id": "present", "name": "@deepseek-ai/dsh-tool-present"}
        ]);
        collect(entries.as_array().unwrap(), &mut p).unwrap();
        let mut rows: Vec<&str> = p.rows.iter().map(String::as_str).collect();
        rows.sort_unstable();
        assert_eq!(
            rows,
            ["tool-bash", "tool-fs", "tool-present", "tool-presentation"]
        );
        assert_eq!(p.hidden, HashSet::from(["read".to_string()]));
        assert_eq!(p.mode, Some(ToolsMode::Code));
        assert!(collect(&[json!({"name": "x"})], &mut p).is_err());
    }
}
