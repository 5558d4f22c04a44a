//! `maxResponseBytes`: how many bytes one model response (the body of one attempt, as it
//! arrives on the wire) may carry before the attempt is stopped with `RESPONSE_TOO_LARGE`.
//!
//! Every route has it (`llm-deepseek`, each `openai-compatible` and `llm-pi-ai` profile).
//! The default, 128 MiB, is twice the wire size of the longest answer the largest default
//! output cap allows (256,000 tokens in DeepSeek's chat-completions framing, about 250 bytes
//! an event, is ~64 MB; the Messages and Responses framings are smaller), so no answer the
//! model is allowed to give is cut, while a provider that never stops is stopped long before
//! the process runs out of memory.

use dsh_llm::{LlmError, codes};

/// The default bound (128 MiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 128 << 20;

/// JavaScript's largest safe integer: the settings files are shared with upstream.
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// The bound of one route and where it is set (for the error message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ResponseLimit {
    pub bytes: u64,
    /// Where the setting lives, e.g. `in the llm-deepseek settings`.
    pub setting: String,
}

impl ResponseLimit {
    /// The failure of an attempt whose body passed the bound.
    pub(crate) fn exceeded(&self, vendor: &str) -> LlmError {
        LlmError::new(
            codes::RESPONSE_TOO_LARGE,
            format!(
                "{vendor} sent a response larger than {} ({} bytes), so it was stopped and nothing \
                 of it was used; the limit is maxResponseBytes {}: raise it if the model is expected \
                 to answer at this length",
                human_bytes(self.bytes),
                self.bytes,
                self.setting
            ),
        )
    }
}

/// Validates a configured `maxResponseBytes` (absent: the default).
pub(crate) fn resolve_max_response_bytes(value: Option<u64>, at: &str) -> Result<u64, String> {
    match value {
        None => Ok(DEFAULT_MAX_RESPONSE_BYTES),
        Some(n) if (1..=MAX_SAFE_INTEGER).contains(&n) => Ok(n),
        Some(_) => Err(format!(
            "{at} maxResponseBytes must be a positive integer (bytes one model response may carry)"
        )),
    }
}

/// `128 MiB`, `1.5 KiB`, `512 bytes`.
fn human_bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    for (size, unit) in UNITS {
        if n >= size {
            let whole = n / size;
            let tenths = (n % size) * 10 / size;
            return if tenths == 0 {
                format!("{whole} {unit}")
            } else {
                format!("{whole}.{tenths} {unit}")
            };
        }
    }
    format!("{n} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_setting_is_validated_and_defaults_to_128_mib() {
        assert_eq!(
            resolve_max_response_bytes(None, "x:"),
            Ok(134_217_728),
            "the default"
        );
        assert_eq!(resolve_max_response_bytes(Some(1), "x:"), Ok(1));
        assert_eq!(
            resolve_max_response_bytes(Some(0), "llm-deepseek:"),
            Err("llm-deepseek: maxResponseBytes must be a positive integer (bytes one model response may carry)".into())
        );
        assert!(resolve_max_response_bytes(Some(MAX_SAFE_INTEGER + 1), "x:").is_err());
    }

    #[test]
    fn the_error_names_the_limit_and_the_setting() {
        let limit = ResponseLimit {
            bytes: 1536,
            setting: "in the llm-deepseek settings".into(),
        };
        let e = limit.exceeded("DeepSeek");
        assert_eq!(e.code(), codes::RESPONSE_TOO_LARGE);
        assert_eq!(
            e.to_string(),
            "DeepSeek sent a response larger than 1.5 KiB (1536 bytes), so it was stopped and nothing \
             of it was used; the limit is maxResponseBytes in the llm-deepseek settings: raise it if \
             the model is expected to answer at this length"
        );
        assert_eq!(human_bytes(128 << 20), "128 MiB");
        assert_eq!(human_bytes(999), "999 bytes");
    }
}
