//! The memory service: where the files of a working directory are, the prompt view, recall,
//! and writes with secrets removed.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::store::{
    self, Added, Document, Entry, Limits, MemoryError, Origin, Scope, clean_tags, clean_text,
};

/// Whether the model may write memory without asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum WritePolicy {
    /// The first model write of a session asks through the approval path; a yes holds for
    /// the rest of the session.
    #[default]
    AskOnce,
    /// Every model write is allowed.
    Allow,
    /// The model may not write memory (the person still can).
    Deny,
}

impl WritePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            WritePolicy::AskOnce => "ask-once",
            WritePolicy::Allow => "allow",
            WritePolicy::Deny => "deny",
        }
    }
}

/// The `memory` row's configuration.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MemoryConfig {
    /// The workspace file, relative to the project root.
    #[serde(default = "default_workspace_file")]
    pub workspace_file: String,
    /// The user file; relative paths are under the Harness home.
    #[serde(default = "default_user_file")]
    pub user_file: String,
    /// The Harness home (default `$DSH_HOME`, else `~/.dsh`).
    #[serde(default)]
    pub dsh_home: Option<String>,
    #[serde(default = "default_markers")]
    pub project_root_markers: Vec<String>,
    /// The most the memory section adds to a prompt, both scopes together.
    #[serde(default = "default_prompt_bytes")]
    pub max_prompt_bytes: usize,
    /// Files larger than this are skipped with a warning.
    #[serde(default = "default_file_bytes")]
    pub max_file_bytes: u64,
    #[serde(default = "default_entry_chars")]
    pub max_entry_chars: usize,
    #[serde(default)]
    pub writes: WritePolicy,
    /// Propose memories from compaction summaries and at session end (off by default).
    #[serde(default)]
    pub suggest: bool,
    /// Where proposals go.
    #[serde(default = "default_suggest_scope")]
    pub suggest_scope: String,
}

fn default_workspace_file() -> String {
    ".dsh/memory.md".into()
}
fn default_user_file() -> String {
    "memory.md".into()
}
fn default_markers() -> Vec<String> {
    vec![".git".into()]
}
fn default_prompt_bytes() -> usize {
    16 * 1024
}
fn default_file_bytes() -> u64 {
    4 * 1024 * 1024
}
fn default_entry_chars() -> usize {
    2000
}
fn default_suggest_scope() -> String {
    "workspace".into()
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            workspace_file: default_workspace_file(),
            user_file: default_user_file(),
            dsh_home: None,
            project_root_markers: default_markers(),
            max_prompt_bytes: default_prompt_bytes(),
            max_file_bytes: default_file_bytes(),
            max_entry_chars: default_entry_chars(),
            writes: WritePolicy::default(),
            suggest: false,
            suggest_scope: default_suggest_scope(),
        }
    }
}

/// The Harness home (`$DSH_HOME`, else `~/.dsh`).
fn env_home() -> PathBuf {
    dsh_host::secrets::dsh_home()
}

/// One memory with its scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub scope: Scope,
    pub entry: Entry,
    pub score: usize,
}

/// A file that could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    pub scope: Scope,
    pub message: String,
}

/// The memory files one working directory sees.
#[derive(Clone, Debug)]
pub struct Memory {
    pub config: MemoryConfig,
    pub project_root: PathBuf,
    home: PathBuf,
}

impl Memory {
    /// The files seen from `cwd`.
    pub fn new(config: MemoryConfig, cwd: &Path) -> Self {
        let home = config
            .dsh_home
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(env_home);
        let project_root = cwd
            .ancestors()
            .find(|d| {
                config
                    .project_root_markers
                    .iter()
                    .any(|m| d.join(m).exists())
            })
            .unwrap_or(cwd)
            .to_path_buf();
        Self {
            config,
            project_root,
            home,
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_file_bytes: self.config.max_file_bytes,
            max_entry_chars: self.config.max_entry_chars,
        }
    }

    pub fn path(&self, scope: Scope) -> PathBuf {
        match scope {
            Scope::Workspace => self.project_root.join(&self.config.workspace_file),
            Scope::User => {
                let p = PathBuf::from(&self.config.user_file);
                if p.is_absolute() {
                    p
                } else {
                    self.home.join(p)
                }
            }
        }
    }

    /// How the path reads to a person (relative to the project, or under the home).
    pub fn display_path(&self, scope: Scope) -> String {
        let path = self.path(scope);
        if let Ok(r) = path.strip_prefix(&self.project_root)
            && scope == Scope::Workspace
        {
            return r.display().to_string();
        }
        if let Ok(r) = path.strip_prefix(&self.home) {
            let explicit = self.config.dsh_home.is_some()
                || std::env::var("DSH_HOME").is_ok_and(|v| !v.trim().is_empty());
            let prefix = if explicit { "$DSH_HOME" } else { "~/.dsh" };
            return format!("{prefix}/{}", r.display());
        }
        path.display().to_string()
    }

    /// The document of `scope` (empty when the file does not exist).
    pub fn read(&self, scope: Scope) -> Result<Document, MemoryError> {
        Ok(store::read_file(&self.path(scope), &self.limits())?.unwrap_or_default())
    }

    /// Every entry of both scopes (workspace first, file order), and the files skipped.
    pub fn all(&self) -> (Vec<Found>, Vec<Warning>) {
        let mut found = Vec::new();
        let mut warnings = Vec::new();
        for scope in [Scope::Workspace, Scope::User] {
            match self.read(scope) {
                Ok(doc) => found.extend(doc.entries.into_iter().map(|entry| Found {
                    scope,
                    entry,
                    score: 0,
                })),
                Err(e) => warnings.push(Warning {
                    scope,
                    message: e.to_string(),
                }),
            }
        }
        (found, warnings)
    }

    /// The entry `id` in either scope.
    pub fn find(&self, id: &str) -> Result<Found, MemoryError> {
        let (all, _) = self.all();
        let wanted = id.trim().trim_start_matches('#').to_ascii_lowercase();
        let exact: Vec<&Found> = all.iter().filter(|f| f.entry.id == wanted).collect();
        if let [one] = exact.as_slice() {
            return Ok((*one).clone());
        }
        let prefixed: Vec<&Found> = all
            .iter()
            .filter(|f| wanted.len() >= 4 && f.entry.id.starts_with(&wanted))
            .collect();
        match prefixed.as_slice() {
            [one] => Ok((*one).clone()),
            [] => Err(MemoryError::NotFound(id.to_string())),
            _ => Err(MemoryError::Invalid(format!(
                "the id {id} matches more than one memory; give more of it"
            ))),
        }
    }

    /// Writes a memory after removing secrets. Returns what was stored and how many
    /// secrets were removed.
    pub fn remember(
        &self,
        scope: Scope,
        text: &str,
        tags: &[String],
        origin: Origin,
        proposed: bool,
    ) -> Result<(Added, usize), MemoryError> {
        let limits = self.limits();
        let (text, redactions) = dsh_host::redact::redact(text);
        let text = clean_text(&text, &limits)?;
        let entry = Entry::new(
            store::new_id(),
            text,
            clean_tags(tags),
            origin,
            now(),
            proposed,
        );
        let added = store::modify(&self.path(scope), scope, &limits, |doc| {
            Ok(store::add(doc, entry))
        })?;
        Ok((added, redactions))
    }

    /// Removes the entry `id` from whichever scope holds it.
    pub fn forget(&self, id: &str) -> Result<Found, MemoryError> {
        let found = self.find(id)?;
        let entry = store::modify(
            &self.path(found.scope),
            found.scope,
            &self.limits(),
            |doc| store::remove(doc, &found.entry.id),
        )?;
        Ok(Found { entry, ..found })
    }

    /// Accepts a proposal: it becomes a memory the model sees.
    pub fn accept(&self, id: &str) -> Result<Found, MemoryError> {
        let found = self.find(id)?;
        if !found.entry.proposed {
            return Err(MemoryError::Invalid(format!(
                "memory {} is not a proposal (it is already in use)",
                found.entry.id
            )));
        }
        let entry = store::modify(
            &self.path(found.scope),
            found.scope,
            &self.limits(),
            |doc| store::update(doc, &found.entry.id, |e| e.proposed = false),
        )?;
        Ok(Found { entry, ..found })
    }

    /// Replaces the text of entry `id` (secrets removed).
    pub fn edit(&self, id: &str, text: &str) -> Result<Found, MemoryError> {
        let found = self.find(id)?;
        let limits = self.limits();
        let (text, _) = dsh_host::redact::redact(text);
        let text = clean_text(&text, &limits)?;
        let entry = store::modify(&self.path(found.scope), found.scope, &limits, |doc| {
            store::update(doc, &found.entry.id, |e| e.text = text)
        })?;
        Ok(Found { entry, ..found })
    }

    /// Memories matching `query` (every word, in text or tags; partial matches after full
    /// ones), newest first within a score; without a query the newest. Proposals are left
    /// out unless `proposals`.
    pub fn recall(
        &self,
        query: &str,
        scopes: &[Scope],
        limit: usize,
        proposals: bool,
    ) -> (Vec<Found>, Vec<Warning>) {
        let (all, warnings) = self.all();
        let terms: Vec<String> = words(query);
        let mut hits: Vec<(usize, usize, Found)> = all
            .into_iter()
            .enumerate()
            .filter(|(_, f)| scopes.contains(&f.scope) && (proposals || !f.entry.proposed))
            .filter_map(|(i, mut f)| {
                if terms.is_empty() {
                    return Some((0, i, f));
                }
                let mut hay = f.entry.text.to_lowercase();
                for t in &f.entry.tags {
                    hay.push(' ');
                    hay.push_str(&t.to_lowercase());
                }
                let matched = terms
                    .iter()
                    .filter(|t| {
                        hay.split(|c: char| !c.is_alphanumeric())
                            .any(|w| w.starts_with(t.as_str()))
                    })
                    .count();
                (matched > 0).then(|| {
                    f.score = matched;
                    (matched, i, f)
                })
            })
            .collect();
        // Score first, then newer (later in the file, user after workspace by time).
        hits.sort_by(|a, b| {
            b.0.cmp(&a.0)
                .then_with(|| b.2.entry.at.cmp(&a.2.entry.at))
                .then_with(|| b.1.cmp(&a.1))
        });
        (
            hits.into_iter().take(limit).map(|(_, _, f)| f).collect(),
            warnings,
        )
    }

    /// The text of the prompt section: both scopes' memories (proposals left out), newest
    /// kept when over the byte budget; `None` when there is nothing to say.
    pub fn prompt_text(&self) -> Option<String> {
        let mut blocks: Vec<String> = Vec::new();
        let mut budget = self.config.max_prompt_bytes;
        let mut omitted = 0usize;
        let mut warnings = Vec::new();
        for scope in [Scope::Workspace, Scope::User] {
            let doc = match self.read(scope) {
                Ok(d) => d,
                Err(e) => {
                    tracing::warn!("memory: {e}");
                    warnings.push(format!("- {e}"));
                    continue;
                }
            };
            let lines: Vec<String> = doc
                .entries
                .iter()
                .filter(|e| !e.proposed)
                .map(|e| format!("- [{}] {}", e.id, e.display().replace('\n', "\n  ")))
                .collect();
            if lines.is_empty() {
                continue;
            }
            let head = match scope {
                Scope::Workspace => {
                    format!("Workspace memory ({}):", self.display_path(scope))
                }
                Scope::User => format!("User memory ({}):", self.display_path(scope)),
            };
            // Newest last in the file: keep from the end while the budget lasts.
            let mut kept: Vec<&String> = Vec::new();
            let mut used = head.len() + 2;
            for line in lines.iter().rev() {
                if used + line.len() + 1 > budget {
                    break;
                }
                used += line.len() + 1;
                kept.push(line);
            }
            omitted += lines.len() - kept.len();
            if kept.is_empty() {
                continue;
            }
            budget = budget.saturating_sub(used);
            kept.reverse();
            let body: Vec<&str> = kept.iter().map(|s| s.as_str()).collect();
            blocks.push(format!("{head}\n{}", body.join("\n")));
        }
        if blocks.is_empty() && warnings.is_empty() {
            return None;
        }
        let mut text = String::from(crate::PROMPT_INTRO);
        for b in blocks {
            text.push_str("\n\n");
            text.push_str(&b);
        }
        if omitted > 0 {
            text.push_str(&format!(
                "\n\n({omitted} older memories are not shown here for space; recall finds them.)"
            ));
        }
        if !warnings.is_empty() {
            text.push_str("\n\nMemory files skipped (tell the person if it matters):\n");
            text.push_str(&warnings.join("\n"));
        }
        Some(text)
    }
}

/// Lower-case words of letters and digits.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Now, RFC 3339 in UTC to the second.
pub fn now() -> Option<String> {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis() as i64;
    let iso = dsh_context::query::iso_millis(ms - ms % 1000);
    Some(iso.replace(".000Z", "Z"))
}
