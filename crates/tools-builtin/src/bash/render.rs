//! The model-facing text of a finished foreground run.

use super::process::{Collected, RunOutcome};
use crate::errors::js_number;

fn stream_text(output: &Collected) -> String {
    if !output.truncated {
        return output.text.clone();
    }
    let path = output
        .spill_path
        .as_ref()
        .map(|p| p.to_string_lossy().into_owned());
    format!(
        "{}\n[output truncated; full output: {}]",
        output.text,
        path.as_deref().unwrap_or("(unavailable)")
    )
}

/// stdout, then a `[stderr]` section, then the sandbox markers (`sandbox`), then the
/// timeout / signal / exit-code markers, each on its own line; `(no output)` when both
/// streams are empty. A non-zero exit is reported, not raised.
pub(crate) fn render_result(outcome: &RunOutcome, timeout_ms: f64, sandbox: &[String]) -> String {
    let out = stream_text(&outcome.stdout);
    let err = stream_text(&outcome.stderr);
    let mut body = out;
    if !err.is_empty() {
        if !body.is_empty() && !body.ends_with('\n') {
            body.push('\n');
        }
        body.push_str("[stderr]\n");
        body.push_str(&err);
    }
    if body.is_empty() {
        body = "(no output)".into();
    }
    let mut markers: Vec<String> = sandbox.to_vec();
    if outcome.timed_out {
        markers.push(format!("[timed out after {}ms]", js_number(timeout_ms)));
    }
    match (&outcome.signal, outcome.exit_code) {
        (Some(signal), _) => markers.push(format!("[killed by signal: {signal}]")),
        (None, Some(0)) => {}
        (None, Some(code)) => markers.push(format!("[exit code: {code}]")),
        (None, None) => markers.push("[exit code: null]".into()),
    }
    if markers.is_empty() {
        return body;
    }
    if !body.ends_with('\n') {
        body.push('\n');
    }
    body + &markers.join("\n")
}

fn stream_value(output: &Collected) -> serde_json::Value {
    let mut v = serde_json::json!({"text": output.text, "truncated": output.truncated});
    if let (Some(path), Some(map)) = (&output.spill_path, v.as_object_mut()) {
        map.insert(
            "spillPath".into(),
            path.to_string_lossy().into_owned().into(),
        );
    }
    v
}

/// The typed value a Code Mode program receives for a finished foreground run
/// (`{kind: "foreground", exitCode, signal, timedOut, aborted, timeoutMs, stdout, stderr,
/// sandbox?}`); `sandbox` is `(mode, denied, enforcement)` when a file policy applied
/// (`enforcement` only for a confined run).
pub(crate) fn typed_value(
    outcome: &RunOutcome,
    timeout_ms: f64,
    sandbox: Option<(String, bool, Option<&'static str>)>,
) -> serde_json::Value {
    let mut v = serde_json::json!({
        "kind": "foreground",
        "exitCode": outcome.exit_code,
        "signal": outcome.signal,
        "timedOut": outcome.timed_out,
        "aborted": outcome.aborted,
        "timeoutMs": timeout_ms,
        "stdout": stream_value(&outcome.stdout),
        "stderr": stream_value(&outcome.stderr),
    });
    if let (Some((mode, denied, enforcement)), Some(map)) = (sandbox, v.as_object_mut()) {
        let mut facts = serde_json::json!({"mode": mode, "denied": denied});
        if let (Some(e), Some(f)) = (enforcement, facts.as_object_mut()) {
            f.insert("enforcement".into(), e.into());
        }
        map.insert("sandbox".into(), facts);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::path::PathBuf;

    fn outcome(
        stdout: &str,
        stderr: &str,
        exit: Option<i32>,
        signal: Option<&str>,
        timed_out: bool,
    ) -> RunOutcome {
        RunOutcome {
            exit_code: exit,
            signal: signal.map(str::to_owned),
            timed_out,
            aborted: false,
            stdout: Collected {
                text: stdout.into(),
                ..Collected::default()
            },
            stderr: Collected {
                text: stderr.into(),
                ..Collected::default()
            },
        }
    }

    #[test]
    fn renders_like_upstream() {
        assert_eq!(
            render_result(
                &outcome("TERMINAL_OK\n", "", Some(0), None, false),
                1.0,
                &[]
            ),
            "TERMINAL_OK\n"
        );
        assert_eq!(
            render_result(&outcome("", "", Some(0), None, false), 1.0, &[]),
            "(no output)"
        );
        assert_eq!(
            render_result(
                &outcome("", "landlock-run: partial\n", Some(1), None, false),
                1.0,
                &[]
            ),
            "[stderr]\nlandlock-run: partial\n[exit code: 1]"
        );
        assert_eq!(
            render_result(
                &outcome(
                    "",
                    "touch: x: Read-only file system\n",
                    Some(1),
                    None,
                    false
                ),
                1.0,
                &["[sandbox: file access denied under read-only mode]".into()]
            ),
            "[stderr]\ntouch: x: Read-only file system\n[sandbox: file access denied under read-only mode]\n[exit code: 1]"
        );
        assert_eq!(
            render_result(&outcome("a", "b", Some(2), None, false), 1.0, &[]),
            "a\n[stderr]\nb\n[exit code: 2]"
        );
        assert_eq!(
            render_result(&outcome("", "", None, Some("SIGTERM"), true), 60000.0, &[]),
            "(no output)\n[timed out after 60000ms]\n[killed by signal: SIGTERM]"
        );
        assert_eq!(
            render_result(&outcome("", "", Some(0), None, true), 1500.5, &[]),
            "(no output)\n[timed out after 1500.5ms]"
        );
        let mut truncated = outcome("tail", "", Some(0), None, false);
        truncated.stdout.truncated = true;
        assert_eq!(
            render_result(&truncated, 1.0, &[]),
            "tail\n[output truncated; full output: (unavailable)]"
        );
        truncated.stdout.spill_path = Some(PathBuf::from("/tmp/x.log"));
        assert_eq!(
            render_result(&truncated, 1.0, &[]),
            "tail\n[output truncated; full output: /tmp/x.log]"
        );
    }
}
