//! What adapters get from their host: credential, settings and environment lookups.

use std::sync::Arc;

use dsh_llm::{LlmError, codes};
use serde_json::Value;

/// Resolves a credential reference (e.g. `DEEPSEEK_API_KEY`) to its value, once per
/// request. `None` means "not set"; `Some("")` is a set-but-blank value.
pub type ApiKeyResolver = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Returns the live settings section of the adapter (e.g. `llm-deepseek:` of
/// `settings.yaml`), re-read once per request; `Value::Null` when there is none.
pub type SettingsSource = Arc<dyn Fn() -> Value + Send + Sync>;

/// Looks up a launch-environment variable (used for `DEEPSEEK_BASE_URL`).
pub type EnvLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Returns the anonymous installation id sent as `x-deepseek-harness-user-id`.
pub type UserIdSource = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Returns the request-extension registry when a row provides one (looked up per request,
/// so its row may load after the adapter's).
pub type ExtensionsSource = Arc<dyn Fn() -> Option<Arc<dsh_llm::RequestExtensions>> + Send + Sync>;

/// Host lookups an adapter is constructed with.
#[derive(Clone)]
pub struct ProviderDeps {
    pub api_key: ApiKeyResolver,
    /// Live settings layered over the row config; `None` means the row config only.
    pub settings: Option<SettingsSource>,
    pub env: EnvLookup,
    /// The DeepSeek adapter sends `x-deepseek-harness-user-id` when this yields an id.
    pub user_id: Option<UserIdSource>,
    /// Where the live settings come from (`/home/u/.dsh/settings.yaml: section "llm-deepseek"`),
    /// named by errors a bad section causes.
    pub settings_origin: Option<String>,
    /// Extra request fields other plugins contribute (the DeepSeek adapter sends them).
    pub extensions: Option<ExtensionsSource>,
}

impl ProviderDeps {
    /// Deps with the given key resolver, no live settings, the process environment and no
    /// user id.
    pub fn new(api_key: ApiKeyResolver) -> Self {
        Self {
            api_key,
            settings: None,
            env: Arc::new(|name: &str| std::env::var(name).ok()),
            user_id: None,
            settings_origin: None,
            extensions: None,
        }
    }

    /// Resolves keys from the process environment (non-empty values only).
    pub fn from_process_env() -> Self {
        Self::new(Arc::new(|name: &str| {
            dsh_host::environ::secret_var(name).filter(|v| !v.is_empty())
        }))
    }

    pub fn with_settings(mut self, settings: SettingsSource) -> Self {
        self.settings = Some(settings);
        self
    }

    pub fn with_settings_origin(mut self, origin: String) -> Self {
        self.settings_origin = Some(origin);
        self
    }

    pub fn with_env(mut self, env: EnvLookup) -> Self {
        self.env = env;
        self
    }

    pub fn with_extensions(mut self, extensions: ExtensionsSource) -> Self {
        self.extensions = Some(extensions);
        self
    }

    pub fn with_user_id(mut self, user_id: UserIdSource) -> Self {
        self.user_id = Some(user_id);
        self
    }
}

impl std::fmt::Debug for ProviderDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderDeps")
            .field("settings", &self.settings.is_some())
            .field("user_id", &self.user_id.is_some())
            .finish_non_exhaustive()
    }
}

/// Checks a resolved key: trimmed, it must be non-empty and printable ASCII
/// (`[\x21-\x7E]`, what an HTTP header can carry); otherwise `INVALID_CREDENTIAL`.
/// Returns the trimmed key.
pub(crate) fn usable_api_key(
    raw: &str,
    package: &str,
    reference: &str,
) -> Result<String, LlmError> {
    let key = raw.trim();
    if key.is_empty() {
        return Err(LlmError::new(
            codes::INVALID_CREDENTIAL,
            format!(
                "{package}: {reference} holds only whitespace, not an API key; set {reference} to the key \
                 itself, with the credentials service (the Models page of dsh web does that) or in the environment \
                 dsh starts from"
            ),
        ));
    }
    if !key.bytes().all(|b| (0x21..=0x7E).contains(&b)) {
        return Err(LlmError::new(
            codes::INVALID_CREDENTIAL,
            format!(
                "{package}: the API key in {reference} has characters that cannot go into an HTTP header; \
                 set {reference} to just the key (the Models page of dsh web does that)"
            ),
        ));
    }
    Ok(key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn keys_are_trimmed_and_checked() {
        assert_eq!(
            usable_api_key("  sk-abc \n", "llm-deepseek", "K").map_err(|e| e.failure),
            Ok("sk-abc".into())
        );
        let blank = usable_api_key(" \t", "llm-deepseek", "K").expect_err("blank");
        assert_eq!(
            blank.failure,
            dsh_llm::LlmFailure::new(
                "INVALID_CREDENTIAL",
                "llm-deepseek: K holds only whitespace, not an API key; set K to the key itself, with the credentials \
             service (the Models page of dsh web does that) or in the environment dsh starts from"
            )
        );
        let bad = usable_api_key("sk ab", "llm-deepseek", "K").expect_err("space");
        assert_eq!(
            bad.failure,
            dsh_llm::LlmFailure::new(
                "INVALID_CREDENTIAL",
                "llm-deepseek: the API key in K has characters that cannot go into an HTTP header; \
             set K to just the key (the Models page of dsh web does that)"
            )
        );
        assert!(usable_api_key("sk-\u{e9}", "p", "K").is_err());
    }
}
