//! The durable, log-only `hook/invoked` and `hook/result` events. Each pair is appended
//! inside the open turn around one command run; points without a turn (SessionStart)
//! write no pair.

use std::sync::Arc;

use dsh_session::{AppendError, LiveSession};
use serde_json::{Map, Value, json};

use super::codec::{HookOutput, js_trim};

/// The reference cap of `hook/result.stderrSummary`, in UTF-16 code units.
pub const DEFAULT_STDERR_SUMMARY_MAX_CHARS: usize = 500;

/// The bridge that ran a hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HookDialect {
    ClaudeCode,
    Codex,
}

impl HookDialect {
    /// The durable spelling (`hook/invoked.dialect`, handler-id prefix).
    pub fn as_str(self) -> &'static str {
        match self {
            HookDialect::ClaudeCode => "claude-code",
            HookDialect::Codex => "codex",
        }
    }
}

/// What identifies one invocation across its invoked/result pair.
#[derive(Clone, Debug, PartialEq)]
pub struct HookInvocation {
    pub turn: u64,
    pub point: String,
    pub dialect: HookDialect,
    pub handler_id: String,
    /// The matcher-group pattern that selected the hook (absent for match-all groups).
    pub matcher: Option<String>,
}

/// Trims `stderr` and caps it at `max_chars` UTF-16 code units (JavaScript string length)
/// plus `…`; `None` when blank. A cut never splits a character.
pub fn summarize_stderr(stderr: &str, max_chars: usize) -> Option<String> {
    let t = js_trim(stderr);
    if t.is_empty() {
        return None;
    }
    if dsh_tools::text::utf16_len(t) <= max_chars {
        return Some(t.to_owned());
    }
    Some(format!("{}…", dsh_tools::text::utf16_prefix(t, max_chars)))
}

/// The `hook/invoked` payload: `{turn, point, dialect, handlerId, matcher?}`.
pub fn invoked_data(invocation: &HookInvocation) -> Value {
    let mut data = Map::new();
    data.insert("turn".into(), json!(invocation.turn));
    data.insert("point".into(), json!(invocation.point));
    data.insert("dialect".into(), json!(invocation.dialect.as_str()));
    data.insert("handlerId".into(), json!(invocation.handler_id));
    if let Some(m) = &invocation.matcher {
        data.insert("matcher".into(), json!(m));
    }
    Value::Object(data)
}

/// The `hook/result` payload: `{turn, point, handlerId, decision, exitCode?,
/// stderrSummary?, durationMs}`. `decision` is the parsed decision, else `stop` for
/// `continue:false`, else `pass`.
pub fn result_data(
    invocation: &HookInvocation,
    output: &HookOutput,
    stderr_max_chars: usize,
    duration_ms: f64,
) -> Value {
    let decision = match (output.decision, output.proceed) {
        (Some(d), _) => d.as_str(),
        (None, Some(false)) => "stop",
        (None, Some(true) | None) => "pass",
    };
    let mut data = Map::new();
    data.insert("turn".into(), json!(invocation.turn));
    data.insert("point".into(), json!(invocation.point));
    data.insert("handlerId".into(), json!(invocation.handler_id));
    data.insert("decision".into(), json!(decision));
    if let Some(code) = output.exit_code {
        data.insert("exitCode".into(), json!(code));
    }
    if let Some(summary) = summarize_stderr(&output.stderr, stderr_max_chars) {
        data.insert("stderrSummary".into(), json!(summary));
    }
    data.insert("durationMs".into(), json!(duration_ms));
    Value::Object(data)
}

/// Appends `hook/invoked`.
pub fn append_hook_invoked(
    session: &Arc<LiveSession>,
    invocation: &HookInvocation,
) -> Result<(), AppendError> {
    session
        .append("hook/invoked", invoked_data(invocation), None)
        .map(|_| ())
}

/// Appends the `hook/result` paired with `invocation`.
pub fn append_hook_result(
    session: &Arc<LiveSession>,
    invocation: &HookInvocation,
    output: &HookOutput,
    stderr_max_chars: usize,
    duration_ms: f64,
) -> Result<(), AppendError> {
    session
        .append(
            "hook/result",
            result_data(invocation, output, stderr_max_chars, duration_ms),
            None,
        )
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::codec::HookDecision;
    use pretty_assertions::assert_eq;

    #[test]
    fn stderr_summaries_are_trimmed_and_capped_in_utf16_units() {
        assert_eq!(summarize_stderr("  \n", 5), None);
        assert_eq!(summarize_stderr(" abc ", 3).as_deref(), Some("abc"));
        assert_eq!(summarize_stderr("abcdef", 3).as_deref(), Some("abc…"));
        assert_eq!(
            summarize_stderr("a😀b", 2).as_deref(),
            Some("a…"),
            "a surrogate pair is never split"
        );
        assert_eq!(summarize_stderr("a😀b", 3).as_deref(), Some("a😀…"));
    }

    #[test]
    fn payloads_have_upstreams_key_order_and_optional_fields() {
        let inv = HookInvocation {
            turn: 1,
            point: "PreToolUse".into(),
            dialect: HookDialect::ClaudeCode,
            handler_id: "claude-code:PreToolUse:1".into(),
            matcher: Some("bash".into()),
        };
        assert_eq!(
            dsh_kernel::json::to_string(&invoked_data(&inv)),
            r#"{"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:1","matcher":"bash"}"#
        );
        let blocked = HookOutput {
            exit_code: Some(2),
            stderr: "no".into(),
            decision: Some(HookDecision::Block),
            ..HookOutput::default()
        };
        assert_eq!(
            dsh_kernel::json::to_string(&result_data(&inv, &blocked, 500, 1.5)),
            r#"{"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"block","exitCode":2,"stderrSummary":"no","durationMs":1.5}"#
        );
        let stopped = HookOutput {
            proceed: Some(false),
            ..HookOutput::default()
        };
        assert_eq!(
            dsh_kernel::json::to_string(&result_data(&inv, &stopped, 500, 0.0)),
            r#"{"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"stop","durationMs":0}"#
        );
    }
}
