//! Authentication: the per-launch token in the printed URL is exchanged for a signed,
//! HttpOnly, SameSite=Strict cookie bound to the request authority (upstream 0.2's format,
//! so a cookie minted by either implementation for the same `$DSH_HOME` verifies in both).
//!
//! The token signs in one browser, once: the first exchange spends it, so a copy of the URL
//! that leaks later (shell history, a screenshot, a terminal log) signs nobody in. A browser
//! that already holds a valid cookie is sent on without spending it; anyone else gets a page
//! saying the link was used and how to get a new one (restart `dsh web`).
//!
//! Cookie: `dsh-auth-<b64url(SHA-256(authority))>` =
//! `v1.<b64url(JSON {version, authority, issuedAt, expiresAt})>.<b64url(HMAC-SHA256(secret, body))>`.
//! The signing secret lives in `.credentials.yaml` under
//! `records.client-connection/browser-session`, so a cookie survives restarts on the same
//! port. Tokens are compared in constant time.

use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::{digest, hmac, rand};
use serde_json::{Value, json};

/// The credentials record holding the signing secret (upstream's key).
pub const SECRET_RECORD: &str = "client-connection/browser-session";

/// Default cookie lifetime (upstream's `cookieMaxAgeDays`).
pub const DEFAULT_MAX_AGE_DAYS: u64 = 30;

/// Why authentication could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The system random source failed. Not retryable.
    #[error("cannot draw random bytes for the launch token")]
    Random,
    /// The stored secret record is malformed. Not retryable until fixed.
    #[error(
        "the browser-session secret in .credentials.yaml is malformed ({0}); remove the record to mint a new one"
    )]
    BadSecret(String),
}

/// 32 random bytes, base64url without padding (43 characters).
pub fn random_token() -> Result<String, AuthError> {
    let mut bytes = [0u8; 32];
    rand::SecureRandom::fill(&rand::SystemRandom::new(), &mut bytes)
        .map_err(|_| AuthError::Random)?;
    Ok(B64.encode(bytes))
}

/// The record stored for a fresh secret.
pub fn new_secret_record() -> Result<Value, AuthError> {
    Ok(json!({"kind": "grant", "payload": {"version": 1, "secret": random_token()?}}))
}

/// The secret of a stored record.
pub fn secret_from_record(record: &Value) -> Result<Vec<u8>, AuthError> {
    let text = record
        .pointer("/payload/secret")
        .and_then(Value::as_str)
        .ok_or_else(|| AuthError::BadSecret("no payload.secret".into()))?;
    let bytes = B64
        .decode(text)
        .map_err(|e| AuthError::BadSecret(e.to_string()))?;
    if bytes.len() < 16 {
        return Err(AuthError::BadSecret(
            "the secret is shorter than 16 bytes".into(),
        ));
    }
    Ok(bytes)
}

/// The launch token and the cookie signer.
pub struct Auth {
    token: String,
    key: hmac::Key,
    /// Compares tokens without leaking timing: both sides are HMACed under this key.
    compare_key: hmac::Key,
    max_age_ms: u64,
    /// Set by the first successful exchange.
    spent: AtomicBool,
    /// Browsers reach the page over HTTPS: cookies carry `Secure`.
    secure: bool,
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth").finish_non_exhaustive()
    }
}

/// What a `?token=` exchange yields.
#[derive(Debug, PartialEq, Eq)]
pub enum Exchange {
    /// The token matches and was not used yet: set this cookie (`Set-Cookie` value).
    Grant(String),
    /// [`Auth::peek`]: the token matches and is not spent (nothing was minted).
    Unspent,
    /// The token matches but already signed a browser in.
    Spent,
    /// Wrong or repeated token.
    Refuse,
}

impl Auth {
    pub fn new(token: String, secret: &[u8], max_age_days: u64) -> Result<Self, AuthError> {
        let mut compare = [0u8; 32];
        rand::SecureRandom::fill(&rand::SystemRandom::new(), &mut compare)
            .map_err(|_| AuthError::Random)?;
        Ok(Self {
            token,
            key: hmac::Key::new(hmac::HMAC_SHA256, secret),
            compare_key: hmac::Key::new(hmac::HMAC_SHA256, &compare),
            max_age_ms: max_age_days.saturating_mul(86_400_000),
            spent: AtomicBool::new(false),
            secure: false,
        })
    }

    /// Marks the cookies `Secure` (the page is served over HTTPS).
    pub fn secure(mut self, on: bool) -> Self {
        self.secure = on;
        self
    }

    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether `given` is the launch token (constant time).
    pub fn token_matches(&self, given: &str) -> bool {
        let expected = hmac::sign(&self.compare_key, self.token.as_bytes());
        hmac::verify(&self.compare_key, given.as_bytes(), expected.as_ref()).is_ok()
    }

    /// The cookie name for a request authority.
    pub fn cookie_name(authority: &str) -> String {
        let hash = digest::digest(&digest::SHA256, authority.as_bytes());
        format!("dsh-auth-{}", B64.encode(hash.as_ref()))
    }

    /// Exchanges the query's `token` values for a cookie on `authority`; the first
    /// successful exchange spends the token (of concurrent ones exactly one wins).
    pub fn exchange(&self, tokens: &[String], authority: &str, now_ms: u64) -> Exchange {
        match tokens {
            [one] if self.token_matches(one) => {
                if self.spent.swap(true, Ordering::AcqRel) {
                    Exchange::Spent
                } else {
                    Exchange::Grant(self.set_cookie(authority, now_ms))
                }
            }
            _ => Exchange::Refuse,
        }
    }

    /// What an exchange would answer, without spending the token (for `HEAD`).
    pub fn peek(&self, tokens: &[String]) -> Exchange {
        match tokens {
            [one] if self.token_matches(one) => match self.spent.load(Ordering::Acquire) {
                true => Exchange::Spent,
                false => Exchange::Unspent,
            },
            _ => Exchange::Refuse,
        }
    }

    /// A signed cookie value for `authority`, issued at `now_ms`.
    pub fn mint(&self, authority: &str, now_ms: u64) -> String {
        let payload = json!({
            "version": 1,
            "authority": authority,
            "issuedAt": now_ms,
            "expiresAt": now_ms + self.max_age_ms,
        });
        let body = B64.encode(payload.to_string());
        let tag = hmac::sign(&self.key, body.as_bytes());
        format!("v1.{body}.{}", B64.encode(tag.as_ref()))
    }

    fn set_cookie(&self, authority: &str, now_ms: u64) -> String {
        let expires =
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(now_ms + self.max_age_ms);
        format!(
            "{}={}; Max-Age={}; Path=/; Expires={}; HttpOnly; SameSite=Strict{}",
            Self::cookie_name(authority),
            self.mint(authority, now_ms),
            self.max_age_ms / 1000,
            httpdate::fmt_http_date(expires),
            if self.secure { "; Secure" } else { "" },
        )
    }

    /// Whether the `Cookie` header values carry a valid cookie for `authority`.
    pub fn verify_cookies<'a>(
        &self,
        cookie_headers: impl Iterator<Item = &'a str>,
        authority: &str,
        now_ms: u64,
    ) -> bool {
        let name = Self::cookie_name(authority);
        cookie_headers
            .flat_map(|h| h.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(n, _)| *n == name)
            .any(|(_, value)| self.verify(value, authority, now_ms))
    }

    /// Verifies one cookie value for `authority` at `now_ms`.
    pub fn verify(&self, value: &str, authority: &str, now_ms: u64) -> bool {
        let Some(rest) = value.strip_prefix("v1.") else {
            return false;
        };
        let Some((body, sig)) = rest.split_once('.') else {
            return false;
        };
        let Ok(sig) = B64.decode(sig) else {
            return false;
        };
        if hmac::verify(&self.key, body.as_bytes(), &sig).is_err() {
            return false;
        }
        let Some(payload) = B64
            .decode(body)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            return false;
        };
        let num = |k: &str| payload.get(k).and_then(Value::as_u64);
        match (num("version"), num("issuedAt"), num("expiresAt")) {
            (Some(1), Some(issued), Some(expires)) => {
                payload.get("authority").and_then(Value::as_str) == Some(authority)
                    && issued <= now_ms
                    && now_ms < expires
                    && expires.saturating_sub(issued) <= self.max_age_ms
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn auth() -> Auth {
        Auth::new("tok".into(), b"0123456789abcdef0123456789abcdef", 30).unwrap()
    }

    #[test]
    fn the_cookie_matches_upstreams_format_and_verifies() {
        let a = auth();
        let v = a.mint("127.0.0.1:3080", 1_000);
        let parts: Vec<&str> = v.split('.').collect();
        assert_eq!(parts.len(), 3);
        assert_eq!(parts[0], "v1");
        let payload: Value = serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap();
        assert_eq!(
            payload.to_string(),
            r#"{"version":1,"authority":"127.0.0.1:3080","issuedAt":1000,"expiresAt":2592001000}"#
        );
        // The signature is HMAC-SHA256 over the base64url body text.
        let tag = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, b"0123456789abcdef0123456789abcdef"),
            parts[1].as_bytes(),
        );
        assert_eq!(parts[2], B64.encode(tag.as_ref()));
        assert!(a.verify(&v, "127.0.0.1:3080", 2_000));
        assert!(
            !a.verify(&v, "localhost:3080", 2_000),
            "bound to its authority"
        );
        assert!(!a.verify(&v, "127.0.0.1:3080", 999), "not before issue");
        assert!(!a.verify(&v, "127.0.0.1:3080", 2_592_001_000), "expired");
        let mut tampered = v.clone();
        tampered.replace_range(5..6, if &v[5..6] == "A" { "B" } else { "A" });
        assert!(!a.verify(&tampered, "127.0.0.1:3080", 2_000));
        let other = Auth::new("tok".into(), b"another secret, another signature", 30).unwrap();
        assert!(!other.verify(&v, "127.0.0.1:3080", 2_000));
        assert_eq!(
            Auth::cookie_name("127.0.0.1:3080"),
            format!(
                "dsh-auth-{}",
                B64.encode(digest::digest(&digest::SHA256, b"127.0.0.1:3080").as_ref())
            )
        );
    }

    #[test]
    fn the_exchange_needs_exactly_one_matching_token() {
        let a = auth();
        assert_eq!(a.exchange(&["nope".into()], "h:1", 0), Exchange::Refuse);
        assert_eq!(
            a.exchange(&["tok".into(), "tok".into()], "h:1", 0),
            Exchange::Refuse
        );
        assert_eq!(a.exchange(&[], "h:1", 0), Exchange::Refuse);
        assert_eq!(a.peek(&["tok".into()]), Exchange::Unspent);
        let Exchange::Grant(cookie) = a.exchange(&["tok".into()], "h:1", 0) else {
            panic!("granted");
        };
        assert_eq!(
            a.exchange(&["tok".into()], "h:1", 0),
            Exchange::Spent,
            "the token works once"
        );
        assert_eq!(a.exchange(&["tok".into()], "h:2", 9), Exchange::Spent);
        assert_eq!(a.peek(&["tok".into()]), Exchange::Spent);
        assert_eq!(a.exchange(&["nope".into()], "h:1", 0), Exchange::Refuse);
        assert!(cookie.starts_with(&format!("{}=v1.", Auth::cookie_name("h:1"))));
        assert!(cookie.ends_with(
            "; Max-Age=2592000; Path=/; Expires=Sat, 31 Jan 1970 00:00:00 GMT; HttpOnly; SameSite=Strict"
        ));
        let value = cookie.split(';').next().unwrap().split_once('=').unwrap().1;
        let header = format!("other=1; {}={value}", Auth::cookie_name("h:1"));
        assert!(a.verify_cookies([header.as_str()].into_iter(), "h:1", 5));
        assert!(!a.verify_cookies(["x=y"].into_iter(), "h:1", 5));
        assert!(random_token().unwrap().len() == 43);
    }
}
