//! The memory files: plain markdown, one memory per top-level list item, with an HTML
//! comment after each item naming its id and origin. People edit the files freely; items
//! without a comment get an id from their text.
//!
//! Every write takes an exclusive lock on the file's directory, re-reads the file, changes
//! it and replaces it atomically (temporary file, fsync, rename), so two sessions writing at
//! once both keep their entries and a crash leaves the old file or the new one.

use std::fmt;
use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// Where a memory lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Scope {
    /// The project: `<project root>/.dsh/memory.md`, which may be checked in.
    Workspace,
    /// The person: `$DSH_HOME/memory.md`, for every project.
    User,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Workspace => "workspace",
            Scope::User => "user",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "workspace" | "project" => Some(Scope::Workspace),
            "user" | "global" => Some(Scope::User),
            _ => None,
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who wrote an entry.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Origin {
    /// `model`, `user` or `harness` (a proposal).
    pub by: String,
    pub session: Option<String>,
    /// The 1-based turn of that session.
    pub turn: Option<u64>,
}

/// One memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub text: String,
    pub tags: Vec<String>,
    pub origin: Origin,
    /// RFC 3339 time of writing, when recorded.
    pub at: Option<String>,
    /// A proposal waiting for the person's yes: not shown to the model.
    pub proposed: bool,
    /// Line range `[start, end)` in the file.
    lines: (usize, usize),
}

impl Entry {
    pub fn new(
        id: String,
        text: String,
        tags: Vec<String>,
        origin: Origin,
        at: Option<String>,
        proposed: bool,
    ) -> Self {
        Self {
            id,
            text,
            tags,
            origin,
            at,
            proposed,
            lines: (0, 0),
        }
    }

    /// The text with its tags, as the model and the listings show it.
    pub fn display(&self) -> String {
        if self.tags.is_empty() {
            self.text.clone()
        } else {
            let tags: Vec<String> = self.tags.iter().map(|t| format!("#{t}")).collect();
            format!("{} {}", self.text, tags.join(" "))
        }
    }
}

/// Why a memory operation failed.
#[derive(Debug)]
pub enum MemoryError {
    /// The file exists but cannot be used (binary, not UTF-8, too large): it is left alone.
    Unusable {
        path: PathBuf,
        reason: String,
    },
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    Invalid(String),
    NotFound(String),
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::Unusable { path, reason } => write!(
                f,
                "the memory file {} was skipped: {reason}; fix or remove it to use this scope",
                path.display()
            ),
            MemoryError::Io { path, error } => {
                write!(f, "memory file {}: {error}", path.display())
            }
            MemoryError::Invalid(m) => f.write_str(m),
            MemoryError::NotFound(id) => write!(f, "no memory with id {id}"),
        }
    }
}

impl std::error::Error for MemoryError {}

/// Size limits.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// A file larger than this is skipped (and never rewritten).
    pub max_file_bytes: u64,
    /// One entry's text at most.
    pub max_entry_chars: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_file_bytes: 4 * 1024 * 1024,
            max_entry_chars: 2000,
        }
    }
}

const TITLE: &str = "# Memory";
fn intro(scope: Scope) -> &'static str {
    match scope {
        Scope::Workspace => {
            "Notes dsh keeps about this project for later sessions. Each top-level list item is one memory: edit, reorder or delete items freely. The comment after an item holds its id and where it came from."
        }
        Scope::User => {
            "Notes dsh keeps about you for every project. Each top-level list item is one memory: edit, reorder or delete items freely. The comment after an item holds its id and where it came from."
        }
    }
}

/// An item's text and the key=value list of its trailing `<!-- dsh-memory … -->` comment.
fn split_meta(raw: &str) -> (&str, &str) {
    let trimmed = raw.trim_end();
    if let Some(body) = trimmed.strip_suffix("-->")
        && let Some(open) = body.rfind("<!--")
        && let Some(meta) = body[open + 4..].trim_start().strip_prefix("dsh-memory")
        && (meta.is_empty() || meta.starts_with(char::is_whitespace))
    {
        return (body[..open].trim(), meta.trim());
    }
    (raw.trim(), "")
}

fn is_item_start(line: &str) -> Option<&str> {
    ["- ", "* ", "+ "]
        .iter()
        .find_map(|m| line.strip_prefix(m))
        .or_else(|| (line == "-" || line == "*").then_some(""))
}

/// A stable id from an entry's text (for items written by hand).
pub fn text_id(text: &str) -> String {
    let digest = sha1_smol::Sha1::from(normalized(text).as_bytes())
        .digest()
        .to_string();
    digest[..8].to_string()
}

/// The comparison form of a text: lower case, one space between words, no closing dot.
pub fn normalized(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .join(" ")
        .to_lowercase()
        .trim_end_matches(['.', '!', ';'])
        .to_string()
}

/// One parsed file.
#[derive(Clone, Debug, Default)]
pub struct Document {
    lines: Vec<String>,
    pub entries: Vec<Entry>,
}

impl Document {
    pub fn parse(text: &str) -> Self {
        let lines: Vec<String> = text.lines().map(str::to_string).collect();
        let mut entries = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let Some(first) = is_item_start(&lines[i]) else {
                i += 1;
                continue;
            };
            let start = i;
            let mut parts = vec![first.to_string()];
            i += 1;
            while i < lines.len()
                && !lines[i].trim().is_empty()
                && lines[i].starts_with([' ', '\t'])
            {
                parts.push(lines[i].trim().to_string());
                i += 1;
            }
            let raw = if parts.len() == 1 {
                parts.pop().unwrap_or_default()
            } else {
                parts.join("\n")
            };
            let (text, meta) = split_meta(&raw);
            if text.is_empty() {
                continue;
            }
            entries.push(entry_from(text.to_string(), meta, (start, i)));
        }
        Self { lines, entries }
    }

    fn render(&self) -> String {
        let mut out = self.lines.join("\n");
        out.push('\n');
        out
    }

    /// The entry with `id` (ids are matched case-insensitively, by prefix of at least 4).
    pub fn find(&self, id: &str) -> Option<&Entry> {
        let id = id.trim().trim_start_matches('#').to_ascii_lowercase();
        if let Some(e) = self.entries.iter().find(|e| e.id == id) {
            return Some(e);
        }
        if id.len() < 4 {
            return None;
        }
        let mut found = self.entries.iter().filter(|e| e.id.starts_with(&id));
        match (found.next(), found.next()) {
            (Some(e), None) => Some(e),
            _ => None,
        }
    }

    fn replace_lines(&mut self, range: (usize, usize), with: Vec<String>) {
        self.lines.splice(range.0..range.1, with);
        *self = Self::parse(&self.render());
    }
}

fn entry_from(text: String, meta: &str, lines: (usize, usize)) -> Entry {
    let mut entry = Entry {
        id: String::new(),
        text,
        tags: Vec::new(),
        origin: Origin::default(),
        at: None,
        proposed: false,
        lines,
    };
    for pair in meta.split_whitespace() {
        let Some((k, v)) = pair.split_once('=') else {
            continue;
        };
        match k {
            "id" => entry.id = v.to_ascii_lowercase(),
            "tags" => {
                entry.tags = v
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .map(str::to_string)
                    .collect();
            }
            "by" => entry.origin.by = v.to_string(),
            "session" => entry.origin.session = Some(v.to_string()),
            "turn" => entry.origin.turn = v.parse().ok(),
            "at" => entry.at = Some(v.to_string()),
            "status" => entry.proposed = v == "proposed",
            _ => {}
        }
    }
    if entry.id.is_empty() {
        entry.id = text_id(&entry.text);
    }
    entry
}

/// An entry's lines in the file.
fn entry_lines(e: &Entry) -> Vec<String> {
    let mut meta = vec![format!("id={}", e.id)];
    if !e.tags.is_empty() {
        meta.push(format!("tags={}", e.tags.join(",")));
    }
    if !e.origin.by.is_empty() {
        meta.push(format!("by={}", e.origin.by));
    }
    if let Some(s) = &e.origin.session {
        meta.push(format!("session={s}"));
    }
    if let Some(t) = e.origin.turn {
        meta.push(format!("turn={t}"));
    }
    if let Some(at) = &e.at {
        meta.push(format!("at={at}"));
    }
    if e.proposed {
        meta.push("status=proposed".into());
    }
    let mut lines: Vec<String> = e
        .text
        .lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                format!("- {l}")
            } else {
                format!("  {l}")
            }
        })
        .collect();
    if let Some(last) = lines.last_mut() {
        last.push_str(&format!(" <!-- dsh-memory {} -->", meta.join(" ")));
    }
    lines
}

/// Cleans a text for storage: trimmed, comment markers defused, blank lines dropped.
pub fn clean_text(text: &str, limits: &Limits) -> Result<String, MemoryError> {
    let text = text
        .replace("<!--", "< !--")
        .replace("-->", "-- >")
        .replace('\r', "");
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let text = lines.join("\n");
    if text.is_empty() {
        return Err(MemoryError::Invalid(
            "a memory needs some text: say in a sentence what to keep".into(),
        ));
    }
    let chars = text.chars().count();
    if chars > limits.max_entry_chars {
        return Err(MemoryError::Invalid(format!(
            "a memory holds at most {} characters (this one has {chars}); keep the fact, not the story",
            limits.max_entry_chars
        )));
    }
    Ok(text)
}

/// Cleans tags: lower-case words of letters, digits, `-` and `_`.
pub fn clean_tags(tags: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in tags {
        let t: String = t
            .trim()
            .trim_start_matches('#')
            .to_lowercase()
            .chars()
            .map(|c| if c.is_whitespace() { '-' } else { c })
            .filter(|c| c.is_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        if !t.is_empty() && !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// Reads a memory file: `Ok(None)` when it does not exist.
pub fn read_file(path: &Path, limits: &Limits) -> Result<Option<Document>, MemoryError> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => {
            return Err(MemoryError::Io {
                path: path.to_path_buf(),
                error,
            });
        }
    };
    let unusable = |reason: String| MemoryError::Unusable {
        path: path.to_path_buf(),
        reason,
    };
    let meta = file.metadata().map_err(|error| MemoryError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    if !meta.is_file() {
        return Err(unusable("it is not a regular file".into()));
    }
    if meta.len() > limits.max_file_bytes {
        return Err(unusable(format!(
            "it has {} bytes, over the {}-byte limit",
            meta.len(),
            limits.max_file_bytes
        )));
    }
    let mut bytes = Vec::new();
    file.take(limits.max_file_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|error| MemoryError::Io {
            path: path.to_path_buf(),
            error,
        })?;
    if bytes.len() as u64 > limits.max_file_bytes {
        return Err(unusable(format!(
            "it grew over the {}-byte limit",
            limits.max_file_bytes
        )));
    }
    if bytes.contains(&0) {
        return Err(unusable("it is binary (it holds NUL bytes)".into()));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        unusable(format!(
            "it is not UTF-8 text (byte {})",
            e.utf8_error().valid_up_to()
        ))
    })?;
    Ok(Some(Document::parse(&text)))
}

/// Replaces `path` with `text` atomically (its permissions kept).
fn write_atomic(path: &Path, text: &str) -> Result<(), MemoryError> {
    dsh_host::fs::write_atomic(path, text.as_bytes()).map_err(|error| MemoryError::Io {
        path: path.to_path_buf(),
        error,
    })
}

/// Holds the exclusive lock of a memory file's directory while alive.
struct DirLock(File);

impl DirLock {
    fn take(path: &Path) -> Result<Self, MemoryError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let io = |error| MemoryError::Io {
            path: dir.to_path_buf(),
            error,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let handle = File::open(dir).map_err(io)?;
        handle.lock().map_err(io)?;
        Ok(Self(handle))
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = self.0.unlock();
    }
}

/// Changes the file at `path` under its lock: `change` gets the current document (a new
/// one with the title and intro when the file does not exist) and returns a value, or an
/// error that leaves the file untouched. The file is rewritten only when `change` altered it.
pub fn modify<T>(
    path: &Path,
    scope: Scope,
    limits: &Limits,
    change: impl FnOnce(&mut Document) -> Result<T, MemoryError>,
) -> Result<T, MemoryError> {
    let _lock = DirLock::take(path)?;
    let existing = read_file(path, limits)?;
    let mut doc = existing.clone().unwrap_or_else(|| Document {
        lines: vec![TITLE.to_string(), String::new(), intro(scope).to_string()],
        entries: Vec::new(),
    });
    let before = existing.as_ref().map(Document::render);
    let value = change(&mut doc)?;
    let after = doc.render();
    if before.as_deref() != Some(after.as_str()) {
        write_atomic(path, &after)?;
    }
    Ok(value)
}

/// What [`add`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Added {
    pub entry: Entry,
    /// The same text was already there (nothing written); `entry` is the existing one.
    pub duplicate: bool,
}

/// Appends `entry` unless an entry with the same normalized text exists (a proposal that
/// becomes a plain memory is accepted in place).
pub fn add(doc: &mut Document, mut entry: Entry) -> Added {
    let key = normalized(&entry.text);
    if let Some(existing) = doc
        .entries
        .iter()
        .find(|e| normalized(&e.text) == key)
        .cloned()
    {
        if existing.proposed && !entry.proposed {
            let mut accepted = existing.clone();
            accepted.proposed = false;
            doc.replace_lines(existing.lines, entry_lines(&accepted));
            return Added {
                entry: accepted,
                duplicate: false,
            };
        }
        return Added {
            entry: existing,
            duplicate: true,
        };
    }
    while doc.entries.iter().any(|e| e.id == entry.id) {
        entry.id = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    }
    // Keep one blank line between the prose above and the list.
    if let Some(last) = doc.lines.last()
        && !last.trim().is_empty()
        && is_item_start(last).is_none()
        && !last.starts_with([' ', '\t'])
    {
        doc.lines.push(String::new());
    }
    while doc.lines.last().is_some_and(|l| l.trim().is_empty())
        && doc.lines.len() >= 2
        && doc.lines[doc.lines.len() - 2].trim().is_empty()
    {
        doc.lines.pop();
    }
    let at = doc.lines.len();
    let lines = entry_lines(&entry);
    entry.lines = (at, at + lines.len());
    doc.lines.extend(lines);
    doc.entries.push(entry.clone());
    Added {
        entry,
        duplicate: false,
    }
}

/// Removes the entry `id`; returns it.
pub fn remove(doc: &mut Document, id: &str) -> Result<Entry, MemoryError> {
    let entry = doc
        .find(id)
        .cloned()
        .ok_or_else(|| MemoryError::NotFound(id.to_string()))?;
    doc.replace_lines(entry.lines, Vec::new());
    Ok(entry)
}

/// Rewrites the entry `id` with `edit` applied; returns the new entry.
pub fn update(
    doc: &mut Document,
    id: &str,
    edit: impl FnOnce(&mut Entry),
) -> Result<Entry, MemoryError> {
    let old = doc
        .find(id)
        .cloned()
        .ok_or_else(|| MemoryError::NotFound(id.to_string()))?;
    let mut new = old.clone();
    edit(&mut new);
    doc.replace_lines(old.lines, entry_lines(&new));
    Ok(doc
        .entries
        .iter()
        .find(|e| e.id == new.id)
        .cloned()
        .unwrap_or(new))
}

/// A new entry's id.
pub fn new_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..8].to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn entry(text: &str) -> Entry {
        Entry {
            id: new_id(),
            text: text.into(),
            tags: vec!["build".into()],
            origin: Origin {
                by: "model".into(),
                session: Some("s1".into()),
                turn: Some(2),
            },
            at: Some("2026-12-04T18:00:00Z".into()),
            proposed: false,
            lines: (0, 0),
        }
    }

    #[test]
    fn hand_written_items_and_written_ones_round_trip() {
        let text = "# Memory\n\nSome prose.\n\n- Use pnpm, not npm.\n* Two lines\n  continue here\n\n## Style\n- tabs <!-- dsh-memory id=abcd1234 tags=style by=user -->\n";
        let mut doc = Document::parse(text);
        assert_eq!(doc.entries.len(), 3);
        assert_eq!(doc.entries[1].text, "Two lines\ncontinue here");
        assert_eq!(doc.entries[2].id, "abcd1234");
        assert_eq!(doc.entries[2].tags, vec!["style".to_string()]);
        assert_eq!(doc.entries[0].id, text_id("use pnpm, not npm"));
        assert_eq!(doc.render(), text);
        let added = add(&mut doc, entry("Run `make check` before pushing."));
        assert!(!added.duplicate);
        let again = Document::parse(&doc.render());
        assert_eq!(again.entries.len(), 4);
        assert_eq!(again.entries[3].origin.session.as_deref(), Some("s1"));
        assert_eq!(again.entries[3].origin.turn, Some(2));
        let dup = add(&mut doc, entry("run `make check` before   pushing"));
        assert!(dup.duplicate);
        let removed = remove(&mut doc, "abcd").unwrap();
        assert_eq!(removed.text, "tabs");
        assert_eq!(Document::parse(&doc.render()).entries.len(), 3);
    }

    #[test]
    fn binary_huge_and_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let limits = Limits {
            max_file_bytes: 64,
            ..Limits::default()
        };
        let missing = dir.path().join("none.md");
        assert!(read_file(&missing, &limits).unwrap().is_none());
        let bin = dir.path().join("bin.md");
        std::fs::write(&bin, b"- a\0b\n").unwrap();
        let e = read_file(&bin, &limits).unwrap_err().to_string();
        assert!(e.contains("binary"), "{e}");
        let big = dir.path().join("big.md");
        std::fs::write(&big, "- x\n".repeat(40)).unwrap();
        let e = read_file(&big, &limits).unwrap_err().to_string();
        assert!(e.contains("over the 64-byte limit"), "{e}");
        let e = modify(&big, Scope::User, &limits, |d| Ok(add(d, entry("y"))))
            .unwrap_err()
            .to_string();
        assert!(e.contains("skipped"), "{e}");
        assert_eq!(std::fs::read_to_string(&big).unwrap(), "- x\n".repeat(40));
    }

    #[test]
    fn concurrent_writers_keep_every_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(".dsh/memory.md");
        let limits = Limits::default();
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let path = path.clone();
                std::thread::spawn(move || {
                    for i in 0..25 {
                        modify(&path, Scope::Workspace, &limits, |d| {
                            Ok(add(d, entry(&format!("fact {t}-{i}"))))
                        })
                        .unwrap();
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let doc = read_file(&path, &limits).unwrap().unwrap();
        assert_eq!(doc.entries.len(), 200);
    }
}
