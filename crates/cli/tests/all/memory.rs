//! Memory across sessions through the `dsh` binary against the mock LLM: a fact the model
//! keeps in one session is in the next session's prompt, `/forget` removes it, the prompt
//! prefix of one session holds while memory changes, concurrent sessions keep every entry,
//! proposals lose their secrets and wait for the person's yes, recall cites the session and
//! event a fact came from, and unusable files are reported and skipped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::Output;

use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::{Run, call, loop_requests, stderr, tool_texts};

/// The memory message's first words (`dsh_memory::PROMPT_INTRO`).
const INTRO: &str = "What earlier sessions kept in memory";

/// What these tests add to [`Run`].
trait RunExt {
    fn patch(&self, yaml: &str) -> String;
    fn headless(&self, server: &MockServer, patch: Option<&str>, args: &[&str]) -> Output;
    fn dsh(&self, args: &[&str]) -> Output;
    fn memory_file(&self) -> String;
    fn sessions(&self) -> Vec<String>;
}

impl RunExt for Run {
    fn patch(&self, yaml: &str) -> String {
        let path = self.home.path().join("memory-patch.yml");
        std::fs::write(&path, yaml).unwrap();
        path.display().to_string()
    }

    fn headless(&self, server: &MockServer, patch: Option<&str>, args: &[&str]) -> Output {
        let mut all = vec!["headless"];
        if let Some(p) = patch {
            all.extend(["--patch", p]);
        }
        all.extend_from_slice(args);
        let mut c = self.base(server);
        c.args(&all);
        c.output().unwrap()
    }

    fn dsh(&self, args: &[&str]) -> Output {
        let server = MockServer::start();
        let mut c = self.base(&server);
        c.args(args);
        c.output().unwrap()
    }

    fn memory_file(&self) -> String {
        std::fs::read_to_string(self.work.path().join(".dsh/memory.md")).unwrap_or_default()
    }

    fn sessions(&self) -> Vec<String> {
        let mut list = self.files().list().unwrap();
        list.sort_by_key(|(h, _)| h.created_at);
        list.into_iter().map(|(h, _)| h.id).collect()
    }
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).to_string()
}

fn ok(o: &Output) {
    assert_eq!(o.status.code(), Some(0), "{}\n{}", stdout(o), stderr(o));
}

const ALLOW: &str = "- id: memory\n  config:\n    writes: allow\n";

fn memory_changes(run: &Run, id: &str) -> Vec<Value> {
    run.events(id)
        .iter()
        .filter(|e| e.is("memory/change"))
        .map(|e| {
            let mut d = e.data.as_value().clone();
            d["seq"] = json!(e.seq);
            d
        })
        .collect()
}

/// Session 1 keeps two facts over two turns (the second turn a resumed run); every request
/// of that session extends the previous one byte for byte (same system prompt and tools,
/// earlier messages unchanged) and none carries the memory section, which was empty when the
/// session began. Session 2 starts with both facts; `/forget` removes one and session 3 sees
/// only the other.
#[test]
fn a_kept_fact_reaches_the_next_session_and_forget_removes_it() {
    let server = MockServer::with_replies([
        call(
            "r1",
            "remember",
            json!({"text": "Integration tests need PGHOST=127.0.0.1", "tags": ["tests"]}),
        ),
        Reply::text("Noted."),
        call(
            "r2",
            "remember",
            json!({"text": "Releases are cut from the release branch", "scope": "user"}),
        ),
        Reply::text("Noted too."),
        Reply::text("Both facts are known."),
        Reply::text("One fact left."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    let patch = run.patch(ALLOW);
    let first = run.headless(&server, Some(&patch), &["remember the test setup"]);
    ok(&first);
    let s1 = run.only_session();
    let second = run.headless(
        &server,
        Some(&patch),
        &["--session-id", &s1, "and the release rule"],
    );
    ok(&second);

    let requests = loop_requests(&server);
    assert_eq!(requests.len(), 4);
    for pair in requests.windows(2) {
        let (a, b) = (
            pair[0].json.as_ref().unwrap(),
            pair[1].json.as_ref().unwrap(),
        );
        assert_eq!(a["system"], b["system"], "the system prompt holds");
        assert_eq!(a["tools"], b["tools"], "the tools hold");
        let (ma, mb) = (pair[0].raw_messages(), pair[1].raw_messages());
        // The last message of a request may gain cache marks in the next; every earlier
        // one is repeated byte for byte.
        assert_eq!(
            ma[..ma.len() - 1].to_vec(),
            mb[..ma.len() - 1].to_vec(),
            "the earlier messages hold"
        );
    }
    for r in &requests {
        assert!(!r.body.contains(INTRO), "no memory section in session 1");
    }
    // The two writes are in the files, with the session and turn that wrote them.
    let file = run.memory_file();
    assert!(
        file.contains("- Integration tests need PGHOST=127.0.0.1 <!-- dsh-memory id="),
        "{file}"
    );
    assert!(
        file.contains(&format!("tags=tests by=model session={s1} turn=1 ")),
        "{file}"
    );
    let user = std::fs::read_to_string(run.dsh_home().join("memory.md")).unwrap();
    assert!(
        user.contains("- Releases are cut from the release branch <!-- dsh-memory id="),
        "{user}"
    );
    assert!(user.contains(&format!("session={s1} turn=2 ")), "{user}");
    let changes = memory_changes(&run, &s1);
    assert_eq!(
        changes
            .iter()
            .map(|c| (
                c["action"].clone(),
                c["by"].clone(),
                c["scope"].clone(),
                c["callId"].clone()
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                json!("remember"),
                json!("model"),
                json!("workspace"),
                json!("r1")
            ),
            (
                json!("remember"),
                json!("model"),
                json!("user"),
                json!("r2")
            ),
        ]
    );
    let id1 = changes[0]["id"].as_str().unwrap().to_string();

    // Session 2 starts with both facts, ids in brackets.
    let third = run.headless(&server, Some(&patch), &["what do you know?"]);
    ok(&third);
    let r = loop_requests(&server).pop().unwrap();
    assert!(r.body.contains(INTRO), "{}", r.body);
    assert!(r.body.contains(&format!(
        "[{id1}] Integration tests need PGHOST=127.0.0.1 #tests"
    )));
    assert!(r.body.contains("Releases are cut from the release branch"));
    assert!(r.body.contains("Workspace memory (.dsh/memory.md)"));
    assert!(r.body.contains("User memory ($DSH_HOME/memory.md)"));

    // The person forgets the first one with a slash command.
    let forget = run.headless(&server, None, &[&format!("/forget {id1}")]);
    ok(&forget);
    assert!(stdout(&forget).contains("Forgot"), "{}", stdout(&forget));
    assert!(!run.memory_file().contains("PGHOST"));
    let fourth = run.headless(&server, None, &["and now?"]);
    ok(&fourth);
    let r = loop_requests(&server).pop().unwrap();
    assert!(r.body.contains(INTRO));
    assert!(!r.body.contains("PGHOST"), "forgotten");
    assert!(r.body.contains("Releases are cut from the release branch"));
    // The forget is in its session's log.
    let forgot_in = run
        .sessions()
        .into_iter()
        .find(|id| {
            memory_changes(&run, id)
                .iter()
                .any(|c| c["action"] == "forget")
        })
        .expect("a session logged the forget");
    let c = &memory_changes(&run, &forgot_in)[0];
    assert_eq!(
        (c["by"].clone(), c["id"].clone()),
        (json!("user"), json!(id1))
    );
}

/// Without a way to ask (headless) the default policy refuses model writes with a message
/// saying what to configure; nothing is written.
#[test]
fn model_writes_need_a_yes_and_headless_cannot_ask() {
    let server = MockServer::with_replies([
        call("r1", "remember", json!({"text": "Use pnpm"})),
        Reply::text("Could not keep it."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    ok(&run.headless(&server, None, &["remember pnpm"]));
    let results = tool_texts(&run.session());
    assert!(
        results[0].contains("no way to ask") && results[0].contains("writes: allow"),
        "{results:?}"
    );
    assert_eq!(run.memory_file(), "");
    let events = run.session();
    assert!(
        events.iter().any(|e| e.is("approval/asked")),
        "the ask is audited"
    );
}

/// Two sessions writing at the same time keep every entry (the file is locked and
/// replaced atomically).
#[test]
fn concurrent_sessions_keep_every_entry() {
    let run = Run::new();
    let patch = run.patch(ALLOW);
    let servers: Vec<MockServer> = ["a", "b"]
        .iter()
        .map(|who| {
            let mut replies: Vec<Reply> = (0..6)
                .map(|i| {
                    call(
                        &format!("{who}{i}"),
                        "remember",
                        json!({"text": format!("fact {who}-{i}")}),
                    )
                })
                .collect();
            replies.push(Reply::text("kept"));
            MockServer::with_replies(replies).answer_untooled("Mock title")
        })
        .collect();
    let children: Vec<_> = servers
        .iter()
        .map(|s| {
            let mut c = run.base(s);
            c.args(["headless", "--patch", &patch, "keep facts"]);
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        ok(&out);
    }
    let file = run.memory_file();
    for who in ["a", "b"] {
        for i in 0..6 {
            assert!(
                file.contains(&format!("- fact {who}-{i} <!--")),
                "fact {who}-{i} lost:\n{file}"
            );
        }
    }
    let list = run.dsh(&["memory", "list", "--json"]);
    ok(&list);
    assert_eq!(stdout(&list).lines().count(), 12);
}

/// With `suggest: true`, a finished session proposes memories from its conversation; a
/// secret in a proposal is removed before anything is written; a proposal reaches no prompt
/// until the person accepts it.
#[test]
fn proposals_lose_their_secrets_and_wait_for_a_yes() {
    let server = MockServer::with_replies([Reply::text("Deployed."), Reply::text("ok"), Reply::text("ok")])
        .answer_untooled_with(|r| {
            if r.body.contains("<material>") {
                Reply::text(
                    "- Deploy with DEPLOY_TOKEN=9f8e7d6c5b4a3f2e1 from CI\n- The docs build with make docs\n- (none)",
                )
            } else {
                Reply::text("Mock title")
            }
        });
    let run = Run::new();
    let patch = run.patch("- id: memory\n  config:\n    suggest: true\n");
    ok(&run.headless(&server, Some(&patch), &["deploy it"]));
    let s1 = run.only_session();
    let file = run.memory_file();
    assert!(!file.contains("9f8e7d6c5b4a3f2e1"), "{file}");
    assert!(
        file.contains("- Deploy with DEPLOY_TOKEN=[redacted] from CI <!-- dsh-memory"),
        "{file}"
    );
    assert!(
        file.contains("- The docs build with make docs <!-- dsh-memory"),
        "{file}"
    );
    assert_eq!(file.matches("by=harness").count(), 2);
    assert_eq!(file.matches("status=proposed").count(), 2);
    let events = run.events(&s1);
    let suggest = events
        .iter()
        .find(|e| e.is("memory/suggest"))
        .expect("memory/suggest");
    assert_eq!(suggest.data["trigger"], "session-end");
    assert_eq!(suggest.data["redacted"], 1);
    let logged: String = events
        .iter()
        .map(|e| e.data.as_value().to_string())
        .collect();
    assert!(
        !logged.contains("9f8e7d6c5b4a3f2e1"),
        "the log keeps no secret of a proposal"
    );
    let proposals = memory_changes(&run, &s1);
    assert_eq!(proposals.len(), 2);
    assert!(
        proposals
            .iter()
            .all(|c| c["action"] == "propose" && c["by"] == "harness")
    );

    // Not in the next prompt until accepted.
    ok(&run.headless(&server, None, &["next"]));
    let r = loop_requests(&server).pop().unwrap();
    assert!(!r.body.contains(INTRO), "proposals stay out of the prompt");
    let docs = proposals[1]["id"].as_str().unwrap();
    let accept = run.dsh(&["memory", "accept", docs]);
    ok(&accept);
    ok(&run.headless(&server, None, &["again"]));
    let r = loop_requests(&server).pop().unwrap();
    assert!(r.body.contains("The docs build with make docs"));
    assert!(
        !r.body.contains("DEPLOY_TOKEN"),
        "the other proposal still waits"
    );
}

/// recall finds a memory with the session, turn and event that wrote it, and earlier
/// sessions of the workspace that mention the words (from the session index); `dsh memory
/// show` names the same origin.
#[test]
fn recall_cites_the_session_and_event_a_fact_came_from() {
    let server = MockServer::with_replies([
        call(
            "r1",
            "remember",
            json!({"text": "The flux capacitor code lives in src/flux.rs"}),
        ),
        Reply::text("Kept."),
        call("q1", "recall", json!({"query": "flux capacitor"})),
        Reply::text("Found it."),
    ])
    .answer_untooled("Mock title");
    let run = Run::new();
    let patch = run.patch(ALLOW);
    ok(&run.headless(
        &server,
        Some(&patch),
        &["where is the flux capacitor code?"],
    ));
    let s1 = run.only_session();
    let change = memory_changes(&run, &s1)[0].clone();
    ok(&run.headless(&server, Some(&patch), &["recall the flux capacitor"]));
    let s2 = run.sessions().into_iter().find(|s| *s != s1).unwrap();
    let result: Value = serde_json::from_str(&tool_texts(&run.events(&s2))[0]).unwrap();
    let m = &result["memories"][0];
    assert_eq!(m["text"], "The flux capacitor code lives in src/flux.rs");
    assert_eq!(
        m["origin"],
        json!({"by": "model", "sessionId": s1, "turn": 1, "seq": change["seq"]})
    );
    let hits = result["sessions"].as_array().expect("session hits");
    assert!(
        hits.iter()
            .any(|h| h["sessionId"] == s1.as_str() && h["seq"].is_u64()),
        "{result}"
    );

    let show = run.dsh(&["memory", "show", change["id"].as_str().unwrap(), "--json"]);
    ok(&show);
    let shown: Value = serde_json::from_str(&stdout(&show)).unwrap();
    assert_eq!(shown["origin"]["seq"], change["seq"]);
    assert_eq!(shown["origin"]["sessionId"], s1.as_str());
}

/// A binary workspace file is reported and skipped: the session still gets the user memory
/// and a warning naming the file; `dsh memory list` warns and lists the rest; nothing
/// overwrites the broken file.
#[test]
fn an_unusable_memory_file_is_reported_and_skipped() {
    let server = MockServer::with_replies([Reply::text("ok")]).answer_untooled("Mock title");
    let run = Run::new();
    std::fs::create_dir_all(run.work.path().join(".dsh")).unwrap();
    std::fs::write(run.work.path().join(".dsh/memory.md"), b"- a\0\xff\n").unwrap();
    let add = run.dsh(&["memory", "add", "--user", "Answer in English"]);
    ok(&add);
    ok(&run.headless(&server, None, &["hi"]));
    let r = loop_requests(&server).pop().unwrap();
    assert!(r.body.contains("Answer in English"));
    assert!(r.body.contains("was skipped: it is binary"), "{}", r.body);
    let list = run.dsh(&["memory", "list"]);
    ok(&list);
    assert!(stderr(&list).contains("it is binary"), "{}", stderr(&list));
    assert!(stdout(&list).contains("Answer in English"));
    let add = run.dsh(&["memory", "add", "more"]);
    assert_eq!(add.status.code(), Some(1));
    assert!(stderr(&add).contains("skipped"), "{}", stderr(&add));
    assert_eq!(
        std::fs::read(run.work.path().join(".dsh/memory.md")).unwrap(),
        b"- a\0\xff\n"
    );
}

/// A fact kept mid-session reaches the prompt after the session's next compaction (the
/// compaction replaced the memory message, so a new one is entered with what memory holds
/// now); with `suggest: true` the compaction summary is read for proposals, which are
/// recorded even though the run that compacted ends right after.
#[test]
fn a_compaction_renews_the_memory_section_and_its_summary_is_read_for_proposals() {
    const SUMMARY: &str = "## Primary Request and Intent\n- SUMMARY-MARKER keep facts\n## Key Technical Concepts\n(none)\n## Files and Code\n(none)\n## Errors and Fixes\n(none)\n## Pending Jobs\n(none)\n## Current Work\n(none)\n## Next Step\n(none)\n## Critical Context\n(none)";
    let server = MockServer::with_replies([
        call("r1", "remember", json!({"text": "Lint with cargo clippy"})),
        Reply::text("Kept B."),
        Reply::text("After the compaction."),
    ])
    .answer_compaction(SUMMARY)
    .answer_untooled_with(|r| {
        if r.body.contains("<material>") && r.body.contains("SUMMARY-MARKER") {
            Reply::text("- Releases are tagged vX.Y on main")
        } else if r.body.contains("<material>") {
            Reply::text("- (none)")
        } else {
            Reply::text("Mock title")
        }
    });
    let run = Run::new();
    ok(&run.dsh(&["memory", "add", "Build with cargo build"]));
    let patch = run.patch("- id: memory\n  config:\n    writes: allow\n    suggest: true\n");
    let long_task = format!(
        "keep the lint rule. {}",
        "Context line for the task. ".repeat(200)
    );
    ok(&run.headless(&server, Some(&patch), &[&long_task]));
    let id = run.only_session();
    let first = loop_requests(&server);
    assert!(first[0].body.contains("Build with cargo build"));
    assert!(
        first
            .iter()
            .all(|r| !r.body.contains("] Lint with cargo clippy")),
        "not mid-session"
    );

    let compact = run.headless(&server, Some(&patch), &["--session-id", &id, "/compact"]);
    ok(&compact);
    assert!(
        stdout(&compact).starts_with("Compacted "),
        "{}",
        stdout(&compact)
    );
    ok(&run.headless(&server, Some(&patch), &["--session-id", &id, "go on"]));
    let last = loop_requests(&server).pop().unwrap();
    assert!(last.body.contains("<compacted-summary>"));
    assert!(
        last.body.contains("] Lint with cargo clippy"),
        "renewed after the compaction"
    );
    assert!(last.body.contains("] Build with cargo build"));

    let events = run.events(&id);
    let summary = events.iter().find(|e| e.is("compaction/summary")).unwrap();
    let suggested: Vec<&Value> = events
        .iter()
        .filter(|e| e.is("memory/suggest"))
        .map(|e| e.data.as_value())
        .collect();
    let from_compaction = suggested
        .iter()
        .find(|d| d["trigger"] == "compaction")
        .expect("a proposal round after the compaction");
    assert_eq!(from_compaction["sourceSeq"], json!(summary.seq));
    assert_eq!(from_compaction["proposed"].as_array().unwrap().len(), 1);
    let file = run.memory_file();
    assert!(
        file.contains("- Releases are tagged vX.Y on main <!-- dsh-memory")
            && file.contains("status=proposed"),
        "{file}"
    );
}
