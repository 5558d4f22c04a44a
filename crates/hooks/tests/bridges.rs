//! The bridges end to end: real hook scripts in a temp session cwd, a scripted model, and
//! whole-value assertions on the session log (hook events included) and tool results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_kernel::BoxFuture;
use dsh_tools::{Approval, ApprovalOutcome, ApprovalRequest, ApprovalService};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::*;

fn hooks(config: Value) -> String {
    config.to_string()
}

fn claude(file: &str) -> Value {
    json!({"configPath": format!("{{dir}}/{file}")})
}

#[tokio::test]
async fn claude_pretool_exit_two_denies_the_call_with_stderr() {
    let cfg = hooks(json!({"hooks": {"PreToolUse": [
        {"matcher": "echo", "hooks": [{"type": "command", "command": "echo 'echo is disabled by policy' >&2; exit 2"}]},
        {"matcher": "Write|Edit", "hooks": [{"type": "command", "command": "exit 0"}]}
    ]}}));
    let h = Harness::new(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg)],
    );
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-turn +[go]",
            "turn/start 1",
            "inbox next-turn -1",
            "step/start 1.1",
            "user go",
            "assistant [call:echo]",
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:1","matcher":"echo"}"#,
            r#"hook/result {"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"block","exitCode":2,"stderrSummary":"echo is disabled by policy","durationMs":0}"#,
            r#"tool/result error "Error: echo is disabled by policy""#,
            "step/end 1.1",
            "step/start 1.2",
            "assistant [done]",
            "step/end 1.2",
            "turn/end 1 completed",
        ]
    );
    assert_eq!(*h.echo_runs.lock().unwrap(), 0);
}

/// `(tool name, call id, reason)` of one approval request.
type Asked = (String, String, Option<String>);

/// An approval service that answers with a fixed outcome and records what it was asked.
struct Answer {
    outcome: ApprovalOutcome,
    asked: Arc<Mutex<Vec<Asked>>>,
}

impl ApprovalService for Answer {
    fn request(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalOutcome> {
        self.asked
            .lock()
            .unwrap()
            .push((request.tool_name, request.call_id, request.reason));
        let outcome = self.outcome;
        Box::pin(async move { outcome })
    }
}

async fn ask_with(outcome: ApprovalOutcome) -> (Vec<String>, Vec<Asked>, u32) {
    let ask = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"echo needs a human"}}'"#;
    let allow = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","permissionDecisionReason":"fine by me"}}'"#;
    let cfg = hooks(json!({"PreToolUse": [{"matcher": "echo", "hooks": [
        {"type": "command", "command": allow},
        {"type": "command", "command": ask}
    ]}]}));
    let h = Harness::new(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg)],
    );
    let asked = Arc::new(Mutex::new(Vec::new()));
    h.root
        .provide(Arc::new(Approval(Arc::new(Answer {
            outcome,
            asked: asked.clone(),
        }))))
        .unwrap();
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    let lines = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("hook/") || l.starts_with("tool/"))
        .collect();
    let asked = asked.lock().unwrap().clone();
    let runs = *h.echo_runs.lock().unwrap();
    (lines, asked, runs)
}

#[tokio::test]
async fn claude_pretool_ask_goes_to_approval_and_wins_over_allow() {
    let (lines, asked, runs) = ask_with(ApprovalOutcome::Rejected).await;
    assert_eq!(
        lines,
        [
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:1","matcher":"echo"}"#,
            r#"hook/result {"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"allow","exitCode":0,"durationMs":0}"#,
            r#"hook/invoked {"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:2","matcher":"echo"}"#,
            r#"hook/result {"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:2","decision":"ask","exitCode":0,"durationMs":0}"#,
            r#"tool/result error "Error: the user rejected tool \"echo\"""#,
        ]
    );
    assert_eq!(
        asked,
        [(
            "echo".to_string(),
            "c1".to_string(),
            Some("echo needs a human".to_string())
        )]
    );
    assert_eq!(runs, 0);

    let (lines, _, runs) = ask_with(ApprovalOutcome::AllowedOnce).await;
    assert_eq!(
        lines.last().map(String::as_str),
        Some(r#"tool/result ok "HELLO\n""#)
    );
    assert_eq!(runs, 1);
}

#[tokio::test]
async fn codex_pretool_honours_deny_only() {
    let ask = r#"echo '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask"}}'"#;
    let cfg = hooks(
        json!({"hooks": {"PreToolUse": [{"matcher": "^ec", "hooks": [{"type": "command", "command": ask}]}]}}),
    );
    let h = Harness::new(
        "hooks-codex",
        claude("codex-hooks.json"),
        &[("codex-hooks.json", &cfg)],
    );
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    let lines: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("hook/") || l.starts_with("tool/"))
        .collect();
    assert_eq!(
        lines,
        [
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PreToolUse","dialect":"codex","handlerId":"codex:PreToolUse:1","matcher":"^ec"}"#,
            r#"hook/result {"turn":1,"point":"PreToolUse","handlerId":"codex:PreToolUse:1","decision":"ask","exitCode":0,"durationMs":0}"#,
            r#"tool/result ok "HELLO\n""#,
        ]
    );
}

#[tokio::test]
async fn claude_posttool_block_replaces_the_result_with_feedback_once() {
    let script = "if test -e .blocked; then exit 0; fi\n: > .blocked\nprintf '%s\\n' 'tool output rejected: retry once' >&2\nexit 2\n";
    let cfg = hooks(
        json!({"hooks": {"PostToolUse": [{"matcher": "echo", "hooks": [{"type": "command", "command": "sh once.sh"}]}]}}),
    );
    let h = Harness::new(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg), ("once.sh", script)],
    );
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model
        .push(call("c2", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    let lines: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("hook/") || l.starts_with("tool/"))
        .collect();
    assert_eq!(
        lines,
        [
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PostToolUse","dialect":"claude-code","handlerId":"claude-code:PostToolUse:1","matcher":"echo"}"#,
            r#"hook/result {"turn":1,"point":"PostToolUse","handlerId":"claude-code:PostToolUse:1","decision":"block","exitCode":2,"stderrSummary":"tool output rejected: retry once","durationMs":0}"#,
            r#"tool/result error "tool output rejected: retry once""#,
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PostToolUse","dialect":"claude-code","handlerId":"claude-code:PostToolUse:2","matcher":"echo"}"#,
            r#"hook/result {"turn":1,"point":"PostToolUse","handlerId":"claude-code:PostToolUse:2","decision":"pass","exitCode":0,"durationMs":0}"#,
            r#"tool/result ok "HELLO\n""#,
        ]
    );
    assert_eq!(
        *h.echo_runs.lock().unwrap(),
        2,
        "a post-execute block runs the body"
    );
}

#[tokio::test]
async fn codex_posttool_context_enters_the_next_step() {
    let ctx = r#"echo '{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"Output verified against the audit log."}}'"#;
    let cfg = hooks(
        json!({"hooks": {"PostToolUse": [{"matcher": "echo", "hooks": [{"type": "command", "command": ctx}]}]}}),
    );
    let h = Harness::new(
        "hooks-codex",
        claude("codex-hooks.json"),
        &[("codex-hooks.json", &cfg)],
    );
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    assert_eq!(
        trace(agent.session())[6..],
        [
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PostToolUse","dialect":"codex","handlerId":"codex:PostToolUse:1","matcher":"echo"}"#,
            r#"hook/result {"turn":1,"point":"PostToolUse","handlerId":"codex:PostToolUse:1","decision":"pass","exitCode":0,"durationMs":0}"#,
            r#"tool/result ok "HELLO\n""#,
            "inbox next-step +[Output verified against the audit log. <hooks-codex>]",
            "step/end 1.1",
            "inbox next-step -1",
            "step/start 1.2",
            "user Output verified against the audit log. <hooks-codex>",
            "assistant [done]",
            "step/end 1.2",
            "turn/end 1 completed",
        ]
    );
}

#[tokio::test]
async fn claude_prompt_submit_context_follows_the_prompt() {
    let ctx = r#"echo '{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"Favourite colour: teal."}}'"#;
    let cfg = hooks(
        json!({"hooks": {"UserPromptSubmit": [{"hooks": [{"type": "command", "command": ctx}]}]}}),
    );
    let h = Harness::new(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg)],
    );
    h.model.push(text("teal"));
    let agent = h.agent();
    h.run(&agent, "colour?").await;
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-turn +[colour?]",
            "turn/start 1",
            "inbox next-turn -1",
            r#"hook/invoked {"turn":1,"point":"UserPromptSubmit","dialect":"claude-code","handlerId":"claude-code:UserPromptSubmit:1"}"#,
            r#"hook/result {"turn":1,"point":"UserPromptSubmit","handlerId":"claude-code:UserPromptSubmit:1","decision":"pass","exitCode":0,"durationMs":0}"#,
            "step/start 1.1",
            "user colour?",
            "user Favourite colour: teal. <hooks-claude-code>",
            "assistant [teal]",
            "step/end 1.1",
            "turn/end 1 completed",
        ]
    );
}

#[tokio::test]
async fn codex_prompt_submit_block_ends_the_turn_blocked_without_a_request() {
    let cfg = hooks(json!({"hooks": {"UserPromptSubmit": [
        {"matcher": "[", "hooks": [{"type": "command", "command": "echo 'blocked by codex policy hook' >&2; exit 2"}]}
    ]}}));
    let h = Harness::new(
        "hooks-codex",
        claude("codex-hooks.json"),
        &[("codex-hooks.json", &cfg)],
    );
    let agent = h.agent();
    h.run(&agent, "Delete everything").await;
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-turn +[Delete everything]",
            "turn/start 1",
            "inbox next-turn -1",
            r#"hook/invoked {"turn":1,"point":"UserPromptSubmit","dialect":"codex","handlerId":"codex:UserPromptSubmit:1"}"#,
            r#"hook/result {"turn":1,"point":"UserPromptSubmit","handlerId":"codex:UserPromptSubmit:1","decision":"block","exitCode":2,"stderrSummary":"blocked by codex policy hook","durationMs":0}"#,
            "turn/end 1 blocked",
        ]
    );
    assert!(h.model.requests().is_empty());
}

#[tokio::test]
async fn codex_stop_block_forces_one_more_step() {
    let once = "if [ -f .stop_fired ]; then exit 0; else touch .stop_fired; echo 'Also say SECOND.' >&2; exit 2; fi";
    let cfg =
        hooks(json!({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": once}]}]}}));
    let h = Harness::new(
        "hooks-codex",
        claude("codex-hooks.json"),
        &[("codex-hooks.json", &cfg)],
    );
    h.model.push(text("FIRST"));
    h.model.push(text("SECOND"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    assert_eq!(
        trace(agent.session())[4..],
        [
            "user go",
            "assistant [FIRST]",
            "step/end 1.1",
            r#"hook/invoked {"turn":1,"point":"Stop","dialect":"codex","handlerId":"codex:Stop:1"}"#,
            r#"hook/result {"turn":1,"point":"Stop","handlerId":"codex:Stop:1","decision":"block","exitCode":2,"stderrSummary":"Also say SECOND.","durationMs":0}"#,
            "inbox next-step +[Also say SECOND. <hooks-codex>]",
            "inbox next-step -1",
            "step/start 1.2",
            "user Also say SECOND. <hooks-codex>",
            "assistant [SECOND]",
            "step/end 1.2",
            r#"hook/invoked {"turn":1,"point":"Stop","dialect":"codex","handlerId":"codex:Stop:2"}"#,
            r#"hook/result {"turn":1,"point":"Stop","handlerId":"codex:Stop:2","decision":"pass","exitCode":0,"durationMs":0}"#,
            "turn/end 1 completed",
        ]
    );
}

#[tokio::test]
async fn codex_session_start_plain_stdout_is_injected_context() {
    let cfg = hooks(
        json!({"hooks": {"SessionStart": [{"matcher": "startup", "hooks": [
            {"type": "command", "command": "echo 'Project uses tabs.'; : > started"}
        ]}]}}),
    );
    let h = Harness::new(
        "hooks-codex",
        claude("codex-hooks.json"),
        &[("codex-hooks.json", &cfg)],
    );
    h.model.push(text("ok"));
    let agent = h.agent();
    // The hook runs detached; wait until it has run and its context is queued.
    read_when_present(&h.path("started")).await;
    for _ in 0..400 {
        if !agent.inbox().next_step.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    h.run(&agent, "go").await;
    assert_eq!(
        trace(agent.session()),
        [
            "inbox next-step +[Project uses tabs. <hooks-codex>]",
            "inbox next-turn +[go]",
            "turn/start 1",
            "inbox next-step -1",
            "inbox next-turn -1",
            "step/start 1.1",
            "user Project uses tabs. <hooks-codex>",
            "user go",
            "assistant [ok]",
            "step/end 1.1",
            "turn/end 1 completed",
        ],
        "SessionStart writes no hook/* pair (there is no turn)"
    );
}

#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_and_does_not_block() {
    let cfg = hooks(json!({"PreToolUse": [{"hooks": [
        {"type": "command", "command": "echo started >&2; sleep 30; exit 2", "timeout": 0.3}
    ]}]}));
    let h = Harness::new(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg)],
    );
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    let started = Instant::now();
    h.run(&agent, "go").await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let lines: Vec<String> = trace(agent.session())
        .into_iter()
        .filter(|l| l.starts_with("hook/") || l.starts_with("tool/"))
        .collect();
    assert_eq!(
        lines,
        [
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:1"}"#,
            r#"hook/result {"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"pass","stderrSummary":"started","durationMs":0}"#,
            r#"tool/result ok "HELLO\n""#,
        ]
    );
}

async fn plain_turn(bridge: &str, config: Value, files: &[(&str, &str)]) -> Vec<String> {
    let h = Harness::new(bridge, config, files);
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    trace(agent.session())
}

const PLAIN: [&str; 13] = [
    "inbox next-turn +[go]",
    "turn/start 1",
    "inbox next-turn -1",
    "step/start 1.1",
    "user go",
    "assistant [call:echo]",
    "tool/call echo",
    r#"tool/result ok "HELLO\n""#,
    "step/end 1.1",
    "step/start 1.2",
    "assistant [done]",
    "step/end 1.2",
    "turn/end 1 completed",
];

#[tokio::test]
async fn an_invalid_matcher_rejects_the_whole_file() {
    let cfg = hooks(json!({"hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "echo 'must not run' >&2; exit 2"}]}],
        "PreToolUse": [{"matcher": "[", "hooks": [{"type": "command", "command": "exit 2"}]}]
    }}));
    for (bridge, file) in [
        ("hooks-claude-code", "hooks.json"),
        ("hooks-codex", "codex-hooks.json"),
    ] {
        let got = plain_turn(bridge, claude(file), &[(file, &cfg)]).await;
        assert_eq!(got, PLAIN, "{bridge}");
    }
}

#[tokio::test]
async fn a_missing_or_malformed_config_registers_nothing() {
    assert_eq!(
        plain_turn("hooks-claude-code", claude("absent.json"), &[]).await,
        PLAIN
    );
    assert_eq!(
        plain_turn(
            "hooks-codex",
            claude("bad.json"),
            &[("bad.json", "{not json")]
        )
        .await,
        PLAIN
    );
}

#[test]
fn a_bad_summary_cap_fails_the_row() {
    let mut catalog = dsh_kernel::Catalog::new();
    dsh_hooks::register_catalog(&mut catalog);
    let plugin = catalog.lookup("hooks-codex").unwrap();
    let root = dsh_kernel::Context::new_root();
    let config = dsh_kernel::PluginConfig::new(
        "hooks-codex",
        "test",
        json!({"configPath": "x.json", "stderrSummaryMaxChars": 0.5}),
    );
    let err = plugin.apply(&root, &config).err().map(|e| e.to_string());
    assert_eq!(
        err.as_deref(),
        Some("hooks-codex: stderrSummaryMaxChars must be a positive integer")
    );
}

#[tokio::test]
async fn claude_payloads_env_and_cwd() {
    let cfg = hooks(json!({"hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "cat > prompt.json"}]}],
        "PreToolUse": [{"matcher": "echo", "hooks": [
            {"type": "command", "command": "cat > pre.json; printf %s \"$CLAUDE_PROJECT_DIR|$(pwd)|${CLAUDE_PLUGIN_ROOT}\" > env.txt"}
        ]}],
        "PostToolUse": [{"hooks": [{"type": "command", "command": "cat > post.json"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "cat > stop.json"}]}]
    }}));
    let config = json!({"configPath": "{dir}/hooks.json", "pluginRoot": "/plugins/x"});
    let h = Harness::new("hooks-claude-code", config, &[("hooks.json", &cfg)]);
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "say hi").await;
    let id = agent.session().id();
    let cwd = h.cwd();
    let base = |event: &str| json!({"session_id": id, "transcript_path": "", "cwd": cwd, "hook_event_name": event});
    let read = |name: &str| std::fs::read_to_string(h.path(name)).unwrap();
    let parsed = |name: &str| -> Value {
        let raw = read(name);
        assert!(
            raw.ends_with("}\n"),
            "Claude Code payloads end with a newline: {raw:?}"
        );
        serde_json::from_str(&raw).unwrap()
    };
    let with = |mut v: Value, extra: Value| {
        v.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        v
    };
    assert_eq!(
        parsed("prompt.json"),
        with(base("UserPromptSubmit"), json!({"prompt": "say hi"}))
    );
    assert_eq!(
        parsed("pre.json"),
        with(
            base("PreToolUse"),
            json!({"tool_name": "echo", "tool_input": {"command": "HELLO"}, "tool_use_id": "c1"})
        )
    );
    assert_eq!(
        parsed("post.json"),
        with(
            base("PostToolUse"),
            json!({"tool_name": "echo", "tool_input": {"command": "HELLO"}, "tool_use_id": "c1", "tool_response": "HELLO\n"})
        )
    );
    assert_eq!(
        parsed("stop.json"),
        with(base("Stop"), json!({"stop_hook_active": false}))
    );
    let real = std::fs::canonicalize(h.dir.path())
        .unwrap()
        .display()
        .to_string();
    assert_eq!(
        read("env.txt"),
        format!("{cwd}|{real}|/plugins/x"),
        "the project dir defaults to the session cwd; the plugin root is substituted at parse time"
    );
}

#[tokio::test]
async fn codex_payloads_are_bare_and_carry_model_and_turn() {
    let cfg = hooks(json!({"hooks": {
        "PreToolUse": [{"matcher": "echo", "hooks": [{"type": "command", "command": "cat > pre.json"}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "cat > stop.json"}]}]
    }}));
    let config = json!({"configPath": "{dir}/codex-hooks.json", "model": "m-test"});
    let h = Harness::new("hooks-codex", config, &[("codex-hooks.json", &cfg)]);
    h.model.push(call(
        "c1",
        "echo",
        json!({"command": "HELLO", "description": "say it"}),
    ));
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    let id = agent.session().id();
    let cwd = h.cwd();
    let read = |name: &str| std::fs::read_to_string(h.path(name)).unwrap();
    assert_eq!(
        read("pre.json"),
        dsh_kernel::json::to_string(&json!({
            "session_id": id, "transcript_path": null, "cwd": cwd, "hook_event_name": "PreToolUse",
            "model": "m-test", "permission_mode": "default", "turn_id": "1",
            "tool_name": "echo", "tool_input": {"command": "HELLO"}, "tool_use_id": "c1"
        }))
    );
    assert_eq!(
        read("stop.json"),
        dsh_kernel::json::to_string(&json!({
            "session_id": id, "transcript_path": null, "cwd": cwd, "hook_event_name": "Stop",
            "model": "m-test", "permission_mode": "default", "turn_id": "1",
            "stop_hook_active": false, "last_assistant_message": null
        }))
    );
}

fn process_gone(pid: &str) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie waiting for its reaper is dead too.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn cancelling_the_turn_kills_a_running_hook_and_its_children() {
    let cfg = hooks(json!({"PreToolUse": [{"hooks": [
        {"type": "command", "command": "sleep 30 & echo $! > child.pid; wait"}
    ]}]}));
    let h = Harness::new(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg)],
    );
    h.model
        .push(call("c1", "echo", json!({"command": "HELLO"})));
    let agent = h.agent();
    agent.followup(dsh_llm::Message::user_text("go")).unwrap();
    let pid = read_when_present(&h.path("child.pid")).await;
    let pid = pid.trim().to_string();
    agent.cancel(dsh_session::CancelCause::User, false);
    tokio::time::timeout(Duration::from_secs(10), agent.when_idle())
        .await
        .expect("agent went idle");
    let lines: Vec<String> = trace(agent.session()).into_iter().skip(6).collect();
    assert_eq!(
        lines,
        [
            "tool/call echo",
            r#"hook/invoked {"turn":1,"point":"PreToolUse","dialect":"claude-code","handlerId":"claude-code:PreToolUse:1"}"#,
            r#"hook/result {"turn":1,"point":"PreToolUse","handlerId":"claude-code:PreToolUse:1","decision":"pass","durationMs":0}"#,
            r#"tool/result error "Error: tool call aborted before dispatch""#,
            "step/end 1.1",
            "turn/end 1 aborted",
        ]
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !process_gone(&pid) {
        assert!(
            Instant::now() < deadline,
            "the hook's child {pid} survived the cancel"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(*h.echo_runs.lock().unwrap(), 0);
}

#[tokio::test]
async fn the_transcript_path_names_the_persisted_log() {
    let cfg = hooks(
        json!({"UserPromptSubmit": [{"hooks": [{"type": "command", "command": "cat > prompt.json"}]}]}),
    );
    let h = Harness::persisted(
        "hooks-claude-code",
        claude("hooks.json"),
        &[("hooks.json", &cfg)],
    );
    h.model.push(text("done"));
    let agent = h.agent();
    h.run(&agent, "go").await;
    let payload: Value =
        serde_json::from_str(&std::fs::read_to_string(h.path("prompt.json")).unwrap()).unwrap();
    let transcript = std::path::PathBuf::from(payload["transcript_path"].as_str().unwrap());
    assert!(
        transcript.starts_with(h.path("sessions")),
        "{}",
        transcript.display()
    );
    assert!(
        transcript.ends_with(format!("{}/session.v4.jsonl", agent.session().id())),
        "{}",
        transcript.display()
    );
    assert!(
        transcript.is_file(),
        "{} is the live log",
        transcript.display()
    );
}
