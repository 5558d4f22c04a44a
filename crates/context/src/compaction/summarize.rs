//! The summary call: the conversation's own system prompt, tools and the shadowed messages,
//! replayed verbatim (so a provider prefix cache is reused), plus one instruction.

use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_llm::{
    BlockAssembler, CallPurpose, ContentBlock, FinishReason, GenerateOptions, LlmCallConfig,
    LlmRuntime, Message, MessageSource, TokenUsage, ToolSchema,
};
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

/// The last user message of a summary request (our wording; upstream's structure: a fixed
/// list of sections, all present, facts kept exact, earlier checkpoints merged).
pub const INSTRUCTION: &str = "Stop working on the task for a moment: your only job now is to condense the conversation above into a checkpoint that will replace it. Someone continuing the work will see only this checkpoint and the newest messages, so keep everything they need and nothing they do not.

Reply with Markdown using exactly these headings, in this order, every one of them present (write `(none)` under a heading with nothing to say):

## Primary Request and Intent
## Key Technical Concepts
## Files and Code
## Errors and Fixes
## Pending Jobs
## Current Work
## Next Step
## Critical Context

Rules:
- Short English bullets written for an engineer.
- Copy exact file paths, commands, error messages, identifiers and numbers; never paraphrase them.
- Keep what the user asked for and every correction or preference they gave, faithfully.
- If the conversation starts with an earlier <compacted-summary> block, fold its content into this one so a single up-to-date checkpoint remains; do not copy it unchanged.
- Do not mention that this is a summary, a checkpoint or a compaction.
- Output the checkpoint only: no tool calls, no preamble, no closing remarks.";

/// The paragraph before the summary in the checkpoint message (our wording).
pub const PREAMBLE: &str = "The earlier part of this conversation was condensed automatically to free context space; the checkpoint below stands in for it. Take it as settled background without repeating it, and carry on from the messages that follow as if nothing had been condensed.";

/// The checkpoint message content: preamble, `<compacted-summary>`, the summary's text
/// blocks, `</compacted-summary>`.
pub fn frame(summary: &[ContentBlock]) -> Vec<ContentBlock> {
    let mut content = vec![ContentBlock::text(format!(
        "{PREAMBLE}\n\n<compacted-summary>"
    ))];
    content.extend(summary.iter().cloned());
    content.push(ContentBlock::text("</compacted-summary>"));
    content
}

/// What a successful summary call produced.
pub struct Summary {
    /// The text blocks (reasoning and anything else dropped).
    pub text: Vec<ContentBlock>,
    /// Everything the model returned.
    pub raw: Vec<ContentBlock>,
    pub provider: String,
    pub model: String,
    pub max_tokens: u64,
    pub usage: Option<TokenUsage>,
}

/// Everything one summary call needs.
pub struct SummaryRequest {
    pub provider: String,
    pub model: String,
    pub max_tokens: u64,
    pub system: Option<String>,
    pub tools: Option<Vec<ToolSchema>>,
    pub messages: Vec<Arc<Message>>,
    pub session_id: String,
    pub cancel: CancellationToken,
}

/// Runs the summary call through `llm/stream` (purpose `compaction`).
pub async fn summarize(llm: &LlmRuntime, request: SummaryRequest) -> Result<Summary, BoxError> {
    let mut config = LlmCallConfig::route(request.provider.clone(), request.model.clone());
    config.max_tokens = Some(request.max_tokens);
    let mut messages = request.messages;
    messages.push(Arc::new(Message::user(
        vec![ContentBlock::text(INSTRUCTION)],
        MessageSource::plugin("dsh-compaction-basic", []),
    )));
    let mut options = GenerateOptions::new(config, messages);
    options.system = request.system;
    options.tools = request.tools;
    options.session_id = Some(request.session_id);
    options.purpose = CallPurpose::Compaction;
    options.cancel = request.cancel.clone();
    let mut stream = llm.stream(Arc::new(options), None).await?;
    let mut asm = BlockAssembler::new();
    loop {
        let next = tokio::select! {
            biased;
            () = request.cancel.cancelled() => return Err("summarization was cancelled".into()),
            next = stream.next() => next,
        };
        let Some(chunk) = next else { break };
        asm.push(&chunk?);
    }
    match asm.finish() {
        FinishReason::Error(f) | FinishReason::Aborted(f) => {
            return Err(format!("summarization failed ({}): {}", f.code, f.message).into());
        }
        FinishReason::MaxTokens => {
            return Err("summarization truncated at the token cap (incomplete checkpoint)".into());
        }
        _ => {}
    }
    let raw = asm.blocks()?;
    if raw.iter().any(|b| b.block_type() == "image") {
        return Err("summarization returned unsupported image content".into());
    }
    let text: Vec<ContentBlock> = raw
        .iter()
        .filter(|b| matches!(b, ContentBlock::Text { .. }))
        .cloned()
        .collect();
    if text
        .iter()
        .all(|b| b.as_text().is_none_or(|t| t.trim().is_empty()))
    {
        return Err("summarization produced no text summary content".into());
    }
    Ok(Summary {
        text,
        raw,
        provider: request.provider,
        model: request.model,
        max_tokens: request.max_tokens,
        usage: asm.usage().cloned(),
    })
}
