//! `@deepseek-ai/dsh-repeat-tool-reminder`: nudges a model that keeps making the same tool
//! call with the same arguments. Consecutive identical calls of an agent are counted in
//! `tools/post-execute` (denied calls too); at each threshold (default 3, 5, 8) a notice
//! joins the result's additional contexts, which the loop enters before the next step. A
//! human prompt resets the count. Never blocks a call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh_agent::PreStep;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::SessionDisposed;
use dsh_tools::{PostExecute, PostToolDecision};
use serde_json::{Map, Value};

/// The reminder's settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ReminderConfig {
    /// Ascending, distinct, each ≥ 2.
    pub thresholds: Vec<u32>,
    pub include: Vec<String>,
    pub exclude: Vec<String>,
    pub arguments_preview_chars: usize,
}

impl Default for ReminderConfig {
    fn default() -> Self {
        Self {
            thresholds: vec![3, 5, 8],
            include: Vec::new(),
            exclude: Vec::new(),
            arguments_preview_chars: 500,
        }
    }
}

fn parse_config(value: &Value) -> Result<ReminderConfig, String> {
    let mut c = ReminderConfig::default();
    let empty = Map::new();
    let map = match value {
        Value::Null => &empty,
        Value::Object(m) => m,
        _ => return Err("repeat-tool-reminder: config must be an object".into()),
    };
    let names = |key: &str, v: &Value| -> Result<Vec<String>, String> {
        v.as_array()
            .and_then(|a| a.iter().map(|x| x.as_str().map(str::to_owned)).collect())
            .ok_or_else(|| format!("repeat-tool-reminder: `{key}` must be a list of tool names"))
    };
    for (k, v) in map {
        match k.as_str() {
            "thresholds" => {
                let list = v
                    .as_array()
                    .ok_or("repeat-tool-reminder: `thresholds` must be a list of integers")?;
                if list.is_empty() {
                    return Err("repeat-tool-reminder: `thresholds` must not be empty".into());
                }
                let mut out = Vec::new();
                for t in list {
                    let n = t.as_u64().filter(|n| *n >= 2).ok_or_else(|| {
                        format!("repeat-tool-reminder: invalid threshold {t} — every threshold must be an integer >= 2")
                    })?;
                    out.push(n as u32);
                }
                out.sort_unstable();
                if out.windows(2).any(|w| w[0] == w[1]) {
                    return Err(
                        "repeat-tool-reminder: `thresholds` must not contain duplicates".into(),
                    );
                }
                c.thresholds = out;
            }
            "include" => c.include = names(k, v)?,
            "exclude" => c.exclude = names(k, v)?,
            "argumentsPreviewChars" => {
                c.arguments_preview_chars = v.as_u64().filter(|n| *n >= 1).ok_or_else(|| {
                    format!("repeat-tool-reminder: invalid argumentsPreviewChars {v} — must be an integer >= 1")
                })? as usize;
            }
            other => return Err(format!("repeat-tool-reminder: unknown key \"{other}\"")),
        }
    }
    Ok(c)
}

/// `*` matches any run of characters; everything else is literal; the whole name must match.
fn wildcard(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

impl ReminderConfig {
    fn tracks(&self, tool: &str) -> bool {
        (self.include.is_empty() || self.include.iter().any(|p| wildcard(p, tool)))
            && !self.exclude.iter().any(|p| wildcard(p, tool))
    }
}

/// `JSON.stringify` of `value` with object keys sorted, recursively.
pub fn canonical_json(value: &Value) -> String {
    fn sorted(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort_by(|a, b| a.encode_utf16().cmp(b.encode_utf16()));
                Value::Object(
                    keys.into_iter()
                        .map(|k| (k.clone(), sorted(&m[k])))
                        .collect(),
                )
            }
            Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
            other => other.clone(),
        }
    }
    dsh_kernel::json::to_string(&sorted(value))
}

/// The reminder text: a short nudge at the first threshold, the call spelled out after.
fn reminder_text(tool: &str, count: u32, first: bool, arguments: &str, preview: usize) -> String {
    if first {
        return "You have now made the same tool call with the same arguments several times in a row. Look closely at the result you already have before calling again; if the task is not done, change the approach or the arguments rather than repeating the call.".into();
    }
    let units: Vec<u16> = arguments.encode_utf16().collect();
    let shown = if units.len() > preview {
        format!(
            "{}… (+{} more chars)",
            String::from_utf16_lossy(&units[..preview]),
            units.len() - preview
        )
    } else {
        arguments.to_string()
    };
    format!(
        "Repeated tool call detected:\n- tool: {tool}\n- consecutive_calls: {count}\n- arguments: {shown}\nRepeating this call is not getting anywhere. Do not call this tool with these exact arguments again: read the latest result, then pick a different action or different arguments, or finish the task if the evidence you have is enough."
    )
}

#[derive(Default)]
struct Chains(Mutex<HashMap<String, (String, u32)>>);

impl Chains {
    fn observe(&self, agent: &str, key: String) -> u32 {
        let mut map = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map.entry(agent.to_string()).or_insert((String::new(), 0));
        if entry.0 == key {
            entry.1 += 1;
        } else {
            *entry = (key, 1);
        }
        entry.1
    }

    fn reset(&self, agent: &str) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(agent);
    }
}

/// `@deepseek-ai/dsh-repeat-tool-reminder` (config `{thresholds, include, exclude,
/// argumentsPreviewChars}`).
pub struct RepeatToolReminderPlugin;

impl Plugin for RepeatToolReminderPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-repeat-tool-reminder"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let config = Arc::new(parse_config(config.raw_keys(&[
            "thresholds",
            "include",
            "exclude",
            "argumentsPreviewChars",
        ]))?);
        let chains = Arc::new(Chains::default());
        let (c, ch) = (config.clone(), chains.clone());
        ctx.on_waterfall::<PostExecute>(ListenOptions::default(), move |payload, next| {
            let (c, ch) = (c.clone(), ch.clone());
            Box::pin(async move {
                let exec = &payload.exec;
                let Some(session) = exec.session.as_ref().filter(|_| c.tracks(&exec.name)) else {
                    return next.run().await;
                };
                let arguments = match &exec.arguments {
                    Value::String(raw) => raw.clone(),
                    other => canonical_json(other),
                };
                let key = dsh_kernel::json::to_string(&Value::Array(vec![
                    Value::from(exec.name.as_str()),
                    Value::from(arguments.as_str()),
                ]));
                let count = ch.observe(&session.id(), key);
                let mut decision = next.run().await?;
                if let Some(i) = c.thresholds.iter().position(|t| *t == count) {
                    let text = reminder_text(
                        &exec.name,
                        count,
                        i == 0,
                        &arguments,
                        c.arguments_preview_chars,
                    );
                    let source = MessageSource::plugin(
                        "repeat-tool-reminder",
                        [
                            ("form".to_string(), Value::from("notice")),
                            (
                                "summary".to_string(),
                                Value::from(format!("{} \u{d7} {count}", exec.name)),
                            ),
                        ],
                    );
                    let notice = Message::user(vec![ContentBlock::text(text)], source);
                    match &mut decision {
                        PostToolDecision::Accept {
                            additional_contexts,
                            ..
                        }
                        | PostToolDecision::Block {
                            additional_contexts,
                            ..
                        } => additional_contexts.insert(0, notice),
                    }
                }
                Ok(decision)
            })
        })?;
        let ch = chains.clone();
        ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |payload, next| {
            if payload.messages.iter().any(|m| m.source.kind() == "user") {
                ch.reset(payload.agent.id());
            }
            next.run()
        })?;
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            chains.reset(&session.id());
            Ok(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn config_is_validated_like_upstream() {
        assert_eq!(
            parse_config(&Value::Null).unwrap(),
            ReminderConfig::default()
        );
        assert_eq!(
            parse_config(&json!({"thresholds": [8, 3]}))
                .unwrap()
                .thresholds,
            vec![3, 8]
        );
        for (bad, msg) in [
            (json!({"thresholds": []}), "must not be empty"),
            (json!({"thresholds": [1]}), "invalid threshold 1"),
            (json!({"thresholds": [3, 3]}), "duplicates"),
            (
                json!({"argumentsPreviewChars": 0}),
                "invalid argumentsPreviewChars 0",
            ),
            (json!({"other": 1}), "unknown key \"other\""),
        ] {
            let e = parse_config(&bad).unwrap_err();
            assert!(e.contains(msg), "{e}");
        }
    }

    #[test]
    fn wildcards_are_anchored() {
        assert!(wildcard("session_*", "session_search"));
        assert!(!wildcard("session_*", "my_session_search"));
        assert!(wildcard("*read*", "session_event_read"));
        assert!(wildcard("bash", "bash") && !wildcard("bash", "bash2"));
    }

    #[test]
    fn chains_count_consecutive_identical_calls() {
        let c = Chains::default();
        assert_eq!(c.observe("a", "k".into()), 1);
        assert_eq!(c.observe("a", "k".into()), 2);
        assert_eq!(c.observe("b", "k".into()), 1);
        assert_eq!(c.observe("a", "other".into()), 1);
        c.reset("a");
        assert_eq!(c.observe("a", "other".into()), 1);
        assert_eq!(
            canonical_json(&json!({"b": 1, "a": {"d": [2], "c": null}})),
            r#"{"a":{"c":null,"d":[2]},"b":1}"#
        );
    }

    #[test]
    fn later_reminders_spell_out_the_call_with_a_bounded_preview() {
        let t = reminder_text("bash", 5, false, "{\"command\":\"ls\"}", 10);
        assert!(t.starts_with("Repeated tool call detected:\n- tool: bash\n- consecutive_calls: 5\n- arguments: {\"command\"… (+6 more chars)\n"), "{t}");
    }
}
