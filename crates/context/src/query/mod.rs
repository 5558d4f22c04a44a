//! Session query: the model reads and searches the history of its own session and of the
//! workspace's other sessions, spilled outputs included through their locators.
//!
//! * `@deepseek-ai/dsh-session-query-sqlite` ([`SessionQuerySqlitePlugin`]) provides the
//!   [`SessionQuery`] service; its FTS5 index is derived from the logs.
//! * `@deepseek-ai/dsh-tool-session-query` ([`ToolSessionQueryPlugin`]) registers the five
//!   `session_*` tools and their prompt section.

mod extract;
mod format;
mod index;
mod service;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_prompt::SystemPrompt;
use dsh_tools::ToolRegistry;
use serde::Deserialize;

pub use extract::{SurfaceClass, SurfaceFold, event_text, iso_millis, parse_iso};
pub use format::{event_object, snippet, to_string_pretty};
pub use index::{EventFilters, Hit, IndexPath, SearchIndex};
pub use service::{QueryConfig, QueryError, SessionQuery, SessionRecord, SessionView};
pub use tools::{QueryTool, ToolConfig, tools};

/// The model-visible guidance of the session tools.
pub const PROMPT_SECTION: &str = "Earlier work can be looked up: session_search finds past sessions of this workspace that mention a phrase, and session_event_search finds matching events inside one session. Results come as a single list without paging (a list cut at the result cap says so) and never reach outside this workspace. From a hit, session_trace shows a session's parents and children, session_event_trace shows what replaced or cites an event, and session_event_read returns an event's exact content.";

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SqliteConfig {
    path: String,
    #[serde(default)]
    open_at: Option<String>,
    #[serde(default)]
    journal_mode: Option<String>,
    #[serde(default)]
    default_limit: Option<u64>,
    #[serde(default)]
    max_limit: Option<u64>,
    #[serde(default)]
    snippet_chars: Option<u64>,
    #[serde(default)]
    read_window_max: Option<u64>,
    #[serde(default)]
    persisted_inspect_concurrency: Option<u64>,
}

/// `@deepseek-ai/dsh-session-query-sqlite` (config `{path, openAt?: startup | first-search |
/// never, snippetChars?, readWindowMax?, …}`).
pub struct SessionQuerySqlitePlugin;

impl Plugin for SessionQuerySqlitePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-session-query-sqlite"
    }

    fn upstream_keys_not_taken(&self) -> &'static [(&'static str, &'static str)] {
        &[
            (
                "persistedReadConcurrency",
                "stored sessions are indexed one at a time here",
            ),
            (
                "preparedSessionCacheSize",
                "this build keeps no cache of prepared sessions",
            ),
        ]
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: SqliteConfig = config.parse()?;
        if c.path.is_empty() {
            return Err("session-query-sqlite: path must be a non-empty path or ':memory:'".into());
        }
        if let Some(mode) = &c.journal_mode
            && mode != "wal"
            && mode != "delete"
        {
            return Err(format!("session-query-sqlite: unknown journalMode \"{mode}\"").into());
        }
        let _ = (
            c.default_limit,
            c.max_limit,
            c.persisted_inspect_concurrency,
        );
        let path = if c.path == ":memory:" {
            IndexPath::Memory
        } else {
            let p = PathBuf::from(&c.path);
            IndexPath::File(if p.is_absolute() {
                p
            } else {
                std::env::current_dir()?.join(p)
            })
        };
        let index = match c.open_at.as_deref().unwrap_or("startup") {
            "never" => None,
            "first-search" => Some(SearchIndex::new(path)),
            "startup" => {
                let index = SearchIndex::new(path);
                index
                    .open_now()
                    .map_err(|e| format!("session-query-sqlite: {e}"))?;
                Some(index)
            }
            other => {
                return Err(format!(
                    "session-query-sqlite: openAt must be startup, first-search or never (got \"{other}\")"
                )
                .into());
            }
        };
        let config = QueryConfig {
            read_window_max: c.read_window_max.unwrap_or(50),
            snippet_chars: c.snippet_chars.unwrap_or(240).max(1) as usize,
        };
        ctx.provide(SessionQuery::new(ctx.clone(), config, index))?;
        Ok(())
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ToolRowConfig {
    max_search_results: Option<u64>,
    search_timeout_ms: Option<u64>,
}

/// `@deepseek-ai/dsh-tool-session-query` (config `{maxSearchResults?, searchTimeoutMs?}`).
pub struct ToolSessionQueryPlugin;

impl Plugin for ToolSessionQueryPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-session-query"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ToolRowConfig = config.parse()?;
        let tool_config = ToolConfig {
            max_search_results: c.max_search_results.unwrap_or(100).max(1) as usize,
            search_timeout_ms: c.search_timeout_ms.unwrap_or(30_000).max(1),
        };
        let service = ctx.require::<SessionQuery>()?;
        let registry = ctx.require::<ToolRegistry>()?;
        let prompt = ctx.require::<SystemPrompt>()?;
        prompt.section(
            ctx,
            "tool:session-query",
            113.0,
            Arc::new(|_| PROMPT_SECTION.to_string()),
        )?;
        for tool in tools::tools(&service, tool_config)? {
            registry.register(ctx, Arc::new(tool))?;
        }
        Ok(())
    }
}
