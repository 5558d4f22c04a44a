//! Upstream's keyless SDK-runtime snapshots (`../shared/conformance/sdk`, README there)
//! against `dsh --profile sdk`: each scenario launches the binary on stdio as the SDK does,
//! replays the recorded session through the `llm-replay` row, drives one turn the way the
//! TypeScript SDK's `HarnessSession.run` does (prompt, then the session tree's notifications
//! from the inbox receipt through the root's next `idle`), and compares
//!
//! * the normalized notification stream with `notifications.expected.jsonl`,
//! * the normalized `RunResult` projection with `result.expected.json`,
//! * every session log we wrote (the parent, and the child for the subagent scenario) with
//!   the recorded `session.jsonl` / `session.N.jsonl`, both normalized as snapshots,
//!
//! plus upstream's per-scenario invariants (the last notification is `idle`, the files a
//! scenario leaves, the minimal composition's assembled prompt and tools, the subagent
//! lifecycle notifications). Normalization follows upstream's acp-snapshot normalizers
//! (times and ids tokenized, the run's cwd as `{{cwd}}`, request-header bulk as
//! `{{system}}` / `{{tools}}`); see `normalize` below for the two parts left out, and
//! `drop_run_directory` for what 0.2.1 added to bash results.
//!
//! The composition under test: upstream runs these with its example SDK deployment
//! (`cordis.yml`, or `minimal.cordis.yml` for `persistent-tools`) with the DeepSeek adapter
//! swapped for replay (`cordis.snapshot.yml`). Ours is `dsh --profile sdk` plus one
//! `--patch` layer per deployment that does the same: the replay row in place of
//! `llm-deepseek`, uncompressed v0 logs (upstream's snapshot mode writes `compression:
//! none` in the v0 format of the fixtures), and the deployment's differences from our
//! interactive base bundle (named in each patch).
//!
//! Skips (passing, with a printed SKIP) when `../shared/conformance/sdk` is absent.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{Map, Value, json};

/// How long one frame may take to arrive before the run is declared hung.
const FRAME_TIMEOUT: Duration = Duration::from_secs(90);

/// The replay swap both deployments share: the fixture-backed provider claims the route
/// `initialize` names, and logs are written as upstream's snapshot mode writes them.
const REPLAY_ROWS: &str = "\
- id: llm-deepseek
  disabled: true
- id: session-persistence-jsonl
  config:
    root: !!js dshHomePath('sessions')
    compression: none
    formatVersion: 0
- insert:
    - id: llm-replay
      name: '@deepseek-ai/dsh-llm-replay'
      config:
        providers:
          - id: deepseek-official
            name: DeepSeek
            models:
              - id: deepseek-v4-flash
";

/// Upstream's example SDK deployment (`cordis.yml`) is unattended: no permission presets,
/// no approval, no sandbox, no plan mode (its bash and filesystem rows are the unconfined local ones), so
/// it logs no policy events and sends no runtime-context message; its `subagent` tool runs
/// children in the foreground only (`enableRunInBackground: false`).
const SDK_DEPLOYMENT: &str = "\
- id: permission
  disabled: true
- id: approval
  disabled: true
- id: sandbox-policy
  disabled: true
- id: sandbox
  disabled: true
- id: plan-mode
  disabled: true
- id: bash-sandbox
  config:
    timeoutMs: 60000
    sandboxed: false
- id: tool-subagent
  config:
    provider: spawn
    toolName: subagent
    enableRunInBackground: false
";

/// Upstream's minimal deployment (`minimal.cordis.yml`): the system prompt is
/// `$DSH_SYSTEM_PROMPT` alone (no harness identity, no runtime context), the model sees
/// only the persistent `bash` and `str_replace_editor`, the sandbox policy is
/// danger-full-access, and there is no compaction, plan mode or goal tools (the 0.1 tree had none).
/// The bash description is appended from
/// the shared composition (see `minimal_patch`).
const MINIMAL_DEPLOYMENT: &str = "\
- id: system-prompt
  config:
    persona: !!js process.env.DSH_SYSTEM_PROMPT ?? 'You are a software engineering assistant.'
    includeHarnessIdentity: false
    includeRuntimeContext: false
- id: permission
  disabled: true
- id: approval
  disabled: true
- id: sandbox-policy
  config:
    mode: danger-full-access
    workspaceRoot: !!js process.cwd()
- id: tool-bash
  disabled: true
- id: tool-jobs
  disabled: true
- id: tool-fs
  disabled: true
- id: tool-working-directory
  disabled: true
- id: tool-fs-search
  disabled: true
- id: tool-todo
  disabled: true
- id: tool-goal
  disabled: true
- id: tool-subagent-control
  disabled: true
- id: tool-subagent-list-agents
  disabled: true
- id: tool-subagent
  disabled: true
- id: tool-subagent-fork
  disabled: true
- id: tool-subagent-report
  disabled: true
- id: tool-workflow
  disabled: true
- id: tool-ralph
  disabled: true
- id: tool-web
  disabled: true
- id: tool-lsp
  disabled: true
- id: tool-lsp-diagnostics
  disabled: true
- id: tool-session-query
  disabled: true
- id: tool-memory
  disabled: true
- id: memory
  disabled: true
- id: tool-skill
  disabled: true
- id: compaction-basic
  disabled: true
- id: command-compact
  disabled: true
- id: plan-mode
  disabled: true
- insert:
    - id: pty
      name: '@deepseek-ai/dsh-terminal'
    - id: terminal-bash
      name: '@deepseek-ai/dsh-terminal-bash'
      config:
        timeoutMs: 300000
";

/// Our own deployment-selected system prompt for `persistent-tools` (headers are tokenized in
/// the fixtures, so any text proves the wiring).
const MINIMAL_SYSTEM_PROMPT: &str = "You are the minimal engineer this deployment selected.";

#[derive(Clone, Copy, PartialEq)]
enum Deployment {
    Sdk,
    Minimal,
}

/// One scenario: its prompt, SDK session id and child-log count come from its row in the
/// shared README's table.
struct Scenario {
    name: &'static str,
    prompt: String,
    session_id: String,
    children: usize,
    deployment: Deployment,
    /// Workspace files (relative) and their contents after the turn.
    expected_files: &'static [(&'static str, &'static str)],
}

impl Scenario {
    fn load(
        shared: &Path,
        name: &'static str,
        deployment: Deployment,
        expected_files: &'static [(&'static str, &'static str)],
    ) -> Self {
        let readme = read(&shared.join("README.md"));
        let row = readme
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("README.md has no row for {name}"));
        let cells: Vec<&str> = row.split(" | ").collect();
        let code = |i: usize| {
            cells
                .get(i)
                .and_then(|c| c.strip_prefix('`'))
                .and_then(|c| c.strip_suffix('`'))
                .unwrap_or_else(|| panic!("README.md row for {name}: cell {i}"))
                .to_string()
        };
        Self {
            name,
            prompt: code(1),
            session_id: code(2),
            children: cells
                .get(3)
                .and_then(|c| c.trim().parse().ok())
                .unwrap_or_else(|| panic!("README.md row for {name}: child count")),
            deployment,
            expected_files,
        }
    }
}

fn shared_dir() -> Option<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/sdk");
    if dir.is_dir() {
        Some(dir)
    } else {
        dsh_test_support::prereq::skip("../shared/conformance/sdk is not available");
        None
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The minimal deployment patch with the persistent bash row, whose description is the one
/// the shared `minimal.cordis.yml` gives its `persistent-bash` row.
fn minimal_patch(shared: &Path) -> (String, String) {
    let text = read(&shared.join("minimal.cordis.yml"));
    let mut lines = text.lines().skip_while(|l| *l != "- id: persistent-bash");
    let mut description = Vec::new();
    let mut inside = false;
    for line in lines.by_ref() {
        if inside {
            match line.strip_prefix("      ") {
                Some(rest) => description.push(rest),
                None => break,
            }
        } else if line.trim() == "description: |-" {
            inside = true;
        }
    }
    assert!(
        !description.is_empty(),
        "minimal.cordis.yml: no persistent-bash description"
    );
    let description = description.join("\n");
    let mut patch = String::from(MINIMAL_DEPLOYMENT);
    patch.push_str(
        "    - id: persistent-bash\n      name: '@deepseek-ai/dsh-tool-bash-persistent'\n      config:\n        timeoutMs: 300000\n        description: |-\n",
    );
    for line in description.lines() {
        patch.push_str("          ");
        patch.push_str(line);
        patch.push('\n');
    }
    (patch, description)
}

// ---------------------------------------------------------------------------------------
// Normalization (upstream's acp-snapshot normalizers: normalizeStdout, normalizeSessionLog,
// scrubRequestHeaders, scrubSessionSnapshot). Left out: the spill-locator and
// `session_event_read` time rewrites, which only apply to spill paths and event-read
// results; none of these scenarios produces either, and one that did would show as a diff.
// ---------------------------------------------------------------------------------------

struct Ctx {
    session_ids: Vec<String>,
    /// Every spelling of the run's cwd, longest first.
    cwds: Vec<String>,
}

impl Ctx {
    fn new(session_ids: Vec<String>, cwds: &[String]) -> Self {
        let mut all: Vec<String> = Vec::new();
        for c in cwds.iter().filter(|c| !c.is_empty()) {
            if !all.contains(c) {
                all.push(c.clone());
            }
        }
        let private: Vec<String> = all
            .iter()
            .filter(|c| c.starts_with('/') && !c.starts_with("/private/"))
            .map(|c| format!("/private{c}"))
            .collect();
        for p in private {
            if !all.contains(&p) {
                all.push(p);
            }
        }
        all.sort_by_key(|c| std::cmp::Reverse(c.len()));
        Self {
            session_ids,
            cwds: all,
        }
    }
}

fn is_boundary(c: char) -> bool {
    c.is_whitespace() || "<>'\"`()[]{},;:!?=".contains(c)
}

/// Whether `prefix` ends in `file://` or `file:///` that starts a token.
fn ends_with_file_uri(prefix: &str) -> bool {
    let lower = prefix.to_ascii_lowercase();
    for tail in ["file:///", "file://"] {
        if let Some(head) = lower.strip_suffix(tail) {
            return head.chars().next_back().is_none_or(|c| {
                !(c.is_ascii_lowercase() || c.is_ascii_digit() || "+.-".contains(c))
            });
        }
    }
    false
}

fn is_cwd_match(value: &str, start: usize, len: usize) -> bool {
    let before = value[..start].chars().next_back();
    let mut rest = value[start + len..].chars();
    let after = rest.next();
    let after_punct = rest.next();
    let starts = before.is_none_or(is_boundary) || ends_with_file_uri(&value[..start]);
    let ends = match after {
        None | Some('/') | Some('\\') => true,
        Some('.') => after_punct.is_none_or(is_boundary),
        Some(c) => is_boundary(c),
    };
    starts && ends
}

fn replace_cwd_spelling(value: &str, spelling: &str, replacement: &str) -> String {
    let mut out = String::new();
    let mut cursor = 0;
    while let Some(found) = value[cursor..].find(spelling) {
        let at = cursor + found;
        let end = at + spelling.len();
        if is_cwd_match(value, at, spelling.len()) {
            out.push_str(&value[cursor..at]);
            out.push_str(replacement);
        } else {
            out.push_str(&value[cursor..end]);
        }
        cursor = end;
    }
    out.push_str(&value[cursor..]);
    out
}

/// `{{cwd}}`-rooted paths with `/` separators.
fn canonical_cwd_paths(value: &str) -> String {
    const TOKEN: &str = "{{cwd}}";
    let mut out = String::new();
    let mut cursor = 0;
    while let Some(found) = value[cursor..].find(TOKEN) {
        let at = cursor + found + TOKEN.len();
        out.push_str(&value[cursor..at]);
        let tail = &value[at..];
        let run = tail
            .find(|c: char| c.is_whitespace() || "<>\"'`".contains(c))
            .unwrap_or(tail.len());
        let path = &tail[..run];
        if path.len() > 1 && (path.starts_with('/') || path.starts_with('\\')) {
            out.push_str(&path.replace('\\', "/"));
            cursor = at + run;
        } else {
            cursor = at;
        }
    }
    out.push_str(&value[cursor..]);
    out
}

/// `<path>…</path>` and `Additional instructions from: …` with `/` separators.
fn canonical_embedded_paths(value: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(open) = rest.find("<path>") {
        let body = &rest[open + 6..];
        match body.find('<') {
            Some(close) if body[close..].starts_with("</path>") => {
                out.push_str(&rest[..open + 6]);
                out.push_str(&body[..close].replace('\\', "/"));
                out.push_str("</path>");
                rest = &body[close + 7..];
            }
            _ => {
                out.push_str(&rest[..open + 6]);
                rest = body;
            }
        }
    }
    out.push_str(rest);
    const LEAD: &str = "Additional instructions from: ";
    if !out.contains(LEAD) {
        return out;
    }
    let mut done = String::new();
    let mut rest = out.as_str();
    while let Some(at) = rest.find(LEAD) {
        let body = &rest[at + LEAD.len()..];
        let end = body.find(['\r', '\n']).unwrap_or(body.len());
        done.push_str(&rest[..at + LEAD.len()]);
        done.push_str(&body[..end].replace('\\', "/"));
        rest = &body[end..];
    }
    done.push_str(rest);
    done
}

fn is_uuid_at(bytes: &[u8], i: usize) -> bool {
    if bytes.len() < i + 36 {
        return false;
    }
    bytes[i..i + 36].iter().enumerate().all(|(k, b)| {
        if [8, 13, 18, 23].contains(&k) {
            *b == b'-'
        } else {
            b.is_ascii_hexdigit()
        }
    })
}

fn replace_uuids(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = String::new();
    let mut i = 0;
    let mut copied = 0;
    while i < bytes.len() {
        if is_uuid_at(bytes, i) {
            out.push_str(&value[copied..i]);
            out.push_str("{{sessionId}}");
            i += 36;
            copied = i;
        } else {
            i += 1;
        }
    }
    out.push_str(&value[copied..]);
    out
}

fn scrub_string(value: &str, ctx: &Ctx) -> String {
    let mut out = value.to_string();
    for spelling in &ctx.cwds {
        out = replace_cwd_spelling(&out, spelling, "{{cwd}}");
    }
    out = out.replace("/private{{cwd}}", "{{cwd}}");
    out = canonical_cwd_paths(&out);
    out = canonical_embedded_paths(&out);
    for id in &ctx.session_ids {
        out = out.replace(id.as_str(), "{{sessionId}}");
    }
    replace_uuids(&out)
}

fn scrub_value(value: &Value, ctx: &Ctx, key: Option<&str>) -> Value {
    match value {
        Value::String(s) => {
            let s = scrub_string(s, ctx);
            Value::String(if key == Some("path") {
                s.replace('\\', "/")
            } else {
                s
            })
        }
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| scrub_value(v, ctx, None)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), scrub_value(v, ctx, Some(k))))
                .collect(),
        ),
        other => other.clone(),
    }
}

fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.split('\n').filter(|l| !l.trim().is_empty())
}

fn parse(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn join(records: impl Iterator<Item = Value>) -> String {
    let mut out = String::new();
    for r in records {
        out.push_str(&serde_json::to_string(&r).unwrap());
        out.push('\n');
    }
    out
}

/// normalizeSessionLog: times and durations zeroed, volatile strings tokenized.
fn normalize_session_log(raw: &str, ctx: &Ctx) -> String {
    join(lines(raw).map(|line| {
        let mut record = parse(line);
        if let Some(obj) = record.as_object_mut() {
            let kind = obj
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            if kind == "session" {
                if obj.contains_key("createdAt") {
                    obj.insert("createdAt".into(), json!(0));
                }
            } else if ["text-chunks", "reasoning-chunks", "tool-call-chunks"]
                .contains(&kind.as_str())
            {
                if obj.contains_key("time0") {
                    obj.insert("time0".into(), json!(0));
                }
                if let Some(dt) = obj
                    .get_mut("data")
                    .and_then(|d| d.get_mut("dt"))
                    .and_then(Value::as_array_mut)
                {
                    dt.iter_mut().for_each(|v| *v = json!(0));
                }
            } else if obj.contains_key("time") {
                obj.insert("time".into(), json!(0));
            }
            if kind == "hook/result"
                && let Some(data) = obj.get_mut("data").and_then(Value::as_object_mut)
                && data.contains_key("durationMs")
            {
                data.insert("durationMs".into(), json!(0));
            }
        }
        scrub_value(&record, ctx, None)
    }))
}

/// scrubRequestHeaders on one record.
fn scrub_request_header(record: &mut Value) {
    if record["type"] != "request/header" {
        return;
    }
    if let Some(header) = record
        .get_mut("data")
        .and_then(|d| d.get_mut("header"))
        .and_then(Value::as_object_mut)
    {
        if header.contains_key("system") {
            header.insert("system".into(), json!("{{system}}"));
        }
        if header.contains_key("tools") {
            header.insert("tools".into(), json!("{{tools}}"));
        }
    }
}

/// normalizeSessionSnapshot: the normalized log with request headers tokenized and the
/// persistence envelope (`seq`, `time`, `seq0`, `time0`) left off every body record.
fn normalize_session_snapshot(raw: &str, ctx: &Ctx) -> String {
    let normalized = normalize_session_log(raw, ctx);
    join(lines(&normalized).enumerate().map(|(i, line)| {
        let mut record = parse(line);
        if i == 0 {
            assert_eq!(
                record["type"], "session",
                "a session log starts with its header"
            );
            return record;
        }
        scrub_request_header(&mut record);
        drop_run_directory(&mut record);
        if let Some(obj) = record.as_object_mut() {
            for k in ["seq", "time", "seq0", "time0"] {
                obj.shift_remove(k);
            }
        }
        record
    }))
}

/// A bash result's `data.meta: {cwd}` (where the command ran) left out: upstream 0.2.1
/// records it; the 0.1.1 recordings of these snapshots predate it, and 0.2 wins.
fn drop_run_directory(record: &mut Value) {
    if record["type"] == "tool/result"
        && let Some(data) = record.get_mut("data").and_then(Value::as_object_mut)
        && data
            .get("meta")
            .and_then(Value::as_object)
            .is_some_and(|m| m.len() == 1 && m.contains_key("cwd"))
    {
        data.shift_remove("meta");
    }
}

/// The notification stream as upstream's SDK snapshot pins it: every `session.event`
/// envelope normalized like a session log (request headers tokenized), then every record
/// scrubbed like a wire frame.
fn normalize_notifications(notifications: &[Value], ctx: &Ctx) -> String {
    join(notifications.iter().map(|n| {
        let mut record = json!({"method": n["method"], "params": n["params"]});
        if n["method"] == "session.event" {
            let event = serde_json::to_string(&n["params"]["event"]).unwrap();
            let mut event = parse(normalize_session_log(&event, ctx).trim_end());
            scrub_request_header(&mut event);
            drop_run_directory(&mut event);
            record["params"]["event"] = event;
        }
        scrub_value(&record, ctx, None)
    }))
}

// ---------------------------------------------------------------------------------------
// The run
// ---------------------------------------------------------------------------------------

struct Runtime {
    child: Child,
    stdin: std::process::ChildStdin,
    frames: Receiver<String>,
    stderr: PathBuf,
}

impl Runtime {
    fn send(&mut self, frame: Value) {
        writeln!(self.stdin, "{frame}").unwrap();
        self.stdin.flush().unwrap();
    }

    fn next(&mut self, what: &str) -> Value {
        match self.frames.recv_timeout(FRAME_TIMEOUT) {
            Ok(line) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout is not JSON-RPC ({e}): {line}")),
            Err(RecvTimeoutError::Timeout) => {
                let _ = self.child.kill();
                panic!(
                    "no frame within {FRAME_TIMEOUT:?} while waiting for {what}; stderr:\n{}",
                    std::fs::read_to_string(&self.stderr).unwrap_or_default()
                )
            }
            Err(RecvTimeoutError::Disconnected) => panic!(
                "the runtime closed stdout while waiting for {what}; stderr:\n{}",
                std::fs::read_to_string(&self.stderr).unwrap_or_default()
            ),
        }
    }
}

struct Outcome {
    /// The notifications `HarnessSession.run` hands its observer, in wire order.
    notifications: Vec<Value>,
    final_response: String,
    /// Persisted logs, parent first, then children by creation time.
    logs: Vec<(Value, String)>,
    files: Vec<(String, Option<String>)>,
    cwd: PathBuf,
}

fn launch(scenario: &Scenario, shared: &Path, cwd: &Path, home: &Path) -> Runtime {
    let dir = shared.join(scenario.name);
    // Replay fixtures hydrated with this run's cwd, as upstream's harness does.
    let fixtures = cwd.join(".replay-fixtures");
    std::fs::create_dir_all(&fixtures).unwrap();
    let mut paths = Vec::new();
    for name in fixture_names(scenario) {
        let to = fixtures.join(&name);
        let text = read(&dir.join(&name)).replace("{{cwd}}", &cwd.display().to_string());
        std::fs::write(&to, text).unwrap();
        paths.push(to);
    }
    let patch = match scenario.deployment {
        Deployment::Sdk => format!("{SDK_DEPLOYMENT}{REPLAY_ROWS}"),
        Deployment::Minimal => format!("{}{REPLAY_ROWS}", minimal_patch(shared).0),
    };
    let patch_file = home.join("snapshot.patch.yml");
    std::fs::write(&patch_file, patch).unwrap();
    let stderr = home.join("runtime.stderr");
    let mut command = Command::new(env!("CARGO_BIN_EXE_dsh"));
    command
        .args(["--profile", "sdk", "--patch"])
        .arg(&patch_file)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("DSH_HOME", home.join(".dsh"))
        .env("DSH_SNAPSHOT_FILE", &paths[0])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr).unwrap());
    if paths.len() > 1 {
        let children: Vec<String> = paths[1..].iter().map(|p| p.display().to_string()).collect();
        command.env("DSH_SNAPSHOT_CHILD_FILES", children.join(":"));
    }
    if scenario.deployment == Deployment::Minimal {
        command.env("DSH_SYSTEM_PROMPT", MINIMAL_SYSTEM_PROMPT);
    }
    let mut child = command.spawn().unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, frames) = channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Runtime {
        child,
        stdin,
        frames,
        stderr,
    }
}

fn fixture_names(scenario: &Scenario) -> Vec<String> {
    let mut names = vec!["session.jsonl".to_string()];
    names.extend((1..=scenario.children).map(|i| format!("session.{i}.jsonl")));
    names
}

/// What `HarnessSession.run` collects, given every frame in wire order: the client learns
/// lineage from each `subagent.started` as it arrives and scopes the subscription to the
/// root's tree at that moment; the run starts at the inbox receipt of `message_id` and
/// ends at the root's first `idle` after it. `None` while that interval is incomplete.
fn sdk_run(frames: &[Value], root: &str, message_id: &str) -> Option<Vec<Value>> {
    let mut parents: std::collections::HashMap<String, String> = Default::default();
    let in_tree = |parents: &std::collections::HashMap<String, String>, id: &str| {
        let mut current = id.to_string();
        let mut seen = std::collections::HashSet::new();
        while seen.insert(current.clone()) {
            if current == root {
                return true;
            }
            match parents.get(&current) {
                Some(p) => current = p.clone(),
                None => return false,
            }
        }
        false
    };
    let mut out = Vec::new();
    let mut received = false;
    for f in frames
        .iter()
        .filter(|f| f.get("method").is_some() && f.get("id").is_none())
    {
        let method = f["method"].as_str().unwrap_or_default();
        let params = &f["params"];
        if method == "subagent.started"
            && let (Some(p), Some(c)) = (
                params["parentSessionId"].as_str(),
                params["childSessionId"].as_str(),
            )
            && !p.is_empty()
            && !c.is_empty()
            && p != c
        {
            parents.insert(c.to_string(), p.to_string());
        }
        let wanted = if method == "subagent.started" || method == "subagent.finished" {
            params["parentSessionId"]
                .as_str()
                .is_some_and(|p| in_tree(&parents, p))
                || params["childSessionId"] == root
        } else {
            params["sessionId"]
                .as_str()
                .is_some_and(|s| in_tree(&parents, s))
        };
        if !wanted {
            continue;
        }
        if !received {
            let event = &params["event"];
            let receipt = method == "session.event"
                && params["sessionId"] == root
                && event["type"] == "agent/inbox/spliced"
                && event["data"]["inserted"]
                    .as_array()
                    .is_some_and(|m| m.iter().any(|m| m["id"] == message_id));
            if !receipt {
                continue;
            }
            received = true;
        }
        out.push(json!({"method": method, "params": params}));
        if method == "session.status" && params["sessionId"] == root && params["status"] == "idle" {
            return Some(out);
        }
    }
    None
}

/// The concatenated text blocks of the root's last `assistant/message` in the run.
fn final_response(notifications: &[Value], root: &str) -> String {
    notifications
        .iter()
        .filter(|n| n["method"] == "session.event" && n["params"]["sessionId"] == root)
        .map(|n| &n["params"]["event"])
        .rfind(|e| e["type"] == "assistant/message")
        .map(|e| common::message_text(&e["data"]["message"]))
        .unwrap_or_default()
}

fn session_logs(root: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            session_logs(&path, found);
        } else if path.to_string_lossy().contains(".jsonl") {
            found.push(path);
        }
    }
}

fn run(scenario: &Scenario, shared: &Path) -> Outcome {
    let work = tempfile::Builder::new()
        .prefix(&format!("sdk-snapshot-{}-", scenario.name))
        .tempdir()
        .unwrap();
    let home = tempfile::tempdir().unwrap();
    let cwd = work.path().canonicalize().unwrap();
    let mut rt = launch(scenario, shared, &cwd, home.path());
    let cwd_text = cwd.display().to_string();

    rt.send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "cwd": cwd_text, "provider": "deepseek-official", "model": "deepseek-v4-flash"}}),
    );
    let mut frames = Vec::new();
    loop {
        let f = rt.next("the initialize answer");
        if f["id"] == 1 {
            assert!(f["result"].is_object(), "initialize failed: {f}");
            break;
        }
        frames.push(f);
    }
    let prompt = scenario.prompt.replace("{{cwd}}", &cwd_text);
    rt.send(
        json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": {
        "sessionId": scenario.session_id, "contentBlocks": [{"type": "text", "text": prompt}]}}),
    );
    let mut message_id = None;
    let notifications = loop {
        let f = rt.next("the end of the turn");
        if f["id"] == 2 {
            let id = f["result"]["messageId"].as_str();
            message_id = Some(
                id.unwrap_or_else(|| panic!("session/prompt failed: {f}"))
                    .to_string(),
            );
        } else {
            frames.push(f);
        }
        if let Some(id) = &message_id
            && let Some(run) = sdk_run(&frames, &scenario.session_id, id)
        {
            break run;
        }
    };
    rt.send(json!({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}));
    loop {
        let f = rt.next("the shutdown answer");
        if f["id"] == 3 {
            assert_eq!(f["result"], json!({}), "{f}");
            break;
        }
    }
    drop(rt.stdin);
    let mut exited = false;
    for _ in 0..200 {
        if rt.child.try_wait().unwrap().is_some() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !exited {
        let _ = rt.child.kill();
        panic!("the runtime did not exit within 10s of shutdown");
    }

    let mut found = Vec::new();
    session_logs(&home.path().join(".dsh/sessions"), &mut found);
    let mut logs: Vec<(Value, String)> = found
        .iter()
        .map(|p| {
            assert!(
                p.extension().is_some_and(|e| e == "jsonl"),
                "expected uncompressed .jsonl logs, found {}",
                p.display()
            );
            let text = read(p);
            (parse(text.lines().next().unwrap_or_default()), text)
        })
        .collect();
    logs.sort_by_key(|(h, _)| {
        (
            h["parentSession"].is_string(),
            h["createdAt"].as_f64().unwrap_or(0.0) as u64,
        )
    });
    let files = scenario
        .expected_files
        .iter()
        .map(|(name, _)| {
            (
                name.to_string(),
                std::fs::read_to_string(cwd.join(name)).ok(),
            )
        })
        .collect();
    Outcome {
        final_response: final_response(&notifications, &scenario.session_id),
        notifications,
        logs,
        files,
        cwd,
    }
}

/// The first `request/header` of a log.
fn request_header(log: &str) -> Value {
    lines(log)
        .map(parse)
        .find(|r| r["type"] == "request/header")
        .map(|r| r["data"]["header"].clone())
        .expect("the log has a request/header")
}

fn check(
    name: &'static str,
    deployment: Deployment,
    expected_files: &'static [(&'static str, &'static str)],
) {
    let Some(shared) = shared_dir() else {
        return;
    };
    let scenario = &Scenario::load(&shared, name, deployment, expected_files);
    let dir = shared.join(scenario.name);
    let out = run(scenario, &shared);

    // Persisted logs: one parent, the scenario's children, each equal to its recording.
    let parents = out
        .logs
        .iter()
        .filter(|(h, _)| !h["parentSession"].is_string())
        .count();
    assert_eq!(
        (parents, out.logs.len() - parents),
        (1, scenario.children),
        "{}: session logs (parent, children)",
        scenario.name
    );
    let ids: Vec<String> = out
        .logs
        .iter()
        .filter_map(|(h, _)| h["id"].as_str().map(str::to_owned))
        .collect();
    let mut spellings = vec![out.cwd.display().to_string()];
    if let Ok(real) = out.cwd.canonicalize() {
        spellings.push(real.display().to_string());
    }
    let actual_ctx = Ctx::new(ids, &spellings);
    let expected: Vec<String> = fixture_names(scenario)
        .iter()
        .map(|n| read(&dir.join(n)))
        .collect();
    let headers: Vec<Value> = expected
        .iter()
        .map(|t| parse(t.lines().next().unwrap_or_default()))
        .collect();
    let expected_ctx = Ctx::new(
        headers
            .iter()
            .filter_map(|h| h["id"].as_str().map(str::to_owned))
            .collect(),
        &[headers[0]["cwd"]
            .as_str()
            .unwrap_or("\0no-cwd\0")
            .to_string()],
    );
    for ((_, log), (name, fixture)) in out
        .logs
        .iter()
        .zip(fixture_names(scenario).iter().zip(&expected))
    {
        assert_eq!(
            normalize_session_snapshot(log, &actual_ctx),
            normalize_session_snapshot(fixture, &expected_ctx),
            "{}: {name}",
            scenario.name
        );
    }

    // The SDK-visible stream and the run result.
    assert_eq!(
        normalize_notifications(&out.notifications, &actual_ctx),
        read(&dir.join("notifications.expected.jsonl")),
        "{}: notifications",
        scenario.name
    );
    let result = json!({"sessionId": scenario.session_id, "finalResponse": out.final_response});
    assert_eq!(
        join(std::iter::once(scrub_value(&result, &actual_ctx, None))),
        read(&dir.join("result.expected.json")),
        "{}: result",
        scenario.name
    );

    // Upstream's invariants.
    let last = out.notifications.last().unwrap();
    assert_eq!(
        (&last["method"], &last["params"]["status"]),
        (&json!("session.status"), &json!("idle"))
    );
    for (name, content) in &out.files {
        let wanted = scenario
            .expected_files
            .iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1;
        assert_eq!(
            content.as_deref(),
            Some(wanted),
            "{}: {name}",
            scenario.name
        );
    }
    if scenario.children > 0 {
        for method in ["subagent.started", "subagent.finished"] {
            assert!(
                out.notifications.iter().any(|n| n["method"] == method),
                "{}: no {method}",
                scenario.name
            );
        }
    }
    if scenario.deployment == Deployment::Minimal {
        let parent = &out.logs[0].1;
        let header = request_header(parent);
        assert_eq!(header["system"], MINIMAL_SYSTEM_PROMPT);
        let tools: Map<String, Value> = header["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| {
                (
                    t["name"].as_str().unwrap().to_string(),
                    t["parameters"]["required"].clone(),
                )
            })
            .collect();
        assert_eq!(
            Value::Object(tools),
            json!({"bash": ["command"], "str_replace_editor": ["command", "path"]})
        );
        let bash = header["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == "bash")
            .unwrap();
        assert_eq!(bash["description"], minimal_patch(&shared).1.as_str());
        let contexts = lines(parent)
            .map(parse)
            .filter(|r| {
                r["type"] == "user/message"
                    && r["data"]["source"]["kind"] == "plugin"
                    && r["data"]["source"]["plugin"] == "@deepseek-ai/dsh-system-prompt"
            })
            .count();
        assert_eq!(contexts, 0, "no runtime-context message");
    }
}

#[test]
fn sdk_snapshot_text_turn() {
    check("text-turn", Deployment::Sdk, &[]);
}

#[test]
fn sdk_snapshot_bash_tool() {
    check("bash-tool", Deployment::Sdk, &[]);
}

#[test]
fn sdk_snapshot_subagent_spawn_in_process() {
    check("subagent-spawn-in-process", Deployment::Sdk, &[]);
}

#[test]
fn sdk_snapshot_persistent_tools() {
    check(
        "persistent-tools",
        Deployment::Minimal,
        &[("note.txt", "target:\n\tnew\n")],
    );
}
