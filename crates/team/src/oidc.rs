//! Sign-in through an OpenID Connect provider: `dsh serve --oidc-issuer <url> --oidc-audience
//! <client id>` accepts the provider's signed JWTs (ID tokens, or access tokens in JWT form)
//! as bearer tokens, and maps each to the account named by one of its claims (`sub` unless
//! `--oidc-claim` says otherwise). The account must exist (`dsh team user add`): the provider
//! says who someone is, the store says what they may see.
//!
//! The signing keys come from the issuer's discovery document (`/.well-known/openid-
//! configuration`, whose `issuer` must be the configured one) and its `jwks_uri`; they are
//! fetched on first use and again when a token names a key not seen yet (at most once a
//! minute). Only asymmetric keys count (RSA: RS*/PS*, EC: ES256/ES384), the algorithm must be
//! one of its key's kind, and `iss`, `aud` and `exp` are required and checked (`nbf` too when
//! present), with a minute of clock leeway.

use std::time::{Duration, Instant};

use jsonwebtoken::jwk::{AlgorithmParameters, Jwk, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

/// How `dsh serve` checks provider tokens.
#[derive(Clone, Debug)]
pub struct OidcOptions {
    /// The issuer, exactly as its tokens' `iss` spell it.
    pub issuer: String,
    /// The audience tokens must be for (the client id dsh is registered under).
    pub audience: String,
    /// The claim whose string value names the account.
    pub claim: String,
}

/// How long a key set stays current when a token names a key it lacks.
const REFETCH_AFTER: Duration = Duration::from_secs(60);

/// How long a key set is trusted at all: a key the provider withdrew stops counting then.
const MAX_KEY_AGE: Duration = Duration::from_secs(3600);

/// After a failed fetch, tokens are refused without asking the provider for this long.
const FAILED_FETCH_BACKOFF: Duration = Duration::from_secs(10);

/// Why a provider token was refused: what the caller is told, and what the log gets.
#[derive(Debug)]
pub struct Refusal {
    pub public: String,
    pub detail: String,
}

impl Refusal {
    fn token(why: String) -> Self {
        Self {
            public: why.clone(),
            detail: why,
        }
    }
}

const FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a discovery document or key set may weigh.
const MAX_DOCUMENT_BYTES: usize = 1 << 20;

/// A verifier of one issuer's tokens.
pub struct Oidc {
    options: OidcOptions,
    client: reqwest::Client,
    keys: tokio::sync::Mutex<Keys>,
}

#[derive(Default)]
struct Keys {
    set: Option<(JwkSet, Instant)>,
    failed_at: Option<Instant>,
}

/// Whether a bearer token has the shape of a JWT (three base64url parts, a JSON header).
pub fn looks_like_jwt(token: &str) -> bool {
    token.starts_with("eyJ") && token.split('.').count() == 3
}

impl Oidc {
    pub fn new(options: OidcOptions) -> Result<Self, String> {
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| format!("OIDC: cannot build an HTTP client: {e}"))?;
        Ok(Self {
            options,
            client,
            keys: tokio::sync::Mutex::new(Keys::default()),
        })
    }

    /// The account a provider token names, or why it is refused.
    pub async fn account(&self, token: &str) -> Result<String, Refusal> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| Refusal::token(format!("header: {e}")))?;
        let jwk = self.key(header.kid.as_deref()).await?;
        self.check(token, &header, &jwk).map_err(Refusal::token)
    }

    fn check(
        &self,
        token: &str,
        header: &jsonwebtoken::Header,
        jwk: &Jwk,
    ) -> Result<String, String> {
        let allowed: &[Algorithm] = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => &[
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
            ],
            AlgorithmParameters::EllipticCurve(_) => &[Algorithm::ES256, Algorithm::ES384],
            _ => return Err("the issuer's key is not an RSA or EC key".into()),
        };
        if !allowed.contains(&header.alg) {
            return Err(format!(
                "algorithm {:?} does not fit the issuer's key",
                header.alg
            ));
        }
        let key = DecodingKey::from_jwk(jwk).map_err(|e| format!("the issuer's key: {e}"))?;
        let mut validation = Validation::new(header.alg);
        validation.set_issuer(&[&self.options.issuer]);
        validation.set_audience(&[&self.options.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<serde_json::Map<String, Value>>(token, &key, &validation)
            .map_err(|e| format!("token: {e}"))?;
        match data.claims.get(&self.options.claim) {
            Some(Value::String(name))
                if !name.is_empty()
                    && name.len() <= crate::auth::MAX_NAME_BYTES
                    && !name.contains('\0') =>
            {
                Ok(name.clone())
            }
            _ => Err(format!(
                "the token has no string claim {:?}",
                self.options.claim
            )),
        }
    }

    /// The issuer's key `kid` (with no `kid`: its only key), fetching the set when needed:
    /// first use, a key not seen yet (at most once a minute), a set older than an hour.
    async fn key(&self, kid: Option<&str>) -> Result<Jwk, Refusal> {
        let unknown = || Refusal::token(format!("the issuer has no key {kid:?}"));
        let mut keys = self.keys.lock().await;
        if let Some((set, fetched)) = keys.set.as_ref()
            && fetched.elapsed() < MAX_KEY_AGE
        {
            if let Some(k) = pick(set, kid) {
                return Ok(k);
            }
            if fetched.elapsed() < REFETCH_AFTER {
                return Err(unknown());
            }
        }
        if keys
            .failed_at
            .is_some_and(|t| t.elapsed() < FAILED_FETCH_BACKOFF)
        {
            return Err(Refusal {
                public: "the issuer's keys are unavailable".into(),
                detail: "the issuer's keys are unavailable (a fetch failed moments ago)".into(),
            });
        }
        match self.fetch_keys().await {
            Ok(set) => {
                let found = pick(&set, kid);
                keys.set = Some((set, Instant::now()));
                keys.failed_at = None;
                found.ok_or_else(unknown)
            }
            Err(e) => {
                keys.failed_at = Some(Instant::now());
                Err(Refusal {
                    public: "the issuer's keys are unavailable".into(),
                    detail: e,
                })
            }
        }
    }

    async fn fetch_keys(&self) -> Result<JwkSet, String> {
        let discovery_url = format!(
            "{}/.well-known/openid-configuration",
            self.options.issuer.trim_end_matches('/')
        );
        let discovery: Value = self.get_json(&discovery_url).await?;
        if discovery.get("issuer").and_then(Value::as_str) != Some(self.options.issuer.as_str()) {
            return Err(format!(
                "{discovery_url} names issuer {}, not {:?}",
                discovery.get("issuer").unwrap_or(&Value::Null),
                self.options.issuer
            ));
        }
        let Some(jwks_uri) = discovery.get("jwks_uri").and_then(Value::as_str) else {
            return Err(format!("{discovery_url} has no jwks_uri"));
        };
        let set: Value = self.get_json(jwks_uri).await?;
        serde_json::from_value(set).map_err(|e| format!("{jwks_uri}: not a key set: {e}"))
    }

    async fn get_json(&self, url: &str) -> Result<Value, String> {
        let mut resp = self
            .client
            .get(url)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{url}: HTTP {}", resp.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| format!("{url}: {e}"))? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_DOCUMENT_BYTES {
                return Err(format!("{url}: over {MAX_DOCUMENT_BYTES} bytes"));
            }
        }
        serde_json::from_slice(&body).map_err(|e| format!("{url}: not JSON: {e}"))
    }
}

fn pick(set: &JwkSet, kid: Option<&str>) -> Option<Jwk> {
    match kid {
        Some(kid) => set.find(kid).cloned(),
        None if set.keys.len() == 1 => set.keys.first().cloned(),
        None => None,
    }
}
