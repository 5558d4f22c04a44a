//! Proposals (`suggest: true` on the `memory` row, off by default): after a compaction
//! summary and when a top-level session ends, one model call reads the summary (or the
//! conversation's last part) and lists facts worth keeping. Each candidate is scrubbed of
//! secrets, compared with what memory already holds, and stored as a *proposal*: it reaches
//! no prompt until the person accepts it (`dsh memory accept`, `/memory accept`, the web page).

use std::sync::Arc;
use std::time::Duration;

use dsh_agent::AgentDisposing;
use dsh_kernel::{BoxError, Context, ListenOptions};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::{LiveSession, SessionAppended, types};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use crate::plugin::{MemoryService, record_change, turn_number};
use crate::service::Found;
use crate::store::{Origin, Scope, normalized};

/// The instruction of a proposal call (our wording).
pub const SUGGEST_INSTRUCTION: &str = "Below is material from a coding session. List the facts from it that a later session in the same project would be glad to know from the start: how to build, run or test, project conventions, decisions with their reasons, the person's stated preferences. Leave out anything about the current task's progress, anything that will soon be stale, and any secret (keys, tokens, passwords).

Reply with one fact per line, each line starting with \"- \", at most 5 lines, nothing else. Reply with \"- (none)\" when nothing qualifies.";

/// The most conversation text a session-end call reads.
const TAIL_BYTES: usize = 16 * 1024;
const MAX_PROPOSALS: usize = 5;
const CALL_TIMEOUT: Duration = Duration::from_secs(90);

/// The candidate facts of a proposal reply: its `- ` lines, `(none)` and blanks dropped.
pub fn parse_suggestions(reply: &str) -> Vec<String> {
    reply
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            l.strip_prefix("- ")
                .or_else(|| l.strip_prefix("* "))
                .map(str::trim)
        })
        .filter(|l| !l.is_empty() && !l.eq_ignore_ascii_case("(none)"))
        .take(MAX_PROPOSALS)
        .map(str::to_string)
        .collect()
}

fn blocks_text(value: &Value) -> String {
    value
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

/// The conversation's person and assistant text, last [`TAIL_BYTES`] of it.
fn conversation_tail(session: &LiveSession) -> String {
    let parts: Vec<String> = session.read(|s| {
        s.events()
            .iter()
            .filter_map(|e| {
                if e.is(types::USER_MESSAGE)
                    && e.data.pointer("/source/kind").and_then(Value::as_str) == Some("user")
                {
                    Some(format!("Person: {}", blocks_text(&e.data["content"])))
                } else if e.event_type == "assistant/message" {
                    let t = blocks_text(&e.data["content"]);
                    (!t.trim().is_empty()).then(|| format!("Assistant: {t}"))
                } else {
                    None
                }
            })
            .collect()
    });
    let all = parts.join("\n\n");
    if all.len() <= TAIL_BYTES {
        return all;
    }
    let mut start = all.len() - TAIL_BYTES;
    while !all.is_char_boundary(start) {
        start += 1;
    }
    all[start..].to_string()
}

/// One proposal call over `material`; returns the candidate facts.
async fn ask(
    llm: &dsh_llm::LlmRuntime,
    session: &LiveSession,
    material: &str,
) -> Result<(Vec<String>, String, String), BoxError> {
    let route = session
        .read(|s| {
            s.request_header()
                .map(|h| (h.config.provider.clone(), h.config.model.clone()))
        })
        .ok_or("no model route recorded in this session")?;
    let mut config = dsh_llm::LlmCallConfig::route(route.0.clone(), route.1.clone());
    config.max_tokens = Some(1024);
    let message = Message::user(
        vec![ContentBlock::text(format!(
            "{SUGGEST_INSTRUCTION}\n\n<material>\n{material}\n</material>"
        ))],
        MessageSource::plugin("dsh-memory", []),
    );
    let mut options = dsh_llm::GenerateOptions::new(config, vec![Arc::new(message)]);
    options.session_id = Some(session.id());
    options.purpose = dsh_llm::CallPurpose::Auxiliary;
    let cancel = options.cancel.clone();
    let run = async {
        let mut stream = llm.stream(Arc::new(options), None).await?;
        let mut asm = dsh_llm::BlockAssembler::new();
        while let Some(chunk) = stream.next().await {
            asm.push(&chunk?);
        }
        Ok::<_, BoxError>(asm)
    };
    let asm = match tokio::time::timeout(CALL_TIMEOUT, run).await {
        Ok(r) => r?,
        Err(_) => {
            cancel.cancel();
            return Err("the proposal call timed out".into());
        }
    };
    if let dsh_llm::FinishReason::Error(f) | dsh_llm::FinishReason::Aborted(f) = asm.finish() {
        return Err(f.message.into());
    }
    let text: Vec<String> = asm
        .blocks()?
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(str::to_string)
        .collect();
    Ok((parse_suggestions(&text.join("\n")), route.0, route.1))
}

/// Runs one proposal round for `session` and records what it stored.
async fn propose(
    service: Arc<MemoryService>,
    llm: Arc<dsh_llm::LlmRuntime>,
    session: Arc<LiveSession>,
    trigger: &'static str,
    source_seq: Option<u64>,
    material: String,
) -> Result<(), BoxError> {
    if material.trim().is_empty() {
        return Ok(());
    }
    let Some(cwd) = session.header().cwd.map(std::path::PathBuf::from) else {
        return Ok(());
    };
    let (candidates, provider, model) = ask(&llm, &session, &material).await?;
    let memory = service.at(&cwd);
    let scope = Scope::parse(&service.config.suggest_scope).unwrap_or(Scope::Workspace);
    let turn = turn_number(&session);
    let mut stored = Vec::new();
    let mut duplicates = 0usize;
    let mut redacted_total = 0usize;
    for text in candidates {
        // Known in either scope, proposals included: not proposed again.
        let key = normalized(&dsh_host::redact::redact(&text).0);
        let (all, _) = memory.all();
        if all.iter().any(|f| normalized(&f.entry.text) == key) {
            duplicates += 1;
            continue;
        }
        let origin = Origin {
            by: "harness".into(),
            session: Some(session.id()),
            turn: Some(turn),
        };
        let m = memory.clone();
        let result =
            tokio::task::spawn_blocking(move || m.remember(scope, &text, &[], origin, true))
                .await?;
        match result {
            Ok((added, redacted)) if !added.duplicate => {
                redacted_total += redacted;
                let found = Found {
                    scope,
                    entry: added.entry,
                    score: 0,
                };
                let mut extra = Map::new();
                extra.insert("trigger".into(), json!(trigger));
                if let Some(seq) = source_seq {
                    extra.insert("sourceSeq".into(), json!(seq));
                }
                if redacted > 0 {
                    extra.insert("redacted".into(), json!(redacted));
                }
                record_change(&session, "propose", "harness", &memory, &found, extra)?;
                stored.push(found.entry.id);
            }
            Ok(_) => duplicates += 1,
            Err(e) => tracing::warn!("memory: a proposal was not stored: {e}"),
        }
    }
    session.append(
        "memory/suggest",
        json!({
            "trigger": trigger,
            "sourceSeq": source_seq,
            "route": {"provider": provider, "model": model},
            "proposed": stored,
            "duplicates": duplicates,
            "redacted": redacted_total,
        }),
        None,
    )?;
    Ok(())
}

pub(crate) fn install(ctx: &Context, service: &Arc<MemoryService>) -> Result<(), BoxError> {
    let llm = ctx.require::<dsh_llm::LlmRuntime>()?;
    {
        let (service, llm) = (service.clone(), llm.clone());
        ctx.on_emit::<SessionAppended>(ListenOptions::GLOBAL, move |p| {
            if p.event.event_type != "compaction/summary" {
                return Ok(());
            }
            let material = blocks_text(&p.event.data["summary"]);
            let (service, llm, session, seq) =
                (service.clone(), llm.clone(), p.session.clone(), p.event.seq);
            let id = session.id();
            let pending = service.clone();
            let task = tokio::spawn(async move {
                if let Err(e) =
                    propose(service, llm, session, "compaction", Some(seq), material).await
                {
                    tracing::warn!("memory: proposals after compaction failed: {e}");
                }
            });
            // Awaited when the session ends: a one-shot run that compacts and exits still
            // records its proposals.
            pending.push_pending(&id, task);
            Ok(())
        })?;
    }
    let (service, llm) = (service.clone(), llm);
    ctx.on_serial::<AgentDisposing>(ListenOptions::GLOBAL, move |p| {
        let (service, llm) = (service.clone(), llm.clone());
        let session = p.agent.session().clone();
        Box::pin(async move {
            let header = session.header();
            let completed = session.read(|s| {
                s.events().iter().any(|e| {
                    e.event_type == "turn/end"
                        && e.data.pointer("/reason/kind").and_then(Value::as_str)
                            == Some("completed")
                })
            });
            let pending = service.take_pending(&session.id());
            for task in pending {
                if tokio::time::timeout(CALL_TIMEOUT, task).await.is_err() {
                    tracing::warn!("memory: a proposal call outlived the session");
                }
            }
            if header.parent_session.is_some() || !completed {
                return Ok(());
            }
            let material = conversation_tail(&session);
            if let Err(e) = propose(service, llm, session, "session-end", None, material).await {
                tracing::warn!("memory: proposals at session end failed: {e}");
            }
            Ok(())
        })
    })?;
    Ok(())
}
