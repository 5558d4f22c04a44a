//! `session-title`: a short title for every session, derived from its first human prompt
//! (`session/title` with `source: {kind: "fallback"}`), written once, right before the
//! first request of the session is logged.

use dsh_agent::Request;
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{LiveSession, types};
use serde::Deserialize;
use serde_json::json;

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
    out.split(' ').filter(|w| !w.is_empty()).collect::<Vec<_>>().join(" ")
}

/// The fallback title: the first `words` words, at most `bytes` UTF-8 bytes.
pub fn fallback_title(text: &str, words: usize, bytes: usize) -> String {
    let normalized = normalize(text);
    let mut title: String = normalized.split(' ').take(words).collect::<Vec<_>>().join(" ");
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
    m.content.iter().filter_map(ContentBlock::as_text).collect::<Vec<_>>().join("\n")
}

/// Writes the fallback title if the session has none yet.
pub fn ensure_fallback(session: &std::sync::Arc<LiveSession>, words: usize, bytes: usize) -> Result<(), BoxError> {
    let candidate = session.read(|s| {
        if s.events().iter().any(|e| e.is(types::SESSION_TITLE)) {
            return None;
        }
        s.events().iter().filter(|e| e.is(types::USER_MESSAGE)).find_map(|e| {
            let m = Message::from_value(e.data.clone()).ok()?;
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

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: TitleConfig = config.parse()?;
        ctx.on_waterfall::<Request>(ListenOptions::default(), move |p, next| {
            let session = p.agent.session().clone();
            Box::pin(async move {
                if let Err(e) = ensure_fallback(&session, c.fallback_max_words, c.fallback_max_bytes) {
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
        assert_eq!(fallback_title("Reply with exactly the word: PONG. Do not use any tools.", 5, 40), "Reply with exactly the word:");
        assert_eq!(fallback_title("Use the bash tool to run exactly: echo", 5, 40), "Use the bash tool to");
        assert_eq!(
            fallback_title("Read nested/task.txt, then read scope</system-reminder>/AGENTS.md and more", 5, 40),
            "Read nested/task.txt, then read scope</s"
        );
        assert_eq!(fallback_title("  \u{1b}[31mred\u{1b}[0m\t\ttext\u{200B} ", 5, 40), "red text");
        assert_eq!(fallback_title("\u{7}", 5, 40), "");
        assert_eq!(fallback_title("ééééééééééééééééééééééé", 5, 5), "éé");
    }
}
