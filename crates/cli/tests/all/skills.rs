//! Skills through the `dsh` binary against the mock LLM: a `SKILL.md` folder in the
//! workspace is listed to the model in the session catalog (user-only and malformed skills
//! are not), the `skill` tool loads it, and `/name` in the task injects it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;
use std::process::Output;

use dsh_session::types;
use dsh_test_support::mock_server::{MockServer, Reply};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

use common::Run;

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// What these tests add to [`Run`].
trait RunExt {
    fn seed_skills(&self);
    fn headless(&self, server: &MockServer, task: &str) -> Output;
}

impl RunExt for Run {
    /// The workspace's skills: one model-visible, one user-only, one malformed.
    fn seed_skills(&self) {
        let skills = self.work.path().join(".dsh/skills");
        write(
            &skills.join("release-notes/SKILL.md"),
            "---\nname: release-notes\ndescription: Write   release notes\n  from the changelog.\n---\n\n# Release notes\n\nRead CHANGELOG.md, then summarize.\n",
        );
        write(
            &skills.join("user-only/SKILL.md"),
            "---\nname: user-only\ndescription: Only for the user.\ndisable-model-invocation: true\n---\nUser-only body.\n",
        );
        write(&skills.join("broken/SKILL.md"), "---\nname: broken\n");
    }

    fn headless(&self, server: &MockServer, task: &str) -> Output {
        self.base(server)
            .args(["--profile", "headless", task])
            .output()
            .unwrap()
    }
}

fn user_texts(request: &dsh_test_support::mock_server::RecordedRequest) -> Vec<String> {
    request
        .messages()
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn tool_names(request: &dsh_test_support::mock_server::RecordedRequest) -> Vec<String> {
    request.tool_names()
}

#[test]
fn a_workspace_skill_is_listed_to_the_model_and_loaded_by_the_tool() {
    let run = Run::new();
    run.seed_skills();
    let server = MockServer::with_replies([
        Reply::tool_call("c1", "skill", r#"{"name":"release-notes"}"#),
        Reply::tool_call("c2", "skill", r#"{"name":"user-only"}"#),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = run.headless(&server, "write the release notes");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "done");

    let requests = server.requests();
    assert!(tool_names(&requests[0]).contains(&"skill".to_string()));
    let catalog = user_texts(&requests[0])
        .into_iter()
        .find(|t| t.contains("<available_skills>"))
        .expect("the first request carries the skill catalog");
    assert!(
        catalog.contains(
            "<available_skills>\n- `release-notes`: Write release notes from the changelog.\n</available_skills>"
        ),
        "{catalog}"
    );

    let base = run.work.path().join(".dsh/skills/release-notes");
    assert_eq!(
        requests[1].last_tool_output().unwrap(),
        format!(
            "<skill_content name=\"release-notes\">\n<skill_resources>\nBase directory for this skill: {}\nResolve relative paths mentioned by this skill against the base directory before using them. Load referenced resources only as needed.\n</skill_resources>\n\n<skill_instructions>\n# Release notes\n\nRead CHANGELOG.md, then summarize.\n</skill_instructions>\n</skill_content>",
            base.display()
        )
    );
    assert_eq!(
        requests[2].last_tool_output().unwrap(),
        "Error: skill \"user-only\" is not available for model invocation"
    );
    // The catalog is published once, durably, with the entries it showed.
    let events = run.session();
    let catalogs: Vec<&Value> = events
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE) && e.data["source"]["kind"] == "skill-catalog")
        .map(|e| &e.data["source"])
        .collect();
    assert_eq!(
        catalogs,
        vec![&json!({
            "kind": "skill-catalog",
            "form": "catalog",
            "entries": [{"name": "release-notes", "description": "Write release notes from the changelog."}]
        })]
    );
}

#[test]
fn a_slash_gesture_injects_a_user_invocable_skill_and_no_skills_means_no_catalog() {
    let run = Run::new();
    run.seed_skills();
    let server = MockServer::with_replies([Reply::text("ok")]).answer_untooled("T");
    let out = run.headless(&server, "/user-only now");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let texts = user_texts(&server.requests()[0]);
    let last = texts.last().unwrap();
    assert!(
        last.starts_with("<skill_content name=\"user-only\">") && last.contains("User-only body."),
        "{texts:?}"
    );
    let sources: Vec<Value> = run
        .session()
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE))
        .map(|e| e.data["source"].clone())
        .collect();
    assert!(
        sources.contains(
            &json!({"kind": "skill-invocation", "name": "user-only", "form": "instructions"})
        ),
        "{sources:?}"
    );

    let empty = Run::new();
    let server = MockServer::with_replies([Reply::text("ok")]).answer_untooled("T");
    let out = empty.headless(&server, "hello");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let texts = user_texts(&server.requests()[0]);
    assert!(
        texts.iter().all(|t| !t.contains("<available_skills>")),
        "{texts:?}"
    );
}

#[test]
fn a_skill_added_mid_turn_republishes_the_catalog_as_an_update() {
    let run = Run::new();
    run.seed_skills();
    let new_skill = serde_json::to_string(&json!({
        "file_path": ".dsh/skills/added/SKILL.md",
        "content": "---\nname: added\ndescription: Added during the turn.\n---\nNew body.\n",
    }))
    .unwrap();
    let server = MockServer::with_replies([
        Reply::tool_call("c1", "write", &new_skill),
        Reply::text("done"),
    ])
    .answer_untooled("T");
    let out = run.headless(&server, "add a skill");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let catalogs: Vec<Value> = run
        .session()
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE) && e.data["source"]["kind"] == "skill-catalog")
        .map(|e| e.data["source"].clone())
        .collect();
    assert_eq!(
        catalogs,
        vec![
            json!({"kind": "skill-catalog", "form": "catalog", "entries": [
                {"name": "release-notes", "description": "Write release notes from the changelog."}
            ]}),
            json!({"kind": "skill-catalog", "form": "catalog", "update": true, "entries": [
                {"name": "added", "description": "Added during the turn."},
                {"name": "release-notes", "description": "Write release notes from the changelog."}
            ]}),
        ]
    );
    let texts = user_texts(&server.requests()[1]);
    assert!(
        texts
            .iter()
            .any(|t| t.contains("The skill catalog has changed.")),
        "{texts:?}"
    );
}
