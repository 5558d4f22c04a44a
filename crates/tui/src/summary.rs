//! One-line descriptions shared by the terminal frontends (the TUI's tool cards and the
//! headless progress lines): what a tool call does, how it ended, durations and token
//! counts.

use std::time::Duration;

use serde_json::Value;

/// One line saying what a tool call does: the command of a shell call, the path of a file
/// tool, the pattern of a search; else the arguments as compact JSON.
pub fn summarize_arguments(name: &str, args: &Value) -> String {
    let args = match args {
        Value::String(s) => serde_json::from_str(s).unwrap_or(Value::String(s.clone())),
        other => other.clone(),
    };
    let pick = |keys: &[&str]| {
        keys.iter()
            .find_map(|k| args.get(*k).and_then(Value::as_str).map(str::to_owned))
    };
    let text = match name {
        "bash" => pick(&["command"]),
        "ask_user_question" => args
            .pointer("/questions/0/question")
            .and_then(Value::as_str)
            .map(str::to_owned),
        "todo_write" => args["todos"].as_array().map(|t| {
            let done = t.iter().filter(|i| i["status"] == "completed").count();
            format!("{} items, {done} done", t.len())
        }),
        "grep" | "glob" => pick(&["pattern"]).map(|p| match pick(&["path"]) {
            Some(path) => format!("{p} in {path}"),
            None => p,
        }),
        _ => pick(&[
            "path",
            "file_path",
            "filePath",
            "command",
            "pattern",
            "url",
            "query",
        ]),
    }
    .unwrap_or_else(|| match &args {
        Value::Object(m) if m.is_empty() => String::new(),
        other => other.to_string(),
    });
    truncate(&one_line(&text), 120)
}

/// Whether a tool result succeeded, and how it ended: the exit code, signal or timeout a
/// shell reports, else "ok" / the error.
pub fn outcome_of(data: &Value) -> (bool, String) {
    let result = data
        .pointer("/message/content/0")
        .cloned()
        .unwrap_or(Value::Null);
    let is_error = result["isError"].as_bool().unwrap_or(false) || data.get("error").is_some();
    let text = result_text(data);
    let marker = text.lines().rev().take(3).find(|l| {
        l.starts_with("[exit code:")
            || l.starts_with("[killed by signal:")
            || l.starts_with("[timed out")
    });
    let outcome = match (marker, is_error) {
        (Some(m), _) => m.trim_matches(['[', ']']).to_string(),
        (None, false) => "ok".into(),
        (None, true) => match data.pointer("/error/code").and_then(Value::as_str) {
            Some(code) => format!("error {code}"),
            None => format!("error: {}", truncate(&one_line(&text), 80)),
        },
    };
    (!is_error && marker.is_none(), outcome)
}

/// The text blocks of a `tool/result` event's result, one per line.
pub fn result_text(data: &Value) -> String {
    data.pointer("/message/content/0/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

pub fn tokens_text(input: u64, output: u64) -> String {
    let k = |n: u64| {
        if n >= 10_000 {
            format!("{}k", n / 1000)
        } else if n >= 1000 {
            format!("{:.1}k", n as f64 / 1000.0)
        } else {
            n.to_string()
        }
    };
    format!("{} in / {} out tokens", k(input), k(output))
}
