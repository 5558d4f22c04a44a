//! Message shapes that differ between the in-memory (v0) vocabulary and v4: source kinds
//! (v4 names the producer instead of `{kind:"plugin", plugin}`), content tags outside the
//! core set (namespaced `plugin:<type>`), and tool results (`role:"tool"` messages instead
//! of a user message wrapping one `tool-result` block).

use serde_json::{Map, Value};

/// Plugins whose v4 source kind is their own name (v0: `{kind:"plugin", plugin: <name>}`).
const SAME_NAME: [&str; 14] = [
    "model-selection",
    "plan-mode",
    "time-context",
    "tmux-context",
    "user-approval",
    "repeat-tool-reminder",
    "tool-cordis",
    "cordis-host-runner",
    "tool-goal",
    "tool-jobs",
    "hooks-codex",
    "hooks-claude-code",
    "schedule",
    "dsh-session-title-llm",
];

/// Plugin names with a renamed v4 kind.
/// (The in-memory vocabulary is 0.1's, so `ptc-mode` reads back as `tools-code-mode`.)
const RENAMED: [(&str, &str); 5] = [
    ("@deepseek-ai/dsh-system-prompt", "runtime-context"),
    ("compact", "compact-checkpoint"),
    ("tools-code-mode", "ptc-mode"),
    ("tools-ptc", "ptc-mode"),
    ("dsh-compaction-basic", "compact-basic"),
];

/// Content block types v4 keeps as they are.
const CORE_BLOCKS: [&str; 6] = [
    "text",
    "reasoning",
    "image",
    "file",
    "tool-call",
    "tool-result",
];

/// v0 source → v4 source (in place).
pub(crate) fn source_to_v4(source: &mut Value) {
    let Value::Object(m) = source else { return };
    if m.get("kind").and_then(Value::as_str) != Some("plugin") {
        return;
    }
    let plugin = m
        .get("plugin")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let kind = RENAMED
        .iter()
        .find(|(p, _)| *p == plugin)
        .map(|(_, k)| (*k).to_string())
        .or_else(|| SAME_NAME.contains(&plugin.as_str()).then(|| plugin.clone()))
        .unwrap_or_else(|| format!("plugin:{plugin}"));
    let mut out = Map::new();
    out.insert("kind".into(), Value::from(kind));
    for (k, v) in std::mem::take(m) {
        if k != "kind" && k != "plugin" {
            out.insert(k, v);
        }
    }
    *m = out;
}

/// v4 source → v0 source (in place); kinds v0 names directly stay.
pub(crate) fn source_from_v4(source: &mut Value) {
    let Value::Object(m) = source else { return };
    let Some(kind) = m.get("kind").and_then(Value::as_str).map(str::to_owned) else {
        return;
    };
    let plugin = if let Some(p) = kind.strip_prefix("plugin:") {
        p.to_string()
    } else if let Some((p, _)) = RENAMED.iter().find(|(_, k)| *k == kind) {
        (*p).to_string()
    } else if SAME_NAME.contains(&kind.as_str()) {
        kind.clone()
    } else {
        return;
    };
    let mut out = Map::new();
    out.insert("kind".into(), Value::from("plugin"));
    out.insert("plugin".into(), Value::from(plugin));
    for (k, v) in std::mem::take(m) {
        if k != "kind" {
            out.insert(k, v);
        }
    }
    *m = out;
}

fn tags(content: &mut Value, to_v4: bool) {
    let Value::Array(blocks) = content else {
        return;
    };
    for block in blocks {
        let Some(Value::String(t)) = block.get_mut("type") else {
            continue;
        };
        if to_v4 {
            if !CORE_BLOCKS.contains(&t.as_str()) && !t.starts_with("plugin:") {
                *t = format!("plugin:{t}");
            }
        } else if let Some(rest) = t.strip_prefix("plugin:") {
            *t = rest.to_string();
        }
    }
}

/// A v0 message → its v4 form (sources, content tags; tool results lifted to
/// `role:"tool"`).
pub(crate) fn message_to_v4(message: &mut Value) {
    if let Some(source) = message.get_mut("source") {
        source_to_v4(source);
    }
    if let Some(content) = message.get_mut("content") {
        tags(content, true);
    }
    lift_tool_result(message);
}

/// A v4 message → its in-memory (v0) form.
pub(crate) fn message_from_v4(message: &mut Value) {
    unlift_tool_result(message);
    if let Some(source) = message.get_mut("source") {
        source_from_v4(source);
    }
    if let Some(content) = message.get_mut("content") {
        tags(content, false);
    }
}

/// `{source, content:[{type:"tool-result", toolCallId, content, isError?}], role:"user", id}`
/// → `{role:"tool", source, toolCallId, content, isError?, id}`; other keys are kept as
/// `plugin:message:<k>` / `plugin:result:<k>`.
fn lift_tool_result(message: &mut Value) {
    let Value::Object(m) = message else { return };
    let wrapped = m.get("role").and_then(Value::as_str) == Some("user")
        && matches!(m.get("content"), Some(Value::Array(c)) if c.len() == 1
            && c[0].get("type").and_then(Value::as_str) == Some("tool-result"));
    if !wrapped {
        return;
    }
    let mut old = std::mem::take(m);
    let Some(Value::Array(mut content)) = old.remove("content") else {
        return;
    };
    let Some(Value::Object(mut result)) = content.pop() else {
        return;
    };
    let mut out = Map::new();
    out.insert("role".into(), Value::from("tool"));
    if let Some(s) = old.remove("source") {
        out.insert("source".into(), s);
    }
    out.insert(
        "toolCallId".into(),
        result.remove("toolCallId").unwrap_or(Value::Null),
    );
    let mut inner = result.remove("content").unwrap_or(Value::Array(Vec::new()));
    tags(&mut inner, true);
    out.insert("content".into(), inner);
    if let Some(e) = result.remove("isError") {
        out.insert("isError".into(), e);
    }
    if let Some(id) = old.remove("id") {
        out.insert("id".into(), id);
    }
    old.remove("role");
    for (k, v) in old {
        out.insert(format!("plugin:message:{k}"), v);
    }
    result.remove("type");
    for (k, v) in result {
        out.insert(format!("plugin:result:{k}"), v);
    }
    *m = out;
}

fn unlift_tool_result(message: &mut Value) {
    let Value::Object(m) = message else { return };
    if m.get("role").and_then(Value::as_str) != Some("tool") {
        return;
    }
    let mut old = std::mem::take(m);
    let mut result = Map::new();
    result.insert("type".into(), Value::from("tool-result"));
    result.insert(
        "toolCallId".into(),
        old.remove("toolCallId").unwrap_or(Value::Null),
    );
    let mut inner = old.remove("content").unwrap_or(Value::Array(Vec::new()));
    tags(&mut inner, false);
    result.insert("content".into(), inner);
    if let Some(e) = old.remove("isError") {
        result.insert("isError".into(), e);
    }
    let mut extra_message = Map::new();
    for (k, v) in std::mem::take(&mut old) {
        if let Some(rk) = k.strip_prefix("plugin:result:") {
            result.insert(rk.to_string(), v);
        } else if let Some(mk) = k.strip_prefix("plugin:message:") {
            extra_message.insert(mk.to_string(), v);
        } else {
            old.insert(k, v);
        }
    }
    let mut out = Map::new();
    if let Some(s) = old.remove("source") {
        out.insert("source".into(), s);
    }
    out.insert("content".into(), Value::Array(vec![Value::Object(result)]));
    out.insert("role".into(), Value::from("user"));
    if let Some(id) = old.remove("id") {
        out.insert("id".into(), id);
    }
    for (k, v) in extra_message {
        out.insert(k, v);
    }
    *m = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn tool_results_and_sources_round_trip() {
        let v0 = json!({"source": {"kind": "tool", "callId": "c1"}, "content": [{"type": "tool-result",
            "toolCallId": "c1", "content": [{"type": "text", "text": "hi"}], "isError": false}],
            "role": "user", "id": "r1"});
        let mut m = v0.clone();
        message_to_v4(&mut m);
        assert_eq!(
            m,
            json!({"role": "tool", "source": {"kind": "tool", "callId": "c1"}, "toolCallId": "c1",
                "content": [{"type": "text", "text": "hi"}], "isError": false, "id": "r1"})
        );
        message_from_v4(&mut m);
        assert_eq!(m, v0);

        let v0 = json!({"content": [{"type": "text", "text": "ctx"}], "source": {"kind": "plugin",
            "plugin": "@deepseek-ai/dsh-system-prompt", "form": "snapshot"}, "role": "user", "id": "u"});
        let mut m = v0.clone();
        message_to_v4(&mut m);
        assert_eq!(
            m["source"],
            json!({"kind": "runtime-context", "form": "snapshot"})
        );
        message_from_v4(&mut m);
        assert_eq!(m, v0);
        let mut other = json!({"kind": "plugin", "plugin": "my-plugin"});
        source_to_v4(&mut other);
        assert_eq!(other, json!({"kind": "plugin:my-plugin"}));
        source_from_v4(&mut other);
        assert_eq!(other, json!({"kind": "plugin", "plugin": "my-plugin"}));
    }
}
