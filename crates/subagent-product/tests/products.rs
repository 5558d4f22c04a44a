//! The Codex and Claude Code drivers against small stand-in programs that speak the real
//! wire (tests/fakes/*.py): success, failures with their product diagnostics, a crash, a
//! hang past the timeout, and cancellation that leaves no process of the tree behind.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dsh_llm::ContentBlock;
use dsh_subagent::{StopReason, SubagentResult, SubagentRun};
use dsh_subagent_product::drivers::{start_acp, start_claude_code, start_codex, start_dsh_sdk};
use dsh_subagent_product::{
    AcpSpec, ClaudeMode, ClaudeSpec, CodexMode, CodexSpec, Permission, SdkSpec,
    claude_protocol_args,
};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

fn python() -> Option<&'static str> {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        dsh_test_support::prereq::skip("the stand-in products need python3");
    }
    ok.then_some("python3")
}

fn fake(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fakes")
        .join(name)
        .display()
        .to_string()
}

struct Dir {
    dir: tempfile::TempDir,
}

impl Dir {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }
    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(self.dir.path().join("frames.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
    fn env(&self, mode: &str) -> Vec<(String, String)> {
        vec![
            ("FAKE_MODE".into(), mode.into()),
            (
                "FAKE_LOG".into(),
                self.dir.path().join("frames.jsonl").display().to_string(),
            ),
            (
                "FAKE_PIDS".into(),
                self.dir.path().join("pids").display().to_string(),
            ),
            ("FAKE_EXTRA".into(), "configured".into()),
        ]
    }
    fn pids(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dir.path().join("pids"))
            .unwrap_or_default()
            .split_whitespace()
            .map(|p| p.parse().unwrap())
            .collect()
    }
}

fn codex(py: &str, dir: &Dir, mode: &str) -> CodexSpec {
    CodexSpec {
        command: py.into(),
        args: vec![fake("codex.py"), "app-server".into(), "--stdio".into()],
        cwd: dir.path(),
        env: dir.env(mode),
        mode: CodexMode::Never,
        dispose_grace: Duration::from_millis(300),
        timeout: None,
    }
}

fn claude(py: &str, dir: &Dir, mode: &str) -> ClaudeSpec {
    ClaudeSpec {
        command: py.into(),
        args: vec![fake("claude.py")],
        cwd: dir.path(),
        env: dir.env(mode),
        mode: ClaudeMode::DontAsk,
        dispose_grace: Duration::from_millis(300),
        timeout: None,
    }
}

fn task(t: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::text(t)]
}

async fn settle(run: SubagentRun) -> SubagentResult {
    let result = tokio::time::timeout(Duration::from_secs(20), run.result.clone())
        .await
        .expect("the result settles")
        .expect("no run fault");
    run.dispose().await.unwrap();
    result
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => !matches!(
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.trim_start().chars().next()),
            Some('Z') | Some('X') | None
        ),
    }
}

async fn wait_pids(dir: &Dir) -> Vec<u32> {
    for _ in 0..750 {
        let p = dir.pids();
        if p.len() == 2 {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the stand-in never reported its pids");
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_success_returns_the_final_answer_and_speaks_the_app_server_wire() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_codex(
        codex(py, &dir, "success"),
        task("add tests"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert!(run.local.is_none(), "a product child has no local agent");
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Completed);
    assert_eq!(r.text(), "CODEX_OK: add tests");
    assert_eq!(r.diagnostic, None);

    let frames = dir.log();
    assert_eq!(
        frames[0]["argv"],
        serde_json::json!(["app-server", "--stdio"])
    );
    assert_eq!(frames[0]["cwd"], dir.path().display().to_string());
    assert_eq!(frames[0]["env_extra"], "configured");
    let methods: Vec<&str> = frames[1..]
        .iter()
        .filter_map(|f| f["method"].as_str())
        .collect();
    assert_eq!(
        methods,
        ["initialize", "initialized", "thread/start", "turn/start"]
    );
    let init = &frames[1]["params"];
    assert_eq!(init["clientInfo"]["name"], "deepseek-harness");
    assert_eq!(init["capabilities"]["experimentalApi"], false);
    let thread = &frames[3]["params"];
    assert_eq!(thread["ephemeral"], true);
    assert_eq!(thread["approvalPolicy"], "never");
    assert_eq!(thread["cwd"], dir.path().display().to_string());
    let turn = &frames[4]["params"];
    assert_eq!(turn["threadId"], "thr-1");
    assert_eq!(
        turn["input"],
        serde_json::json!([{"type": "text", "text": "add tests", "text_elements": []}])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_approval_requests_are_answered_unattended() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_codex(
        codex(py, &dir, "approval"),
        task("rm"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Completed);
    assert_eq!(r.text(), "CODEX_AFTER_APPROVAL");
    let answer = dir
        .log()
        .into_iter()
        .find(|f| f["id"] == 99)
        .expect("the approval request was answered");
    assert_eq!(answer["result"], serde_json::json!({"decision": "cancel"}));
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_failure_categories_become_diagnostics() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_codex(codex(py, &dir, "fail"), task("x"), CancellationToken::new())
        .await
        .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(r.text(), "partial codex text");
    assert_eq!(
        r.diagnostic.as_deref(),
        Some(
            "Product subagent failure (product: Codex; stage: turn; category: httpConnectionFailed; HTTP status: 503; message: boom)"
        )
    );

    let dir = Dir::new();
    let run = start_codex(
        codex(py, &dir, "context"),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(
        r.diagnostic.as_deref(),
        Some(
            "Product subagent failure (product: Codex; stage: turn; category: contextWindowExceeded; message: too long)"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_crash_is_a_process_failure_with_its_exit_code() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_codex(
        codex(py, &dir, "crash"),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(
        r.diagnostic.as_deref(),
        Some(
            "Product subagent failure (product: Codex; stage: process; category: process-exit; exit code: 3)"
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_program_is_a_clear_start_error() {
    let dir = Dir::new();
    let mut spec = codex("python3", &dir, "success");
    spec.command = "dsh-no-such-codex-program".into();
    let err = start_codex(spec, task("x"), CancellationToken::new())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("subagent-codex: Product subagent failure (product: Codex; stage: initialize; category: unknown): cannot start `dsh-no-such-codex-program`"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_hang_past_the_timeout_ends_in_error_and_disposal_kills_the_tree() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let mut spec = codex(py, &dir, "hang");
    spec.timeout = Some(Duration::from_millis(700));
    let run = start_codex(spec, task("x"), CancellationToken::new())
        .await
        .unwrap();
    let pids = wait_pids(&dir).await;
    let r = tokio::time::timeout(Duration::from_secs(10), run.result.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(
        r.diagnostic.as_deref(),
        Some("Product subagent failure (product: Codex; stage: turn; category: timeout)")
    );
    assert!(
        pids.iter().all(|p| alive(*p)),
        "still running before disposal"
    );
    // The child logs the interrupt when it reads it, which under load can be a moment after
    // the result: wait for it (bounded) before disposal kills the child.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !dir.log().iter().any(|f| f["method"] == "turn/interrupt")
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        dir.log().iter().any(|f| f["method"] == "turn/interrupt"),
        "the timeout interrupted the turn"
    );
    run.dispose().await.unwrap();
    // The child ignores SIGTERM: only the SIGKILL of the grace ladder ends it.
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "no process of the tree survives"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_cancel_aborts_at_once_and_no_process_survives() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let cancel = CancellationToken::new();
    let run = start_codex(codex(py, &dir, "hang"), task("x"), cancel.clone())
        .await
        .unwrap();
    let pids = wait_pids(&dir).await;
    let started = Instant::now();
    cancel.cancel();
    let r = tokio::time::timeout(Duration::from_secs(5), run.result.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Aborted);
    assert!(started.elapsed() < Duration::from_secs(2));
    run.dispose().await.unwrap();
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "no process of the tree survives"
    );
    // A cancelled request before start fails the start.
    let dir = Dir::new();
    let cancelled = CancellationToken::new();
    cancelled.cancel();
    assert!(
        start_codex(codex(py, &dir, "success"), task("x"), cancelled)
            .await
            .is_err()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_refuses_non_text_and_blank_tasks() {
    let dir = Dir::new();
    let err = start_codex(
        codex("python3", &dir, "success"),
        task("  "),
        CancellationToken::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert_eq!(err, "subagent-codex: the one-shot task must not be empty");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_success_speaks_the_stream_json_control_protocol() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_claude_code(
        claude(py, &dir, "success"),
        task("review"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Completed);
    assert_eq!(r.text(), "CLAUDE_OK: review");

    let frames = dir.log();
    let argv: Vec<String> = serde_json::from_value(frames[0]["argv"].clone()).unwrap();
    assert_eq!(argv, claude_protocol_args(ClaudeMode::DontAsk));
    assert!(
        argv.windows(2)
            .any(|w| w == ["--permission-prompt-tool", "stdio"])
    );
    assert!(
        argv.windows(2)
            .any(|w| w == ["--permission-mode", "dontAsk"])
    );
    assert!(
        argv.windows(2)
            .any(|w| w == ["--disallowedTools", "AskUserQuestion"])
    );
    assert_eq!(frames[1]["type"], "control_request");
    assert_eq!(frames[1]["request"]["subtype"], "initialize");
    assert_eq!(frames[2]["type"], "user");
    assert_eq!(
        frames[2]["message"],
        serde_json::json!({"role": "user", "content": "review"})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_permission_requests_are_denied_and_reported() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_claude_code(
        claude(py, &dir, "permission"),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(
        r.diagnostic.as_deref(),
        Some(
            "Product subagent failure (product: Claude Code; stage: query-run; category: error_during_execution)\nClaude Code unattended decision (mode: dontAsk; request: tool permission; decision: denied): the subagent runs unattended and cannot ask a person to approve"
        )
    );
    let answer = dir
        .log()
        .into_iter()
        .find(|f| f["type"] == "control_response")
        .expect("the permission request was answered");
    assert_eq!(answer["response"]["request_id"], "cli-1");
    assert_eq!(answer["response"]["response"]["behavior"], "deny");
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_failures_crash_and_hang() {
    let Some(py) = python() else { return };
    for (mode, diagnostic) in [
        (
            "budget",
            "Product subagent failure (product: Claude Code; stage: query-run; category: error_max_budget_usd)",
        ),
        (
            "invalid",
            "Product subagent failure (product: Claude Code; stage: query-run; category: invalid-success)",
        ),
        (
            "crash",
            "Product subagent failure (product: Claude Code; stage: process; category: process-exit; exit code: 2)",
        ),
    ] {
        let dir = Dir::new();
        let run = start_claude_code(claude(py, &dir, mode), task("x"), CancellationToken::new())
            .await
            .unwrap();
        let r = settle(run).await;
        assert_eq!(r.stop_reason, StopReason::Error, "{mode}");
        assert_eq!(r.diagnostic.as_deref(), Some(diagnostic), "{mode}");
    }

    let dir = Dir::new();
    let mut spec = claude(py, &dir, "hang");
    spec.timeout = Some(Duration::from_millis(700));
    let cancel = CancellationToken::new();
    let run = start_claude_code(spec, task("x"), cancel.clone())
        .await
        .unwrap();
    let pids = wait_pids(&dir).await;
    let r = tokio::time::timeout(Duration::from_secs(10), run.result.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        r.diagnostic.as_deref(),
        Some(
            "Product subagent failure (product: Claude Code; stage: query-run; category: timeout)"
        )
    );
    run.dispose().await.unwrap();
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "no process of the tree survives"
    );
}

#[test]
fn diagnostics_are_bounded_on_a_character_boundary() {
    use dsh_subagent_product::{MAX_DIAGNOSTIC_BYTES, limit_diagnostic};
    assert_eq!(limit_diagnostic("short"), "short");
    let long = "é".repeat(3000);
    let cut = limit_diagnostic(&long);
    assert!(cut.len() <= MAX_DIAGNOSTIC_BYTES);
    assert!(cut.ends_with("\n[diagnostic truncated]"));
    assert!(cut.starts_with("éé"));
}

fn acp(py: &str, dir: &Dir, mode: &str, permission: Permission) -> AcpSpec {
    AcpSpec {
        command: py.into(),
        args: vec![fake("acp.py")],
        cwd: dir.path(),
        env: dir.env(mode),
        permission,
        dispose_eof_grace: Duration::from_millis(2000),
        dispose_grace: Duration::from_millis(300),
        timeout: None,
    }
}

fn sdk(py: &str, dir: &Dir, mode: &str) -> SdkSpec {
    SdkSpec {
        command: py.into(),
        args: vec![fake("sdk.py")],
        cwd: dir.path(),
        env: dir.env(mode),
        provider: "deepseek-official".into(),
        model: "deepseek-v4-flash".into(),
        max_tokens: Some(512),
        shutdown_timeout: Duration::from_millis(1000),
        dispose_eof_grace: Duration::from_millis(2000),
        dispose_grace: Duration::from_millis(300),
        timeout: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acp_child_streams_its_answer_and_maps_stop_reasons() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_acp(
        acp(py, &dir, "success", Permission::Reject),
        task("greet"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Completed);
    assert_eq!(r.text(), "ACP_OK: greet");
    let frames = dir.log();
    assert_eq!(frames[0]["cwd"], dir.path().display().to_string());
    assert_eq!(
        frames[1]["params"],
        serde_json::json!({"protocolVersion": 1, "clientCapabilities": {}})
    );
    assert_eq!(
        frames[2]["params"],
        serde_json::json!({"cwd": dir.path().display().to_string(), "mcpServers": []})
    );
    assert_eq!(
        frames[3]["params"],
        serde_json::json!({"sessionId": "s-1", "prompt": [{"type": "text", "text": "greet"}]})
    );

    let dir = Dir::new();
    let run = start_acp(
        acp(py, &dir, "maxtokens", Permission::Reject),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::MaxTokens);
    assert_eq!(r.text(), "partial");

    let dir = Dir::new();
    let run = start_acp(
        acp(py, &dir, "crash", Permission::Reject),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(r.text(), "partial");

    let dir = Dir::new();
    let err = start_acp(
        acp(py, &dir, "nostart", Permission::Reject),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        err.starts_with("subagent-acp: the ACP child failed to start a session"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn acp_permission_requests_follow_the_policy() {
    let Some(py) = python() else { return };
    for (policy, outcome) in [
        (
            Permission::Reject,
            serde_json::json!({"outcome": "cancelled"}),
        ),
        (
            Permission::Allow,
            serde_json::json!({"outcome": "selected", "optionId": "yes"}),
        ),
    ] {
        let dir = Dir::new();
        let run = start_acp(
            acp(py, &dir, "permission", policy),
            task("x"),
            CancellationToken::new(),
        )
        .await
        .unwrap();
        let r = settle(run).await;
        assert_eq!(r.stop_reason, StopReason::Completed);
        let seen: Value = serde_json::from_str(&r.text()).unwrap();
        assert_eq!(seen, outcome, "{policy:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn acp_cancel_sends_session_cancel_and_disposal_ends_the_tree() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let cancel = CancellationToken::new();
    let run = start_acp(
        acp(py, &dir, "hang", Permission::Reject),
        task("x"),
        cancel.clone(),
    )
    .await
    .unwrap();
    let pids = wait_pids(&dir).await;
    cancel.cancel();
    let r = tokio::time::timeout(Duration::from_secs(5), run.result.clone())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.stop_reason, StopReason::Aborted);
    run.dispose().await.unwrap();
    assert!(
        pids.iter().all(|p| !alive(*p)),
        "no process of the tree survives"
    );
    assert!(
        dir.log()
            .iter()
            .any(|f| f["method"] == "session/cancel" && f["params"]["sessionId"] == "s-1"),
        "the child was asked to cancel"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sdk_child_folds_its_session_events() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_dsh_sdk(
        sdk(py, &dir, "success"),
        task("sum"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Completed);
    assert_eq!(r.text(), "SDK_OK: sum");
    let frames = dir.log();
    assert_eq!(frames[0]["method"], "initialize");
    assert_eq!(
        frames[0]["params"],
        serde_json::json!({"cwd": dir.path().display().to_string(),
            "provider": "deepseek-official", "model": "deepseek-v4-flash", "maxTokens": 512})
    );
    let sid = frames[1]["params"]["sessionId"].as_str().unwrap();
    assert!(sid.starts_with("session-") && sid.len() == 40, "{sid}");
    assert!(
        frames.iter().any(|f| f["method"] == "shutdown"),
        "disposal asked for shutdown"
    );

    let dir = Dir::new();
    let run = start_dsh_sdk(
        sdk(py, &dir, "maxtokens"),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    assert_eq!(settle(run).await.stop_reason, StopReason::MaxTokens);

    let dir = Dir::new();
    let run = start_dsh_sdk(sdk(py, &dir, "crash"), task("x"), CancellationToken::new())
        .await
        .unwrap();
    let r = settle(run).await;
    assert_eq!(r.stop_reason, StopReason::Error);
    assert_eq!(r.text(), "", "another session's answer is not the child's");
}

/// The real Codex CLI (`DSH_CODEX_BIN`, which `.ci/run` installs from npm).
fn real_codex() -> Option<PathBuf> {
    let bin = std::env::var_os("DSH_CODEX_BIN").map(PathBuf::from);
    match bin {
        Some(b) if b.is_file() => Some(b),
        _ => {
            dsh_test_support::prereq::skip(
                "the real Codex CLI is needed: set DSH_CODEX_BIN (.ci/run installs @openai/codex)",
            );
            None
        }
    }
}

fn real_codex_spec(bin: &Path, dir: &Dir, env: &[(&str, &str)]) -> CodexSpec {
    let home = dir.path().join("codex-home");
    std::fs::create_dir_all(&home).unwrap();
    let mut all: Vec<(String, String)> = vec![
        ("PATH".into(), std::env::var("PATH").unwrap_or_default()),
        ("HOME".into(), dir.path().display().to_string()),
        ("CODEX_HOME".into(), home.display().to_string()),
    ];
    all.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    CodexSpec {
        command: bin.display().to_string(),
        args: vec!["app-server".into(), "--stdio".into()],
        cwd: dir.path(),
        env: all,
        mode: CodexMode::Never,
        dispose_grace: Duration::from_millis(500),
        timeout: Some(Duration::from_secs(60)),
    }
}

/// A missing key is named as such, with Codex's own message (it reports it as `other`).
#[tokio::test(flavor = "multi_thread")]
async fn codex_without_a_key_says_which_credential_is_missing() {
    let Some(py) = python() else { return };
    let dir = Dir::new();
    let run = start_codex(
        codex(py, &dir, "nokey"),
        task("x"),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let r = settle(run).await;
    assert_eq!(
        r.diagnostic.as_deref(),
        Some(
            "Product subagent failure (product: Codex; stage: turn; category: missingCredential; message: Missing environment variable: `OPENAI_API_KEY`.)"
        )
    );
}

/// The real Codex with no network: once it has used up its reconnects it waits for the
/// network without end; the run ends then, naming the network failure in Codex's words,
/// long before its timeout.
#[tokio::test(flavor = "multi_thread")]
async fn real_codex_without_network_fails_fast_naming_the_network() {
    let Some(bin) = real_codex() else { return };
    let dir = Dir::new();
    let spec = real_codex_spec(
        &bin,
        &dir,
        &[
            ("OPENAI_API_KEY", "sk-test"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1"),
        ],
    );
    let run = start_codex(spec, task("say hi"), CancellationToken::new())
        .await
        .unwrap();
    let r = tokio::time::timeout(Duration::from_secs(120), run.result.clone())
        .await
        .expect("the result settles")
        .expect("no run fault");
    run.dispose().await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Error);
    let d = r.diagnostic.unwrap_or_default();
    assert!(
        d.starts_with("Product subagent failure (product: Codex; stage: turn; category: responseStreamDisconnected; message: Reconnecting... waiting for network"),
        "{d}"
    );
}
