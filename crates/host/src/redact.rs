//! Secret redaction in free text: what the harness stores for later sessions (memory
//! entries, their proposals) passes through [`redact`] first, so a key that reached the
//! conversation does not outlive it. The rules are the environment scrub's own — secret
//! values this process resolved, URL passwords, credential-shaped names — plus the token
//! shapes providers issue.

use std::sync::OnceLock;

use regex::Regex;

use crate::secrets::{is_secret_name, known_secret_values};

/// What stands in for a removed secret.
pub const REDACTED: &str = "[redacted]";

/// Token shapes issued by common providers, and private key blocks.
fn token_shapes() -> Option<&'static Regex> {
    static SHAPES: OnceLock<Option<Regex>> = OnceLock::new();
    SHAPES.get_or_init(|| {
        let shapes = [
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|\z)",
            r"\bsk-(?:ant-|proj-)?[A-Za-z0-9_\-]{16,}",
            r"\bgh[pousr]_[A-Za-z0-9]{20,}",
            r"\bgithub_pat_[A-Za-z0-9_]{20,}",
            r"\bglpat-[A-Za-z0-9_\-]{20,}",
            r"\bxox[abprs]-[A-Za-z0-9\-]{10,}",
            r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
            r"\bAIza[0-9A-Za-z_\-]{35}",
            r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",
            r"(?i)\bbearer\s+[A-Za-z0-9._~+/\-]{16,}=*",
        ];
        Regex::new(&shapes.join("|")).ok()
    })
    .as_ref()
}

/// `NAME=value`, `NAME: value`, `"NAME": "value"` where NAME is credential-shaped.
fn assignments() -> Option<&'static Regex> {
    static ASSIGN: OnceLock<Option<Regex>> = OnceLock::new();
    ASSIGN.get_or_init(|| {
        Regex::new(r#"(?P<name>\b[A-Za-z_][A-Za-z0-9_.\-]{2,})(?P<sep>"?\s*[:=]\s*"?)(?P<value>[^\s"',;]{6,})"#)
            .ok()
    })
    .as_ref()
}

/// URL user-info passwords (`scheme://user:password@host`).
fn url_passwords() -> Option<&'static Regex> {
    static URL: OnceLock<Option<Regex>> = OnceLock::new();
    URL.get_or_init(|| {
        Regex::new(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s/:@]*:)(?P<password>[^\s/@]+)@").ok()
    })
    .as_ref()
}

/// `text` with every secret it holds replaced by [`REDACTED`], and how many were replaced.
pub fn redact(text: &str) -> (String, usize) {
    let mut count = 0;
    let mut out = text.to_string();
    for value in known_secret_values() {
        let hits = out.matches(value.as_str()).count();
        if hits > 0 {
            count += hits;
            out = out.replace(value.as_str(), REDACTED);
        }
    }
    if let Some(re) = url_passwords() {
        out = re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                count += 1;
                format!("{}{REDACTED}@", &c["head"])
            })
            .into_owned();
    }
    if let Some(re) = token_shapes() {
        out = re
            .replace_all(&out, |_: &regex::Captures<'_>| {
                count += 1;
                REDACTED.to_string()
            })
            .into_owned();
    }
    if let Some(re) = assignments() {
        out = re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                let name = c["name"].trim_start_matches(['-', '.']);
                let value = &c["value"];
                // A word in prose ("token: stored in the vault") is no secret; values have
                // a digit or length.
                let looks_secret = value.len() >= 16 || value.bytes().any(|b| b.is_ascii_digit());
                if is_secret_name(&name.replace(['.', '-'], "_"))
                    && value != REDACTED
                    && looks_secret
                {
                    count += 1;
                    format!("{}{}{REDACTED}", &c["name"], &c["sep"])
                } else {
                    c[0].to_string()
                }
            })
            .into_owned();
    }
    (out, count)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn provider_tokens_assignments_and_url_passwords_are_removed() {
        let (text, n) = redact(
            "use DEEPSEEK_API_KEY=sk-abcdefghijklmnop1234 and postgres://me:hunter22@db/x; token ghp_abcdefghijklmnopqrstuvwx",
        );
        assert_eq!(
            text,
            "use DEEPSEEK_API_KEY=[redacted] and postgres://me:[redacted]@db/x; token [redacted]"
        );
        assert_eq!(n, 3);
    }

    #[test]
    fn ordinary_text_is_unchanged() {
        let plain = "Run the tests with `cargo test --workspace`; PATH=/usr/bin; the key idea: small steps; the token: stored elsewhere. sk-short";
        assert_eq!(redact(plain), (plain.to_string(), 0));
    }

    #[test]
    fn remembered_values_and_key_blocks_go_too() {
        crate::secrets::remember_secret("custom-secret-1234567");
        let (text, n) = redact(
            "value custom-secret-1234567 here\n-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\nafter",
        );
        assert_eq!(text, "value [redacted] here\n[redacted]\nafter");
        assert_eq!(n, 2);
    }
}
