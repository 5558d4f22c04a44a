//! The one canonical fold from stream chunks to content blocks.

use serde_json::Value;

use crate::chunk::{FinishReason, StreamChunk, TokenUsage};
use crate::message::ContentBlock;

#[derive(Debug)]
struct Partial {
    index: u32,
    block_type: String,
    text: String,
    call_id: Option<String>,
    call_name: Option<String>,
    closed: Option<ContentBlock>,
}

/// Folds a provider stream into blocks, usage and the finish reason.
#[derive(Debug, Default)]
pub struct BlockAssembler {
    partials: Vec<Partial>,
    usage: Option<TokenUsage>,
    finish: Option<FinishReason>,
    replay_state: Option<Value>,
    /// Tool-call blocks opened so far.
    tool_calls: usize,
}

/// An open block of a type the assembler cannot complete.
#[derive(Debug, thiserror::Error)]
#[error("stream left block {index} of unknown type \"{block_type}\" open")]
pub struct OpenUnknownBlock {
    pub index: u32,
    pub block_type: String,
}

impl BlockAssembler {
    pub fn new() -> Self {
        Self::default()
    }

    fn partial(&mut self, index: u32, block_type: &str) -> &mut Partial {
        // Indexes are unique and deltas nearly always extend the newest block: search from
        // the end, so a response with many blocks is not quadratic.
        let pos = match self.partials.iter().rposition(|p| p.index == index) {
            Some(pos) => pos,
            None => {
                if block_type == "tool-call" {
                    self.tool_calls += 1;
                }
                self.partials.push(Partial {
                    index,
                    block_type: block_type.to_string(),
                    text: String::new(),
                    call_id: None,
                    call_name: None,
                    closed: None,
                });
                self.partials.len() - 1
            }
        };
        &mut self.partials[pos]
    }

    pub fn push(&mut self, chunk: &StreamChunk) {
        match chunk {
            StreamChunk::BlockStart { index, block_type } => {
                self.partial(*index, block_type);
            }
            StreamChunk::TextDelta { index, text } => {
                let p = self.partial(*index, "text");
                if p.closed.is_none() {
                    p.text.push_str(text);
                }
            }
            StreamChunk::ReasoningDelta { index, text } => {
                let p = self.partial(*index, "reasoning");
                if p.closed.is_none() {
                    p.text.push_str(text);
                }
            }
            StreamChunk::ToolCallDelta {
                index,
                id,
                name,
                arguments_delta,
            } => {
                let p = self.partial(*index, "tool-call");
                if p.closed.is_none() {
                    p.call_id = Some(id.clone());
                    if let Some(n) = name.as_deref().filter(|n| !n.is_empty()) {
                        p.call_name = Some(n.to_string());
                    }
                    p.text.push_str(arguments_delta);
                }
            }
            StreamChunk::BlockEnd { index, block } => {
                let p = self.partial(*index, block.block_type());
                if p.closed.is_none() {
                    p.closed = Some(block.clone());
                    // The closed block wins from now on: the deltas' copy is dead weight.
                    p.text = String::new();
                }
            }
            StreamChunk::Usage { usage } => self.usage = Some(usage.clone()),
            StreamChunk::Finish {
                reason,
                replay_state,
            } => {
                self.finish = Some(reason.clone());
                self.replay_state = replay_state.clone();
            }
        }
    }

    /// [`BlockAssembler::push`] for a chunk the caller no longer needs: a `block-end`'s
    /// block is moved in instead of copied (a long answer is not held twice).
    pub fn push_owned(&mut self, chunk: StreamChunk) {
        match chunk {
            StreamChunk::BlockEnd { index, block } => {
                let p = self.partial(index, block.block_type());
                if p.closed.is_none() {
                    p.closed = Some(block);
                    p.text = String::new();
                }
            }
            other => self.push(&other),
        }
    }

    /// The finish reason, `stop` when none arrived.
    pub fn finish(&self) -> FinishReason {
        self.finish.clone().unwrap_or(FinishReason::Stop)
    }

    pub fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    fn assemble(p: &Partial) -> Result<ContentBlock, OpenUnknownBlock> {
        if let Some(block) = &p.closed {
            return Ok(block.clone());
        }
        match p.block_type.as_str() {
            "text" => Ok(ContentBlock::Text {
                text: p.text.clone(),
            }),
            "reasoning" => Ok(ContentBlock::Reasoning {
                text: p.text.clone(),
            }),
            "tool-call" => Ok(ContentBlock::ToolCall {
                id: p
                    .call_id
                    .clone()
                    .unwrap_or_else(|| format!("call-{}", p.index)),
                name: p.call_name.clone().unwrap_or_default(),
                arguments: p.text.clone(),
            }),
            other => Err(OpenUnknownBlock {
                index: p.index,
                block_type: other.to_string(),
            }),
        }
    }

    /// The assembled blocks in first-seen order. After a `max-tokens` finish, tool calls are
    /// dropped (truncated calls are unsafe to run).
    pub fn blocks(&self) -> Result<Vec<ContentBlock>, OpenUnknownBlock> {
        let drop_calls = matches!(self.finish, Some(FinishReason::MaxTokens));
        let mut out = Vec::with_capacity(self.partials.len());
        for p in &self.partials {
            let block = Self::assemble(p)?;
            if drop_calls && matches!(block, ContentBlock::ToolCall { .. }) {
                continue;
            }
            out.push(block);
        }
        Ok(out)
    }

    /// [`BlockAssembler::blocks`], moving the text out instead of copying it. The assembler
    /// is spent afterwards: read `usage`, `finish` and `replay_state` first.
    pub fn take_blocks(&mut self) -> Result<Vec<ContentBlock>, OpenUnknownBlock> {
        // Refuse before moving anything, so a refusal leaves the assembler intact.
        if let Some(p) = self.partials.iter().find(|p| {
            p.closed.is_none()
                && !matches!(p.block_type.as_str(), "text" | "reasoning" | "tool-call")
        }) {
            return Err(OpenUnknownBlock {
                index: p.index,
                block_type: p.block_type.clone(),
            });
        }
        let drop_calls = matches!(self.finish, Some(FinishReason::MaxTokens));
        let mut out = Vec::with_capacity(self.partials.len());
        for p in &mut self.partials {
            let block = match p.closed.take() {
                Some(block) => block,
                None => {
                    let text = std::mem::take(&mut p.text);
                    match p.block_type.as_str() {
                        "text" => ContentBlock::Text { text },
                        "reasoning" => ContentBlock::Reasoning { text },
                        "tool-call" => ContentBlock::ToolCall {
                            id: p
                                .call_id
                                .take()
                                .unwrap_or_else(|| format!("call-{}", p.index)),
                            name: p.call_name.take().unwrap_or_default(),
                            arguments: text,
                        },
                        other => {
                            return Err(OpenUnknownBlock {
                                index: p.index,
                                block_type: other.to_string(),
                            });
                        }
                    }
                }
            };
            if drop_calls && matches!(block, ContentBlock::ToolCall { .. }) {
                continue;
            }
            out.push(block);
        }
        self.partials.clear();
        Ok(out)
    }

    /// How many tool-call blocks the stream opened so far.
    pub fn tool_call_count(&self) -> usize {
        self.tool_calls
    }

    /// The adapter's replay envelope, with `blocks` entries pruned where blocks were dropped;
    /// discarded when it does not line up with the assembled blocks.
    pub fn replay_state(&self) -> Option<Value> {
        let mut state = self.replay_state.clone()?;
        let drop_calls = matches!(self.finish, Some(FinishReason::MaxTokens));
        if let Some(Value::Array(entries)) = state.get_mut("blocks") {
            if entries.len() != self.partials.len() {
                return None;
            }
            if drop_calls {
                let keep: Vec<bool> = self
                    .partials
                    .iter()
                    .map(|p| !matches!(Self::assemble(p), Ok(ContentBlock::ToolCall { .. })))
                    .collect();
                let mut i = 0;
                entries.retain(|_| {
                    let k = keep.get(i).copied().unwrap_or(true);
                    i += 1;
                    k
                });
            }
        }
        Some(state)
    }

    /// The text/reasoning prefix to keep when a stream is cancelled: closed or open blocks
    /// whose text is not whitespace-only.
    pub fn interrupted_blocks(&self) -> Vec<ContentBlock> {
        self.partials
            .iter()
            .filter_map(|p| Self::assemble(p).ok())
            .filter(|b| match b {
                ContentBlock::Text { text } | ContentBlock::Reasoning { text } => {
                    !text.trim().is_empty()
                }
                _ => false,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::LlmFailure;
    use pretty_assertions::assert_eq;

    fn feed(chunks: &[StreamChunk]) -> BlockAssembler {
        let mut a = BlockAssembler::new();
        for c in chunks {
            a.push(c);
        }
        a
    }

    #[test]
    fn deltas_and_block_ends_assemble() {
        let a = feed(&[
            StreamChunk::BlockStart {
                index: 0,
                block_type: "reasoning".into(),
            },
            StreamChunk::ReasoningDelta {
                index: 0,
                text: "thi".into(),
            },
            StreamChunk::ReasoningDelta {
                index: 0,
                text: "nk".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 1,
                id: "c1".into(),
                name: Some("bash".into()),
                arguments_delta: "{\"a\"".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 1,
                id: "c1".into(),
                name: None,
                arguments_delta: ":1}".into(),
            },
            StreamChunk::BlockEnd {
                index: 0,
                block: ContentBlock::Reasoning {
                    text: "final".into(),
                },
            },
            StreamChunk::finish(FinishReason::ToolCalls),
        ]);
        assert_eq!(
            a.blocks().unwrap(),
            [
                ContentBlock::Reasoning {
                    text: "final".into()
                },
                ContentBlock::ToolCall {
                    id: "c1".into(),
                    name: "bash".into(),
                    arguments: "{\"a\":1}".into()
                }
            ]
        );
        assert_eq!(a.finish(), FinishReason::ToolCalls);
    }

    #[test]
    fn max_tokens_drops_tool_calls() {
        let a = feed(&[
            StreamChunk::TextDelta {
                index: 0,
                text: "partial".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 1,
                id: "c".into(),
                name: Some("x".into()),
                arguments_delta: "{".into(),
            },
            StreamChunk::finish(FinishReason::MaxTokens),
        ]);
        assert_eq!(a.blocks().unwrap(), [ContentBlock::text("partial")]);
    }

    #[test]
    fn interrupted_prefix_keeps_non_blank_text_only() {
        let a = feed(&[
            StreamChunk::TextDelta {
                index: 0,
                text: "  ".into(),
            },
            StreamChunk::ReasoningDelta {
                index: 1,
                text: "why".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 2,
                id: "c".into(),
                name: None,
                arguments_delta: "{".into(),
            },
            StreamChunk::TextDelta {
                index: 3,
                text: "seen".into(),
            },
        ]);
        assert_eq!(
            a.interrupted_blocks(),
            [
                ContentBlock::Reasoning { text: "why".into() },
                ContentBlock::text("seen")
            ]
        );
        assert_eq!(
            a.finish(),
            FinishReason::Stop,
            "no finish chunk defaults to stop"
        );
        let e = feed(&[StreamChunk::error(LlmFailure::new("AUTH", "no"))]);
        assert_eq!(e.finish().kind(), "error");
    }

    #[test]
    fn an_open_block_of_unknown_type_is_an_error() {
        let a = feed(&[StreamChunk::BlockStart {
            index: 0,
            block_type: "image".into(),
        }]);
        assert!(a.blocks().is_err());
        let mut a = a;
        assert!(a.take_blocks().is_err());
        assert!(
            a.blocks().is_err(),
            "a refused take leaves the blocks in place"
        );
    }

    fn mixed() -> Vec<StreamChunk> {
        vec![
            StreamChunk::ReasoningDelta {
                index: 0,
                text: "why".into(),
            },
            StreamChunk::TextDelta {
                index: 1,
                text: "ans".into(),
            },
            StreamChunk::TextDelta {
                index: 1,
                text: "wer".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 2,
                id: "c1".into(),
                name: Some("bash".into()),
                arguments_delta: "{}".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 3,
                id: "c2".into(),
                name: Some("read".into()),
                arguments_delta: "{\"p\":1}".into(),
            },
            StreamChunk::BlockEnd {
                index: 1,
                block: ContentBlock::text("answer"),
            },
            StreamChunk::finish(FinishReason::ToolCalls),
        ]
    }

    #[test]
    fn taking_the_blocks_moves_what_blocks_would_copy() {
        let copied = feed(&mixed());
        let mut owned = BlockAssembler::new();
        for c in mixed() {
            owned.push_owned(c);
        }
        assert_eq!(copied.tool_call_count(), 2);
        assert_eq!(owned.tool_call_count(), 2);
        let expected = copied.blocks().unwrap();
        assert_eq!(owned.blocks().unwrap(), expected);
        assert_eq!(owned.take_blocks().unwrap(), expected);
        let mut capped = feed(&[
            StreamChunk::TextDelta {
                index: 0,
                text: "cut".into(),
            },
            StreamChunk::ToolCallDelta {
                index: 1,
                id: "c".into(),
                name: None,
                arguments_delta: "{".into(),
            },
            StreamChunk::finish(FinishReason::MaxTokens),
        ]);
        assert_eq!(capped.take_blocks().unwrap(), [ContentBlock::text("cut")]);
    }
}
