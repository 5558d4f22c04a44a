//! `@deepseek-ai/dsh-compaction-tool-result-pruner`: model-free shrinking of bulky tool
//! results (head + marker + tail, by code points), run by compaction before it summarizes.
//! Each pruned result is a `compaction/prune` event followed by a single-node `tool/result`
//! replacement that changes only the result's inner content.

use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message};
use dsh_session::{LiveSession, SurfaceIntent, SurfaceOp, types};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::meter::{TokenMeter, estimate_message, surface_message};

/// The model-visible marker where the middle was cut.
pub const MARKER: &str = "\n\n[... tool result middle pruned ...]\n\n";

/// The pruner's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrunerConfig {
    pub threshold_chars: usize,
    pub head_chars: usize,
    pub tail_chars: usize,
}

impl Default for PrunerConfig {
    fn default() -> Self {
        Self {
            threshold_chars: 8192,
            head_chars: 4096,
            tail_chars: 1024,
        }
    }
}

/// The `toolResultPruner` service.
pub struct ToolResultPruner {
    pub config: PrunerConfig,
}

/// `blocks` with the code points `[head, total - tail)` of their text removed and the
/// marker put where the cut starts; `None` when the text is within the threshold.
pub fn prune_content(config: PrunerConfig, blocks: &[ContentBlock]) -> Option<Vec<ContentBlock>> {
    let total: usize = blocks
        .iter()
        .filter_map(ContentBlock::as_text)
        .map(|t| t.chars().count())
        .sum();
    if total <= config.threshold_chars {
        return None;
    }
    let (cut_from, cut_to) = (config.head_chars, total - config.tail_chars);
    let mut out = Vec::with_capacity(blocks.len());
    let mut offset = 0usize;
    let mut marked = false;
    for block in blocks {
        let Some(text) = block.as_text() else {
            out.push(block.clone());
            continue;
        };
        let len = text.chars().count();
        let (start, end) = (offset, offset + len);
        offset = end;
        if end <= cut_from || start >= cut_to {
            out.push(block.clone());
            continue;
        }
        let mut kept = String::new();
        for (i, c) in text.chars().enumerate() {
            let at = start + i;
            if at == cut_from.max(start) && !marked {
                kept.push_str(MARKER);
                marked = true;
            }
            if at < cut_from || at >= cut_to {
                kept.push(c);
            }
        }
        if !marked {
            kept.push_str(MARKER);
            marked = true;
        }
        if !kept.is_empty() {
            out.push(ContentBlock::text(kept));
        }
    }
    Some(out)
}

impl ToolResultPruner {
    /// Prunes every bulky tool result on `session`'s surface. Returns how many were
    /// replaced. Idempotent: a pruned result is within the threshold.
    pub fn prune_session(
        &self,
        meter: &TokenMeter,
        session: &Arc<LiveSession>,
    ) -> Result<usize, BoxError> {
        let nodes = meter.nodes(session);
        let events = session.events();
        let mut pruned = 0;
        for node in nodes.iter().filter(|n| n.result) {
            let Some(event) = events.get(node.seq as usize) else {
                continue;
            };
            let Some(Value::Array(inner)) = event.data.pointer("/message/content/0/content") else {
                continue;
            };
            let blocks: Vec<ContentBlock> = inner
                .iter()
                .filter_map(|b| ContentBlock::from_json(b).ok())
                .collect();
            if blocks.len() != inner.len() {
                continue;
            }
            let Some(replacement) = prune_content(self.config, &blocks) else {
                continue;
            };
            let original = surface_message(event).map_or(0, |m: Message| estimate_message(&m));
            let mut data = event.data.to_value();
            if let Some(slot) = data.pointer_mut("/message/content/0/content") {
                *slot = Value::Array(replacement.iter().map(block_value).collect());
            }
            let prune = json!({
                "shadowedRange": {"start": node.seq, "end": node.seq},
                "shadowedSeqs": [node.seq],
                "shadowedTokenCount": original,
            });
            let replacement = Some(SurfaceIntent {
                op: SurfaceOp::Replace {
                    start: node.seq,
                    end: node.seq,
                },
                sources: Some(vec![node.seq]),
            });
            session.append_group(|_| {
                vec![
                    ("compaction/prune".into(), prune, None),
                    (types::TOOL_RESULT.into(), data, replacement),
                ]
            })?;
            pruned += 1;
        }
        Ok(pruned)
    }
}

fn block_value(block: &ContentBlock) -> Value {
    serde_json::to_value(block).unwrap_or(Value::Null)
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RowConfig {
    threshold_chars: Option<usize>,
    head_chars: Option<usize>,
    tail_chars: Option<usize>,
}

/// `@deepseek-ai/dsh-compaction-tool-result-pruner` (config `{thresholdChars, headChars,
/// tailChars}`).
pub struct ToolResultPrunerPlugin;

impl Plugin for ToolResultPrunerPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-compaction-tool-result-pruner"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: RowConfig = config.parse()?;
        let d = PrunerConfig::default();
        let config = PrunerConfig {
            threshold_chars: c.threshold_chars.unwrap_or(d.threshold_chars),
            head_chars: c.head_chars.unwrap_or(d.head_chars),
            tail_chars: c.tail_chars.unwrap_or(d.tail_chars),
        };
        if config.threshold_chars == 0 {
            return Err("tool-result-pruner: thresholdChars must be a positive integer".into());
        }
        if config.head_chars + MARKER.chars().count() + config.tail_chars > config.threshold_chars {
            return Err(
                "tool-result-pruner: headChars + marker + tailChars must not exceed thresholdChars"
                    .into(),
            );
        }
        ctx.provide(Arc::new(ToolResultPruner { config }))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    const SMALL: PrunerConfig = PrunerConfig {
        threshold_chars: 50,
        head_chars: 5,
        tail_chars: 3,
    };

    #[test]
    fn the_middle_is_cut_by_code_points_across_blocks() {
        let text: String = "é".repeat(30) + &"x".repeat(30);
        let got = prune_content(SMALL, &[ContentBlock::text(text)]).unwrap();
        assert_eq!(got, vec![ContentBlock::text(format!("ééééé{MARKER}xxx"))]);
        let blocks = [
            ContentBlock::text("a".repeat(30)),
            ContentBlock::text("b".repeat(30)),
        ];
        let got = prune_content(SMALL, &blocks).unwrap();
        assert_eq!(
            got,
            vec![
                ContentBlock::text(format!("aaaaa{MARKER}")),
                ContentBlock::text("bbb")
            ]
        );
        assert_eq!(prune_content(SMALL, &[ContentBlock::text("short")]), None);
        // Pruned output is within the threshold: a second pass finds nothing.
        let again = prune_content(SMALL, &got);
        assert_eq!(again, None);
    }
}
