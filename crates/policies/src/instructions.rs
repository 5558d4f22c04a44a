//! `agent-instructions`: workspace instruction files (`AGENTS.md`, `CLAUDE.md`, their
//! `.local` variants, and `$DSH_HOME/AGENTS.md`) reach the model as `<system-reminder>`
//! user messages: a baseline before the first request, and additions when the agent
//! touches files under a directory with its own instructions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_agent::{AgentRef, PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::types;
use dsh_tools::ToolResultEvent;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::host::dsh_home;

/// `source.kind` of the instruction messages this row injects.
pub const SOURCE_KIND: &str = "agent-instructions";
const BASELINE_INTRO: &str = "These workspace instructions may apply to your work; follow them where they fit. Instructions closer to the files you work on win over broader ones, and none of them outranks system, developer or direct user instructions.";

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
struct Config {
    #[serde(default = "default_max_bytes")]
    max_bytes: usize,
    #[serde(default = "default_max_source")]
    max_source_bytes: u64,
    dsh_home: Option<String>,
    #[serde(default = "default_markers")]
    project_root_markers: Vec<String>,
    #[serde(default = "default_candidates")]
    instruction_file_candidates: Vec<String>,
    #[serde(default = "default_local_candidates")]
    local_instruction_file_candidates: Vec<String>,
}

/// A regular file's text when it has at most `max` bytes (read with that bound, so a file
/// that grows meanwhile cannot make it larger); `None` otherwise.
fn read_bounded(path: &Path, max: u64) -> Option<String> {
    use std::io::Read as _;
    let file = std::fs::File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > max {
        return None;
    }
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text).ok()?;
    (text.len() as u64 <= max).then_some(text)
}

fn default_max_bytes() -> usize {
    65536
}
fn default_max_source() -> u64 {
    1_048_576
}
fn default_markers() -> Vec<String> {
    vec![".git".into()]
}
fn default_candidates() -> Vec<String> {
    vec!["AGENTS.md".into(), "CLAUDE.md".into()]
}
fn default_local_candidates() -> Vec<String> {
    vec!["AGENTS.local.md".into(), "CLAUDE.local.md".into()]
}

/// One instruction file in effect.
#[derive(Clone, Debug, PartialEq)]
struct Source {
    /// `<dir>\u{0}<file>`; `dir` is `.`, a root-relative directory, or `user-global`.
    scope: String,
    display: String,
    /// Root-relative directory the file applies to (empty for the root and user-global).
    dir: String,
    content: String,
    digest: String,
}

fn sha1_hex(text: &str) -> String {
    sha1_smol::Sha1::from(text.as_bytes()).digest().to_string()
}

fn escape(body: &str) -> String {
    body.replace("</system-reminder>", "<\\/system-reminder>")
}

fn frame(body: &str) -> String {
    format!("<system-reminder>\n{}\n</system-reminder>", escape(body))
}

fn rel(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .map(|r| r.to_string_lossy().replace('\\', "/"))
        .unwrap_or_else(|_| p.display().to_string())
}

struct Workspace {
    config: Config,
    cwd: PathBuf,
    root: PathBuf,
    home: PathBuf,
}

impl Workspace {
    fn new(config: Config, cwd: PathBuf) -> Self {
        let home = config
            .dsh_home
            .clone()
            .map(PathBuf::from)
            .unwrap_or_else(dsh_home);
        let root = cwd
            .ancestors()
            .find(|d| {
                config
                    .project_root_markers
                    .iter()
                    .any(|m| d.join(m).exists())
            })
            .map(Path::to_path_buf)
            .unwrap_or_else(|| cwd.clone());
        Self {
            config,
            cwd,
            root,
            home,
        }
    }

    fn identity(&self) -> String {
        let v = json!({
            "projectRoot": self.cwd.strip_prefix(&self.root).map(|r| vec![".."; r.components().count()].join("/")).unwrap_or_default(),
            "projectRootMarkers": self.config.project_root_markers,
            "maxBytes": self.config.max_bytes,
            "maxSourceBytes": self.config.max_source_bytes,
            "instructionFileCandidates": self.config.instruction_file_candidates,
            "localInstructionFileCandidates": self.config.local_instruction_file_candidates,
        });
        dsh_kernel::json::to_string(&v)
    }

    /// Instruction files of one directory, de-duplicated by trimmed content.
    fn files_in(&self, dir: &Path) -> Vec<Source> {
        let rel_dir = rel(&self.root, dir);
        let scope_dir = if rel_dir.is_empty() {
            ".".to_string()
        } else {
            rel_dir.clone()
        };
        let mut seen: Vec<String> = Vec::new();
        let mut out = Vec::new();
        let names = self
            .config
            .instruction_file_candidates
            .iter()
            .chain(&self.config.local_instruction_file_candidates);
        for name in names {
            let path = dir.join(name);
            let Some(content) = read_bounded(&path, self.config.max_source_bytes) else {
                continue;
            };
            let trimmed_digest = sha1_hex(content.trim());
            if seen.contains(&trimmed_digest) {
                continue;
            }
            seen.push(trimmed_digest);
            out.push(Source {
                scope: format!("{scope_dir}\u{0}{name}"),
                display: rel(&self.root, &path),
                dir: rel_dir.clone(),
                digest: sha1_hex(&content),
                content,
            });
        }
        out
    }

    /// The baseline: the user-global file, then every directory from the root to the cwd.
    fn baseline_sources(&self) -> Vec<Source> {
        let mut out = Vec::new();
        let global = self.home.join("AGENTS.md");
        if let Some(content) = read_bounded(&global, self.config.max_source_bytes) {
            let display = if std::env::var("DSH_HOME").is_ok_and(|v| !v.trim().is_empty())
                || self.config.dsh_home.is_some()
            {
                "$DSH_HOME/AGENTS.md".to_string()
            } else {
                "~/.dsh/AGENTS.md".to_string()
            };
            out.push(Source {
                scope: "user-global\u{0}AGENTS.md".into(),
                display,
                dir: String::new(),
                digest: sha1_hex(&content),
                content,
            });
        }
        let mut dirs: Vec<&Path> = self
            .cwd
            .ancestors()
            .take_while(|d| d.starts_with(&self.root))
            .collect();
        dirs.reverse();
        for d in dirs {
            out.extend(self.files_in(d));
        }
        out
    }

    /// Nested instruction files between the cwd and the directory of `touched`.
    fn nested_sources(&self, touched: &Path) -> Vec<Source> {
        let abs = if touched.is_absolute() {
            touched.to_path_buf()
        } else {
            self.cwd.join(touched)
        };
        let Some(parent) = abs.parent() else {
            return Vec::new();
        };
        if !parent.starts_with(&self.cwd) || parent == self.cwd {
            return Vec::new();
        }
        let mut dirs: Vec<&Path> = parent
            .ancestors()
            .take_while(|d| d.starts_with(&self.cwd) && *d != self.cwd)
            .collect();
        dirs.reverse();
        dirs.into_iter().flat_map(|d| self.files_in(d)).collect()
    }
}

fn baseline_text(sources: &[Source]) -> String {
    let mut parts = vec![BASELINE_INTRO.to_string()];
    for s in sources {
        parts.push(format!("Instructions from: {}\n\n{}", s.display, s.content));
    }
    frame(&parts.join("\n\n"))
}

fn addition_text(s: &Source) -> String {
    frame(&format!(
        "Additional instructions from: {}\n\nThey apply to work under `{}`; follow them where they fit. More specific instructions win, and none of them outranks system, developer or direct user instructions.\n\n{}",
        s.display, s.dir, s.content
    ))
}

fn change(s: &Source) -> Value {
    json!({"action": "set", "scope": s.scope, "path": s.display, "digest": s.digest})
}

#[derive(Default)]
struct AgentState {
    /// Scopes shown to the model, with the digest shown.
    shown: HashMap<String, String>,
    /// The message id of the baseline last entered.
    baseline_id: Option<String>,
    touched: Vec<PathBuf>,
}

fn instruction_message(
    content: Vec<ContentBlock>,
    baseline: Option<String>,
    changes: Vec<Value>,
) -> Message {
    let mut extra: Vec<(String, Value)> = vec![("form".into(), Value::from("instructions"))];
    if let Some(identity) = baseline {
        extra.push(("baseline".into(), Value::Bool(true)));
        extra.push(("baselineIdentity".into(), Value::from(identity)));
    }
    extra.push(("changes".into(), Value::Array(changes)));
    let mut map = Map::new();
    map.insert("kind".into(), Value::from(SOURCE_KIND));
    map.extend(extra);
    Message::user(content, MessageSource::Other(map))
}

fn baseline_visible(agent: &AgentRef, id: &str) -> bool {
    agent.session().read(|s| {
        let seq = s.events().iter().rev().find(|e| {
            e.is(types::USER_MESSAGE) && e.data.get("id").and_then(Value::as_str) == Some(id)
        });
        seq.is_some_and(|e| s.surface().nodes().contains(&e.seq))
    })
}

/// Decides what to enter before a step: `(message, via_inbox)`.
fn desired(ws: &Workspace, state: &mut AgentState, agent: &AgentRef) -> Option<(Message, bool)> {
    let touched = std::mem::take(&mut state.touched);
    let visible = state
        .baseline_id
        .as_deref()
        .is_some_and(|id| baseline_visible(agent, id));
    let mut nested: Vec<Source> = Vec::new();
    for t in &touched {
        for s in ws.nested_sources(t) {
            if !nested.iter().any(|n| n.scope == s.scope) {
                nested.push(s);
            }
        }
    }
    if !visible {
        // (Re)baseline with everything in effect: the baseline files plus every nested
        // scope already shown or newly touched.
        let sources = ws.baseline_sources();
        let mut extra: Vec<Source> = Vec::new();
        for s in &nested {
            if !sources.iter().any(|b| b.scope == s.scope) {
                extra.push(s.clone());
            }
        }
        for (scope, _) in state.shown.clone() {
            if !sources.iter().chain(&extra).any(|s| s.scope == scope)
                && let Some(dir) = scope
                    .split('\u{0}')
                    .next()
                    .filter(|d| *d != "." && *d != "user-global")
            {
                extra.extend(
                    ws.files_in(&ws.root.join(dir))
                        .into_iter()
                        .filter(|s| s.scope == scope),
                );
            }
        }
        if sources.is_empty() && extra.is_empty() {
            return None;
        }
        let mut content = Vec::new();
        if !sources.is_empty() {
            content.push(ContentBlock::text(baseline_text(&sources)));
        }
        content.extend(extra.iter().map(|s| ContentBlock::text(addition_text(s))));
        let changes: Vec<Value> = sources.iter().chain(&extra).map(change).collect();
        state.shown = sources
            .iter()
            .chain(&extra)
            .map(|s| (s.scope.clone(), s.digest.clone()))
            .collect();
        let message = instruction_message(content, Some(ws.identity()), changes);
        state.baseline_id = Some(message.id.clone());
        return Some((message, !touched.is_empty()));
    }
    let fresh: Vec<Source> = nested
        .into_iter()
        .filter(|s| state.shown.get(&s.scope) != Some(&s.digest))
        .collect();
    if fresh.is_empty() {
        return None;
    }
    for s in &fresh {
        state.shown.insert(s.scope.clone(), s.digest.clone());
    }
    let content = fresh
        .iter()
        .map(|s| ContentBlock::text(addition_text(s)))
        .collect();
    Some((
        instruction_message(content, None, fresh.iter().map(change).collect()),
        true,
    ))
}

/// `@deepseek-ai/dsh-agent-instructions`.
pub struct InstructionsPlugin;

impl Plugin for InstructionsPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-agent-instructions"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let config: Config = config.parse()?;
        if config.max_bytes == 0 {
            return Ok(());
        }
        let states: Arc<Mutex<HashMap<String, AgentState>>> = Arc::default();
        {
            // A session that leaves the store takes its state along (a server keeps running
            // through thousands of sessions); reopened, it is baselined again, as after a
            // restart.
            let states = states.clone();
            ctx.on_emit::<dsh_session::SessionDisposed>(ListenOptions::GLOBAL, move |session| {
                states
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&session.id());
                Ok(())
            })?;
        }
        {
            let states = states.clone();
            ctx.on_emit::<ToolResultEvent>(ListenOptions::default(), move |p| {
                let touched =
                    matches!(p.exec.name.as_str(), "read" | "write" | "edit") && !p.result.is_error;
                if let (true, Some(session), Some(path)) = (
                    touched,
                    &p.exec.session,
                    p.exec.arguments.get("file_path").and_then(Value::as_str),
                ) {
                    states
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .entry(session.id())
                        .or_default()
                        .touched
                        .push(PathBuf::from(path));
                }
                Ok(())
            })?;
        }
        ctx.on_waterfall::<PreStep>(ListenOptions::default(), move |p, next| {
            let states = states.clone();
            let config = config.clone();
            Box::pin(async move {
                let decision = next.run().await?;
                let PreStepDecision::Enter(mut messages) = decision else {
                    return Ok(decision);
                };
                let agent = p.agent.clone();
                let Some(cwd) = agent.cwd() else {
                    return Ok(PreStepDecision::Enter(messages));
                };
                let ws = Workspace::new(config, cwd);
                let wanted = {
                    let mut map = states.lock().unwrap_or_else(|e| e.into_inner());
                    desired(&ws, map.entry(agent.id().to_string()).or_default(), &agent)
                };
                if let Some((message, via_inbox)) = wanted {
                    let message = Arc::new(message);
                    if via_inbox {
                        // The projection of touched files lands in the inbox first, then this
                        // step takes it over (a durable cancellation), as upstream logs it.
                        agent.inject((*message).clone())?;
                        agent.discard(&message.id);
                    }
                    let at = p.messages.len().min(messages.len());
                    messages.insert(at, message);
                }
                Ok(PreStepDecision::Enter(messages))
            })
        })?;
        Ok(())
    }
}
