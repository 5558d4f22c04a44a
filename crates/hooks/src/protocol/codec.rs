//! Decoding a hook process's outcome (both dialects). Exit 2 blocks with stderr as the
//! reason; exit 0 may carry a structured JSON object on stdout (or plain text the bridge
//! may use); every other exit — and a hook that could not run — is a non-blocking error.

use serde_json::{Map, Value};

/// The exit code a hook uses to block (stderr becomes the reason).
pub const BLOCKING_EXIT_CODE: i32 = 2;

/// The blocking decision one hook expressed. The legacy top-level `decision` only knows
/// `approve`/`block`; `allow`/`deny`/`ask` come only from
/// `hookSpecificOutput.permissionDecision`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookDecision {
    Approve,
    Allow,
    Block,
    Deny,
    Ask,
}

impl HookDecision {
    /// The durable spelling (`hook/result.decision`).
    pub fn as_str(self) -> &'static str {
        match self {
            HookDecision::Approve => "approve",
            HookDecision::Allow => "allow",
            HookDecision::Block => "block",
            HookDecision::Deny => "deny",
            HookDecision::Ask => "ask",
        }
    }

    fn top_level(value: &str) -> Option<Self> {
        match value {
            "approve" => Some(HookDecision::Approve),
            "block" => Some(HookDecision::Block),
            _ => None,
        }
    }

    fn permission(value: &str) -> Option<Self> {
        match value {
            "allow" => Some(HookDecision::Allow),
            "deny" => Some(HookDecision::Deny),
            "ask" => Some(HookDecision::Ask),
            _ => None,
        }
    }
}

/// The dialect-neutral outcome of one hook run. Every structured field is optional: a
/// bridge decides which ones its hook point honours.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HookOutput {
    /// The process exit code; `None` when the hook could not run or died by a signal.
    pub exit_code: Option<i32>,
    /// Trimmed stderr (the block reason on exit 2).
    pub stderr: String,
    /// Trimmed stdout, verbatim (plain text is context for some Codex points).
    pub stdout: String,
    /// `continue` (`false` asks to halt).
    pub proceed: Option<bool>,
    pub stop_reason: Option<String>,
    pub decision: Option<HookDecision>,
    pub reason: Option<String>,
    /// `hookSpecificOutput.hookEventName`, recorded even when it names another event.
    pub hook_event_name: Option<String>,
    pub additional_context: Option<String>,
    pub system_message: Option<String>,
    /// A requested tool-input rewrite: parsed, never honoured.
    pub updated_input: Option<Map<String, Value>>,
}

/// JavaScript's `String.prototype.trim` (Unicode white space, line terminators, BOM).
pub fn js_trim(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_whitespace() || c == '\u{feff}')
}

fn string_field<'a>(object: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    object.get(key).and_then(Value::as_str)
}

/// Decodes a hook run. Total: malformed JSON stays plain stdout. With `expected_event`,
/// a `hookSpecificOutput` block whose `hookEventName` is missing or names another event
/// contributes only its claimed name.
pub fn parse_hook_output(
    exit_code: Option<i32>,
    stdout: &str,
    stderr: &str,
    expected_event: Option<&str>,
) -> HookOutput {
    let mut output = HookOutput {
        exit_code,
        stderr: js_trim(stderr).to_owned(),
        stdout: js_trim(stdout).to_owned(),
        ..HookOutput::default()
    };
    if exit_code == Some(BLOCKING_EXIT_CODE) {
        output.decision = Some(HookDecision::Block);
        if !output.stderr.is_empty() {
            output.reason = Some(output.stderr.clone());
        }
    }
    if exit_code == Some(0)
        && output.stdout.starts_with('{')
        && let Ok(Value::Object(parsed)) = serde_json::from_str::<Value>(&output.stdout)
    {
        apply_structured(&mut output, &parsed, expected_event);
    }
    output
}

fn apply_structured(
    output: &mut HookOutput,
    parsed: &Map<String, Value>,
    expected_event: Option<&str>,
) {
    if let Some(proceed) = parsed.get("continue").and_then(Value::as_bool) {
        output.proceed = Some(proceed);
    }
    if let Some(s) = string_field(parsed, "stopReason") {
        output.stop_reason = Some(s.to_owned());
    }
    if let Some(s) = string_field(parsed, "systemMessage") {
        output.system_message = Some(s.to_owned());
    }
    if let Some(d) = string_field(parsed, "decision").and_then(HookDecision::top_level) {
        output.decision = Some(d);
    }
    if let Some(s) = string_field(parsed, "reason") {
        output.reason = Some(s.to_owned());
    }
    let Some(Value::Object(specific)) = parsed.get("hookSpecificOutput") else {
        return;
    };
    let event_name = string_field(specific, "hookEventName");
    if let Some(name) = event_name {
        output.hook_event_name = Some(name.to_owned());
    }
    if let Some(expected) = expected_event
        && event_name != Some(expected)
    {
        return;
    }
    if let Some(d) = string_field(specific, "permissionDecision").and_then(HookDecision::permission)
    {
        output.decision = Some(d);
    }
    if let Some(s) = string_field(specific, "permissionDecisionReason") {
        output.reason = Some(s.to_owned());
    }
    if let Some(s) = string_field(specific, "additionalContext") {
        output.additional_context = Some(s.to_owned());
    }
    if let Some(Value::Object(updated)) = specific.get("updatedInput") {
        output.updated_input = Some(updated.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn exit_two_blocks_with_trimmed_stderr() {
        assert_eq!(
            parse_hook_output(
                Some(2),
                "ignored {\"decision\":\"approve\"}",
                "  nope \n",
                None
            ),
            HookOutput {
                exit_code: Some(2),
                stderr: "nope".into(),
                stdout: "ignored {\"decision\":\"approve\"}".into(),
                decision: Some(HookDecision::Block),
                reason: Some("nope".into()),
                ..HookOutput::default()
            }
        );
        let silent = parse_hook_output(Some(2), "", "", None);
        assert_eq!(
            (silent.decision, silent.reason),
            (Some(HookDecision::Block), None)
        );
    }

    #[test]
    fn other_failures_do_not_block_and_never_read_json() {
        let out = parse_hook_output(Some(1), "{\"decision\":\"block\"}", "boom", None);
        assert_eq!(out.decision, None);
        let out = parse_hook_output(None, "", "spawn failed", None);
        assert_eq!(
            (out.exit_code, out.decision, out.stderr.as_str()),
            (None, None, "spawn failed")
        );
    }

    #[test]
    fn structured_stdout_on_exit_zero() {
        let stdout = r#"{"continue":false,"stopReason":"halt","systemMessage":"hi","decision":"block","reason":"r",
            "hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"why",
            "additionalContext":"ctx","updatedInput":{"command":"ls"}}}"#;
        assert_eq!(
            parse_hook_output(Some(0), stdout, "", Some("PreToolUse")),
            HookOutput {
                exit_code: Some(0),
                stdout: stdout.into(),
                proceed: Some(false),
                stop_reason: Some("halt".into()),
                decision: Some(HookDecision::Ask),
                reason: Some("why".into()),
                hook_event_name: Some("PreToolUse".into()),
                additional_context: Some("ctx".into()),
                system_message: Some("hi".into()),
                updated_input: serde_json::json!({"command": "ls"}).as_object().cloned(),
                ..HookOutput::default()
            }
        );
    }

    #[test]
    fn a_mismatched_event_block_only_records_its_claim() {
        let stdout = r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","permissionDecision":"deny","additionalContext":"x"}}"#;
        let out = parse_hook_output(Some(0), stdout, "", Some("PreToolUse"));
        assert_eq!(
            (
                out.decision,
                out.additional_context,
                out.hook_event_name.as_deref()
            ),
            (None, None, Some("PostToolUse"))
        );
        let missing = r#"{"hookSpecificOutput":{"permissionDecision":"deny"}}"#;
        assert_eq!(
            parse_hook_output(Some(0), missing, "", Some("PreToolUse")).decision,
            None
        );
        assert_eq!(
            parse_hook_output(Some(0), missing, "", None).decision,
            Some(HookDecision::Deny)
        );
    }

    #[test]
    fn out_of_band_top_level_decisions_and_bad_json_are_ignored() {
        assert_eq!(
            parse_hook_output(Some(0), r#"{"decision":"deny"}"#, "", None).decision,
            None
        );
        let out = parse_hook_output(Some(0), "{not json", "", None);
        assert_eq!((out.decision, out.stdout.as_str()), (None, "{not json"));
        let out = parse_hook_output(Some(0), "plain text\n", "", None);
        assert_eq!(out.stdout, "plain text");
    }
}
