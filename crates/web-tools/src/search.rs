//! Web search providers behind upstream's seam: DeepSeek (the Anthropic-compatible
//! Messages API with the server `web_search` tool), Exa (`/search`) and Perplexity
//! (`/chat/completions`). A provider without a key is not available.

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_session::LiveSession;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::error::web_error;

/// One source of a search answer.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Source {
    pub url: String,
    pub title: Option<String>,
    pub snippet: Option<String>,
    pub published_at: Option<String>,
}

/// A provider's answer to one query.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SearchResult {
    pub content: Option<String>,
    pub sources: Vec<Source>,
    pub truncated: bool,
}

/// What a provider is asked.
#[derive(Clone)]
pub struct SearchRequest {
    pub query: String,
    pub max_results: usize,
    /// The calling session (DeepSeek records its request there).
    pub session: Option<Arc<LiveSession>>,
}

/// A search backend. Implementations must honour `cancel`, bound their own responses, and
/// report failures as `WebError`s.
pub trait SearchProvider: Send + Sync + 'static {
    fn id(&self) -> &str;
    /// Whether it can serve now (a key is present); checked without network.
    fn available(&self) -> bool;
    fn search(
        &self,
        request: SearchRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<SearchResult, BoxError>>;
}

/// Looks a credential reference up (the credentials service, else the environment).
pub type CredentialLookup = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where a provider's key comes from: the row, else a credential reference resolved at
/// each search.
#[derive(Clone)]
pub enum Key {
    Literal(String),
    Reference(String, CredentialLookup),
}

impl Key {
    pub fn resolve(&self) -> Option<String> {
        match self {
            Key::Literal(k) => Some(k.clone()).filter(|k| !k.is_empty()),
            Key::Reference(name, lookup) => lookup(name).filter(|k| !k.is_empty()),
        }
    }
}

const USER_AGENT: &str = "deepseek-harness/0.0.1";
const MAX_ERROR_BODY: usize = 64 * 1024;
const MAX_RESPONSE_BODY: usize = 8 * 1024 * 1024;

fn client(timeout: Duration) -> Result<reqwest::Client, BoxError> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(timeout)
        .build()
        .map_err(|e| web_error("WEB_PROVIDER_ERROR", e.to_string()))
}

/// Posts `body` and returns the JSON answer, with upstream's error texts.
async fn post_json(
    provider: &'static str,
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Value,
    cancel: CancellationToken,
) -> Result<Value, BoxError> {
    let client = client(Duration::from_secs(120))?;
    let mut request = client
        .post(url)
        .header(reqwest::header::USER_AGENT, USER_AGENT)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    for (k, v) in headers {
        request = request.header(k, v);
    }
    let exchange = async {
        let response = request.send().await.map_err(|e| {
            web_error(
                "WEB_PROVIDER_ERROR",
                format!("{provider} search request failed: {e}"),
            )
        })?;
        let status = response.status();
        let limit = if status.is_success() {
            MAX_RESPONSE_BODY
        } else {
            MAX_ERROR_BODY
        };
        let mut bytes = Vec::new();
        let mut stream = response.bytes_stream();
        use futures::StreamExt;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| {
                web_error(
                    "WEB_PROVIDER_ERROR",
                    format!("{provider} search request failed: {e}"),
                )
            })?;
            let room = limit.saturating_sub(bytes.len());
            bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if chunk.len() > room {
                break;
            }
        }
        if !status.is_success() {
            let parsed: Option<Value> = serde_json::from_slice(&bytes).ok();
            let message = parsed.as_ref().and_then(|v| {
                v.get("error")
                    .and_then(|e| {
                        e.as_str()
                            .map(str::to_owned)
                            .or_else(|| e.get("message").and_then(Value::as_str).map(str::to_owned))
                    })
                    .or_else(|| v.get("message").and_then(Value::as_str).map(str::to_owned))
            });
            return Err(web_error(
                "WEB_PROVIDER_ERROR",
                message
                    .unwrap_or_else(|| format!("{provider} API error (HTTP {})", status.as_u16())),
            ));
        }
        serde_json::from_slice::<Value>(&bytes).map_err(|e| {
            web_error(
                "WEB_PROVIDER_ERROR",
                format!("{provider} returned an unprocessable response body: {e}"),
            )
        })
    };
    tokio::select! {
        r = exchange => r,
        () = cancel.cancelled() => Err(web_error("WEB_ABORTED", format!("{provider} search aborted"))),
    }
}

fn text(v: &Value, key: &str) -> Option<String> {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn cap(mut result: SearchResult, max: usize) -> SearchResult {
    if result.sources.len() > max {
        result.sources.truncate(max);
        result.truncated = true;
    }
    result
}

/// DeepSeek search (`deepseek-official`).
pub struct DeepSeekSearch {
    pub key: Key,
    pub base_url: String,
    pub model: String,
}

impl DeepSeekSearch {
    pub const DEFAULT_BASE_URL: &'static str = "https://api.deepseek.com/anthropic/v1";

    /// The request body (also recorded in the session, without secrets).
    pub fn body(&self, query: &str) -> Value {
        json!({
            "model": self.model,
            "max_tokens": 4096,
            "messages": [{"role": "user", "content": [{"type": "text", "text": format!("Search the web for: {query}")}]}],
            "tools": [{"type": "web_search_20250305", "name": "web_search", "max_uses": 5}],
        })
    }

    /// Sources of a Messages answer: the search result blocks, with the first citation of
    /// each URL as its snippet.
    pub fn map(answer: &Value) -> Result<SearchResult, BoxError> {
        let blocks = answer
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut found_block = false;
        let mut sources: Vec<Source> = Vec::new();
        for block in &blocks {
            if block.get("type").and_then(Value::as_str) != Some("web_search_tool_result") {
                continue;
            }
            found_block = true;
            for item in block
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if item.get("type").and_then(Value::as_str) != Some("web_search_result") {
                    continue;
                }
                let Some(url) = text(item, "url") else {
                    continue;
                };
                if sources.iter().any(|s| s.url == url) {
                    continue;
                }
                sources.push(Source {
                    url,
                    title: text(item, "title"),
                    snippet: None,
                    published_at: text(item, "page_age"),
                });
            }
        }
        if !found_block {
            return Err(web_error(
                "WEB_PROVIDER_ERROR",
                "DeepSeek's reply held no web_search_tool_result block, so its native web search apparently did not run; try again or rephrase the query",
            ));
        }
        for block in &blocks {
            for citation in block
                .get("citations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (Some(url), Some(cited)) =
                    (text(citation, "url"), text(citation, "cited_text"))
                else {
                    continue;
                };
                if let Some(s) = sources
                    .iter_mut()
                    .find(|s| s.url == url && s.snippet.is_none())
                {
                    s.snippet = Some(cited);
                }
            }
        }
        Ok(SearchResult {
            content: None,
            sources,
            truncated: false,
        })
    }
}

impl SearchProvider for DeepSeekSearch {
    fn id(&self) -> &str {
        "deepseek-official"
    }

    fn available(&self) -> bool {
        self.key.resolve().is_some()
    }

    fn search(
        &self,
        request: SearchRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<SearchResult, BoxError>> {
        let key = self.key.resolve();
        let endpoint = format!("{}/messages", self.base_url.trim_end_matches('/'));
        let body = self.body(&request.query);
        let reference = match &self.key {
            Key::Reference(name, _) => name.clone(),
            Key::Literal(_) => "apiKey".into(),
        };
        Box::pin(async move {
            let Some(key) = key else {
                return Err(web_error(
                    "WEB_PROVIDER_CREDENTIAL_MISSING",
                    format!(
                        "DeepSeek search has no API key for \"{reference}\"; set it in the credentials file or the environment"
                    ),
                ));
            };
            if let Some(session) = &request.session
                && let Err(e) = session.append(
                    "web/deepseek-search-llm-request",
                    json!({"endpoint": endpoint, "apiVersion": "2023-06-01", "body": body}),
                    None,
                )
            {
                tracing::warn!("web search: could not record the request: {e}");
            }
            let answer = post_json(
                "DeepSeek",
                endpoint,
                vec![
                    ("x-api-key", key.clone()),
                    ("authorization", format!("Bearer {key}")),
                    ("anthropic-version", "2023-06-01".into()),
                ],
                body,
                cancel,
            )
            .await?;
            Ok(cap(Self::map(&answer)?, request.max_results))
        })
    }
}

/// Exa search (`exa`).
pub struct ExaSearch {
    pub key: Key,
    pub base_url: String,
    pub search_type: String,
}

impl ExaSearch {
    pub fn map(answer: &Value) -> SearchResult {
        let sources = answer
            .get("results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| {
                let snippet = r
                    .get("highlights")
                    .and_then(Value::as_array)?
                    .iter()
                    .filter_map(Value::as_str)
                    .find(|h| !h.trim().is_empty())?
                    .to_string();
                Some(Source {
                    url: text(r, "url")?,
                    title: text(r, "title"),
                    snippet: Some(snippet),
                    published_at: text(r, "publishedDate"),
                })
            })
            .collect();
        SearchResult {
            content: None,
            sources,
            truncated: false,
        }
    }
}

impl SearchProvider for ExaSearch {
    fn id(&self) -> &str {
        "exa"
    }

    fn available(&self) -> bool {
        self.key.resolve().is_some()
    }

    fn search(
        &self,
        request: SearchRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<SearchResult, BoxError>> {
        let key = self.key.resolve().unwrap_or_default();
        let url = format!("{}/search", self.base_url.trim_end_matches('/'));
        let body = json!({
            "query": request.query,
            "type": self.search_type,
            "contents": {"highlights": {"highlightsPerUrl": 1}},
            "numResults": request.max_results,
        });
        Box::pin(async move {
            let answer = post_json(
                "Exa",
                url,
                vec![("authorization", format!("Bearer {key}"))],
                body,
                cancel,
            )
            .await?;
            Ok(cap(Self::map(&answer), request.max_results))
        })
    }
}

/// Perplexity search (`perplexity`).
pub struct PerplexitySearch {
    pub key: Key,
    pub base_url: String,
    pub recency: Option<String>,
}

impl PerplexitySearch {
    pub fn map(answer: &Value) -> SearchResult {
        let content = answer
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let mut sources: Vec<Source> = answer
            .get("search_results")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|r| {
                Some(Source {
                    url: text(r, "url")?,
                    title: text(r, "title"),
                    snippet: text(r, "snippet"),
                    published_at: text(r, "date"),
                })
            })
            .collect();
        if sources.is_empty() {
            sources = answer
                .get("citations")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(|u| Source {
                    url: u.to_string(),
                    ..Source::default()
                })
                .collect();
        }
        SearchResult {
            content,
            sources,
            truncated: false,
        }
    }
}

impl SearchProvider for PerplexitySearch {
    fn id(&self) -> &str {
        "perplexity"
    }

    fn available(&self) -> bool {
        self.key.resolve().is_some()
    }

    fn search(
        &self,
        request: SearchRequest,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, Result<SearchResult, BoxError>> {
        let key = self.key.resolve().unwrap_or_default();
        let url = format!("{}/chat/completions", self.base_url.trim_end_matches('/'));
        let mut body = json!({
            "model": "sonar",
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": request.query}],
        });
        if let Some(r) = &self.recency {
            body["search_recency_filter"] = Value::from(r.as_str());
        }
        Box::pin(async move {
            let answer = post_json(
                "Perplexity",
                url,
                vec![("authorization", format!("Bearer {key}"))],
                body,
                cancel,
            )
            .await?;
            Ok(cap(Self::map(&answer), request.max_results))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn deepseek_answers_map_to_sources_with_cited_snippets() {
        let answer = json!({"content": [
            {"type": "server_tool_use"},
            {"type": "web_search_tool_result", "content": [
                {"type": "web_search_result", "url": "https://a.example/", "title": "A", "page_age": "2024"},
                {"type": "web_search_result", "url": "https://a.example/"},
                {"type": "web_search_result", "url": "https://b.example/"}]},
            {"type": "text", "text": "x", "citations": [{"url": "https://b.example/", "cited_text": "from b"}]}
        ]});
        let r = DeepSeekSearch::map(&answer).unwrap();
        assert_eq!(
            r.sources,
            [
                Source {
                    url: "https://a.example/".into(),
                    title: Some("A".into()),
                    snippet: None,
                    published_at: Some("2024".into())
                },
                Source {
                    url: "https://b.example/".into(),
                    title: None,
                    snippet: Some("from b".into()),
                    published_at: None
                },
            ]
        );
        assert!(DeepSeekSearch::map(&json!({"content": []})).is_err());
    }

    #[test]
    fn exa_and_perplexity_answers_map() {
        let exa = ExaSearch::map(&json!({"results": [
            {"url": "https://x/", "title": "X", "highlights": ["", "hi"], "publishedDate": "d"},
            {"url": "https://y/", "highlights": []}]}));
        assert_eq!(exa.sources.len(), 1);
        assert_eq!(exa.sources[0].snippet.as_deref(), Some("hi"));
        let p = PerplexitySearch::map(
            &json!({"choices": [{"message": {"content": "answer"}}], "citations": ["https://c/"]}),
        );
        assert_eq!(p.content.as_deref(), Some("answer"));
        assert_eq!(p.sources[0].url, "https://c/");
    }
}
