//! `session.files {sessionId, query}`: workspace files for the composer's `@` mentions,
//! best fuzzy matches first. `session.workspaceDiff {sessionId, seq, path}`: one file's
//! diff of the `workspace/changes` summary at `seq`. The walk honours `.gitignore` and skips hidden entries; it
//! looks at no more than [`MAX_SCANNED`] files, so a huge tree answers quickly.

use std::path::Path;

use serde_json::{Value, json};

use super::sessions::{require_known, session_id};
use crate::rpc::{ApiError, ApiResult, Args};
use crate::state::WebState;

/// Files looked at per query.
const MAX_SCANNED: usize = 20_000;
/// Matches returned.
const LIMIT: usize = 20;

pub async fn workspace_diff(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let seq = Args(p)
        .opt_u64("seq")?
        .ok_or_else(|| ApiError::bad_request("seq is required"))?;
    let path = Args(p).str("path")?;
    let unavailable = || {
        ApiError::bad_request(
            "this diff is no longer available: dsh web keeps the snapshots it compares only while it runs",
        )
    };
    let changes = s.changes.clone().ok_or_else(unavailable)?;
    match changes.diff(id, seq, path).await {
        None => Err(unavailable()),
        Some(Ok(diff)) => Ok(json!({"diff": diff})),
        Some(Err(e)) => Err(ApiError::internal(e)),
    }
}

pub async fn files(s: &WebState, p: &Value) -> ApiResult {
    let id = session_id(p)?;
    let query = Args(p).opt_str("query")?.unwrap_or("").to_lowercase();
    if query.len() > 200 {
        return Err(ApiError::bad_request("query is longer than 200 characters"));
    }
    require_known(s, id).await?;
    let agent = s.lifecycle().ensure_live(id).await?;
    let cwd = agent
        .cwd()
        .ok_or_else(|| ApiError::bad_request("this session has no working directory"))?;
    let resources = resources_matching(s, &agent, &query).await;
    let items = tokio::task::spawn_blocking(move || best(&cwd, &query))
        .await
        .map_err(ApiError::internal)?;
    Ok(json!({"items": items, "resources": resources}))
}

/// Resources offered per query in the `@` menu.
const RESOURCE_LIMIT: usize = 6;
/// Longest wait for the servers' resource lists.
const RESOURCE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// The connected MCP servers' resources that match `query`, as `@server:uri` references.
async fn resources_matching(s: &WebState, agent: &dsh_agent::AgentRef, query: &str) -> Vec<Value> {
    let Some(service) = s.root.get::<dsh_mcp::McpResources>() else {
        return Vec::new();
    };
    let Ok(all) = tokio::time::timeout(RESOURCE_WAIT, service.catalog(agent.ctx())).await else {
        return Vec::new();
    };
    let mut scored: Vec<(i64, Value)> = all
        .into_iter()
        .filter_map(|r| {
            let reference = format!("{}:{}", r.server, r.uri);
            let score = score(&format!("{reference} {}", r.name).to_lowercase(), query)?;
            Some((
                score,
                json!({"ref": reference, "server": r.server, "uri": r.uri,
                                "name": r.name, "mimeType": r.mime_type}),
            ))
        })
        .collect();
    scored.sort_by_key(|b| std::cmp::Reverse(b.0));
    scored
        .into_iter()
        .take(RESOURCE_LIMIT)
        .map(|(_, v)| v)
        .collect()
}

/// The `@server:uri` references in `text` to servers in `servers` (each once, in order).
pub(crate) fn resource_refs(text: &str, servers: &[String]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for token in text.split_whitespace() {
        let Some((server, uri)) = token.strip_prefix('@').and_then(|t| t.split_once(':')) else {
            continue;
        };
        // Sentence punctuation after a reference is not part of it.
        let uri = uri.trim_end_matches([',', ';', '.', '!', '?', ')']);
        if uri.is_empty() || !servers.iter().any(|s| s == server) {
            continue;
        }
        let pair = (server.to_string(), uri.to_string());
        if !out.contains(&pair) {
            out.push(pair);
        }
    }
    out
}

fn best(root: &Path, query: &str) -> Vec<String> {
    let mut scored: Vec<(i64, String)> = Vec::new();
    let walk = ignore::WalkBuilder::new(root)
        .hidden(true)
        .git_ignore(true)
        .git_global(false)
        .require_git(false)
        .follow_links(false)
        .build();
    for entry in walk.filter_map(Result::ok).take(MAX_SCANNED) {
        if !entry.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(rel) = entry.path().strip_prefix(root) else {
            continue;
        };
        let rel = rel.to_string_lossy().replace('\\', "/");
        if let Some(score) = score(&rel, query) {
            scored.push((score, rel));
        }
    }
    scored.sort_by(|a, b| {
        b.0.cmp(&a.0)
            .then(a.1.len().cmp(&b.1.len()))
            .then(a.1.cmp(&b.1))
    });
    scored.into_iter().take(LIMIT).map(|(_, p)| p).collect()
}

/// A subsequence match of `query` in `path` (case-insensitive): consecutive characters,
/// characters at the start of a path segment or word, and matches in the file name score
/// higher; `None` when `query` is not a subsequence.
fn score(path: &str, query: &str) -> Option<i64> {
    if query.is_empty() {
        return Some(-(path.len() as i64));
    }
    let lower = path.to_lowercase();
    let chars: Vec<char> = lower.chars().collect();
    let name_start = lower.rfind('/').map_or(0, |i| lower[..=i].chars().count());
    let mut score = 0i64;
    let mut pos = 0usize;
    let mut prev: Option<usize> = None;
    for q in query.chars() {
        let found = (pos..chars.len()).find(|&i| chars[i] == q)?;
        score += 1;
        if prev.is_some_and(|p| p + 1 == found) {
            score += 8;
        }
        if found == 0 || matches!(chars[found - 1], '/' | '_' | '-' | '.' | ' ') {
            score += 6;
        }
        if found >= name_start {
            score += 4;
        }
        prev = Some(found);
        pos = found + 1;
    }
    if lower.contains(query) {
        score += 20;
    }
    Some(score * 100 - chars.len() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_references_name_a_connected_server() {
        let servers = vec!["docs".to_string()];
        assert_eq!(
            resource_refs(
                "see @docs:demo://a/b and @docs:demo://a/b, @other:x @docs: @path/file.rs",
                &servers
            ),
            vec![("docs".to_string(), "demo://a/b".to_string())]
        );
    }

    #[test]
    fn names_beat_scattered_matches_and_misses_are_none() {
        let a = score("src/config/loader.rs", "loader").unwrap_or(i64::MIN);
        let b = score("src/long/other/directory/readme.md", "loader");
        assert!(b.is_none_or(|b| a > b));
        assert!(score("README.md", "xyz").is_none());
        let exact = score("crates/web/src/lib.rs", "lib.rs").unwrap_or(i64::MIN);
        let spread = score("crates/lsp/src/b.rs", "lib.rs").unwrap_or(i64::MIN);
        assert!(exact > spread);
    }

    #[test]
    fn the_walk_honours_gitignore_and_hidden_files() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = dir.path();
        for (p, body) in [
            ("src/main.rs", "fn main() {}"),
            ("target/debug/main.d", "x"),
            (".hidden/main.rs", "x"),
            (".gitignore", "target/\n"),
        ] {
            let path = root.join(p);
            std::fs::create_dir_all(path.parent().unwrap_or(root))
                .unwrap_or_else(|e| panic!("{e}"));
            std::fs::write(path, body).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(best(root, "main"), vec!["src/main.rs".to_string()]);
    }
}
