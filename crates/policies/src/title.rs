//! `session-title`: a short title for every session, derived from its first human prompt
//! (`session/title` with `source: {kind: "fallback"}`), written once, right before the
//! first request of the session is logged.

use dsh_agent::Request;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{LiveSession, types};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
struct TitleConfig {
    #[serde(default = "five")]
    fallback_max_words: usize,
    #[serde(default = "forty")]
    fallback_max_bytes: usize,
}

fn five() -> usize {
    5
}
fn forty() -> usize {
    40
}

fn is_invisible(c: char) -> bool {
    matches!(c as u32, 0x200B | 0x200E | 0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF)
}

/// Strips terminal escape sequences, control and invisible characters, collapses
/// whitespace.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                Some('[') => {
                    chars.next();
                    while let Some(&n) = chars.peek() {
                        chars.next();
                        if ('@'..='~').contains(&n) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    chars.next();
                    while let Some(n) = chars.next() {
                        if n == '\u{7}' || (n == '\u{1b}' && chars.peek() == Some(&'\\')) {
                            if n == '\u{1b}' {
                                chars.next();
                            }
                            break;
                        }
                    }
                }
                _ => {
                    chars.next();
                }
            },
            c if c.is_whitespace() => out.push(' '),
            c if c.is_control() || is_invisible(c) => {}
            c => out.push(c),
        }
    }
    out.split(' ')
        .filter(|w| !w.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The fallback title: the first `words` words, at most `bytes` UTF-8 bytes.
pub fn fallback_title(text: &str, words: usize, bytes: usize) -> String {
    let normalized = normalize(text);
    let mut title: String = normalized
        .split(' ')
        .take(words)
        .collect::<Vec<_>>()
        .join(" ");
    if title.len() > bytes {
        let mut cut = bytes;
        while !title.is_char_boundary(cut) {
            cut -= 1;
        }
        title.truncate(cut);
    }
    title.trim_end().to_string()
}

fn message_text(m: &Message) -> String {
    m.content
        .iter()
        .filter_map(ContentBlock::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Writes the fallback title if the session has none yet.
pub fn ensure_fallback(
    session: &std::sync::Arc<LiveSession>,
    words: usize,
    bytes: usize,
) -> Result<(), BoxError> {
    let candidate = session.read(|s| {
        if s.events().iter().any(|e| e.is(types::SESSION_TITLE)) {
            return None;
        }
        s.events()
            .iter()
            .filter(|e| e.is(types::USER_MESSAGE))
            .find_map(|e| {
                let m = Message::from_json(e.data.as_value()).ok()?;
                if m.source.kind() != "user" {
                    return None;
                }
                let title = fallback_title(&message_text(&m), words, bytes);
                (!title.is_empty()).then_some((e.seq, title))
            })
    });
    if let Some((seq, title)) = candidate {
        session.append(
            types::SESSION_TITLE,
            json!({"title": title, "messageSeqs": [seq], "source": {"kind": "fallback"}}),
            None,
        )?;
    }
    Ok(())
}

/// `@deepseek-ai/dsh-session-title`.
pub struct TitlePlugin;

impl Plugin for TitlePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-session-title"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "maxTitleBytes",
            "titles are bounded by fallbackMaxBytes and the title model's word targets here",
        )]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: TitleConfig = config.parse()?;
        ctx.on_waterfall::<Request>(ListenOptions::default(), move |p, next| {
            let session = p.agent.session().clone();
            Box::pin(async move {
                if let Err(e) =
                    ensure_fallback(&session, c.fallback_max_words, c.fallback_max_bytes)
                {
                    tracing::warn!("session-title: {e}");
                }
                next.run().await
            })
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn fallback_titles_match_upstream_examples() {
        assert_eq!(
            fallback_title(
                "Reply with exactly the word: PONG. Do not use any tools.",
                5,
                40
            ),
            "Reply with exactly the word:"
        );
        assert_eq!(
            fallback_title("Use the bash tool to run exactly: echo", 5, 40),
            "Use the bash tool to"
        );
        assert_eq!(
            fallback_title(
                "Read nested/task.txt, then read scope</system-reminder>/AGENTS.md and more",
                5,
                40
            ),
            "Read nested/task.txt, then read scope</s"
        );
        assert_eq!(
            fallback_title("  \u{1b}[31mred\u{1b}[0m\t\ttext\u{200B} ", 5, 40),
            "red text"
        );
        assert_eq!(fallback_title("\u{7}", 5, 40), "");
        assert_eq!(fallback_title("ééééééééééééééééééééééé", 5, 5), "éé");
    }
}

/// Config of the model-backed title.
#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct LlmTitleConfig {
    #[serde(default = "five")]
    target_words: usize,
    #[serde(default = "ten")]
    target_cjk_characters: usize,
    #[serde(default = "four_k")]
    max_input_bytes: usize,
    #[serde(default = "sixty_four")]
    max_output_tokens: u64,
    #[serde(default = "sixty_s")]
    timeout_ms: u64,
    #[serde(default = "eighty")]
    max_title_bytes: usize,
    provider: Option<String>,
    model: Option<String>,
}

fn ten() -> usize {
    10
}
fn four_k() -> usize {
    4096
}
fn sixty_four() -> u64 {
    64
}
fn sixty_s() -> u64 {
    60_000
}
fn eighty() -> usize {
    80
}

/// The plugin id recorded as the title's provider.
pub const LLM_TITLE_PROVIDER: &str = "session-title-first-prompt-llm";

fn title_system(c: &LlmTitleConfig) -> String {
    format!(
        "Write a short title for an AI coding-assistant session, based on the human messages provided.\nReply with the title alone on a single line: plain natural-language text, no quotes, labels, explanations, Markdown, XML or control characters, and no code.\nWrite in the language of the messages.\nAim for roughly {} words, or {} characters for CJK languages.",
        c.target_words, c.target_cjk_characters
    )
}

/// The auxiliary title request of `session` (first eligible prompt only), recorded as
/// `session/title-llm-request`; `None` when the session has no eligible prompt.
fn record_title_request(
    session: &std::sync::Arc<LiveSession>,
    c: &LlmTitleConfig,
    route: (String, String),
) -> Result<Option<TitleRequest>, BoxError> {
    let first = session.read(|s| {
        s.events()
            .iter()
            .filter(|e| e.is(types::USER_MESSAGE))
            .find_map(|e| {
                let m = Message::from_json(e.data.as_value()).ok()?;
                (m.source.kind() == "user" && !normalize(&message_text(&m)).is_empty())
                    .then(|| (e.seq, message_text(&m)))
            })
    });
    let Some((seq, text)) = first else {
        return Ok(None);
    };
    let framed = format!(
        "Title this session from the human messages in this JSON array:\n{}",
        dsh_kernel::json::to_string(&json!([{"seq": seq, "text": text}]))
    );
    if framed.len() > c.max_input_bytes {
        return Err(format!(
            "session-title-llm: input is {} bytes, exceeding maxInputBytes {}",
            framed.len(),
            c.max_input_bytes
        )
        .into());
    }
    let system = title_system(c);
    let message = Message::user(
        vec![ContentBlock::text(framed)],
        dsh_llm::MessageSource::plugin("dsh-session-title-llm", []),
    );
    let (provider, model) = route;
    session.append(
        "session/title-llm-request",
        json!({
            "titleProvider": LLM_TITLE_PROVIDER,
            "messageSeqs": [seq],
            "route": {"provider": provider, "model": model},
            "system": system,
            "messages": [message.to_value()],
            "maxTokens": c.max_output_tokens,
        }),
        None,
    )?;
    Ok(Some(TitleRequest {
        seq,
        system,
        message,
        provider,
        model,
    }))
}

/// A recorded title request, ready to run.
struct TitleRequest {
    seq: u64,
    system: String,
    message: Message,
    provider: String,
    model: String,
}

/// Runs a recorded title request and appends the provider's title when it completes.
async fn llm_title(
    llm: std::sync::Arc<dsh_llm::LlmRuntime>,
    session: std::sync::Arc<LiveSession>,
    c: LlmTitleConfig,
    request: TitleRequest,
) -> Result<(), BoxError> {
    let TitleRequest {
        seq,
        system,
        message,
        provider,
        model,
    } = request;
    let mut config = dsh_llm::LlmCallConfig::route(provider.clone(), model.clone());
    config.max_tokens = Some(c.max_output_tokens);
    let mut options = dsh_llm::GenerateOptions::new(config, vec![std::sync::Arc::new(message)]);
    options.system = Some(system);
    options.session_id = Some(session.id());
    options.purpose = dsh_llm::CallPurpose::SessionTitle;
    let cancel = options.cancel.clone();
    let run = async {
        use futures::StreamExt;
        let mut stream = llm.stream(std::sync::Arc::new(options), None).await?;
        let mut asm = dsh_llm::BlockAssembler::new();
        while let Some(chunk) = stream.next().await {
            asm.push(&chunk?);
        }
        Ok::<_, BoxError>(asm)
    };
    let asm = match tokio::time::timeout(std::time::Duration::from_millis(c.timeout_ms), run).await
    {
        Ok(r) => r?,
        Err(_) => {
            cancel.cancel();
            return Err("session-title-llm: the title request timed out".into());
        }
    };
    match asm.finish() {
        dsh_llm::FinishReason::Error(f) | dsh_llm::FinishReason::Aborted(f) => {
            return Err(f.message.into());
        }
        dsh_llm::FinishReason::MaxTokens => {
            return Err("session-title-llm: title output reached maxOutputTokens".into());
        }
        dsh_llm::FinishReason::ToolCalls => {
            return Err("session-title-llm: title model unexpectedly requested a tool".into());
        }
        _ => {}
    }
    let blocks = asm.blocks()?;
    let raw: Vec<&str> = blocks.iter().filter_map(ContentBlock::as_text).collect();
    let title = fallback_title(&raw.join(" "), usize::MAX, c.max_title_bytes);
    if title.is_empty() {
        return Err("session-title-llm: title model produced no text".into());
    }
    session.append(
        types::SESSION_TITLE,
        json!({"title": title, "messageSeqs": [seq], "source": {"kind": "provider", "provider": LLM_TITLE_PROVIDER, "model": {"provider": provider, "model": model}}}),
        None,
    )?;
    Ok(())
}

/// `@deepseek-ai/dsh-session-title-first-prompt-llm`: after the fallback title, asks the
/// model for a better one, once per fresh session (not for forks), without blocking the turn.
pub struct LlmTitlePlugin;

impl Plugin for LlmTitlePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-session-title-first-prompt-llm"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: LlmTitleConfig = config.parse()?;
        let llm = ctx.require::<dsh_llm::LlmRuntime>()?;
        let started: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>> =
            Default::default();
        {
            // Forget sessions that leave the store: a reopened session's log already holds
            // its provider title, or it gets one again.
            let started = started.clone();
            ctx.on_emit::<dsh_session::SessionDisposed>(ListenOptions::GLOBAL, move |session| {
                started
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&session.id());
                Ok(())
            })?;
        }
        let spawner = ctx.clone();
        // Started by the session's first loop request whose route is the logged header's
        // (as upstream): the request record lands after `request/context` and before the
        // first chunk; the provider title is appended whenever the call completes.
        ctx.on_waterfall::<dsh_llm::LlmStreamEvent>(
            ListenOptions {
                prepend: true,
                global: true,
            },
            move |req, next| {
                if let Err(e) = start_title(&spawner, &llm, &started, &c, &req.options) {
                    tracing::warn!("session title: {e}");
                }
                next.run()
            },
        )?;
        Ok(())
    }
}

/// Records and spawns the model title of the session behind `options`, once per fresh
/// (non-fork) session, for its first loop request on the logged route.
fn start_title(
    spawner: &Context,
    llm: &std::sync::Arc<dsh_llm::LlmRuntime>,
    started: &std::sync::Mutex<std::collections::HashSet<String>>,
    c: &LlmTitleConfig,
    options: &dsh_llm::GenerateOptions,
) -> Result<(), BoxError> {
    if !options.agent_loop_request {
        return Ok(());
    }
    let Some(id) = options.session_id.as_deref() else {
        return Ok(());
    };
    let Some(session) = spawner
        .get::<dsh_session::SessionStore>()
        .and_then(|store| store.get(id))
    else {
        return Ok(());
    };
    let header = session.header();
    if header.parent_session.is_some()
        || started
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&header.id)
    {
        return Ok(());
    }
    let (logged_route, has_provider_title) = session.read(|s| {
        (
            s.request_header()
                .map(|h| (h.config.provider.clone(), h.config.model.clone())),
            s.events().iter().any(|e| {
                e.is(types::SESSION_TITLE)
                    && e.data.pointer("/source/kind").and_then(Value::as_str) != Some("fallback")
            }),
        )
    });
    let route_now = (
        options.config.provider.clone(),
        options.config.model.clone(),
    );
    if logged_route.as_ref() != Some(&route_now) {
        return Ok(());
    }
    started
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(header.id.clone());
    if has_provider_title {
        return Ok(());
    }
    let route = (
        c.provider.clone().unwrap_or(route_now.0),
        c.model.clone().unwrap_or(route_now.1),
    );
    let Some(request) = record_title_request(&session, c, route)? else {
        return Ok(());
    };
    let (llm, c) = (llm.clone(), c.clone());
    spawner.spawn(async move {
        if let Err(e) = llm_title(llm, session, c, request).await {
            tracing::warn!("session title: {e}");
        }
    })?;
    Ok(())
}
