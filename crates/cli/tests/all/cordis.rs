//! Dynamic packages through the `dsh` binary (headless) against the mock LLM: with the
//! cordis rows mounted by a home patch, the model defines and runs a package whose host half
//! registers a tool, calls that tool on its next step, and stops the package, which takes
//! the tool away again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use dsh_test_support::mock_server::{MockServer, RecordedRequest, Reply};
use pretty_assertions::assert_eq;
use serde_json::json;

use common::{Run, call, stderr, tool_texts};

const PATCH: &str = "- insert:
    - id: cordis-host-runner
      name: '@deepseek-ai/dsh-cordis-host-runner'
      config:
        vmTimeoutMs: 1000
    - id: tool-cordis
      name: '@deepseek-ai/dsh-tool-cordis'
";

const HOST: &str = r#"
return {
  apply(ctx) {
    ctx.tools.register({
      name: 'word_count',
      description: 'Counts the words of a text.',
      parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] },
      execute(args) {
        if (typeof args.text !== 'string') throw new Error('text must be a string');
        return 'words: ' + args.text.split(/\s+/).filter(Boolean).length;
      },
    });
  },
};
"#;

fn tool_names(request: &RecordedRequest) -> Vec<String> {
    request.tool_names()
}

#[test]
fn the_model_defines_runs_and_calls_a_package_tool() {
    let run = Run::new();
    std::fs::create_dir_all(run.dsh_home()).unwrap();
    std::fs::write(run.dsh_home().join("cordis.patch.yml"), PATCH).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(call(
        "d1",
        "cordis_define",
        json!({
            "plugin": {"kind": "new", "idPrefix": "words"},
            "name": "Word counter",
            "purpose": "Count words for the user.",
            "code": {"host": HOST}
        }),
    ));
    server.push(call(
        "r1",
        "cordis_run",
        json!({"pluginId": "words-1", "packageId": "pkg-1", "mode": "run"}),
    ));
    server.push(call("w1", "word_count", json!({"text": "one two  three"})));
    server.push(call("w2", "word_count", json!({"text": 7})));
    server.push(call("s1", "cordis_stop", json!({"pluginId": "words-1"})));
    server.push(Reply::text("counted"));
    let out = run
        .base(&server)
        .args(["--profile", "headless", "count words with a package"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    assert_eq!(
        tool_texts(&run.session()),
        vec![
            "Defined words-1/pkg-1 (Word counter); it is not running yet. Use cordis_run to activate this Package.",
            "words-1/pkg-1 is running (run-1). It registered these tools, callable from the next step: word_count.",
            "words: 3",
            "Error: dynamic tool \"word_count\" of plugin words-1 failed: Error: text must be a string\n    at execute (eval_script:10:54)",
            "Dynamic Plugin words-1 is stopped; its definition and versions remain.",
        ]
    );

    // The package's tool is on the wire only while the package runs.
    let tooled: Vec<Vec<String>> = server
        .requests()
        .iter()
        .filter(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .map(tool_names)
        .collect();
    assert_eq!(tooled.len(), 6);
    let has = |names: &Vec<String>| names.contains(&"word_count".to_string());
    assert_eq!(
        tooled.iter().map(has).collect::<Vec<_>>(),
        vec![false, false, true, true, true, false]
    );
    assert!(tooled[0].contains(&"cordis_define".to_string()));
}

#[test]
fn a_reference_to_a_missing_plugin_is_explained_to_the_model() {
    let run = Run::new();
    std::fs::create_dir_all(run.dsh_home()).unwrap();
    std::fs::write(run.dsh_home().join("cordis.patch.yml"), PATCH).unwrap();
    let server = MockServer::start().answer_untooled("Mock title");
    server.push(Reply::text("it is gone"));
    let out = run
        .base(&server)
        .args(["--profile", "headless", "please fix @words-1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let request = server
        .requests()
        .into_iter()
        .find(|r| r.json.as_ref().is_some_and(|j| j.get("tools").is_some()))
        .unwrap();
    let texts: Vec<String> = request
        .messages()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect();
    assert!(
        texts
            .iter()
            .any(|t| t.starts_with("<cordis_dynamic_plugin_context>")
                && t.contains("The user referenced @words-1, but no such dynamic plugin exists")),
        "{texts:#?}"
    );
}
