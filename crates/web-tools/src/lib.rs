//! Web tools for the model.
//!
//! * `web_fetch` over [`HttpFetcher`] (`@deepseek-ai/dsh-web-fetch-http`): http(s) only,
//!   size and time limits, same-origin redirects (at most 5), and an address guard that
//!   refuses loopback, private, link-local and other non-public addresses after DNS
//!   resolution and on every redirect hop, pinning the connection to the checked addresses.
//!   HTML bodies become Markdown ([`html_to_markdown`]).
//! * `web_search` over search providers (`@deepseek-ai/dsh-web-search-deepseek|exa|
//!   perplexity`); a provider without a key is unavailable.
//! * [`WebService`] (`@deepseek-ai/dsh-web`) selects providers at call time.

mod error;
mod fetch;
mod markdown;
mod plugins;
mod search;
mod tools;

pub use error::{web_code, web_error};
pub use fetch::guard::{AddressPolicy, HostResolver, SystemResolver, is_blocked};
pub use fetch::{BodyKind, FetchLimits, Fetched, HttpFetcher, classify, cut_utf16, validate_url};
pub use markdown::html_to_markdown;
pub use plugins::{
    ToolWebPlugin, WebFetchHttpPlugin, WebPlugin, WebSearchDeepSeekPlugin, WebSearchExaPlugin,
    WebSearchPerplexityPlugin, register_catalog,
};
pub use search::{
    CredentialLookup, DeepSeekSearch, ExaSearch, Key, PerplexitySearch, SearchProvider,
    SearchRequest, SearchResult, Source,
};
pub use tools::{ToolWebConfig, WebService, merge, parse_queries, render_fetch, render_search};
