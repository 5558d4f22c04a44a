//! Code Mode through the `dsh` binary (headless, `DSH_TOOLS_MODE`) against the mock LLM:
//! the model sees `run_code` instead of the tools, its program calls `bash` and `read`
//! through the registry, the sub-calls are logged, and what the program printed and
//! returned is the result; a runaway program is stopped and the model told why.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::{Command, Output};
use std::sync::Arc;

use dsh_session::{Event, types};
use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::Run;

/// What these tests add to [`Run`].
trait RunExt {
    fn code_mode(&self, server: &MockServer, mode: &str, task: &str) -> Output;
}

impl RunExt for Run {
    fn code_mode(&self, server: &MockServer, mode: &str, task: &str) -> Output {
        let mut c: Command = self.base(server);
        c.env("DSH_TOOLS_MODE", mode)
            .args(["--profile", "headless", task]);
        c.output().unwrap()
    }
}

fn run_code(id: &str, code: &str) -> Reply {
    let args = json!({"code": code, "description": "Exercise the tools"});
    Reply::tool_call(id, "run_code", &args.to_string())
}

fn tool_names(request: &RecordedRequest) -> Vec<String> {
    request.tool_names()
}

fn of_type<'a>(events: &'a [Arc<Event>], t: &str) -> Vec<&'a Arc<Event>> {
    events.iter().filter(|e| e.is(t)).collect()
}

#[test]
fn a_program_calls_tools_through_the_registry() {
    let run = Run::new();
    std::fs::write(run.work.path().join("note.txt"), "alpha\nbeta\n").unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(run_code(
        "c1",
        "const out = await tools.bash({command: 'echo CODE_ONE', description: 'Print a marker'});\n\
         console.log('captured output');\n\
         const file = await tools.read({file_path: 'note.txt'});\n\
         let missing;\n\
         try { await tools.read({file_path: 'nope.txt'}); } catch (e) { missing = e.name + '/' + e.toolName; }\n\
         const bg = await tools.bash({command: 'true', description: 'Start a job', run_in_background: true});\n\
         return out.stdout.text.trim() + '+' + file.lines[1].text + '+' + missing + '+' + bg.kind + ':' + bg.jobId;",
    ));
    server.push(Reply::text("CODE_ONE+beta"));
    // The background job's completion notice reaches the model at a later step.
    server.push(Reply::text("noted"));
    let out = run.code_mode(&server, "code", "use run_code");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let requests = server.requests();
    let first = requests
        .iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    assert_eq!(tool_names(first), vec!["run_code"]);
    let after_program = requests
        .iter()
        .find(|r| r.last_tool_output().is_some())
        .unwrap();
    assert_eq!(
        after_program.last_tool_output().unwrap(),
        "captured output\nCODE_ONE+beta+ToolCallError/read+background:bash-1"
    );

    let events = run.session();
    let starts = of_type(&events, "tool/code-dispatch-start");
    let settled = of_type(&events, "tool/code-dispatch");
    assert_eq!(starts.len(), 4);
    assert_eq!(
        settled
            .iter()
            .map(|e| (
                e.data["subCallId"].as_str().unwrap().to_string(),
                e.data["name"].as_str().unwrap().to_string(),
                e.data["isError"].as_bool().unwrap()
            ))
            .collect::<Vec<_>>(),
        vec![
            ("c1:code:1".to_string(), "bash".to_string(), false),
            ("c1:code:2".to_string(), "read".to_string(), false),
            ("c1:code:3".to_string(), "read".to_string(), true),
            ("c1:code:4".to_string(), "bash".to_string(), false),
        ]
    );
    assert_eq!(
        settled[0].data["content"],
        json!([{"type": "text", "text": "CODE_ONE\n"}])
    );
    // Only the outer call is a tool result.
    assert_eq!(of_type(&events, types::TOOL_RESULT).len(), 1);
}

#[test]
fn a_runaway_program_is_stopped_and_the_model_told() {
    let run = Run::new();
    std::fs::create_dir_all(run.dsh_home()).unwrap();
    // The budget leaves the allocating program room to reach its memory limit first even on
    // a loaded machine (at 300 ms a busy CI machine once ran it out of time instead).
    std::fs::write(
        run.dsh_home().join("cordis.patch.yml"),
        "- id: code-runtime\n  config:\n    computeMs: 1500\n    maxOldGenerationSizeMb: 32\n",
    )
    .unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(run_code("c1", "console.log('spinning'); while (true) {}"));
    server.push(run_code(
        "c2",
        "const a = []; for (;;) a.push('x'.repeat(4096) + a.length);",
    ));
    server.push(Reply::text("stopped"));
    let out = run.code_mode(&server, "both", "loop forever");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let first = requests
        .iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    let names = tool_names(first);
    assert!(names.contains(&"run_code".to_string()) && names.contains(&"bash".to_string()));
    let events = run.session();
    let results: Vec<(bool, String)> = of_type(&events, types::TOOL_RESULT)
        .iter()
        .map(|e| {
            let r = &e.data["message"]["content"][0];
            (
                r["isError"].as_bool().unwrap(),
                r["content"][0]["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        results[0],
        (
            true,
            "Error: code run failed (timeout): compute budget exhausted (1500ms busy)\nCaptured output:\nspinning"
                .to_string()
        )
    );
    assert!(
        results[1]
            .1
            .starts_with("Error: code run failed (worker-exit): memory limit reached"),
        "{}",
        results[1].1
    );
}

/// Text of the request's user messages.
fn user_text(r: &dsh_test_support::mock_server::RecordedRequest) -> String {
    r.messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"].to_string())
        .collect()
}

#[test]
fn concurrency_safe_calls_a_program_issues_together_run_together() {
    let run = Run::new();
    // Two subagents (concurrency-safe) whose commands each wait for the other's file: run
    // one after the other, the first would give up after 5 s and fail.
    let meet = |mine: &str, theirs: &str| {
        json!({
            "command": format!("touch {mine}; for i in $(seq 100); do [ -f {theirs} ] && echo met-{mine} && exit 0; sleep 0.05; done; exit 1"),
            "description": "Meet",
        })
        .to_string()
    };
    let (meet_a, meet_b) = (meet("a", "b"), meet("b", "a"));
    let server = MockServer::start()
        .answer_untooled("Mock title")
        .respond_with(move |r| {
            let text = user_text(r);
            let done = r.last_tool_output();
            let child = ["MEET_A", "MEET_B"].into_iter().find(|m| text.contains(m));
            match (child, done) {
                (Some("MEET_A"), None) => Reply::tool_call("ba", "bash", &meet_a),
                (Some(_), None) => Reply::tool_call("bb", "bash", &meet_b),
                (Some(_), Some(out)) => Reply::text(out.trim()),
                (None, None) => run_code(
                    "c1",
                    "const ask = (p) => tools.subagent({description: p, prompt: p, run_in_background: false});\n\
                     const both = await Promise.all([ask('MEET_A'), ask('MEET_B')]);\n\
                     return JSON.stringify(both);",
                ),
                (None, Some(_)) => Reply::text("both met"),
            }
        });
    // `both`: the children call bash natively.
    let out = run.code_mode(&server, "both", "meet");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let program_result = server
        .requests()
        .into_iter()
        .filter(|r| !user_text(r).contains("MEET_"))
        .find_map(|r| r.last_tool_output())
        .unwrap();
    assert!(
        program_result.contains("met-a") && program_result.contains("met-b"),
        "{program_result}"
    );
    let parent = run
        .files()
        .list()
        .unwrap()
        .into_iter()
        .find(|(h, _)| h.parent_session.is_none())
        .unwrap()
        .0
        .id;
    let events = run.events(&parent);
    assert_eq!(of_type(&events, "tool/code-dispatch").len(), 2);
}

#[test]
fn a_typescript_program_runs_and_the_prompt_declares_typescript() {
    let run = Run::new();
    std::fs::write(run.work.path().join("note.txt"), "alpha\nbeta\ngamma\n").unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(run_code(
        "t1",
        "interface Line { number: number; text: string }\n\
         interface ReadOut { path: string; lines: Line[]; totalLines: number }\n\
         type Pick = (out: ReadOut, n: number) => string;\n\
         const pick: Pick = (out: ReadOut, n: number): string => out.lines[n]!.text;\n\
         const out = (await tools.read({ file_path: 'note.txt' })) as ReadOut;\n\
         const total: number = out.totalLines satisfies number;\n\
         return `${pick(out, 2)}/${total as number}`;",
    ));
    server.push(Reply::text("done"));
    let out = run.code_mode(&server, "code", "use run_code");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let first = requests
        .iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    // The prompt declares the callable tools in TypeScript.
    let system = first.json.as_ref().unwrap().to_string();
    for needle in [
        "async TypeScript function",
        "interface ToolArgsMap",
        "  read: {",
        "interface ToolOutputMap",
        "declare const tools",
    ] {
        assert!(system.contains(needle), "prompt lacks {needle:?}");
    }
    let result = requests.iter().find_map(|r| r.last_tool_output()).unwrap();
    assert_eq!(result, "gamma/3");
}

#[test]
fn a_program_uses_glob_and_grep_structured_values() {
    let run = Run::new();
    std::fs::create_dir_all(run.work.path().join("src")).unwrap();
    std::fs::write(
        run.work.path().join("src/a.rs"),
        "fn alpha() {}\n// TODO one\n",
    )
    .unwrap();
    std::fs::write(
        run.work.path().join("src/b.rs"),
        "// TODO two\nfn beta() {}\n",
    )
    .unwrap();
    std::fs::write(run.work.path().join("notes.md"), "TODO not code\n").unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(run_code(
        "g1",
        "const files = await tools.glob({ pattern: 'src/*.rs' });\n\
         const hits = await tools.grep({ pattern: 'TODO', include: '*.rs' });\n\
         const where = hits.matches.map(m => `${m.path}:${m.lineNumber}:${m.line}`).sort();\n\
         return `${files.root}|${files.paths.slice().sort().join(',')}|${where.join(';')}`;",
    ));
    server.push(Reply::text("done"));
    let out = run.code_mode(&server, "code", "use run_code");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let first = requests
        .iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    // ToolOutputMap types each output from the tool's declared schema; the schema itself
    // never reaches the provider's tool list.
    let body = first.json.as_ref().unwrap();
    let system = body.to_string();
    for needle in [
        "lineNumber: number;",
        "totalLines: number;",
        "operation: \\\"create\\\" | \\\"update\\\";",
    ] {
        assert!(system.contains(needle), "prompt lacks {needle:?}");
    }
    assert!(!body["tools"].to_string().contains("lineNumber"));
    let result = requests.iter().find_map(|r| r.last_tool_output()).unwrap();
    assert_eq!(
        result,
        ".|src/a.rs,src/b.rs|src/a.rs:2:// TODO one;src/b.rs:1:// TODO two"
    );
}

#[test]
fn a_program_polls_a_background_job_through_typed_handles() {
    let run = Run::new();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(run_code(
        "j1",
        "const bg = await tools.bash({ command: 'echo JOB_OUT', description: 'Start a job', run_in_background: true });\n\
         const out = await tools.job_output({ job_id: bg.jobId, wait: true });\n\
         const listed = await tools.job_list({});\n\
         return [bg.kind, out.job.id === bg.jobId, out.job.kind, out.job.status, out.text.trim(), listed.length].join('|');",
    ));
    server.push(Reply::text("done"));
    let out = run.code_mode(&server, "code", "use run_code");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let system = requests
        .iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap()
        .json
        .as_ref()
        .unwrap()
        .to_string();
    assert!(system.contains("\\\"cancellation-requested\\\" | \\\"already-finished\\\""));
    let result = requests.iter().find_map(|r| r.last_tool_output()).unwrap();
    assert_eq!(result, "background|true|bash|completed|JOB_OUT|1");
}

/// The `ToolOutputMap` block of a prompt text, one entry per tool (`name` → its lines).
fn output_map_entries(text: &str) -> std::collections::BTreeMap<String, String> {
    let mut entries = std::collections::BTreeMap::new();
    let Some(start) = text.find("interface ToolOutputMap {\n") else {
        return entries;
    };
    let body = &text[start + "interface ToolOutputMap {\n".len()..];
    let body = &body[..body.find("\n}").unwrap_or(body.len())];
    let mut current: Option<(String, String)> = None;
    for line in body.lines() {
        let top = line.starts_with("  ") && !line.starts_with("   ");
        if top && let Some((name, _)) = line.trim().split_once(": ") {
            if let Some((n, e)) = current.take() {
                entries.insert(n, e);
            }
            current = Some((name.trim_matches('"').to_string(), String::new()));
        }
        if let Some((_, e)) = current.as_mut() {
            e.push_str(line);
            e.push('\n');
        }
    }
    if let Some((n, e)) = current {
        entries.insert(n, e);
    }
    entries
}

fn prompt_texts(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) if s.contains("interface ToolOutputMap") => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| prompt_texts(v, out)),
        Value::Object(map) => map.values().for_each(|v| prompt_texts(v, out)),
        _ => {}
    }
}

#[test]
fn output_map_entries_match_upstreams_recorded_prompt() {
    // Upstream's recorded Code Mode prompts (several compositions) declare its entries.
    let acp =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/conformance/acp");
    let mut upstream = std::collections::BTreeMap::new();
    for scenario in [
        "code-mode-turn",
        "code-mode-read-image",
        "advanced-toolchain",
        "both-mode-turn",
    ] {
        let file = acp.join(scenario).join("system-prompt.expected.md");
        if let Ok(text) = std::fs::read_to_string(file) {
            upstream.extend(output_map_entries(&text));
        }
    }
    if upstream.is_empty() {
        dsh_test_support::prereq::skip("../shared absent: recorded ToolOutputMap not compared");
        return;
    }
    let run = Run::new();
    // Mount the dynamic-package tools too, as the advanced-toolchain composition does.
    std::fs::create_dir_all(run.dsh_home()).unwrap();
    std::fs::write(
        run.dsh_home().join("cordis.patch.yml"),
        "- insert:\n    - id: cordis-host-runner\n      name: '@deepseek-ai/dsh-cordis-host-runner'\n    - id: tool-cordis\n      name: '@deepseek-ai/dsh-tool-cordis'\n",
    )
    .unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("done"));
    let out = run.code_mode(&server, "code", "hello");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut texts = Vec::new();
    for r in server.requests() {
        if let Some(j) = r.json.as_ref() {
            prompt_texts(j, &mut texts);
        }
    }
    let ours = output_map_entries(texts.first().expect("a prompt declares ToolOutputMap"));
    let mut compared = Vec::new();
    let mut differing = Vec::new();
    for (name, entry) in &ours {
        // `ralph` has no `runId` here (it runs its rounds without the workflow engine), so
        // declares it optional.
        if entry.trim_end().ends_with(": JsonValue;") || name == "ralph" {
            continue;
        }
        match upstream.get(name) {
            Some(want) if want == entry => compared.push(name.clone()),
            Some(want) => differing.push(format!("{name}:\n ours:\n{entry}\n upstream:\n{want}")),
            None => {}
        }
    }
    assert!(differing.is_empty(), "{}", differing.join("\n"));
    eprintln!("typed entries identical to upstream's: {compared:?}");
    for name in [
        "bash",
        "cordis_define",
        "create_goal",
        "edit",
        "get_goal",
        "interrupt_agent",
        "job_output",
        "list_agents",
        "read",
        "send_message",
        "subagent",
        "subagent_fork",
        "todo_write",
        "update_goal",
        "write",
    ] {
        assert!(
            compared.contains(&name.to_string()),
            "{name} not compared: {compared:?}"
        );
    }
}
