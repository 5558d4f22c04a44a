//! Spill: tool results too large for the model's context are saved whole in the session's
//! spill area and replaced by a head/tail preview plus a notice naming the file.
//!
//! * `@deepseek-ai/dsh-spill-local` ([`SpillLocalPlugin`], config `{root?}`) provides the
//!   `spillStore` service ([`LocalSpillStore`]).
//! * `@deepseek-ai/dsh-spill-policy` ([`SpillPolicyPlugin`], config `{maxInlineTokens?,
//!   maxInlineBytes?}`) is a `tools/post-execute` listener (outermost) that bounds every
//!   tool's plain-text result. `maxInlineTokens` is upstream 0.2's key, priced with the token
//!   meter's estimate; `maxInlineBytes` is this build's 0.1-era key, still accepted (when
//!   both are set, a result must fit both).

mod retain;
mod store;

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::ContentBlock;
use dsh_tools::{PostExecute, PostToolDecision, SpillRef, SpillRequest, SpillStore};
use serde::Deserialize;
use serde_json::Value;

pub use retain::{Retained, head_tail};
pub use store::{LocalSpillStore, RETRIEVAL_HINT, session_dir_name};

/// `@deepseek-ai/dsh-spill-local`: provides [`SpillStore`] backed by [`LocalSpillStore`].
pub struct SpillLocalPlugin;

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct LocalConfig {
    root: Option<String>,
}

impl Plugin for SpillLocalPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-spill-local"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[(
            "cleanupPeriodDays",
            "spill files live with their session and go when it is deleted; there is no periodic cleanup",
        )]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: LocalConfig = config.parse()?;
        if c.root.as_deref().is_some_and(str::is_empty) {
            return Err("spill-local: root must be a non-empty path".into());
        }
        let store = LocalSpillStore::new(ctx.clone(), c.root.map(PathBuf::from));
        ctx.provide(Arc::new(SpillStore(store)))?;
        Ok(())
    }
}

/// `(Omitted <n> bytes. Full formatted result stored at: <locator>. <hint>)`.
fn saved_notice(omitted: usize, spill: &SpillRef) -> String {
    format!(
        "(Omitted {omitted} bytes. Full formatted result stored at: {}. {})",
        spill.locator, spill.retrieval_hint
    )
}

/// The marker when the complete result could not be saved. Not upstream's behaviour (it
/// keeps the whole result inline then); issue #10 asks for a bounded result with a clear
/// marker instead, so one broken spill area cannot flood the context window.
fn unsaved_notice(omitted: usize, reason: &str) -> String {
    format!(
        "(Omitted {omitted} bytes. The complete result could not be saved ({reason}); rerun the tool with narrower arguments to see the omitted part.)"
    )
}

/// Preview plus notice within `cap` bytes, or `None` when even the notice does not fit.
/// The notice's size is reserved at the worst-case count (`total`) so the final notice,
/// priced at the real count, is never longer than what was reserved.
fn bounded(text: &str, cap: usize, notice: impl Fn(usize) -> String) -> Option<String> {
    let reserve = notice(text.len()).len() + 2;
    let budget = cap.saturating_sub(reserve);
    let kept = head_tail(text, budget.div_ceil(2), budget / 2);
    let notice = notice(kept.omitted);
    let replaced = if kept.text.is_empty() {
        notice
    } else {
        format!("{}\n\n{notice}", kept.text)
    };
    (replaced.len() <= cap).then_some(replaced)
}

/// All-text content as one string (blocks joined with nothing), `None` when any block is
/// not text.
fn plain_text(content: &[ContentBlock]) -> Option<String> {
    let mut text = String::new();
    for block in content {
        text.push_str(block.as_text()?);
    }
    Some(text)
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct PolicyConfig {
    max_inline_tokens: Option<Value>,
    max_inline_bytes: Option<Value>,
}

/// What a result may cost inline.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Cap {
    bytes: Option<usize>,
    tokens: Option<u64>,
}

impl Cap {
    /// Whether `text` (one text block) is over the cap.
    fn exceeded_by(&self, text: &str) -> bool {
        self.bytes.is_some_and(|b| text.len() > b)
            || self
                .tokens
                .is_some_and(|t| crate::meter::text_tokens(text) + 4 > t)
    }

    /// The bytes a replacement may take: a text of at most `4 × (tokens − 4)` bytes is
    /// priced at most `tokens` (the meter counts UTF-16 units, never more than bytes).
    fn byte_budget(&self) -> usize {
        let from_tokens = self
            .tokens
            .map(|t| usize::try_from(t.saturating_sub(4).saturating_mul(4)).unwrap_or(usize::MAX));
        match (self.bytes, from_tokens) {
            (Some(a), Some(b)) => a.min(b),
            (Some(a), None) | (None, Some(a)) => a,
            (None, None) => usize::MAX,
        }
    }
}

/// A non-negative whole number from a config value, or an error naming the key.
fn whole_number(key: &str, raw: &Value) -> Result<u64, BoxError> {
    raw.as_u64()
        .or_else(|| {
            raw.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= 9_007_199_254_740_991.0)
                .map(|f| f as u64)
        })
        .ok_or_else(|| {
            format!(
                "spill-policy: {key} must be a non-negative integer (got {})",
                dsh_kernel::json::to_string(raw)
            )
            .into()
        })
}

/// `@deepseek-ai/dsh-spill-policy`: bounds accepted plain-text results of top-level calls
/// (except `read`, whose own windowing is the way back into a spilled file).
pub struct SpillPolicyPlugin;

impl Plugin for SpillPolicyPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-spill-policy"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: PolicyConfig = config.parse()?;
        let cap = Cap {
            bytes: c
                .max_inline_bytes
                .filter(|v| !v.is_null())
                .map(|v| whole_number("maxInlineBytes", &v))
                .transpose()?
                .map(|b| usize::try_from(b).unwrap_or(usize::MAX)),
            tokens: c
                .max_inline_tokens
                .filter(|v| !v.is_null())
                .map(|v| whole_number("maxInlineTokens", &v))
                .transpose()?,
        };
        if cap.bytes.is_none() && cap.tokens.is_none() {
            return Ok(());
        }
        ctx.on_waterfall::<PostExecute>(ListenOptions::PREPEND, move |payload, next| {
            Box::pin(async move {
                let decision = next.run().await?;
                let PostToolDecision::Accept {
                    content,
                    additional_contexts,
                } = decision
                else {
                    return Ok(decision);
                };
                let exec = &payload.exec;
                let effective = content.as_ref().unwrap_or(&payload.result.content);
                let text = match plain_text(effective) {
                    Some(t)
                        if cap.exceeded_by(&t) && exec.parent.is_none() && exec.name != "read" =>
                    {
                        t
                    }
                    _ => {
                        return Ok(PostToolDecision::Accept {
                            content,
                            additional_contexts,
                        });
                    }
                };
                let replaced = spill_replacement(exec, &text, cap.byte_budget()).await;
                Ok(PostToolDecision::Accept {
                    content: match replaced {
                        Some(r) => Some(vec![ContentBlock::text(r)]),
                        None => content,
                    },
                    additional_contexts,
                })
            })
        })?;
        Ok(())
    }
}

/// Saves `text` and builds its bounded replacement; when it cannot be saved, a bounded
/// truncation with a marker. `None` keeps the original (the notice alone exceeds `cap`).
async fn spill_replacement(
    exec: &dsh_tools::ToolExecution,
    text: &str,
    cap: usize,
) -> Option<String> {
    let saved: Result<SpillRef, String> = match (&exec.session, exec.ctx.get::<SpillStore>()) {
        (None, _) => Err("the call has no session".into()),
        (Some(_), None) => Err("no spill store is loaded".into()),
        (Some(session), Some(store)) => store
            .0
            .save_text(SpillRequest {
                session_id: session.id(),
                tool_name: exec.name.clone(),
                call_id: exec.call_id.clone(),
                suggested_name: format!("{}.txt", exec.name),
                content: text.to_string(),
            })
            .await
            .map_err(|e| e.to_string()),
    };
    let replaced = match &saved {
        Ok(spill) => bounded(text, cap, |n| saved_notice(n, spill)),
        Err(reason) => {
            tracing::warn!(tool = %exec.name, "spill-policy: {reason}; truncating the result");
            bounded(text, cap, |n| unsaved_notice(n, reason))
        }
    };
    if replaced.is_none() {
        tracing::warn!(tool = %exec.name, "spill-policy: the spill notice exceeds the inline cap; keeping the inline content");
    }
    replaced
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn spill(locator: &str) -> SpillRef {
        SpillRef {
            locator: locator.into(),
            retrieval_hint: RETRIEVAL_HINT.into(),
        }
    }

    #[test]
    fn the_preview_budget_reserves_the_notice() {
        // The session-query-spill fixture: 1350 bytes under an 800-byte cap with a locator
        // of this length keep 296 head and 295 tail bytes.
        let locator = format!(
            "/tmp/dsh-acp-snap-035d1d054/session-{}/{}-session_event_read.txt",
            "0".repeat(12),
            "a".repeat(12)
        );
        let text: String = (0..1350)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let got = bounded(&text, 800, |n| saved_notice(n, &spill(&locator))).unwrap();
        let expected = format!(
            "{}{}\n\n{}",
            &text[..296],
            &text[1350 - 295..],
            saved_notice(1350 - 296 - 295, &spill(&locator))
        );
        assert_eq!(got, expected);
        assert!(got.len() <= 800);
    }

    #[test]
    fn a_notice_longer_than_the_cap_keeps_nothing() {
        let text = "x".repeat(100);
        assert_eq!(
            bounded(&text, 20, |n| saved_notice(n, &spill("/a/b"))),
            None
        );
    }

    #[test]
    fn an_unsaved_result_is_truncated_with_a_marker() {
        let text = "y".repeat(5000);
        let got = bounded(&text, 400, |n| unsaved_notice(n, "disk full")).unwrap();
        assert!(got.len() <= 400, "{}", got.len());
        assert!(got.starts_with("yyy"));
        assert!(
            got.contains("The complete result could not be saved (disk full)"),
            "{got}"
        );
    }

    #[test]
    fn only_all_text_content_is_flattened() {
        assert_eq!(
            plain_text(&[ContentBlock::text("a"), ContentBlock::text("b")]),
            Some("ab".into())
        );
    }
}
