//! The web rows: the `web` service, the HTTP fetch provider, three search providers and
//! `tool-web`.

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, Catalog, Context, Plugin, PluginConfig};
use dsh_tools::{ToolRegistry, Typed};
use serde::Deserialize;

use crate::fetch::guard::AddressPolicy;
use crate::fetch::{FetchLimits, HttpFetcher};
use crate::search::{
    CredentialLookup, DeepSeekSearch, ExaSearch, Key, PerplexitySearch, SearchProvider,
};
use crate::tools::{ToolWebConfig, WebFetchTool, WebSearchTool, WebService};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct WebRow {
    search_provider: Option<String>,
    fetch_provider: Option<String>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `@deepseek-ai/dsh-web` (config `{searchProvider?, fetchProvider?}`; the environment's
/// `DSH_WEB_SEARCH_PROVIDER` / `DSH_WEB_FETCH_PROVIDER` fill unset fields).
pub struct WebPlugin;

impl Plugin for WebPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-web"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: WebRow = config.parse()?;
        ctx.provide(Arc::new(WebService::new(
            row.search_provider
                .or_else(|| env("DSH_WEB_SEARCH_PROVIDER")),
            row.fetch_provider.or_else(|| env("DSH_WEB_FETCH_PROVIDER")),
        )))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct FetchRow {
    max_url_length: Option<usize>,
    max_response_bytes: Option<usize>,
    max_body_chars: Option<usize>,
    timeout_ms: Option<u64>,
    max_redirects: Option<usize>,
    user_agent: Option<String>,
    #[serde(default)]
    allow_private_network: bool,
    #[serde(default)]
    allowed_hosts: Vec<String>,
}

fn positive<T: PartialOrd + Default + Copy>(
    name: &str,
    v: Option<T>,
    default: T,
) -> Result<T, BoxError> {
    match v {
        None => Ok(default),
        Some(v) if v > T::default() => Ok(v),
        Some(_) => Err(format!("web-fetch-http: {name} must be a positive integer").into()),
    }
}

/// `@deepseek-ai/dsh-web-fetch-http` (upstream's limits, plus the address guard:
/// `allowPrivateNetwork` (default false) and `allowedHosts` (`host` or `host:port`)).
pub struct WebFetchHttpPlugin;

impl Plugin for WebFetchHttpPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-web-fetch-http"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: FetchRow = config.parse()?;
        let d = FetchLimits::default();
        let limits = FetchLimits {
            max_url_length: positive("maxUrlLength", row.max_url_length, d.max_url_length)?,
            max_response_bytes: positive(
                "maxResponseBytes",
                row.max_response_bytes,
                d.max_response_bytes,
            )?,
            max_body_chars: positive("maxBodyChars", row.max_body_chars, d.max_body_chars)?,
            timeout: Duration::from_millis(positive("timeoutMs", row.timeout_ms, 30_000)?),
            max_redirects: row.max_redirects.unwrap_or(d.max_redirects),
            user_agent: row.user_agent.unwrap_or(d.user_agent),
        };
        let policy = AddressPolicy {
            allow_private_network: row.allow_private_network,
            allowed_hosts: row.allowed_hosts,
        };
        let web = ctx.require::<WebService>()?;
        web.add_fetch("http", Arc::new(HttpFetcher::new(limits, policy)))?;
        let w = Arc::downgrade(&web);
        ctx.effect("web fetch provider", move || {
            if let Some(w) = w.upgrade() {
                w.remove_fetch("http");
            }
        })?;
        Ok(())
    }
}

fn credential_lookup(ctx: &Context) -> CredentialLookup {
    match ctx.get::<dsh_host::Credentials>() {
        Some(c) => Arc::new(move |name: &str| c.resolve(name)),
        None => Arc::new(|name: &str| env(name)),
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct SearchRow {
    api_key: Option<String>,
    api_key_env: Option<String>,
    #[serde(rename = "baseURL")]
    base_url: Option<String>,
    model: Option<String>,
    #[serde(rename = "type")]
    search_type: Option<String>,
    search_recency_filter: Option<String>,
}

fn key(ctx: &Context, row: &SearchRow, default_env: &str) -> Key {
    match row.api_key.clone().filter(|k| !k.is_empty()) {
        Some(k) => Key::Literal(k),
        None => Key::Reference(
            row.api_key_env
                .clone()
                .unwrap_or_else(|| default_env.to_string()),
            credential_lookup(ctx),
        ),
    }
}

fn register(ctx: &Context, provider: Arc<dyn SearchProvider>) -> Result<(), BoxError> {
    let web = ctx.require::<WebService>()?;
    let id = provider.id().to_string();
    web.add_search(provider)?;
    let w = Arc::downgrade(&web);
    ctx.effect("web search provider", move || {
        if let Some(w) = w.upgrade() {
            w.remove_search(&id);
        }
    })?;
    Ok(())
}

/// `@deepseek-ai/dsh-web-search-deepseek` (`{apiKey?, apiKeyEnv = DEEPSEEK_API_KEY,
/// baseURL?, model = deepseek-v4-flash}`; `DEEPSEEK_SEARCH_BASE_URL` overrides the base).
pub struct WebSearchDeepSeekPlugin;

impl Plugin for WebSearchDeepSeekPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-web-search-deepseek"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "apiVersion",
                "web search calls DeepSeek's search endpoint with this build's fixed request shape",
            ),
            (
                "maxTokens",
                "web search calls DeepSeek's search endpoint with this build's fixed request shape",
            ),
            (
                "maxUses",
                "web search calls DeepSeek's search endpoint with this build's fixed request shape",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: SearchRow = config.parse()?;
        let provider = DeepSeekSearch {
            key: key(ctx, &row, "DEEPSEEK_API_KEY"),
            base_url: row
                .base_url
                .clone()
                .or_else(|| env("DEEPSEEK_SEARCH_BASE_URL"))
                .unwrap_or_else(|| DeepSeekSearch::DEFAULT_BASE_URL.into()),
            model: row
                .model
                .clone()
                .unwrap_or_else(|| "deepseek-v4-flash".into()),
        };
        register(ctx, Arc::new(provider))
    }
}

/// `@deepseek-ai/dsh-web-search-exa` (`{apiKey?, baseURL?, type = auto}`; key from
/// `EXA_API_KEY`).
pub struct WebSearchExaPlugin;

impl Plugin for WebSearchExaPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-web-search-exa"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: SearchRow = config.parse()?;
        let search_type = row.search_type.clone().unwrap_or_else(|| "auto".into());
        if !matches!(search_type.as_str(), "auto" | "keyword" | "neural") {
            return Err("web-search-exa: type must be auto, keyword or neural".into());
        }
        let provider = ExaSearch {
            key: key(ctx, &row, "EXA_API_KEY"),
            base_url: row
                .base_url
                .clone()
                .unwrap_or_else(|| "https://api.exa.ai".into()),
            search_type,
        };
        register(ctx, Arc::new(provider))
    }
}

/// `@deepseek-ai/dsh-web-search-perplexity` (`{apiKey?, baseURL?, searchRecencyFilter?}`;
/// key from `PERPLEXITY_API_KEY`).
pub struct WebSearchPerplexityPlugin;

impl Plugin for WebSearchPerplexityPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-web-search-perplexity"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: SearchRow = config.parse()?;
        if let Some(r) = &row.search_recency_filter
            && !matches!(r.as_str(), "day" | "week" | "month" | "year")
        {
            return Err(
                "web-search-perplexity: searchRecencyFilter must be day, week, month or year"
                    .into(),
            );
        }
        let provider = PerplexitySearch {
            key: key(ctx, &row, "PERPLEXITY_API_KEY"),
            base_url: row
                .base_url
                .clone()
                .unwrap_or_else(|| "https://api.perplexity.ai".into()),
            recency: row.search_recency_filter.clone(),
        };
        register(ctx, Arc::new(provider))
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ToolRow {
    search: Option<bool>,
    fetch: Option<bool>,
    search_max_results: Option<f64>,
    search_max_queries: Option<f64>,
    fetch_timeout_ms: Option<f64>,
    search_timeout_ms: Option<f64>,
    fetch_max_output_chars: Option<f64>,
}

fn whole(name: &str, v: Option<f64>, default: u64) -> Result<u64, BoxError> {
    match v {
        None => Ok(default),
        Some(v) if v >= 1.0 && v.fract() == 0.0 && v <= 9_007_199_254_740_991.0 => Ok(v as u64),
        Some(_) => Err(format!("tool-web: {name} must be a positive integer").into()),
    }
}

const FETCH_SECTION: &str = "web_fetch retrieves one http(s) URL (for example a web_search result) and returns its content as text. When you use what it returned, cite the URL as a Markdown link.";

/// `@deepseek-ai/dsh-tool-web` (config `{search, fetch, searchMaxResults, searchMaxQueries,
/// fetchTimeoutMs, searchTimeoutMs, fetchMaxOutputChars}`).
pub struct ToolWebPlugin;

impl Plugin for ToolWebPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-web"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ToolRow = config.parse()?;
        let d = ToolWebConfig::default();
        let c = ToolWebConfig {
            search: row.search.unwrap_or(d.search),
            fetch: row.fetch.unwrap_or(d.fetch),
            search_max_results: whole("searchMaxResults", row.search_max_results, 8)? as usize,
            search_max_queries: whole("searchMaxQueries", row.search_max_queries, 4)? as usize,
            fetch_timeout_ms: whole("fetchTimeoutMs", row.fetch_timeout_ms, 30_000)?,
            search_timeout_ms: whole("searchTimeoutMs", row.search_timeout_ms, 30_000)?,
            fetch_max_output_chars: whole(
                "fetchMaxOutputChars",
                row.fetch_max_output_chars,
                200_000,
            )? as usize,
        };
        let web = ctx.require::<WebService>()?;
        let tools = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.get::<dsh_prompt::SystemPrompt>();
        if c.search {
            let text = if c.fetch {
                format!(
                    "web_search finds current information on the web. Its queries array takes 1 to {} non-empty queries (one item for a single search); it returns an optional answer and a list of source URLs. Use web_fetch for the full content of a result, and cite the URLs you rely on as Markdown links.",
                    c.search_max_queries
                )
            } else {
                format!(
                    "web_search finds current information on the web. Its queries array takes 1 to {} non-empty queries (one item for a single search); it returns an optional answer and a list of source URLs. Rely on the returned snippets, and cite the URLs you use as Markdown links.",
                    c.search_max_queries
                )
            };
            if let Some(p) = &prompt {
                p.section(
                    ctx,
                    "tool:web_search",
                    110.0,
                    Arc::new(move |_| text.clone()),
                )?;
            }
            tools.register(
                ctx,
                Arc::new(Typed::new(WebSearchTool::new(web.clone(), c.clone()))?),
            )?;
        }
        if c.fetch {
            if let Some(p) = &prompt {
                p.section(
                    ctx,
                    "tool:web_fetch",
                    111.0,
                    Arc::new(|_| FETCH_SECTION.to_string()),
                )?;
            }
            tools.register(ctx, Arc::new(Typed::new(WebFetchTool::new(web, c))?))?;
        }
        Ok(())
    }
}

/// Registers the production web rows.
pub fn register_catalog(catalog: &mut Catalog) {
    catalog.register(WebPlugin);
    catalog.register(WebFetchHttpPlugin);
    catalog.register(WebSearchDeepSeekPlugin);
    catalog.register(WebSearchExaPlugin);
    catalog.register(WebSearchPerplexityPlugin);
    catalog.register(ToolWebPlugin);
}
