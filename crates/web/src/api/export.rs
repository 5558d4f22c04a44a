//! `session.export {sessionId, format}`: the session as a file the page downloads —
//! `markdown` (a readable transcript: messages, tool calls with their results, how each
//! turn ended) or `jsonl` (every event of the log, one JSON object per line, as the SSE
//! stream and `dsh headless --json` write them).

use std::fmt::Write as _;
use std::sync::Arc;

use dsh_session::{Event, RecordFormat, SessionHeader, types, write_event};
use serde_json::{Value, json};

use super::sessions::{require_known, session_id};
use crate::rpc::{ApiError, ApiResult, Args};
use crate::state::WebState;

/// A tool result longer than this is cut in the transcript (the JSONL keeps it whole).
const RESULT_CHARS: usize = 4_000;

pub async fn export(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let format = Args(p).opt_str("format")?.unwrap_or("markdown");
    if !matches!(format, "markdown" | "jsonl") {
        return Err(ApiError::bad_request(
            "format must be \"markdown\" or \"jsonl\"",
        ));
    }
    let (header, events) = events_of(s, id).await?;
    let short: String = id.trim_start_matches("session-").chars().take(8).collect();
    let (filename, mime, text) = if format == "jsonl" {
        let mut text = String::with_capacity(events.len() * 256);
        for e in &events {
            write_event(&mut text, e, RecordFormat::Full);
            text.push('\n');
        }
        (format!("dsh-{short}.jsonl"), "application/x-ndjson", text)
    } else {
        (
            format!("dsh-{short}.md"),
            "text/markdown",
            transcript(&header, &events),
        )
    };
    Ok(json!({"filename": filename, "mime": mime, "text": text}))
}

/// The header and events of a session: from memory when it is live here, else read from
/// its log without taking it over.
pub(crate) async fn events_of(
    s: &WebState,
    id: &str,
) -> Result<(SessionHeader, Vec<Arc<Event>>), ApiError> {
    require_known(s, id).await?;
    if let Some(agent) = s.hosting.get(id).and_then(|h| h.agent()) {
        return Ok((agent.session().header(), agent.session().events()));
    }
    let files = s
        .files
        .clone()
        .ok_or_else(|| ApiError::bad_request("session persistence is disabled"))?;
    let owned = id.to_string();
    let loaded = tokio::task::spawn_blocking(move || files.inspect(&owned))
        .await
        .map_err(ApiError::internal)?
        .map_err(|e| crate::hosting::persistence_error(id, e))?;
    Ok((loaded.header, loaded.events))
}

fn texts(blocks: Option<&Value>) -> String {
    let mut out = Vec::new();
    for b in blocks.and_then(Value::as_array).into_iter().flatten() {
        if b["type"] == "text"
            && let Some(t) = b["text"].as_str()
        {
            out.push(t.to_string());
        }
    }
    out.join("\n")
}

/// A fence that the text cannot close.
fn fenced(text: &str, lang: &str) -> String {
    let mut ticks = 3;
    while text.contains(&"`".repeat(ticks)) {
        ticks += 1;
    }
    let fence = "`".repeat(ticks);
    format!("{fence}{lang}\n{}\n{fence}\n", text.trim_end_matches('\n'))
}

fn transcript(header: &SessionHeader, events: &[Arc<Event>]) -> String {
    let mut md = String::new();
    let title = events
        .iter()
        .rev()
        .find(|e| e.is("session/title"))
        .and_then(|e| {
            e.data
                .get("title")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "dsh session".into());
    let _ = writeln!(md, "# {title}\n");
    let _ = writeln!(md, "- Session: `{}`", header.id);
    if let Some(cwd) = &header.cwd {
        let _ = writeln!(md, "- Directory: `{cwd}`");
    }
    md.push('\n');
    for e in events {
        let d = &e.data;
        if e.is(types::USER_MESSAGE) {
            if d.pointer("/source/kind").and_then(Value::as_str) != Some("user") {
                continue;
            }
            let _ = writeln!(md, "## You\n\n{}\n", texts(d.get("content")));
        } else if e.is(types::ASSISTANT_MESSAGE) {
            let model = d
                .pointer("/message/source/model")
                .and_then(Value::as_str)
                .unwrap_or("the model");
            let mut wrote_head = false;
            for b in d
                .pointer("/message/content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match b["type"].as_str() {
                    Some("text") => {
                        let text = b["text"].as_str().unwrap_or_default();
                        if text.trim().is_empty() {
                            continue;
                        }
                        if !wrote_head {
                            let _ = writeln!(md, "## dsh ({model})\n");
                            wrote_head = true;
                        }
                        let _ = writeln!(md, "{text}\n");
                    }
                    Some("tool-call") => {
                        let name = b["name"].as_str().unwrap_or("tool");
                        let args = match &b["arguments"] {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        };
                        let pretty = serde_json::from_str::<Value>(&args)
                            .ok()
                            .and_then(|v| serde_json::to_string_pretty(&v).ok())
                            .unwrap_or(args);
                        let _ =
                            write!(md, "**Tool call: {name}**\n\n{}\n", fenced(&pretty, "json"));
                    }
                    _ => {}
                }
            }
        } else if e.is(types::TOOL_RESULT) {
            let block = d.pointer("/message/content/0");
            let failed = block.and_then(|b| b.get("isError")) == Some(&Value::Bool(true));
            let mut text = texts(block.and_then(|b| b.get("content")));
            if text.chars().count() > RESULT_CHARS {
                text = text.chars().take(RESULT_CHARS).collect::<String>()
                    + "\n… (cut; the JSONL export has all of it)";
            }
            let label = if failed { "Tool error" } else { "Tool result" };
            let _ = write!(md, "{label}:\n\n{}\n", fenced(&text, ""));
        } else if e.is(types::TURN_END) {
            let kind = d
                .pointer("/reason/kind")
                .and_then(Value::as_str)
                .unwrap_or("ended");
            let why = d
                .pointer("/reason/error/message")
                .and_then(Value::as_str)
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            let _ = writeln!(md, "*Turn {kind}{why}.*\n\n---\n");
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_longer_than_any_run_of_backticks_inside() {
        assert_eq!(fenced("a", ""), "```\na\n```\n");
        assert_eq!(fenced("x ``` y", "md"), "````md\nx ``` y\n````\n");
    }
}
