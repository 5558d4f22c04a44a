//! Which children a session has: persisted headers joined with live sessions (live wins),
//! each child's identity folded from its own descriptor.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use dsh_persistence::SessionFiles;
use dsh_session::{SessionHeader, SessionStore};

use crate::descriptor::{Descriptor, DescriptorError, fold_first};

/// Why a child could not be classified.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Diagnostic {
    Corrupt,
    Unsupported,
    Unavailable,
}

impl Diagnostic {
    pub fn as_str(self) -> &'static str {
        match self {
            Diagnostic::Corrupt => "corrupt",
            Diagnostic::Unsupported => "unsupported",
            Diagnostic::Unavailable => "unavailable",
        }
    }
}

/// One listed child.
#[derive(Clone, Debug, PartialEq)]
pub struct ChildEntry {
    pub id: String,
    pub created_at: u64,
    /// Its direct parent and its depth below the listing root (1 = a direct child).
    pub parent: String,
    pub depth: u64,
    /// Live in this process.
    pub live: bool,
    pub identity: Result<Descriptor, Diagnostic>,
}

struct Record {
    header: SessionHeader,
    live: Option<Arc<dsh_session::LiveSession>>,
}

fn corpus(files: Option<&SessionFiles>, sessions: &SessionStore) -> HashMap<String, Record> {
    let mut out = HashMap::new();
    if let Some(files) = files {
        match files.list() {
            Ok(list) => {
                for (header, _) in list {
                    out.insert(header.id.clone(), Record { header, live: None });
                }
            }
            Err(e) => tracing::warn!("listing subagents: stored sessions unreadable: {e}"),
        }
    }
    for s in sessions.list() {
        let header = s.header();
        out.insert(
            header.id.clone(),
            Record {
                header,
                live: Some(s),
            },
        );
    }
    out
}

fn order(a: &SessionHeader, b: &SessionHeader) -> std::cmp::Ordering {
    a.created_at
        .cmp(&b.created_at)
        .then_with(|| a.id.cmp(&b.id))
}

fn identity(
    record: &Record,
    files: Option<&SessionFiles>,
) -> Option<Result<Descriptor, Diagnostic>> {
    let seed = record.header.seed_length.unwrap_or(0) as usize;
    let classify = |r: Result<Option<Descriptor>, DescriptorError>, live: bool| match r {
        Ok(Some(d)) => Some(Ok(d)),
        // A running child that has not stepped yet has no descriptor: not listed.
        Ok(None) if live => None,
        Ok(None) | Err(DescriptorError::Corrupt(_)) => Some(Err(Diagnostic::Corrupt)),
        Err(DescriptorError::Unsupported(_)) => Some(Err(Diagnostic::Unsupported)),
    };
    match &record.live {
        Some(s) => {
            let own = s.read(|l| {
                l.events()
                    .get(seed..)
                    .map(<[_]>::to_vec)
                    .unwrap_or_default()
            });
            classify(fold_first(&own), true)
        }
        None => {
            let Some(files) = files else {
                return Some(Err(Diagnostic::Unavailable));
            };
            match files.inspect(&record.header.id) {
                Err(_) => Some(Err(Diagnostic::Unavailable)),
                Ok(l)
                    if l.header.id != record.header.id
                        || l.header.created_at != record.header.created_at =>
                {
                    Some(Err(Diagnostic::Corrupt))
                }
                Ok(l) => {
                    let seed = l.header.seed_length.unwrap_or(0) as usize;
                    classify(fold_first(l.events.get(seed..).unwrap_or_default()), false)
                }
            }
        }
    }
}

/// The delegated children of `root` (direct children only, or every descendant in
/// pre-order), oldest first among siblings. Blocking: reads stored logs.
pub fn list_children(
    files: Option<&SessionFiles>,
    sessions: &SessionStore,
    root: &str,
    descendants: bool,
) -> Vec<ChildEntry> {
    let corpus = corpus(files, sessions);
    let mut by_parent: HashMap<&str, Vec<&Record>> = HashMap::new();
    for r in corpus.values() {
        if let Some(p) = r.header.parent_session.as_deref() {
            by_parent.entry(p).or_default().push(r);
        }
    }
    for siblings in by_parent.values_mut() {
        siblings.sort_by(|a, b| order(&a.header, &b.header));
    }
    let mut out = Vec::new();
    let mut visited = HashSet::from([root.to_string()]);
    let mut stack: Vec<(&Record, String, u64)> = by_parent
        .get(root)
        .map(|c| c.iter().rev().map(|r| (*r, root.to_string(), 1)).collect())
        .unwrap_or_default();
    while let Some((record, parent, depth)) = stack.pop() {
        let id = record.header.id.clone();
        if !visited.insert(id.clone()) {
            continue;
        }
        if record.header.origin.as_deref() == Some("subagent")
            && let Some(identity) = identity(record, files)
        {
            out.push(ChildEntry {
                id: id.clone(),
                created_at: record.header.created_at,
                parent: parent.clone(),
                depth,
                live: record.live.is_some(),
                identity,
            });
        }
        if descendants && let Some(children) = by_parent.get(id.as_str()) {
            for r in children.iter().rev() {
                stack.push((*r, id.clone(), depth + 1));
            }
        }
    }
    out
}
