//! Replay: recorded session logs become model streams, so an agent runs keylessly against a
//! fixed transcript.
//!
//! Each recorded session yields one *script* of model calls: its `assistant/chunk` events
//! (packed rows expanded) grouped into calls that end at a `finish` chunk, plus local
//! summarizer calls recorded as `compaction/summary` with `llmStreamCall`. A child's own
//! calls start at its `seedLength`. Live sessions bind to scripts in the order of their
//! first call (primary first, then children by `createdAt`, then id); each then advances
//! its own cursor. An override file may replace or patch the primary script with
//! `chunks`, `throw` or `hang` entries, and any string may carry `{{fromRequest:<regex>}}`,
//! resolved against the live request just before the call streams.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_llm::{
    AdapterStream, GenerateOptions, LlmAdapter, LlmError, LlmRuntime, ModelInfo, RetryMode,
    RetryPolicy, StreamChunk, codes,
};
use dsh_session::{Event, parse_log, types};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};

/// One scripted model call.
#[derive(Clone, Debug, PartialEq)]
pub enum Entry {
    Chunks(Vec<Value>),
    Throw {
        chunks: Vec<Value>,
        message: String,
        code: String,
    },
    Hang {
        ready_file: Option<String>,
    },
}

impl Entry {
    fn from_value(v: &Value) -> Result<Self, String> {
        let chunks = |v: &Value| -> Result<Vec<Value>, String> {
            match v.get("chunks") {
                None => Ok(Vec::new()),
                Some(Value::Array(a)) => Ok(a.clone()),
                Some(_) => Err("replay entry `chunks` must be an array".into()),
            }
        };
        match v.get("kind").and_then(Value::as_str) {
            Some("chunks") => Ok(Entry::Chunks(chunks(v)?)),
            Some("throw") => Ok(Entry::Throw {
                chunks: chunks(v)?,
                message: v
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("replayed failure")
                    .to_string(),
                code: v
                    .get("code")
                    .and_then(Value::as_str)
                    .unwrap_or(codes::UNKNOWN)
                    .to_string(),
            }),
            Some("hang") => Ok(Entry::Hang {
                ready_file: v
                    .get("readyFile")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            other => Err(format!("unknown replay entry kind {other:?}")),
        }
    }
}

/// A recorded session's script.
#[derive(Clone, Debug)]
pub struct Script {
    pub session_id: String,
    pub created_at: u64,
    pub entries: Vec<Entry>,
    /// Why the script could not be derived (reported when a call needs it).
    pub derive_error: Option<String>,
}

/// Derives the script of one recorded log.
pub fn derive_script(events: &[Arc<Event>], seed_length: u64) -> (Vec<Entry>, Option<String>) {
    let mut entries = Vec::new();
    let mut current: Vec<Value> = Vec::new();
    let mut key: Option<(u64, u64)> = None;
    let mut error = None;
    for e in events.iter().filter(|e| e.seq >= seed_length) {
        if e.is(types::ASSISTANT_CHUNK) {
            let k = (e.turn().unwrap_or(0), e.step().unwrap_or(0));
            if key.is_some_and(|old| old != k) && !current.is_empty() {
                error.get_or_insert(format!(
                    "recorded model call at turn {} step {} ends without a finish chunk",
                    k.0, k.1
                ));
                current.clear();
            }
            key = Some(k);
            let chunk = e.data.get("chunk").cloned().unwrap_or(Value::Null);
            let finished = chunk.get("type").and_then(Value::as_str) == Some("finish");
            current.push(chunk);
            if finished {
                entries.push(Entry::Chunks(std::mem::take(&mut current)));
                key = None;
            }
        } else if e.is("compaction/summary")
            && e.data.get("llmStreamCall") == Some(&Value::Bool(true))
            && let Some(raw) = e.data.get("rawOutput").and_then(Value::as_array)
        {
            let mut chunks = Vec::new();
            for (i, block) in raw.iter().enumerate() {
                let t = block.get("type").cloned().unwrap_or(Value::Null);
                chunks.push(json!({"type": "block-start", "index": i, "blockType": t}));
                chunks.push(json!({"type": "block-end", "index": i, "block": block}));
            }
            if let Some(u) = e.data.get("usage") {
                chunks.push(json!({"type": "usage", "usage": u}));
            }
            chunks.push(json!({"type": "finish", "reason": {"kind": "stop"}}));
            entries.push(Entry::Chunks(chunks));
        }
    }
    if !current.is_empty() {
        error.get_or_insert("the last recorded model call ends without a finish chunk".into());
    }
    (entries, error)
}

/// Loads a recorded log file into a script.
pub fn load_script(path: &Path) -> Result<Script, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("llm-replay: cannot read {}: {e}", path.display()))?;
    let parsed = parse_log(&text).map_err(|e| format!("llm-replay: {}: {e}", path.display()))?;
    let seed = parsed.header.seed_length.unwrap_or(0);
    let (entries, derive_error) = derive_script(&parsed.events, seed);
    Ok(Script {
        session_id: parsed.header.id,
        created_at: parsed.header.created_at,
        entries,
        derive_error,
    })
}

/// Applies an override document to the primary script.
pub fn apply_override(script: &mut Script, doc: &Value) -> Result<(), String> {
    match doc {
        Value::Array(items) => {
            script.entries = items
                .iter()
                .map(Entry::from_value)
                .collect::<Result<_, _>>()?;
            script.derive_error = None;
        }
        Value::Object(m) => {
            let patches = m
                .get("patches")
                .and_then(Value::as_array)
                .ok_or("override `patches` must be an array")?;
            let mut seen = Vec::new();
            for p in patches {
                let at =
                    p.get("at")
                        .and_then(Value::as_u64)
                        .ok_or("override patch needs a numeric `at`")? as usize;
                if seen.contains(&at) {
                    return Err(format!("override patch index {at} appears twice"));
                }
                seen.push(at);
                let entry =
                    Entry::from_value(p.get("entry").ok_or("override patch needs an `entry`")?)?;
                if at < script.entries.len() {
                    script.entries[at] = entry;
                } else if at == script.entries.len() {
                    script.entries.push(entry);
                } else {
                    return Err(format!(
                        "override patch index {at} is past the end of the script ({})",
                        script.entries.len()
                    ));
                }
            }
        }
        _ => return Err("override must be an array of entries or {patches}".into()),
    }
    Ok(())
}

fn string_leaves(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| string_leaves(x, out)),
        Value::Object(m) => m.values().for_each(|x| string_leaves(x, out)),
        _ => {}
    }
}

/// Resolves `{{fromRequest:<regex>}}` placeholders in every string of `value`.
pub fn resolve_placeholders(value: &Value, options: &GenerateOptions) -> Result<Value, String> {
    let text = value.to_string();
    if !text.contains("{{fromRequest:") {
        return Ok(value.clone());
    }
    let mut leaves = Vec::new();
    for m in &options.messages {
        string_leaves(&m.to_value(), &mut leaves);
    }
    let corpus = leaves.join("\n");
    fn walk(v: &Value, corpus: &str) -> Result<Value, String> {
        Ok(match v {
            Value::String(s) => Value::String(resolve_string(s, corpus)?),
            Value::Array(a) => Value::Array(
                a.iter()
                    .map(|x| walk(x, corpus))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                for (k, x) in m {
                    out.insert(k.clone(), walk(x, corpus)?);
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }
    walk(value, &corpus)
}

fn resolve_string(s: &str, corpus: &str) -> Result<String, String> {
    const OPEN: &str = "{{fromRequest:";
    let mut out = String::new();
    let mut rest = s;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        // The last two braces of a run of `}` close the placeholder.
        let mut end = None;
        let bytes = after.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'}' {
                let mut j = i;
                while j < bytes.len() && bytes[j] == b'}' {
                    j += 1;
                }
                if j - i >= 2 {
                    end = Some(j - 2);
                    break;
                }
                i = j;
            } else {
                i += 1;
            }
        }
        let Some(end) = end else {
            return Err(format!(
                "llm-replay: unterminated {{{{fromRequest:…}}}} in {s:?}"
            ));
        };
        let pattern = &after[..end];
        let re = regex::Regex::new(pattern)
            .map_err(|e| format!("llm-replay: invalid fromRequest regex {pattern:?}: {e}"))?;
        let caps = re.captures_iter(corpus).last().ok_or_else(|| {
            format!("llm-replay: fromRequest pattern {pattern:?} matched nothing in the request")
        })?;
        let value = caps
            .get(1)
            .or_else(|| caps.get(0))
            .map(|m| m.as_str())
            .unwrap_or("");
        out.push_str(value);
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

struct Binding {
    script: usize,
    cursor: usize,
}

/// The replay adapter for one set of recorded sessions.
pub struct ReplayAdapter {
    scripts: Vec<Script>,
    models: Vec<String>,
    retry_policy: Option<RetryPolicy>,
    bindings: Mutex<(HashMap<String, Binding>, usize)>,
    cwd: PathBuf,
    /// Declared input modalities by model id (default: text only).
    modalities: HashMap<String, Vec<String>>,
    /// Delay before each replayed chunk (`paceMs`).
    pace: Option<std::time::Duration>,
}

impl ReplayAdapter {
    pub fn new(
        mut scripts: Vec<Script>,
        models: Vec<String>,
        retry_policy: Option<RetryPolicy>,
        cwd: PathBuf,
    ) -> Self {
        if scripts.len() > 1 {
            scripts[1..].sort_by(|a, b| {
                a.created_at
                    .cmp(&b.created_at)
                    .then_with(|| a.session_id.cmp(&b.session_id))
            });
        }
        Self {
            scripts,
            models,
            retry_policy,
            bindings: Mutex::new((HashMap::new(), 0)),
            cwd,
            modalities: HashMap::new(),
            pace: None,
        }
    }

    fn next_entry(&self, session: &str) -> Result<Entry, String> {
        let mut guard = self.bindings.lock().unwrap_or_else(|p| p.into_inner());
        let (map, claimed) = &mut *guard;
        if !map.contains_key(session) {
            if *claimed >= self.scripts.len() {
                return Err(format!(
                    "llm-replay: a model call arrived from an unrecorded session (#{}); the scenario recorded only {} session(s) — re-record it",
                    *claimed + 1,
                    self.scripts.len()
                ));
            }
            map.insert(
                session.to_string(),
                Binding {
                    script: *claimed,
                    cursor: 0,
                },
            );
            *claimed += 1;
        }
        let Some(binding) = map.get_mut(session) else {
            return Err("llm-replay: binding lost".into());
        };
        let script = &self.scripts[binding.script];
        let n = binding.cursor;
        binding.cursor += 1;
        match script.entries.get(n) {
            Some(e) => Ok(e.clone()),
            None => match &script.derive_error {
                Some(err) if n >= script.entries.len() => Err(format!("llm-replay: {err}")),
                _ => Err(format!(
                    "llm-replay: script exhausted — session requested model call #{} but its script has only {}; re-record the scenario",
                    n + 1,
                    script.entries.len()
                )),
            },
        }
    }
}

fn parse_chunks(values: &[Value], options: &GenerateOptions) -> Result<Vec<StreamChunk>, String> {
    values
        .iter()
        .map(|v| {
            let v = resolve_placeholders(v, options)?;
            serde_json::from_value(v)
                .map_err(|e| format!("llm-replay: invalid recorded chunk: {e}"))
        })
        .collect()
}

impl LlmAdapter for ReplayAdapter {
    fn model_info(&self, _provider: &str, model: &str) -> Result<ModelInfo, LlmError> {
        Ok(ModelInfo {
            id: model.to_string(),
            input_modalities: self
                .modalities
                .get(model)
                .cloned()
                .unwrap_or_else(|| vec!["text".into()]),
            ..ModelInfo::default()
        })
    }

    fn retry_policy(&self, _provider: &str) -> RetryPolicy {
        self.retry_policy.clone().unwrap_or_default()
    }

    fn stream(&self, options: Arc<GenerateOptions>) -> AdapterStream {
        let session = options
            .session_id
            .clone()
            .unwrap_or_else(|| "<anonymous>".into());
        let entry = match self.next_entry(&session) {
            Ok(e) => e,
            Err(msg) => {
                return futures::stream::iter([Err(LlmError::new(codes::UNKNOWN, msg))]).boxed();
            }
        };
        let cancel = options.cancel.clone();
        let fail =
            |msg: String| futures::stream::iter([Err(LlmError::new(codes::UNKNOWN, msg))]).boxed();
        let _ = &self.models;
        match entry {
            Entry::Chunks(values) => match parse_chunks(&values, &options) {
                Ok(chunks) => abortable(chunks, cancel, self.pace).boxed(),
                Err(msg) => fail(msg),
            },
            Entry::Throw {
                chunks,
                message,
                code,
            } => match parse_chunks(&chunks, &options) {
                Ok(chunks) => abortable(chunks, cancel, self.pace)
                    .chain(futures::stream::iter([Err(LlmError::new(code, message))]))
                    .boxed(),
                Err(msg) => fail(msg),
            },
            Entry::Hang { ready_file } => {
                let cwd = self.cwd.clone();
                let prefix = vec![
                    Ok(StreamChunk::BlockStart {
                        index: 0,
                        block_type: "text".into(),
                    }),
                    Ok(StreamChunk::TextDelta {
                        index: 0,
                        text: "partial".into(),
                    }),
                ];
                futures::stream::iter(prefix)
                    .chain(futures::stream::once(async move {
                        if let Some(f) = ready_file
                            && let Err(e) = std::fs::write(cwd.join(&f), b"")
                        {
                            tracing::warn!("llm-replay: cannot create ready file {f}: {e}");
                        }
                        cancel.cancelled().await;
                        Err(LlmError::new(
                            codes::ABORTED,
                            "the replayed call was cancelled",
                        ))
                    }))
                    .boxed()
            }
        }
    }
}

fn abortable(
    chunks: Vec<StreamChunk>,
    cancel: tokio_util::sync::CancellationToken,
    pace: Option<std::time::Duration>,
) -> impl futures::Stream<Item = Result<StreamChunk, LlmError>> {
    futures::stream::iter(chunks).then(move |c| {
        let cancel = cancel.clone();
        async move {
            if let Some(pace) = pace {
                // A cancel during the wait ends the stream at once.
                tokio::select! {
                    _ = tokio::time::sleep(pace) => {}
                    _ = cancel.cancelled() => {}
                }
            }
            if cancel.is_cancelled() {
                Err(LlmError::new(
                    codes::ABORTED,
                    "the replayed call was cancelled",
                ))
            } else {
                Ok(c)
            }
        }
    })
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProviderConfig {
    id: String,
    /// The provider's display name (upstream's compositions give one; nothing shows it).
    #[allow(dead_code)]
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    models: Vec<ModelEntry>,
}

/// A catalog entry: a bare id, or `{id, name?, inputModalities?}` (upstream's image
/// overlays declare which replayed models take images).
#[derive(Deserialize)]
#[serde(untagged)]
enum ModelEntry {
    Id(String),
    Described {
        id: String,
        #[serde(default, rename = "inputModalities")]
        input_modalities: Option<Vec<String>>,
        #[allow(dead_code)]
        #[serde(default)]
        name: Option<String>,
    },
}

impl ModelEntry {
    fn id(&self) -> &str {
        match self {
            ModelEntry::Id(id) | ModelEntry::Described { id, .. } => id,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BackoffConfig {
    #[serde(default)]
    initial_delay_ms: Option<u64>,
    #[serde(default)]
    max_delay_ms: Option<u64>,
    #[serde(default)]
    jitter_ratio: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RetryConfig {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    max_retries: Option<u32>,
    #[serde(default)]
    backoff: Option<BackoffConfig>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplayConfig {
    /// Recorded primary log (default: `$DSH_SNAPSHOT_FILE`).
    file: Option<String>,
    /// Children (default: `$DSH_SNAPSHOT_CHILD_FILES`, `:`-separated).
    child_files: Option<Vec<String>>,
    /// Override (default: `$DSH_SNAPSHOT_OVERRIDE`).
    override_file: Option<String>,
    #[serde(default)]
    providers: Vec<ProviderConfig>,
    retry_policy: Option<RetryConfig>,
    /// Delay before each replayed chunk, so what streams the reply downstream sees it
    /// arrive piece by piece (default: all at once).
    pace_ms: Option<u64>,
}

/// `@deepseek-ai/dsh-llm-replay`.
pub struct ReplayPlugin;

impl ReplayPlugin {
    fn build(config: &ReplayConfig) -> Result<(ReplayAdapter, Vec<String>), String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let primary = config
            .file
            .clone()
            .or_else(|| env("DSH_SNAPSHOT_FILE"))
            .ok_or("llm-replay: no recorded session (set DSH_SNAPSHOT_FILE)")?;
        let mut scripts = vec![load_script(Path::new(&primary))?];
        let children: Vec<String> = match &config.child_files {
            Some(c) => c.clone(),
            None => env("DSH_SNAPSHOT_CHILD_FILES")
                .map(|v| v.split(':').map(str::to_owned).collect())
                .unwrap_or_default(),
        };
        for c in children.iter().filter(|c| !c.is_empty()) {
            scripts.push(load_script(Path::new(c))?);
        }
        if let Some(o) = config
            .override_file
            .clone()
            .or_else(|| env("DSH_SNAPSHOT_OVERRIDE"))
        {
            match std::fs::read_to_string(&o) {
                Ok(text) => {
                    let doc: Value = serde_json::from_str(&text)
                        .map_err(|e| format!("llm-replay: override {o}: {e}"))?;
                    apply_override(&mut scripts[0], &doc)
                        .map_err(|e| format!("llm-replay: override {o}: {e}"))?;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(format!("llm-replay: override {o}: {e}")),
            }
        }
        let routes: Vec<String> = if config.providers.is_empty() {
            vec!["deepseek-official".into()]
        } else {
            config.providers.iter().map(|p| p.id.clone()).collect()
        };
        let models: Vec<String> = config
            .providers
            .iter()
            .flat_map(|p| p.models.iter().map(|m| m.id().to_string()))
            .collect();
        let modalities = config
            .providers
            .iter()
            .flat_map(|p| &p.models)
            .filter_map(|m| match m {
                ModelEntry::Described {
                    id,
                    input_modalities: Some(input),
                    ..
                } => Some((id.clone(), input.clone())),
                _ => None,
            })
            .collect();
        let retry = config.retry_policy.as_ref().map(|r| {
            let d = RetryPolicy::default();
            let b = r.backoff.as_ref();
            RetryPolicy {
                mode: if r.mode.as_deref() == Some("always") {
                    RetryMode::Always
                } else {
                    RetryMode::Normal
                },
                max_retries: r.max_retries.unwrap_or(d.max_retries),
                retryable_codes: d.retryable_codes.clone(),
                initial_delay_ms: b
                    .and_then(|b| b.initial_delay_ms)
                    .unwrap_or(d.initial_delay_ms),
                max_delay_ms: b.and_then(|b| b.max_delay_ms).unwrap_or(d.max_delay_ms),
                jitter_ratio: b.and_then(|b| b.jitter_ratio).unwrap_or(d.jitter_ratio),
            }
        });
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let mut adapter = ReplayAdapter::new(scripts, models, retry, cwd);
        adapter.modalities = modalities;
        adapter.pace = config
            .pace_ms
            .filter(|ms| *ms > 0)
            .map(std::time::Duration::from_millis);
        Ok((adapter, routes))
    }
}

impl Plugin for ReplayPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-llm-replay"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let c: ReplayConfig = config.parse()?;
        let (adapter, routes) = Self::build(&c)?;
        let llm = ctx.require::<LlmRuntime>()?;
        llm.register_adapter(ctx, routes, Arc::new(adapter))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_llm::{LlmCallConfig, Message};
    use pretty_assertions::assert_eq;

    fn opts(texts: &[&str]) -> GenerateOptions {
        let messages = texts
            .iter()
            .map(|t| Arc::new(Message::user_text(*t)))
            .collect();
        GenerateOptions::new(LlmCallConfig::route("p", "m"), messages)
    }

    #[test]
    fn placeholders_take_the_last_match_and_its_first_group() {
        let o = opts(&["path is /tmp/a", "path is /tmp/b"]);
        let v = json!({"text": "see {{fromRequest:path is (\\S+)}} now"});
        assert_eq!(
            resolve_placeholders(&v, &o).unwrap(),
            json!({"text": "see /tmp/b now"})
        );
        let braces = json!("{{fromRequest:x{2}}}");
        assert!(resolve_placeholders(&braces, &opts(&["xx"])).is_ok());
        assert!(
            resolve_placeholders(&json!("{{fromRequest:zzz}}"), &o).is_err(),
            "no match is an error"
        );
        assert!(
            resolve_placeholders(&json!("{{fromRequest:(}}"), &o).is_err(),
            "bad regex is an error"
        );
        assert!(
            resolve_placeholders(&json!("{{fromRequest:abc"), &o).is_err(),
            "unterminated is an error"
        );
    }

    #[test]
    fn fixture_scripts_derive() {
        let root =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/acp");
        let Ok(dirs) = std::fs::read_dir(&root) else {
            dsh_test_support::prereq::skip("../shared/conformance/acp is absent");
            return;
        };
        let mut calls = 0;
        for d in dirs.flatten() {
            let f = d.path().join("session.jsonl");
            if let Ok(s) = load_script(&f) {
                calls += s.entries.len();
            }
        }
        assert!(calls > 100, "derived {calls} calls");
        let bash = load_script(&root.join("bash-tool-turn/session.jsonl")).unwrap();
        assert_eq!(bash.entries.len(), 2);
        assert_eq!(bash.derive_error, None);
    }
}
