//! Non-2xx responses → [`LlmError`], in upstream's classification order.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use dsh_llm::{LlmError, LlmFailure, codes, is_context_window_exceeded};
use regex::Regex;
use serde_json::Value;

/// The parts of a failed response the classifier reads.
pub(crate) struct HttpFailure<'a> {
    pub status: u16,
    /// `retry-after` header value, if any.
    pub retry_after: Option<&'a str>,
    /// `x-request-id` header value (present, possibly empty), if any.
    pub x_request_id: Option<&'a str>,
    /// `x-deepseek-request-id` header value, if any.
    pub x_deepseek_request_id: Option<&'a str>,
    pub body: &'a str,
}

/// The stable code of a non-2xx status, first match wins: 401/403 `AUTH`; 413
/// `INVALID_REQUEST`; quota wording (any status) `QUOTA`; 429 `RATE_LIMIT`; 400
/// `CONTEXT_WINDOW_EXCEEDED` on overflow wording, else `INVALID_REQUEST`; ≥500 `SERVER`;
/// otherwise `HTTP_<status>`.
pub(crate) fn http_error_code(status: u16, detail: &str) -> String {
    match status {
        401 | 403 => codes::AUTH.into(),
        413 => codes::INVALID_REQUEST.into(),
        _ if is_quota_exceeded(detail) => codes::QUOTA.into(),
        429 => codes::RATE_LIMIT.into(),
        400 if is_context_window_exceeded(detail) => codes::CONTEXT_WINDOW_EXCEEDED.into(),
        400 => codes::INVALID_REQUEST.into(),
        500.. => codes::SERVER.into(),
        _ => format!("HTTP_{status}"),
    }
}

/// Classifies a failed response. The message is the provider's `error.message` when
/// non-empty, else `<vendor> API error (HTTP <status>)`.
pub(crate) fn classify(vendor: &str, failure: &HttpFailure<'_>) -> LlmError {
    let provider_error = serde_json::from_str::<Value>(failure.body)
        .ok()
        .and_then(|v| v.get("error").cloned())
        .filter(Value::is_object);
    let field = |name: &str| provider_error.as_ref().and_then(|e| e.get(name));
    let message = match field("message") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => format!("{vendor} API error (HTTP {})", failure.status),
    };
    // Truthy code/type/message values, as text.
    let detail = ["code", "type", "message"]
        .into_iter()
        .filter_map(|name| match field(name)? {
            Value::String(s) if !s.is_empty() => Some(s.clone()),
            Value::Number(n) if n.as_f64() != Some(0.0) => Some(n.to_string()),
            Value::Bool(true) => Some("true".into()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join(" ");
    let request_id = match failure.x_request_id {
        Some(id) => Some(id),
        None => failure.x_deepseek_request_id,
    }
    .filter(|id| !id.is_empty());
    LlmError::from_failure(LlmFailure {
        message,
        code: http_error_code(failure.status, &detail),
        status: Some(failure.status),
        provider_retry_after_ms: failure
            .retry_after
            .and_then(|v| retry_after_ms(v, SystemTime::now())),
        request_id: request_id.map(str::to_owned),
    })
}

/// Whether provider wording identifies an exhausted account quota (case-insensitive; words
/// separated by spaces, `_` or `-`), as opposed to a transient rate limit.
pub(crate) fn is_quota_exceeded(detail: &str) -> bool {
    static PATTERNS: OnceLock<Vec<Regex>> = OnceLock::new();
    let patterns = PATTERNS.get_or_init(|| {
        // Between two words: any run of whitespace, `_` and `-`.
        const GAP: &str = r"[\s_-]+";
        [
            format!(r"(?i)\binsufficient{GAP}(?:quota|balance|credits?)\b"),
            format!(r"(?i)\b(?:quota|usage{GAP}limit){GAP}(?:exceeded|exhausted|reached)\b"),
            format!(r"(?i)\bexceed(?:ed|s)?{GAP}(?:(?:your|the){GAP})?(?:current{GAP})?quota\b"),
            format!(r"(?i)\b(?:balance|credits?){GAP}(?:exhausted|depleted)\b"),
            format!(r"(?i)\bout{GAP}of{GAP}(?:credits?|budget)\b"),
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    });
    patterns.iter().any(|r| r.is_match(detail))
}

/// `Retry-After` in milliseconds: all digits are seconds; otherwise an HTTP-date minus
/// `now`. Kept only when positive.
pub(crate) fn retry_after_ms(value: &str, now: SystemTime) -> Option<u64> {
    if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        return value
            .parse::<u64>()
            .ok()?
            .checked_mul(1000)
            .filter(|ms| *ms > 0);
    }
    let at = parse_http_date(value)?;
    let now_ms = u64::try_from(now.duration_since(UNIX_EPOCH).ok()?.as_millis()).ok()?;
    at.checked_mul(1000)?
        .checked_sub(now_ms)
        .filter(|ms| *ms > 0)
}

/// Parses an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, and the two obsolete forms HTTP
/// still allows) into Unix seconds.
fn parse_http_date(value: &str) -> Option<u64> {
    let at = httpdate::parse_http_date(value.trim()).ok()?;
    Some(at.duration_since(UNIX_EPOCH).ok()?.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::time::Duration;

    fn failure(status: u16, body: &str) -> LlmFailure {
        let f = HttpFailure {
            status,
            retry_after: None,
            x_request_id: None,
            x_deepseek_request_id: None,
            body,
        };
        classify("DeepSeek", &f).failure
    }

    fn err(message: &str) -> String {
        serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "code": null}}).to_string()
    }

    #[test]
    fn every_classification_in_upstream_order() {
        let cases: Vec<(u16, String, &str, &str)> = vec![
            (
                401,
                err("Authentication Fails"),
                "AUTH",
                "Authentication Fails",
            ),
            (403, err("insufficient quota"), "AUTH", "insufficient quota"),
            (
                413,
                err("insufficient balance"),
                "INVALID_REQUEST",
                "insufficient balance",
            ),
            (
                402,
                err("Insufficient Balance"),
                "QUOTA",
                "Insufficient Balance",
            ),
            (
                429,
                err("You exceeded your current quota"),
                "QUOTA",
                "You exceeded your current quota",
            ),
            (500, err("credits exhausted"), "QUOTA", "credits exhausted"),
            (
                429,
                err("Rate limit reached"),
                "RATE_LIMIT",
                "Rate limit reached",
            ),
            (
                400,
                err("This model's maximum context length is 131072 tokens"),
                "CONTEXT_WINDOW_EXCEEDED",
                "This model's maximum context length is 131072 tokens",
            ),
            (400, err("bad tools"), "INVALID_REQUEST", "bad tools"),
            (
                500,
                String::new(),
                "SERVER",
                "DeepSeek API error (HTTP 500)",
            ),
            (
                503,
                "<html>gateway</html>".into(),
                "SERVER",
                "DeepSeek API error (HTTP 503)",
            ),
            (402, err("Payment required"), "HTTP_402", "Payment required"),
            (
                404,
                "{\"error\":{\"message\":\"\"}}".into(),
                "HTTP_404",
                "DeepSeek API error (HTTP 404)",
            ),
            (
                422,
                "{\"error\":\"plain string\"}".into(),
                "HTTP_422",
                "DeepSeek API error (HTTP 422)",
            ),
        ];
        for (status, body, code, message) in cases {
            let mut expected = LlmFailure::new(code, message);
            expected.status = Some(status);
            assert_eq!(failure(status, &body), expected, "{status} {body}");
        }
    }

    #[test]
    fn quota_and_overflow_read_code_and_type_too() {
        let body = r#"{"error":{"message":"denied","type":"insufficient_quota","code":"x"}}"#;
        assert_eq!(failure(429, body).code, "QUOTA");
        let body = r#"{"error":{"message":"bad","code":"context_length_exceeded"}}"#;
        assert_eq!(failure(400, body).code, "CONTEXT_WINDOW_EXCEEDED");
        // Overflow wording only counts on a 400.
        assert_eq!(failure(413, body).code, "INVALID_REQUEST");
        assert_eq!(failure(422, body).code, "HTTP_422");
    }

    #[test]
    fn quota_wording() {
        for yes in [
            "Insufficient_Balance",
            "quota-exceeded",
            "usage limit reached",
            "exceeds the quota",
            "balance depleted",
            "out of budget",
            "OUT OF CREDIT",
        ] {
            assert!(is_quota_exceeded(yes), "{yes}");
        }
        for no in [
            "rate limit exceeded",
            "insufficiently quoted",
            "quotas exceeded",
            "outof credits",
        ] {
            assert!(!is_quota_exceeded(no), "{no}");
        }
    }

    #[test]
    fn retry_after_and_request_id_extras() {
        let f = HttpFailure {
            status: 429,
            retry_after: Some("7"),
            x_request_id: None,
            x_deepseek_request_id: Some("ds-1"),
            body: "",
        };
        let failure = classify("DeepSeek", &f).failure;
        assert_eq!(
            failure,
            LlmFailure {
                message: "DeepSeek API error (HTTP 429)".into(),
                code: "RATE_LIMIT".into(),
                status: Some(429),
                provider_retry_after_ms: Some(7000),
                request_id: Some("ds-1".into()),
            }
        );
        // A present but empty x-request-id shadows the DeepSeek header (upstream `??`).
        let f = HttpFailure {
            x_request_id: Some(""),
            retry_after: Some("0"),
            ..f
        };
        let failure = classify("DeepSeek", &f).failure;
        assert_eq!(
            (failure.request_id, failure.provider_retry_after_ms),
            (None, None)
        );
    }

    #[test]
    fn retry_after_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            retry_after_ms("Sun, 06 Nov 1994 08:49:40 GMT", now),
            Some(3000)
        );
        assert_eq!(retry_after_ms("Sun, 06 Nov 1994 08:49:37 GMT", now), None);
        assert_eq!(retry_after_ms("Sun, 06 Nov 1994 08:49:30 GMT", now), None);
        assert_eq!(
            retry_after_ms("Thu, 01 Jan 2026 00:00:00 GMT", UNIX_EPOCH),
            Some(1_767_225_600_000)
        );
        assert_eq!(retry_after_ms("soon", now), None);
        assert_eq!(retry_after_ms("1.5", now), None);
        assert_eq!(retry_after_ms("99999999999999999999", now), None);
    }
}
