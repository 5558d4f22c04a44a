//! The workspace's files for `@` mentions: listed once at start (ignore files honoured,
//! bounded), matched fuzzily as the user types.

use std::path::Path;

use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher, Utf32Str};

/// Most files listed.
const MAX_FILES: usize = 50_000;

#[derive(Default)]
pub struct WorkspaceFiles {
    paths: Vec<String>,
}

impl WorkspaceFiles {
    /// The files under `root` (relative paths, `/`-separated), skipping what `.gitignore`
    /// and `.ignore` exclude and hidden entries.
    pub fn scan(root: &Path) -> Self {
        let mut paths = Vec::new();
        for entry in ignore::WalkBuilder::new(root).build().flatten() {
            if paths.len() >= MAX_FILES {
                break;
            }
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            if let Ok(rel) = entry.path().strip_prefix(root) {
                paths.push(rel.to_string_lossy().replace('\\', "/"));
            }
        }
        paths.sort();
        Self { paths }
    }

    #[cfg(test)]
    fn of(paths: &[&str]) -> Self {
        Self {
            paths: paths.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// The best `limit` paths for `query`, best first (all, shortest first, when empty).
    pub fn matches(&self, query: &str, limit: usize) -> Vec<String> {
        if query.is_empty() {
            let mut all: Vec<&String> = self.paths.iter().collect();
            all.sort_by_key(|p| (p.matches('/').count(), p.len()));
            return all.into_iter().take(limit).cloned().collect();
        }
        let mut matcher = Matcher::new(Config::DEFAULT.match_paths());
        let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
        let mut buf = Vec::new();
        let mut scored: Vec<(u32, &String)> = self
            .paths
            .iter()
            .filter_map(|p| {
                let s = pattern.score(Utf32Str::new(p, &mut buf), &mut matcher)?;
                Some((s, p))
            })
            .collect();
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.len().cmp(&b.1.len())));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, p)| p.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuzzy_matches_rank_the_closest_path_first() {
        let files = WorkspaceFiles::of(&[
            "README.md",
            "src/main.rs",
            "src/lib.rs",
            "tests/main_test.rs",
        ]);
        let got = files.matches("smain", 10);
        assert_eq!(got.first().map(String::as_str), Some("src/main.rs"));
        assert!(!got.contains(&"README.md".to_string()));
        assert_eq!(
            files.matches("", 2),
            vec!["README.md".to_string(), "src/lib.rs".to_string()]
        );
    }

    #[test]
    fn scanning_skips_ignored_files() {
        let dir = std::env::temp_dir().join(format!("dsh-tui-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("src")).unwrap_or_default();
        std::fs::create_dir_all(dir.join("target")).unwrap_or_default();
        std::fs::write(dir.join(".ignore"), "target/\n").unwrap_or_default();
        std::fs::write(dir.join("src/a.rs"), "").unwrap_or_default();
        std::fs::write(dir.join("target/b.rs"), "").unwrap_or_default();
        let files = WorkspaceFiles::scan(&dir);
        assert_eq!(files.paths, vec!["src/a.rs".to_string()]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
