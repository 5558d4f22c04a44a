//! `@deepseek-ai/dsh-permission-presets`: named bundles of a sandbox mode and an approval
//! policy, pinned into every fresh session (`permission/preset`, `sandbox/mode`,
//! `approval/policy`), and the `/permission [preset]` command that switches a running
//! session. The runtime context the model reads follows the log, so a switch shows in the
//! next request.

use std::sync::Arc;

use dsh_agent::AgentRef;
use dsh_commands::{CommandDefinition, CommandRegistry, CommandResult};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_sandbox::{SandboxMode, SandboxPolicy, session_mode};
use dsh_session::{LiveSession, SessionCreated, types};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::permissions::{ApprovalPolicy, Approvals, session_approval_policy};

/// The name of the state that matches no preset.
const CUSTOM: &str = "custom";

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PresetConfig {
    sandbox: String,
    approval: ApprovalPolicy,
    #[serde(default)]
    description: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Preset {
    name: String,
    sandbox: SandboxMode,
    approval: ApprovalPolicy,
    description: String,
}

/// The preset service.
pub struct PermissionPresets {
    presets: Vec<Preset>,
    default: String,
    sandbox_default: SandboxMode,
    approvals: Arc<Approvals>,
}

impl PermissionPresets {
    fn find(&self, name: &str) -> Option<&Preset> {
        self.presets.iter().find(|p| p.name == name)
    }

    fn names(&self) -> String {
        self.presets
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The preset a session is in: its last `permission/preset` while the knobs still match
    /// it, else the first preset matching the knobs, else `custom`.
    pub fn current(&self, session: &LiveSession) -> String {
        let sandbox = session_mode(session).unwrap_or(self.sandbox_default);
        let approval = self.approvals.effective(Some(session));
        let selected = session.read(|log| {
            log.events()
                .iter()
                .rev()
                .find(|e| e.event_type == "permission/preset")
                .and_then(|e| {
                    e.data
                        .get("preset")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
        });
        let matches = |p: &Preset| p.sandbox == sandbox && p.approval == approval;
        if let Some(name) = selected
            && self.find(&name).is_some_and(matches)
        {
            return name;
        }
        self.presets
            .iter()
            .find(|p| matches(p))
            .map_or_else(|| CUSTOM.to_string(), |p| p.name.clone())
    }

    /// Logs the facts a session is missing: a fresh one gets the default preset's three
    /// events; a seeded or restored one only what it lacks, keeping its effective values.
    fn pin(&self, session: &Arc<LiveSession>) -> Result<(), BoxError> {
        let (has_preset, seeded) = session.read(|log| {
            let events = log.events();
            (
                events.iter().any(|e| e.event_type == "permission/preset"),
                events.iter().any(|e| e.is(types::END_SEED)),
            )
        });
        let sandbox = session_mode(session);
        let approval = session_approval_policy(session);
        if !has_preset && sandbox.is_none() && approval.is_none() && !seeded {
            let Some(p) = self.find(&self.default).cloned() else {
                return Ok(());
            };
            session.append("permission/preset", json!({"preset": p.name}), None)?;
            session.append("sandbox/mode", json!({"mode": p.sandbox.as_str()}), None)?;
            session.append(
                "approval/policy",
                json!({"policy": p.approval.as_str()}),
                None,
            )?;
            return Ok(());
        }
        if !has_preset {
            let effective = self.current(session);
            if effective != CUSTOM {
                session.append("permission/preset", json!({"preset": effective}), None)?;
            }
        }
        if sandbox.is_none() {
            session.append(
                "sandbox/mode",
                json!({"mode": self.sandbox_default.as_str()}),
                None,
            )?;
        }
        if approval.is_none() {
            session.append(
                "approval/policy",
                json!({"policy": self.approvals.policy().as_str()}),
                None,
            )?;
        }
        Ok(())
    }

    /// The presets, in order: `(name, description)`.
    pub fn list(&self) -> Vec<(String, String)> {
        self.presets
            .iter()
            .map(|p| (p.name.clone(), p.description.clone()))
            .collect()
    }

    /// Switches `agent`'s session to preset `name`.
    pub fn apply(&self, agent: &AgentRef, name: &str) -> Result<(), BoxError> {
        let Some(p) = self.find(name).cloned() else {
            return Err(format!("unknown preset \"{name}\" (available: {})", self.names()).into());
        };
        let session = agent.session();
        if self.current(session) != p.name {
            session.append("permission/preset", json!({"preset": p.name}), None)?;
        }
        if session_mode(session).unwrap_or(self.sandbox_default) != p.sandbox {
            session.append("sandbox/mode", json!({"mode": p.sandbox.as_str()}), None)?;
        }
        self.approvals.set_policy(agent, p.approval)?;
        Ok(())
    }

    fn command(self: &Arc<Self>) -> CommandDefinition {
        let this = self.clone();
        CommandDefinition {
            name: "permission".into(),
            description: "Switch the permission preset (sandbox mode + approval policy)".into(),
            hint: Some("<preset>".into()),
            record_input: true,
            handler: Arc::new(move |invocation| {
                let this = this.clone();
                Box::pin(async move {
                    let wanted = invocation.raw_input.trim();
                    if wanted.is_empty() {
                        return Ok(CommandResult::ok(format!(
                            "current preset {} (available: {})",
                            this.current(invocation.agent.session()),
                            this.names()
                        )));
                    }
                    match this.apply(&invocation.agent, wanted) {
                        Ok(()) => Ok(CommandResult::ok(format!("preset {wanted}"))),
                        Err(e) => Ok(CommandResult::error(e.to_string())),
                    }
                })
            }),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[serde(default)]
    presets: Option<indexmap_like::Ordered>,
    default_preset: Option<String>,
    /// Log the preset facts into every fresh session (default true).
    pin_fresh_sessions: Option<bool>,
}

/// Preset tables keep their document order (the first match wins).
mod indexmap_like {
    use serde::Deserialize;

    #[derive(Default)]
    pub struct Ordered(pub Vec<(String, super::PresetConfig)>);

    impl<'de> Deserialize<'de> for Ordered {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let map = serde_json::Map::<String, serde_json::Value>::deserialize(d)?;
            let mut out = Vec::new();
            for (k, v) in map {
                let preset =
                    super::PresetConfig::deserialize(v).map_err(serde::de::Error::custom)?;
                out.push((k, preset));
            }
            Ok(Ordered(out))
        }
    }
}

fn default_presets() -> Vec<(String, PresetConfig)> {
    let p = |sandbox: &str, approval, description: &str| PresetConfig {
        sandbox: sandbox.into(),
        approval,
        description: Some(description.into()),
    };
    vec![
        (
            "read-only".into(),
            p(
                "read-only",
                ApprovalPolicy::Ask,
                "Read anything; changes need approval.",
            ),
        ),
        (
            "workspace-write".into(),
            p(
                "workspace-write",
                ApprovalPolicy::Ask,
                "Write within the workspace and the allowed temporary directories; anything wider needs approval.",
            ),
        ),
        (
            "danger-full-access".into(),
            p(
                "danger-full-access",
                ApprovalPolicy::Never,
                "Full file access without approval prompts.",
            ),
        ),
    ]
}

/// `@deepseek-ai/dsh-permission-presets` (config `{presets?, defaultPreset?}`).
pub struct PermissionPresetsPlugin;

impl Plugin for PermissionPresetsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-permission-presets"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: Config = config.parse()?;
        let approvals = ctx.require::<Approvals>()?;
        let sandbox = ctx.require::<SandboxPolicy>()?;
        let table = c.presets.map(|o| o.0).unwrap_or_else(default_presets);
        let mut presets = Vec::new();
        for (name, p) in table {
            if name == CUSTOM {
                return Err("permission: \"custom\" stands for the state where no preset applies, so no table entry may use that name; rename the entry".into());
            }
            let mode = SandboxMode::parse(&p.sandbox).ok_or_else(|| {
                format!(
                    "permission: preset \"{name}\" has an unknown sandbox mode \"{}\"",
                    p.sandbox
                )
            })?;
            // A preset without a description of its own says what it does: the built-in
            // one's words when it is the built-in preset of that name, else its settings.
            let description = p.description.clone().unwrap_or_else(|| {
                default_presets()
                    .into_iter()
                    .find(|(n, d)| *n == name && d.sandbox == p.sandbox && d.approval == p.approval)
                    .and_then(|(_, d)| d.description)
                    .unwrap_or_else(|| {
                        format!("Sandbox {}; approval {}.", p.sandbox, p.approval.as_str())
                    })
            });
            presets.push(Preset {
                description,
                name,
                sandbox: mode,
                approval: p.approval,
            });
        }
        let sandbox_default = sandbox.default_mode();
        let default = match c.default_preset {
            Some(name) if presets.iter().any(|p| p.name == name) => name,
            Some(name) => {
                let known: Vec<&str> = presets.iter().map(|p| p.name.as_str()).collect();
                return Err(format!("permission: unknown preset \"{name}\" (known: {})", known.join(", ")).into());
            }
            None => presets
                .iter()
                .find(|p| p.sandbox == sandbox_default && p.approval == approvals.policy())
                .map(|p| p.name.clone())
                .ok_or("permission: no preset matches the composed sandbox and approval defaults; set defaultPreset to choose one")?,
        };
        let service = Arc::new(PermissionPresets {
            presets,
            default,
            sandbox_default,
            approvals,
        });
        ctx.provide(service.clone())?;
        if c.pin_fresh_sessions.unwrap_or(true) {
            let s = service.clone();
            ctx.on_emit::<SessionCreated>(ListenOptions::GLOBAL, move |session| s.pin(session))?;
        }
        if let Some(commands) = ctx.get::<CommandRegistry>() {
            commands.register(ctx, service.command())?;
        }
        Ok(())
    }
}
