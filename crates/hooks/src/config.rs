//! Parsing a hook config file into matcher groups, for either dialect. The file holds either
//! a settings object whose `hooks` key has the event map, or that event map alone. Unknown events and
//! malformed entries are ignored; non-command hooks (and Codex `async: true` hooks) are
//! reported as skipped; a runnable group with an invalid regex matcher rejects the whole
//! file. UserPromptSubmit and Stop have no matcher subject, so their matchers are dropped.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::protocol::{CommandHook, HookDialect, InvalidMatcher, Matcher, MatcherMode};

/// A hook point a bridge can fire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookPoint {
    SessionStart,
    UserPromptSubmit,
    PreToolUse,
    PostToolUse,
    Stop,
    SubagentStart,
    SubagentStop,
}

impl HookPoint {
    /// The config key, the payload's `hook_event_name` and the durable `point`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookPoint::SessionStart => "SessionStart",
            HookPoint::UserPromptSubmit => "UserPromptSubmit",
            HookPoint::PreToolUse => "PreToolUse",
            HookPoint::PostToolUse => "PostToolUse",
            HookPoint::Stop => "Stop",
            HookPoint::SubagentStart => "SubagentStart",
            HookPoint::SubagentStop => "SubagentStop",
        }
    }

    fn has_matcher_subject(self) -> bool {
        match self {
            HookPoint::UserPromptSubmit | HookPoint::Stop => false,
            HookPoint::SessionStart
            | HookPoint::PreToolUse
            | HookPoint::PostToolUse
            | HookPoint::SubagentStart
            | HookPoint::SubagentStop => true,
        }
    }
}

/// The points each dialect parses, in upstream's order.
pub fn supported_points(dialect: HookDialect) -> &'static [HookPoint] {
    match dialect {
        HookDialect::ClaudeCode => &[
            HookPoint::SessionStart,
            HookPoint::UserPromptSubmit,
            HookPoint::PreToolUse,
            HookPoint::PostToolUse,
            HookPoint::Stop,
            HookPoint::SubagentStart,
            HookPoint::SubagentStop,
        ],
        HookDialect::Codex => &[
            HookPoint::PreToolUse,
            HookPoint::PostToolUse,
            HookPoint::SessionStart,
            HookPoint::UserPromptSubmit,
            HookPoint::Stop,
        ],
    }
}

fn matcher_mode(dialect: HookDialect) -> MatcherMode {
    match dialect {
        HookDialect::ClaudeCode => MatcherMode::ClaudeCode,
        HookDialect::Codex => MatcherMode::Codex,
    }
}

/// One matcher group: the pattern that selects it and its command hooks, run in order.
#[derive(Clone, Debug)]
pub struct MatcherGroup {
    /// The configured pattern (absent for groups without one); durable as `matcher`.
    pub pattern: Option<String>,
    pub matcher: Matcher,
    pub hooks: Vec<CommandHook>,
}

/// The runnable groups of one config file, per point.
#[derive(Clone, Debug, Default)]
pub struct HookConfig {
    groups: HashMap<HookPoint, Vec<MatcherGroup>>,
}

impl HookConfig {
    /// The groups of `point`, in config order.
    pub fn groups(&self, point: HookPoint) -> &[MatcherGroup] {
        self.groups.get(&point).map_or(&[], Vec::as_slice)
    }

    pub fn has(&self, point: HookPoint) -> bool {
        !self.groups(point).is_empty()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// Why a configured hook does not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SkipReason {
    /// A `type` other than `command` (`prompt`, `agent`, `http`, …).
    UnsupportedType(String),
    /// A Codex `async: true` command.
    Async,
}

/// A configured hook that will not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub point: HookPoint,
    pub reason: SkipReason,
}

/// A parsed file: what runs, and what was skipped (for warnings).
#[derive(Clone, Debug, Default)]
pub struct ParsedConfig {
    pub config: HookConfig,
    pub skipped: Vec<Skipped>,
}

/// Values substituted into Claude Code commands at parse time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Substitutions {
    /// Replaces `${CLAUDE_PLUGIN_ROOT}`.
    pub plugin_root: Option<String>,
    /// Replaces `${CLAUDE_PROJECT_DIR}`.
    pub project_dir: Option<String>,
}

impl Substitutions {
    /// Replaces every occurrence of each token whose value is set.
    pub fn apply(&self, command: &str) -> String {
        let mut out = command.to_owned();
        if let Some(root) = &self.plugin_root {
            out = out.replace("${CLAUDE_PLUGIN_ROOT}", root);
        }
        if let Some(dir) = &self.project_dir {
            out = out.replace("${CLAUDE_PROJECT_DIR}", dir);
        }
        out
    }
}

/// The config file could not be used; nothing is registered.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is missing or unreadable.
    #[error("{0}")]
    Read(#[from] std::io::Error),
    /// The file is not JSON.
    #[error("SyntaxError: {0}")]
    Json(#[from] serde_json::Error),
    /// A runnable group's matcher is not a valid regex.
    #[error("SyntaxError: {source} on event \"{}\"", .point.as_str())]
    InvalidMatcher {
        source: InvalidMatcher,
        point: HookPoint,
    },
}

/// Reads and parses the config file at `path` (relative paths resolve against the
/// process cwd).
pub fn load_config(
    path: &Path,
    dialect: HookDialect,
    substitutions: &Substitutions,
) -> Result<ParsedConfig, ConfigError> {
    let text = std::fs::read_to_string(path)?;
    let raw: Value = serde_json::from_str(&text)?;
    parse_config(&raw, dialect, substitutions)
}

/// Parses an already decoded config. Substitutions apply to Claude Code only.
pub fn parse_config(
    raw: &Value,
    dialect: HookDialect,
    substitutions: &Substitutions,
) -> Result<ParsedConfig, ConfigError> {
    let mut parsed = ParsedConfig::default();
    let Some(root) = raw.as_object() else {
        return Ok(parsed);
    };
    let hooks_map = root.get("hooks").and_then(Value::as_object).unwrap_or(root);
    for &point in supported_points(dialect) {
        let Some(raw_groups) = hooks_map.get(point.as_str()).and_then(Value::as_array) else {
            continue;
        };
        let mut groups = Vec::new();
        for group in raw_groups.iter().filter_map(Value::as_object) {
            let Some(raw_hooks) = group.get("hooks").and_then(Value::as_array) else {
                continue;
            };
            let commands = parse_commands(
                raw_hooks,
                point,
                dialect,
                substitutions,
                &mut parsed.skipped,
            );
            if commands.is_empty() {
                continue;
            }
            let pattern = if point.has_matcher_subject() {
                group
                    .get("matcher")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            } else {
                None
            };
            let matcher = Matcher::compile(pattern.as_deref(), matcher_mode(dialect))
                .map_err(|source| ConfigError::InvalidMatcher { source, point })?;
            groups.push(MatcherGroup {
                pattern,
                matcher,
                hooks: commands,
            });
        }
        if !groups.is_empty() {
            parsed.config.groups.insert(point, groups);
        }
    }
    Ok(parsed)
}

fn parse_commands(
    raw_hooks: &[Value],
    point: HookPoint,
    dialect: HookDialect,
    substitutions: &Substitutions,
    skipped: &mut Vec<Skipped>,
) -> Vec<CommandHook> {
    let mut commands = Vec::new();
    for hook in raw_hooks.iter().filter_map(Value::as_object) {
        let kind = hook
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("command");
        if kind != "command" {
            skipped.push(Skipped {
                point,
                reason: SkipReason::UnsupportedType(kind.to_owned()),
            });
            continue;
        }
        if dialect == HookDialect::Codex && hook.get("async") == Some(&Value::Bool(true)) {
            skipped.push(Skipped {
                point,
                reason: SkipReason::Async,
            });
            continue;
        }
        let Some(command) = hook.get("command").and_then(Value::as_str) else {
            continue;
        };
        let (command, timeout_sec) = match dialect {
            HookDialect::ClaudeCode => (substitutions.apply(command), number(hook, "timeout")),
            // Codex performs no substitution and accepts `timeoutSec` as an alias.
            HookDialect::Codex => (
                command.to_owned(),
                number(hook, "timeout").or_else(|| number(hook, "timeoutSec")),
            ),
        };
        commands.push(CommandHook {
            command,
            timeout_sec,
        });
    }
    commands
}

fn number(hook: &Map<String, Value>, key: &str) -> Option<f64> {
    hook.get(key).and_then(Value::as_f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    type Group = (Option<String>, Vec<(String, Option<f64>)>);

    fn summary(parsed: &ParsedConfig, point: HookPoint) -> Vec<Group> {
        parsed
            .config
            .groups(point)
            .iter()
            .map(|g| {
                (
                    g.pattern.clone(),
                    g.hooks
                        .iter()
                        .map(|h| (h.command.clone(), h.timeout_sec))
                        .collect(),
                )
            })
            .collect()
    }

    #[test]
    fn claude_settings_files_substitute_and_skip_non_commands() {
        let raw = json!({"hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [
                    {"type": "command", "command": "${CLAUDE_PLUGIN_ROOT}/check.sh ${CLAUDE_PROJECT_DIR}", "timeout": 5},
                    {"type": "prompt", "prompt": "judge"},
                    {"command": "no-type-means-command"},
                    {"type": "command"}
                ]},
                {"matcher": "[", "hooks": [{"type": "prompt"}]},
                "not a group"
            ],
            "UserPromptSubmit": [{"matcher": "[", "hooks": [{"type": "command", "command": "p"}]}],
            "Notification": [{"hooks": [{"type": "command", "command": "n"}]}]
        }});
        let subs = Substitutions {
            plugin_root: Some("/plug".into()),
            project_dir: None,
        };
        let parsed = parse_config(&raw, HookDialect::ClaudeCode, &subs).unwrap();
        assert_eq!(
            summary(&parsed, HookPoint::PreToolUse),
            [(
                Some("Bash".to_string()),
                vec![
                    (
                        "/plug/check.sh ${CLAUDE_PROJECT_DIR}".to_string(),
                        Some(5.0)
                    ),
                    ("no-type-means-command".to_string(), None)
                ]
            )]
        );
        assert_eq!(
            summary(&parsed, HookPoint::UserPromptSubmit),
            [(None, vec![("p".to_string(), None)])]
        );
        assert_eq!(
            parsed.skipped,
            [
                Skipped {
                    point: HookPoint::PreToolUse,
                    reason: SkipReason::UnsupportedType("prompt".into())
                },
                Skipped {
                    point: HookPoint::PreToolUse,
                    reason: SkipReason::UnsupportedType("prompt".into())
                },
            ]
        );
    }

    #[test]
    fn an_invalid_runnable_matcher_rejects_the_file() {
        let raw = json!({"PostToolUse": [{"matcher": "(", "hooks": [{"type": "command", "command": "x"}]}]});
        let err = parse_config(&raw, HookDialect::ClaudeCode, &Substitutions::default())
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("SyntaxError: invalid claude-code regex matcher \"(\" on event \"PostToolUse\"")
        );
        let err = parse_config(&raw, HookDialect::Codex, &Substitutions::default())
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("SyntaxError: invalid codex regex matcher \"(\" on event \"PostToolUse\"")
        );
    }

    #[test]
    fn codex_skips_async_accepts_the_timeout_alias_and_ignores_claude_only_events() {
        let raw = json!({"hooks": {
            "Stop": [{"hooks": [
                {"type": "command", "command": "a", "async": true},
                {"type": "command", "command": "b ${CLAUDE_PROJECT_DIR}", "timeoutSec": 2},
                {"type": "command", "command": "c", "timeout": 1, "timeoutSec": 2}
            ]}],
            "SubagentStart": [{"hooks": [{"type": "command", "command": "s"}]}]
        }});
        let subs = Substitutions {
            plugin_root: None,
            project_dir: Some("/p".into()),
        };
        let parsed = parse_config(&raw, HookDialect::Codex, &subs).unwrap();
        assert_eq!(
            summary(&parsed, HookPoint::Stop),
            [(
                None,
                vec![
                    ("b ${CLAUDE_PROJECT_DIR}".to_string(), Some(2.0)),
                    ("c".to_string(), Some(1.0))
                ]
            )]
        );
        assert!(!parsed.config.has(HookPoint::SubagentStart));
        assert_eq!(
            parsed.skipped,
            [Skipped {
                point: HookPoint::Stop,
                reason: SkipReason::Async
            }]
        );
    }

    #[test]
    fn non_objects_parse_to_nothing() {
        for raw in [json!([]), json!("x"), json!(null)] {
            assert!(
                parse_config(&raw, HookDialect::ClaudeCode, &Substitutions::default())
                    .unwrap()
                    .config
                    .is_empty()
            );
        }
    }
}
