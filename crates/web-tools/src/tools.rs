//! The model-facing `web_fetch` and `web_search` (upstream's `tool-web` row): argument
//! checks, provider selection through [`WebService`], and the renderings of results.

use dsh_tools::text::{utf16_len, utf16_prefix};
use std::sync::{Arc, RwLock};

use dsh_kernel::BoxError;
use dsh_tools::{ObjectSchema, Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::web_error;
use crate::fetch::{BodyKind, Fetched, HttpFetcher};
use crate::markdown::html_to_markdown;
use crate::search::{SearchProvider, SearchRequest, SearchResult, Source};

/// The `web` service: registered providers and the configured choice.
#[derive(Default)]
pub struct WebService {
    pub search_provider: Option<String>,
    pub fetch_provider: Option<String>,
    search: RwLock<Vec<Arc<dyn SearchProvider>>>,
    fetch: RwLock<Vec<(String, Arc<HttpFetcher>)>>,
}

fn pick<'a, T: ?Sized>(
    configured: Option<&str>,
    all: &'a [(String, bool, Arc<T>)],
) -> Result<&'a Arc<T>, BoxError> {
    if let Some(id) = configured {
        return match all.iter().find(|(i, _, _)| i == id) {
            None => Err(web_error(
                "WEB_PROVIDER_CONFIGURED_MISSING",
                format!("configured web provider \"{id}\" is not registered"),
            )),
            Some((_, false, _)) => Err(web_error(
                "WEB_PROVIDER_CONFIGURED_UNAVAILABLE",
                format!("configured web provider \"{id}\" is registered but unavailable"),
            )),
            Some((_, true, p)) => Ok(p),
        };
    }
    let usable: Vec<&(String, bool, Arc<T>)> = all.iter().filter(|(_, ok, _)| *ok).collect();
    match usable.as_slice() {
        [] => Err(web_error(
            "WEB_PROVIDER_UNAVAILABLE",
            "no usable web provider is registered",
        )),
        [(_, _, p)] => Ok(p),
        many => Err(web_error(
            "WEB_PROVIDER_AMBIGUOUS",
            format!(
                "multiple usable web providers are registered ({}); configure one explicitly",
                many.iter()
                    .map(|(i, _, _)| i.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

impl WebService {
    pub fn new(search_provider: Option<String>, fetch_provider: Option<String>) -> Self {
        Self {
            search_provider,
            fetch_provider,
            ..Self::default()
        }
    }

    pub fn add_search(&self, provider: Arc<dyn SearchProvider>) -> Result<(), BoxError> {
        let mut all = self.search.write().unwrap_or_else(|p| p.into_inner());
        if all.iter().any(|p| p.id() == provider.id()) {
            return Err(web_error(
                "WEB_DUPLICATE_PROVIDER",
                format!(
                    "a web provider with id \"{}\" is already registered",
                    provider.id()
                ),
            ));
        }
        all.push(provider);
        Ok(())
    }

    pub fn remove_search(&self, id: &str) {
        self.search
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|p| p.id() != id);
    }

    pub fn add_fetch(&self, id: &str, fetcher: Arc<HttpFetcher>) -> Result<(), BoxError> {
        let mut all = self.fetch.write().unwrap_or_else(|p| p.into_inner());
        if all.iter().any(|(i, _)| i == id) {
            return Err(web_error(
                "WEB_DUPLICATE_PROVIDER",
                format!("a web provider with id \"{id}\" is already registered"),
            ));
        }
        all.push((id.to_string(), fetcher));
        Ok(())
    }

    pub fn remove_fetch(&self, id: &str) {
        self.fetch
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(i, _)| i != id);
    }

    pub fn search_provider(&self) -> Result<Arc<dyn SearchProvider>, BoxError> {
        let all: Vec<(String, bool, Arc<dyn SearchProvider>)> = self
            .search
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|p| (p.id().to_string(), p.available(), p.clone()))
            .collect();
        pick(self.search_provider.as_deref(), &all).cloned()
    }

    pub fn fetcher(&self) -> Result<Arc<HttpFetcher>, BoxError> {
        let all: Vec<(String, bool, Arc<HttpFetcher>)> = self
            .fetch
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(i, f)| (i.clone(), true, f.clone()))
            .collect();
        pick(self.fetch_provider.as_deref(), &all).cloned()
    }
}

/// `tool-web` settings.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolWebConfig {
    pub search: bool,
    pub fetch: bool,
    pub search_max_results: usize,
    pub search_max_queries: usize,
    pub fetch_timeout_ms: u64,
    pub search_timeout_ms: u64,
    pub fetch_max_output_chars: usize,
}

impl Default for ToolWebConfig {
    fn default() -> Self {
        Self {
            search: true,
            fetch: true,
            search_max_results: 8,
            search_max_queries: 4,
            fetch_timeout_ms: 30_000,
            search_timeout_ms: 30_000,
            fetch_max_output_chars: 200_000,
        }
    }
}

const FOOTER: &str =
    "\n\n(The page was cut short here. For the rest, fetch a more specific URL or section.)";

/// The `web_fetch` text and its effective truncation.
pub fn render_fetch(result: &Fetched, max_chars: usize) -> (String, bool) {
    let header = format!("Fetched {} (HTTP {})\n\n", result.url, result.status);
    let source = utf16_prefix(&result.content, max_chars);
    let source_cut = source.len() < result.content.len();
    let body = match result.kind {
        BodyKind::Html => html_to_markdown(source),
        BodyKind::Text => source.to_string(),
    };
    let prefix = format!("{header}{body}");
    let truncated = result.truncated || source_cut || utf16_len(&prefix) > max_chars;
    let full = if truncated {
        format!("{prefix}{FOOTER}")
    } else {
        prefix.clone()
    };
    if utf16_len(&full) <= max_chars {
        return (full, truncated);
    }
    let footer_len = utf16_len(FOOTER);
    if max_chars < footer_len {
        return (utf16_prefix(&full, max_chars).to_string(), truncated);
    }
    (
        format!("{}{FOOTER}", utf16_prefix(&prefix, max_chars - footer_len)),
        truncated,
    )
}

fn host_of(url: &str) -> Option<String> {
    url::Url::parse(url).ok()?.host_str().map(str::to_owned)
}

/// The `web_search` text.
pub fn render_search(result: &SearchResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    let content = result.content.as_deref().filter(|c| !c.is_empty());
    if let Some(c) = content {
        parts.push(c.to_string());
    }
    if !result.sources.is_empty() {
        let lines: Vec<String> = result
            .sources
            .iter()
            .map(|s| {
                let label = s
                    .title
                    .clone()
                    .filter(|t| !t.is_empty())
                    .or_else(|| host_of(&s.url))
                    .unwrap_or_else(|| s.url.clone());
                let mut meta = Vec::new();
                if let Some(snippet) = s.snippet.as_deref().filter(|x| !x.is_empty()) {
                    meta.push(snippet.to_string());
                }
                if let Some(p) = s.published_at.as_deref().filter(|x| !x.is_empty()) {
                    meta.push(format!("({p})"));
                }
                let suffix = if meta.is_empty() {
                    String::new()
                } else {
                    format!(" \u{2014} {}", meta.join(" "))
                };
                format!("- [{label}]({}){suffix}", s.url)
            })
            .collect();
        parts.push(format!("Sources:\n{}", lines.join("\n")));
    } else if content.is_none() {
        parts.push("No results found.".into());
    }
    if result.truncated {
        parts.push(format!(
            "(Only the first {} sources are listed; a more specific query finds others.)",
            result.sources.len()
        ));
    }
    parts.push(
        "Link the sources you rely on in your answer, as markdown links to their URLs.".into(),
    );
    parts.join("\n\n")
}

/// Round-robin by rank, deduplicated by URL, capped.
pub fn merge(queries: &[String], results: &[SearchResult], max: usize) -> SearchResult {
    let mut seen = std::collections::HashSet::new();
    let mut sources: Vec<Source> = Vec::new();
    let ranks = results.iter().map(|r| r.sources.len()).max().unwrap_or(0);
    let mut dropped = false;
    'merge: for rank in 0..ranks {
        for r in results {
            if let Some(s) = r.sources.get(rank)
                && seen.insert(s.url.clone())
            {
                if sources.len() == max {
                    dropped = true;
                    break 'merge;
                }
                sources.push(s.clone());
            }
        }
    }
    let contents: Vec<String> = results
        .iter()
        .zip(queries)
        .filter_map(|(r, q)| {
            r.content
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(|c| format!("### {q}\n\n{c}"))
        })
        .collect();
    SearchResult {
        content: (!contents.is_empty()).then(|| contents.join("\n\n")),
        sources,
        truncated: results.iter().any(|r| r.truncated) || dropped,
    }
}

/// The canonical `web_search` value: `{content?, sources, truncated}`.
pub(crate) fn search_value(r: &SearchResult) -> Value {
    let mut m = Map::new();
    if let Some(c) = &r.content {
        m.insert("content".into(), Value::from(c.as_str()));
    }
    m.insert("sources".into(), source_values(r));
    m.insert("truncated".into(), Value::from(r.truncated));
    Value::Object(m)
}

/// The canonical `web_fetch` value: `{url, statusCode, body: {kind, content}, truncated}`
/// (`truncated`: the provider cut the content; the rendered text may cut more).
pub(crate) fn fetch_value(f: &Fetched) -> Value {
    json!({
        "url": f.url,
        "statusCode": f.status,
        "body": {"kind": f.kind.as_str(), "content": f.content},
        "truncated": f.truncated,
    })
}

/// The declared output schemas of `web_search` and `web_fetch`.
pub(crate) fn output_schema(search: bool) -> &'static Value {
    use std::sync::LazyLock;
    static SEARCH: LazyLock<Value> = LazyLock::new(|| {
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["sources", "truncated"],
            "properties": {
                "content": {"type": "string"},
                "sources": {"type": "array", "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["url"],
                    "properties": {
                        "url": {"type": "string"},
                        "title": {"type": "string"},
                        "snippet": {"type": "string"},
                        "publishedAt": {"type": "string"},
                    },
                }},
                "truncated": {"type": "boolean"},
            },
        })
    });
    static FETCH: LazyLock<Value> = LazyLock::new(|| {
        let body = |kind: &str| {
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": ["kind", "content"],
                "properties": {
                    "kind": {"type": "string", "const": kind},
                    "content": {"type": "string"},
                },
            })
        };
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["url", "statusCode", "body", "truncated"],
            "properties": {
                "url": {"type": "string"},
                "statusCode": {"type": "integer"},
                "body": {"oneOf": [body("html"), body("text")]},
                "truncated": {"type": "boolean"},
            },
        })
    });
    if search { &SEARCH } else { &FETCH }
}

fn search_meta(r: &SearchResult) -> Value {
    let mut meta = json!({"sources": source_values(r), "truncated": r.truncated});
    if let Some(c) = &r.content {
        meta["answer"] = Value::from(c.as_str());
    }
    meta
}

fn source_values(r: &SearchResult) -> Value {
    let sources: Vec<Value> = r
        .sources
        .iter()
        .map(|s| {
            let mut m = Map::new();
            m.insert("url".into(), Value::from(s.url.as_str()));
            for (k, v) in [
                ("title", &s.title),
                ("snippet", &s.snippet),
                ("publishedAt", &s.published_at),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), Value::from(v.as_str()));
                }
            }
            Value::Object(m)
        })
        .collect();
    Value::Array(sources)
}

const FETCH_DESCRIPTION: &str =
    "Fetch one http(s) URL and return its content as text (web pages are converted to Markdown).";

pub(crate) struct WebFetchTool {
    web: Arc<WebService>,
    config: ToolWebConfig,
}

impl WebFetchTool {
    pub fn new(web: Arc<WebService>, config: ToolWebConfig) -> Self {
        Self { web, config }
    }
}

// The arguments of `web_fetch` (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub(crate) struct WebFetchArgs {
    /// The http(s) URL to fetch.
    url: String,
}

impl TypedTool for WebFetchTool {
    type Args = WebFetchArgs;
    type Value = Value;

    fn name(&self) -> String {
        "web_fetch".into()
    }

    fn description(&self) -> String {
        FETCH_DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema(false).clone()))
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.fetch_timeout_ms)
    }

    async fn run(
        self: Arc<Self>,
        args: WebFetchArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let max = self.config.fetch_max_output_chars;
        let url = args.url.as_str();
        if url.trim().is_empty() {
            return Err("url must be a non-empty string".into());
        }
        let fetcher = self.web.fetcher()?;
        let fetched = fetcher.fetch(url, &ctx.cancel).await?;
        let (text, truncated) = render_fetch(&fetched, max);
        let meta =
            json!({"url": fetched.url, "statusCode": fetched.status, "truncated": truncated});
        Ok(Reply::text(text)
            .with_meta(meta)
            .with_value(fetch_value(&fetched)))
    }
}

pub(crate) struct WebSearchTool {
    web: Arc<WebService>,
    config: ToolWebConfig,
}

impl WebSearchTool {
    pub fn new(web: Arc<WebService>, config: ToolWebConfig) -> Self {
        Self { web, config }
    }
}

// The arguments of `web_search` (no doc: upstream's parameter object carries no
// description). The description of `queries` names the configured maximum (`tune`).
#[derive(Deserialize, JsonSchema)]
pub(crate) struct WebSearchArgs {
    /// Search queries; their results are merged.
    queries: Vec<String>,
}

/// Upstream's query checks; duplicates collapse.
pub fn parse_queries(args: &Value, max: usize) -> Result<Vec<String>, BoxError> {
    let queries: Vec<String> = args
        .get("queries")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|q| q.as_str().unwrap_or("").to_string())
                .collect()
        })
        .unwrap_or_default();
    check_queries(queries, max)
}

/// [`parse_queries`] on decoded queries.
fn check_queries(queries: Vec<String>, max: usize) -> Result<Vec<String>, BoxError> {
    if queries.is_empty() {
        return Err("queries must contain at least one query".into());
    }
    if queries.len() > max {
        let noun = if max == 1 { "query" } else { "queries" };
        return Err(format!("queries must contain at most {max} {noun}").into());
    }
    if queries.iter().any(|q| q.trim().is_empty()) {
        return Err("each query must be a non-empty string".into());
    }
    let mut unique = Vec::new();
    for q in queries {
        if !unique.contains(&q) {
            unique.push(q);
        }
    }
    Ok(unique)
}

impl TypedTool for WebSearchTool {
    type Args = WebSearchArgs;
    type Value = Value;

    fn name(&self) -> String {
        "web_search".into()
    }

    fn description(&self) -> String {
        let n = self.config.search_max_queries;
        format!(
            "Search the web for current information. Give 1 to {n} queries in `queries`; the answer is an optional summary plus the source URLs."
        )
    }

    fn tune(&self, params: &mut ObjectSchema) {
        let n = self.config.search_max_queries;
        params.describe_property(
            "queries",
            &format!("Search queries, 1 to {n}; their results are merged."),
        );
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema(true).clone()))
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.search_timeout_ms)
    }

    async fn run(
        self: Arc<Self>,
        args: WebSearchArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let config = self.config.clone();
        let queries = check_queries(args.queries, config.search_max_queries)?;
        let provider = self.web.search_provider()?;
        let request = |q: &str| SearchRequest {
            query: q.to_string(),
            max_results: config.search_max_results,
            session: ctx.session.clone(),
        };
        let result = if queries.len() == 1 {
            provider
                .search(request(&queries[0]), ctx.cancel.clone())
                .await?
        } else {
            // The first failure cancels the others.
            let batch = ctx.cancel.child_token();
            let runs = queries.iter().map(|q| {
                let (provider, batch) = (provider.clone(), batch.clone());
                let fut = provider.search(request(q), batch.clone());
                async move {
                    let r = fut.await;
                    if r.is_err() {
                        batch.cancel();
                    }
                    r
                }
            });
            let settled = futures::future::join_all(runs).await;
            let mut results = Vec::new();
            let mut first_error = None;
            for r in settled {
                match r {
                    Ok(r) => results.push(r),
                    Err(e) if first_error.is_none() => first_error = Some(e),
                    Err(_) => {}
                }
            }
            if let Some(e) = first_error {
                return Err(e);
            }
            merge(&queries, &results, config.search_max_results)
        };
        Ok(Reply::text(render_search(&result))
            .with_meta(search_meta(&result))
            .with_value(search_value(&result)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn src(url: &str) -> Source {
        Source {
            url: url.into(),
            ..Source::default()
        }
    }

    #[test]
    fn values_carry_upstream_fields() {
        let r = SearchResult {
            content: Some("answer".into()),
            sources: vec![Source {
                snippet: Some("snip".into()),
                ..src("https://a.example/x")
            }],
            truncated: false,
        };
        assert_eq!(
            search_value(&r),
            json!({"content": "answer", "sources": [{"url": "https://a.example/x", "snippet": "snip"}],
                   "truncated": false})
        );
        assert_eq!(
            search_value(&SearchResult::default()),
            json!({"sources": [], "truncated": false})
        );
        let f = Fetched {
            url: "https://a.example/".into(),
            status: 200,
            kind: BodyKind::Html,
            content: "<p>x</p>".into(),
            truncated: true,
        };
        assert_eq!(
            fetch_value(&f),
            json!({"url": "https://a.example/", "statusCode": 200,
                   "body": {"kind": "html", "content": "<p>x</p>"}, "truncated": true})
        );
        // Every key a value carries is declared.
        let keys = |schema: &Value| -> Vec<String> {
            schema["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        for key in search_value(&r).as_object().unwrap().keys() {
            assert!(keys(output_schema(true)).contains(key), "{key}");
        }
        for key in fetch_value(&f).as_object().unwrap().keys() {
            assert!(keys(output_schema(false)).contains(key), "{key}");
        }
    }

    #[test]
    fn the_parameter_schemas_are_unchanged() {
        use dsh_tools::{Prop, Tool, Typed};
        let config = ToolWebConfig {
            search_max_queries: 3,
            ..ToolWebConfig::default()
        };
        let web = Arc::new(WebService::default());
        let search = Typed::new(WebSearchTool::new(web.clone(), config.clone())).unwrap();
        let expected = ObjectSchema::new().required(
            "queries",
            Prop::array(
                "Search queries, 1 to 3; their results are merged.",
                Prop::String {
                    description: None,
                    enumeration: None,
                },
            ),
        );
        assert_eq!(
            dsh_kernel::json::to_string(&search.schema().parameters),
            dsh_kernel::json::to_string(&expected.to_value())
        );
        assert_eq!(
            search.schema().description,
            "Search the web for current information. Give 1 to 3 queries in `queries`; the answer is an optional summary plus the source URLs."
        );
        assert_eq!(search.output_schema(), Some(output_schema(true)));
        let fetch = Typed::new(WebFetchTool::new(web, config)).unwrap();
        let expected =
            ObjectSchema::new().required("url", Prop::string("The http(s) URL to fetch."));
        assert_eq!(
            dsh_kernel::json::to_string(&fetch.schema().parameters),
            dsh_kernel::json::to_string(&expected.to_value())
        );
        assert_eq!(fetch.output_schema(), Some(output_schema(false)));
    }

    #[test]
    fn search_renders_like_upstream() {
        let r = SearchResult {
            content: None,
            sources: vec![
                Source {
                    url: "https://a.example/x".into(),
                    title: None,
                    snippet: Some("snip".into()),
                    published_at: Some("2024-01-01".into()),
                },
                Source {
                    title: Some("B".into()),
                    ..src("https://b.example/")
                },
            ],
            truncated: true,
        };
        assert_eq!(
            render_search(&r),
            "Sources:\n- [a.example](https://a.example/x) \u{2014} snip (2024-01-01)\n- [B](https://b.example/)\n\n(Only the first 2 sources are listed; a more specific query finds others.)\n\nLink the sources you rely on in your answer, as markdown links to their URLs."
        );
        assert_eq!(
            render_search(&SearchResult::default()),
            "No results found.\n\nLink the sources you rely on in your answer, as markdown links to their URLs."
        );
    }

    #[test]
    fn merges_round_robin_and_caps() {
        let a = SearchResult {
            content: Some("A".into()),
            sources: vec![src("1"), src("2"), src("3")],
            truncated: false,
        };
        let b = SearchResult {
            content: None,
            sources: vec![src("2"), src("4")],
            truncated: false,
        };
        let m = merge(&["qa".into(), "qb".into()], &[a, b], 3);
        let urls: Vec<&str> = m.sources.iter().map(|s| s.url.as_str()).collect();
        assert_eq!(urls, ["1", "2", "4"]);
        assert!(m.truncated, "source 3 was dropped");
        assert_eq!(m.content.as_deref(), Some("### qa\n\nA"));
    }

    #[test]
    fn queries_are_checked() {
        let e = |v: Value| {
            parse_queries(&json!({"queries": v}), 2)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(e(json!([])), "queries must contain at least one query");
        assert_eq!(
            e(json!(["a", "b", "c"])),
            "queries must contain at most 2 queries"
        );
        assert_eq!(
            e(json!(["a", " "])),
            "each query must be a non-empty string"
        );
        assert_eq!(
            parse_queries(&json!({"queries": ["a", "a"]}), 2).unwrap(),
            ["a"]
        );
    }

    #[test]
    fn fetch_output_is_capped_with_a_footer() {
        let f = Fetched {
            url: "http://x/".into(),
            status: 200,
            kind: BodyKind::Text,
            content: "y".repeat(500),
            truncated: false,
        };
        let (text, truncated) = render_fetch(&f, 200);
        assert!(truncated);
        assert_eq!(utf16_len(&text), 200);
        assert!(text.ends_with(FOOTER));
        let (text, truncated) = render_fetch(&f, 10_000);
        assert!(!truncated);
        assert_eq!(
            text,
            format!("Fetched http://x/ (HTTP 200)\n\n{}", "y".repeat(500))
        );
    }
}
