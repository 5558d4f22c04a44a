//! `web-fetch-http`: GET one HTTP(S) URL with bounded size and time, same-origin redirects
//! only (at most `maxRedirects`), the address guard on every hop, and charset decoding.

pub mod guard;

use std::sync::Arc;
use std::time::Duration;

use dsh_kernel::BoxError;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::error::web_error;
use guard::{AddressPolicy, HostResolver, PinnedOnly, vet};

/// Limits and identity of the fetcher (upstream's defaults).
#[derive(Clone, Debug, PartialEq)]
pub struct FetchLimits {
    pub max_url_length: usize,
    pub max_response_bytes: usize,
    /// In UTF-16 units, as upstream counts.
    pub max_body_chars: usize,
    pub timeout: Duration,
    pub max_redirects: usize,
    pub user_agent: String,
}

impl Default for FetchLimits {
    fn default() -> Self {
        Self {
            max_url_length: 2048,
            max_response_bytes: 5_000_000,
            max_body_chars: 100_000,
            timeout: Duration::from_millis(30_000),
            max_redirects: 5,
            user_agent: "deepseek-harness/0.0.1 (+https://github.com/deepseek-ai)".into(),
        }
    }
}

/// What a fetched body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    Html,
    Text,
}

impl BodyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BodyKind::Html => "html",
            BodyKind::Text => "text",
        }
    }
}

/// One fetched resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Fetched {
    /// The final URL (after redirects).
    pub url: String,
    pub status: u16,
    pub kind: BodyKind,
    pub content: String,
    /// Bytes or characters were cut.
    pub truncated: bool,
}

/// The HTTP fetch provider.
pub struct HttpFetcher {
    limits: FetchLimits,
    policy: AddressPolicy,
    resolver: Arc<dyn HostResolver>,
}

/// Per-chunk silence bound while a body streams.
const IDLE_TIMEOUT: Duration = Duration::from_secs(15);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Upstream's URL checks.
pub fn validate_url(input: &str, max_len: usize) -> Result<url::Url, BoxError> {
    if input.encode_utf16().count() > max_len {
        return Err(web_error(
            "WEB_INVALID_URL",
            format!("URL exceeds the maximum length of {max_len}"),
        ));
    }
    let url = url::Url::parse(input)
        .map_err(|_| web_error("WEB_INVALID_URL", format!("invalid URL: {input}")))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(web_error(
            "WEB_INVALID_URL",
            format!(
                "unsupported URL scheme \"{}:\" (only http and https are allowed)",
                url.scheme()
            ),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(web_error(
            "WEB_BLOCKED_URL",
            "credentials in URLs are not allowed",
        ));
    }
    Ok(url)
}

/// `html` / `text` / unsupported, from a `Content-Type`.
pub fn classify(content_type: Option<&str>) -> Option<BodyKind> {
    let mime = content_type
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        return Some(BodyKind::Html);
    }
    let text = mime.starts_with("text/")
        || mime == "application/json"
        || mime == "application/xml"
        || mime.ends_with("+json")
        || mime.ends_with("+xml");
    text.then_some(BodyKind::Text)
}

fn charset(content_type: Option<&str>) -> Option<String> {
    let ct = content_type?;
    let lower = ct.to_ascii_lowercase();
    let mut rest = &lower[..];
    while let Some(i) = rest.find(';') {
        rest = &rest[i + 1..];
        let param = rest.trim_start();
        if let Some(v) = param.strip_prefix("charset") {
            let v = v.trim_start();
            if let Some(v) = v.strip_prefix('=') {
                let v = v.trim_start().trim_start_matches('"');
                let end = v.find(['"', ';']).unwrap_or(v.len());
                let label = v[..end].trim();
                if !label.is_empty() {
                    return Some(label.to_string());
                }
            }
        }
    }
    None
}

fn same_origin(a: &url::Url, b: &url::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

fn network_error(e: &reqwest::Error) -> BoxError {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    web_error("WEB_PROVIDER_ERROR", format!("web fetch failed: {text}"))
}

impl HttpFetcher {
    pub fn new(limits: FetchLimits, policy: AddressPolicy) -> Self {
        Self::with_resolver(limits, policy, Arc::new(guard::SystemResolver))
    }

    pub fn with_resolver(
        limits: FetchLimits,
        policy: AddressPolicy,
        resolver: Arc<dyn HostResolver>,
    ) -> Self {
        Self {
            limits,
            policy,
            resolver,
        }
    }

    /// Fetches `url`; the whole exchange (every hop and the body) is bounded by the
    /// configured timeout, and `cancel` stops it.
    pub async fn fetch(&self, url: &str, cancel: &CancellationToken) -> Result<Fetched, BoxError> {
        if cancel.is_cancelled() {
            return Err(web_error("WEB_ABORTED", "web fetch aborted"));
        }
        tokio::select! {
            r = tokio::time::timeout(self.limits.timeout, self.follow(url)) => match r {
                Ok(result) => result,
                Err(_) => Err(web_error("WEB_FETCH_TIMEOUT", "web fetch timed out")),
            },
            () = cancel.cancelled() => Err(web_error("WEB_ABORTED", "web fetch aborted")),
        }
    }

    async fn follow(&self, input: &str) -> Result<Fetched, BoxError> {
        let mut current = validate_url(input, self.limits.max_url_length)?;
        let mut redirects = 0;
        loop {
            let response = self.request(&current).await?;
            let status = response.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                if redirects >= self.limits.max_redirects {
                    return Err(web_error(
                        "WEB_REDIRECT_BLOCKED",
                        format!(
                            "exceeded the maximum of {} redirects",
                            self.limits.max_redirects
                        ),
                    ));
                }
                let Some(location) = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                else {
                    return Err(web_error(
                        "WEB_PROVIDER_ERROR",
                        format!("redirect response (HTTP {status}) without a Location header"),
                    ));
                };
                let target = current.join(location).map_err(|_| {
                    web_error(
                        "WEB_PROVIDER_ERROR",
                        format!("invalid redirect Location \"{location}\""),
                    )
                })?;
                let target = validate_url(target.as_str(), self.limits.max_url_length)?;
                if !same_origin(&target, &current) {
                    return Err(web_error(
                        "WEB_REDIRECT_BLOCKED",
                        format!(
                            "cross-origin redirect to {} is not followed automatically; retry against that URL directly",
                            target.origin().ascii_serialization()
                        ),
                    ));
                }
                drop(response);
                current = target;
                redirects += 1;
                continue;
            }
            return self.read_body(response, current).await;
        }
    }

    /// One GET, connected only to addresses the guard vetted for this hop.
    async fn request(&self, url: &url::Url) -> Result<reqwest::Response, BoxError> {
        let host = url
            .host()
            .ok_or_else(|| web_error("WEB_INVALID_URL", format!("invalid URL: {url}")))?;
        let port = url.port_or_known_default().unwrap_or(80);
        let addrs = vet(&host, port, &self.policy, &self.resolver, CONNECT_TIMEOUT).await?;
        let mut builder = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .dns_resolver(Arc::new(PinnedOnly));
        if let url::Host::Domain(d) = &host {
            builder = builder.resolve_to_addrs(d, &addrs);
        }
        let client = builder.build().map_err(|e| network_error(&e))?;
        client
            .get(url.clone())
            .header(reqwest::header::USER_AGENT, &self.limits.user_agent)
            .header(
                reqwest::header::ACCEPT,
                "text/html,application/xhtml+xml,text/*;q=0.9,application/json;q=0.8",
            )
            .send()
            .await
            .map_err(|e| network_error(&e))
    }

    async fn read_body(
        &self,
        response: reqwest::Response,
        url: url::Url,
    ) -> Result<Fetched, BoxError> {
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let Some(kind) = classify(content_type.as_deref()) else {
            return Err(web_error(
                "WEB_UNSUPPORTED_CONTENT_TYPE",
                format!(
                    "unsupported content type \"{}\"",
                    content_type.as_deref().unwrap_or("unknown")
                ),
            ));
        };
        let encoding = match charset(content_type.as_deref()) {
            None => encoding_rs::UTF_8,
            Some(label) => encoding_rs::Encoding::for_label(label.as_bytes()).ok_or_else(|| {
                web_error(
                    "WEB_UNSUPPORTED_CONTENT_TYPE",
                    format!("unsupported charset \"{label}\""),
                )
            })?,
        };
        let max = self.limits.max_response_bytes;
        if let Some(declared) = response.content_length()
            && declared > max as u64
        {
            return Err(web_error(
                "WEB_FETCH_TOO_LARGE",
                format!("response exceeds the maximum of {max} bytes"),
            ));
        }
        let mut bytes: Vec<u8> = Vec::new();
        let mut truncated = false;
        let mut stream = response.bytes_stream();
        loop {
            let chunk = match tokio::time::timeout(IDLE_TIMEOUT, stream.next()).await {
                Err(_) => return Err(web_error("WEB_FETCH_TIMEOUT", "web fetch timed out")),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(network_error(&e)),
                Ok(Some(Ok(c))) => c,
            };
            let room = max - bytes.len();
            if chunk.len() > room {
                bytes.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            bytes.extend_from_slice(&chunk);
        }
        drop(stream);
        let (decoded, _, _) = encoding.decode(&bytes);
        let (content, cut) = cut_utf16(&decoded, self.limits.max_body_chars);
        Ok(Fetched {
            url: url.to_string(),
            status,
            kind,
            content,
            truncated: truncated || cut,
        })
    }
}

/// The first `max` UTF-16 units of `text` (never splitting a character).
pub fn cut_utf16(text: &str, max: usize) -> (String, bool) {
    let mut units = 0;
    for (i, c) in text.char_indices() {
        units += c.len_utf16();
        if units > max {
            return (text[..i].to_string(), true);
        }
    }
    (text.to_string(), false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn urls_are_validated_with_upstream_texts() {
        let err = |u: &str| validate_url(u, 2048).unwrap_err().to_string();
        assert_eq!(err("not a url"), "invalid URL: not a url");
        assert_eq!(
            err("ftp://x/"),
            "unsupported URL scheme \"ftp:\" (only http and https are allowed)"
        );
        assert_eq!(err("http://u:p@x/"), "credentials in URLs are not allowed");
        assert_eq!(
            validate_url(&format!("http://x/{}", "a".repeat(30)), 20)
                .unwrap_err()
                .to_string(),
            "URL exceeds the maximum length of 20"
        );
    }

    #[test]
    fn content_types_and_charsets() {
        assert_eq!(
            classify(Some("text/html; charset=utf-8")),
            Some(BodyKind::Html)
        );
        assert_eq!(classify(Some("application/ld+json")), Some(BodyKind::Text));
        assert_eq!(classify(Some("application/octet-stream")), None);
        assert_eq!(classify(None), None);
        assert_eq!(
            charset(Some("text/html; Charset=\"ISO-8859-1\"")).as_deref(),
            Some("iso-8859-1")
        );
        assert_eq!(cut_utf16("a😀b", 2), ("a".to_string(), true));
        assert_eq!(cut_utf16("a😀b", 4), ("a😀b".to_string(), false));
    }
}
