//! `@deepseek-ai/dsh-token-meter`: how many tokens the next request of a session carries.
//!
//! A heuristic (upstream's): text costs `ceil(UTF-16 length / 4)` plus 4 per block and 4
//! per message; the request header costs its system prompt and tool schemas the same way.
//! Provider-reported usage anchors the estimate: after a successful response the total is
//! the larger of the provider's count and the estimate at that point, plus the estimated
//! growth of the surface since. The fold is incremental (each event is priced once), so a
//! measurement costs O(new events), not O(session).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message, Role, TokenUsage, ToolSchema};
use dsh_session::{EpochHeader, Event, LiveSession, SessionDisposed, SurfaceOp, types};
use serde::Deserialize;
use serde_json::Value;

/// `ceil(len / 4)` over UTF-16 code units (JavaScript string length).
pub fn text_tokens(s: &str) -> u64 {
    let len = if s.is_ascii() {
        s.len()
    } else {
        s.encode_utf16().count()
    } as u64;
    len.div_ceil(4)
}

/// The price of one content block.
pub fn estimate_block(block: &ContentBlock) -> u64 {
    match block {
        ContentBlock::Text { text } | ContentBlock::Reasoning { text } => text_tokens(text) + 4,
        ContentBlock::ToolCall {
            name, arguments, ..
        } => text_tokens(name) + text_tokens(arguments) + 4,
        ContentBlock::ToolResult { content, .. } => estimate_content(content) + 4,
        ContentBlock::Other(map) => {
            4 + text_tokens(&dsh_kernel::json::to_string(&Value::Object(map.clone())))
        }
    }
}

pub fn estimate_content(blocks: &[ContentBlock]) -> u64 {
    blocks.iter().map(estimate_block).sum()
}

/// A message: its content plus 4 for the role.
pub fn estimate_message(message: &Message) -> u64 {
    estimate_content(&message.content) + 4
}

/// The request header: system prompt and tool schemas.
pub fn estimate_header(system: Option<&str>, tools: Option<&[ToolSchema]>) -> u64 {
    let system = system.map_or(0, |s| text_tokens(s) + 4);
    let tools = match tools {
        Some(t) if !t.is_empty() => serde_json::to_value(t)
            .map(|v| text_tokens(&dsh_kernel::json::to_string(&v)) + 4)
            .unwrap_or(0),
        _ => 0,
    };
    system + tools
}

/// The message a surface event shows the model, if any (empty assistant messages show
/// nothing, as in `derive_messages`).
pub fn surface_message(event: &Event) -> Option<Message> {
    let value = match event.event_type.as_str() {
        types::USER_MESSAGE => event.data.as_value(),
        types::ASSISTANT_MESSAGE | types::TOOL_RESULT => event.data.get("message")?,
        _ => return None,
    };
    let m = Message::from_json(value).ok()?;
    (!(m.role == Role::Assistant && m.content.is_empty())).then_some(m)
}

/// One priced surface node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PricedNode {
    pub seq: u64,
    pub tokens: u64,
    /// Tool calls the node opens (assistant messages).
    pub calls: u32,
    /// Whether the node is a tool result (closes one call).
    pub result: bool,
}

/// What a measurement found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Measurement {
    /// The estimated size of the next request.
    pub total: u64,
    /// The estimated surface alone.
    pub surface: u64,
    /// Whether provider usage anchored the total.
    pub anchored: bool,
    /// Surface replacements folded so far (changes when compaction lands).
    pub generation: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct Anchor {
    header_seq: u64,
    surface: u64,
    baseline: u64,
    from_usage: bool,
}

#[derive(Default)]
struct State {
    consumed: u64,
    header_seq: Option<u64>,
    header_tokens: u64,
    nodes: Vec<PricedNode>,
    surface: u64,
    step_surface: Option<u64>,
    anchor: Option<Anchor>,
    generation: u64,
}

impl State {
    fn fold(&mut self, e: &Event) {
        self.consumed = e.seq + 1;
        match e.event_type.as_str() {
            types::REQUEST_HEADER => {
                if let Some(h) = e
                    .data
                    .get("header")
                    .and_then(|h| EpochHeader::deserialize(h).ok())
                {
                    self.header_tokens = estimate_header(h.system.as_deref(), h.tools.as_deref());
                    self.header_seq = Some(e.seq);
                }
            }
            types::STEP_START => self.step_surface = Some(self.surface),
            types::STEP_END => self.step_surface = None,
            _ => {}
        }
        let Some(op) = e.surface_op else { return };
        let message = surface_message(e);
        let node = PricedNode {
            seq: e.seq,
            tokens: message.as_ref().map_or(0, estimate_message),
            calls: message
                .as_ref()
                .filter(|m| m.role == Role::Assistant)
                .map_or(0, |m| m.tool_calls().count() as u32),
            result: e.is(types::TOOL_RESULT),
        };
        match op {
            SurfaceOp::Append => {
                self.nodes.push(node);
                self.surface += node.tokens;
            }
            SurfaceOp::Replace { start, end } => {
                let pos = |seq: u64| self.nodes.iter().rposition(|n| n.seq == seq);
                if let (Some(si), Some(ei)) = (pos(start), pos(end))
                    && si <= ei
                {
                    let removed: u64 = self.nodes.splice(si..=ei, [node]).map(|n| n.tokens).sum();
                    self.surface = self.surface - removed.min(self.surface) + node.tokens;
                    self.generation += 1;
                }
            }
        }
        if e.is(types::ASSISTANT_MESSAGE) && e.data.get("interrupted").is_none() {
            let step_surface = self.step_surface.unwrap_or(self.surface - node.tokens);
            let anchor_surface = step_surface + node.tokens;
            let estimated = self.header_tokens + anchor_surface;
            let usage = e
                .data
                .get("usage")
                .and_then(|u| TokenUsage::deserialize(u).ok())
                .filter(|_| self.header_seq.is_some());
            let provider = usage.map(|u| {
                u.input_tokens
                    + u.cache_read_tokens.unwrap_or(0)
                    + u.cache_write_tokens.unwrap_or(0)
                    + u.output_tokens
            });
            let (baseline, from_usage) = match provider {
                Some(p) if p >= estimated => (p, true),
                _ => (estimated, false),
            };
            self.anchor = Some(Anchor {
                header_seq: self.header_seq.unwrap_or(0),
                surface: anchor_surface,
                baseline,
                from_usage,
            });
        }
    }

    fn measure(&self) -> Measurement {
        let (total, anchored) = match self.anchor {
            Some(a) if Some(a.header_seq) == self.header_seq => (
                (a.baseline as i128 + self.surface as i128 - a.surface as i128).max(0) as u64,
                a.from_usage,
            ),
            _ => (self.header_tokens + self.surface, false),
        };
        Measurement {
            total,
            surface: self.surface,
            anchored,
            generation: self.generation,
        }
    }
}

/// The `tokenMeter` service: one incremental fold per session.
#[derive(Default)]
pub struct TokenMeter {
    states: Mutex<HashMap<String, State>>,
}

impl TokenMeter {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn with_state<R>(&self, session: &LiveSession, f: impl FnOnce(&State) -> R) -> R {
        let id = session.id();
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let state = states.entry(id).or_default();
        for e in session.events_from(state.consumed) {
            state.fold(&e);
        }
        f(state)
    }

    /// The estimated size of `session`'s next request.
    pub fn measure(&self, session: &LiveSession) -> Measurement {
        self.with_state(session, State::measure)
    }

    /// The priced surface, in model-visible order.
    pub fn nodes(&self, session: &LiveSession) -> Vec<PricedNode> {
        self.with_state(session, |s| s.nodes.clone())
    }

    /// The header's price (system prompt and tools).
    pub fn header_tokens(&self, session: &LiveSession) -> u64 {
        self.with_state(session, |s| s.header_tokens)
    }

    fn forget(&self, id: &str) {
        self.states
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }
}

/// `@deepseek-ai/dsh-token-meter` (no settings): provides [`TokenMeter`].
pub struct TokenMeterPlugin;

impl Plugin for TokenMeterPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-token-meter"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        if let Value::Object(map) = config.raw_keys(&[])
            && let Some(key) = map.keys().next()
        {
            return Err(format!(
                "TokenMeterConfig: unknown key \"{key}\" (no settings are supported)"
            )
            .into());
        }
        let meter = TokenMeter::new();
        ctx.provide(meter.clone())?;
        ctx.on_emit::<SessionDisposed>(ListenOptions::GLOBAL, move |session| {
            meter.forget(&session.id());
            Ok(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_kernel::Context;
    use dsh_session::{SessionHeader, SessionSource, SessionStore, SurfaceIntent, system_clock};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn prices_follow_the_heuristic() {
        assert_eq!(text_tokens(""), 0);
        assert_eq!(text_tokens("abcde"), 2);
        // "😀" is two UTF-16 units.
        assert_eq!(text_tokens("😀😀😀"), 2);
        let m = Message::user_text("abcdefgh");
        assert_eq!(estimate_message(&m), 2 + 4 + 4);
        let call = ContentBlock::ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: "{\"a\":1}".into(),
        };
        assert_eq!(estimate_block(&call), 1 + 2 + 4);
        assert_eq!(estimate_header(Some("12345678"), None), 6);
    }

    #[test]
    fn the_fold_tracks_appends_replacements_and_usage() {
        let root = Context::new_root();
        let store = SessionStore::new(system_clock());
        let s = store
            .create(&root, SessionHeader::new("m", 0), SessionSource::Fresh)
            .unwrap();
        let meter = TokenMeter::new();
        assert_eq!(meter.measure(&s).total, 0);
        s.append("turn/start", json!({"turn": 1}), None).unwrap();
        s.append("step/start", json!({"turn": 1, "step": 1}), None)
            .unwrap();
        let u = s
            .append(
                "user/message",
                Message::user_text("a".repeat(40)).to_value(),
                Some(SurfaceIntent::append()),
            )
            .unwrap();
        s.append(
            "request/header",
            json!({"header": {"config": {"provider": "p", "model": "m"}, "system": "x".repeat(40)}, "reason": "initial"}),
            None,
        )
        .unwrap();
        // header 14 + user 18
        assert_eq!(meter.measure(&s).total, 32);
        let reply = Message::assistant(vec![ContentBlock::text("b".repeat(8))], "p", "m", None);
        s.append(
            "assistant/message",
            json!({"turn": 1, "step": 1, "message": reply.to_value(), "usage": {"inputTokens": 100, "outputTokens": 5}}),
            Some(SurfaceIntent::append_citing(vec![])),
        )
        .unwrap();
        s.append("step/end", json!({"turn": 1, "step": 1}), None)
            .unwrap();
        // Provider usage (105) is above the estimate at the anchor: it anchors the total.
        // As upstream, the anchor takes the surface at `step/start`, so the user message
        // entered in that step counts again (a conservative over-estimate of one batch).
        let m = meter.measure(&s);
        assert_eq!((m.total, m.anchored), (105 + 18, true));
        // A replacement of the user message by a shorter one lowers the total by the difference.
        let short = Message::user_text("c".repeat(4));
        s.append(
            "user/message",
            short.to_value(),
            Some(dsh_session::SurfaceIntent {
                op: SurfaceOp::Replace {
                    start: u.seq,
                    end: u.seq,
                },
                sources: Some(vec![u.seq]),
            }),
        )
        .unwrap();
        let m = meter.measure(&s);
        assert_eq!((m.total, m.surface, m.generation), (105 + 9, 9 + 10, 1));
        assert_eq!(meter.nodes(&s).len(), 2);
    }
}
