//! The dynamic-package lifecycle through the tool pipeline: define → run → the package's tool
//! is registered and callable → stop removes it → undefine; bad code, runaway code and
//! unknown ids become tool errors.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_cordis::{CordisHostRunnerPlugin, ToolCordisPlugin};
use dsh_kernel::{Context, Plugin, PluginConfig};
use dsh_session::{LiveSession, SessionHeader, SessionSource, SessionStore, system_clock};
use dsh_tools::{ToolExecution, ToolRegistry, ToolResult};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Harness {
    root: Context,
    tools: Arc<ToolRegistry>,
    store: Arc<SessionStore>,
    session: Arc<LiveSession>,
    calls: std::sync::atomic::AtomicU64,
}

impl Harness {
    fn new(runner_config: Value) -> Self {
        let root = Context::new_root();
        let tools = ToolRegistry::new();
        root.provide(tools.clone()).unwrap();
        CordisHostRunnerPlugin
            .apply(
                &root.child("cordis-host-runner"),
                &PluginConfig::new("cordis-host-runner", "test", runner_config),
            )
            .unwrap();
        ToolCordisPlugin
            .apply(
                &root.child("tool-cordis"),
                &PluginConfig::new("tool-cordis", "test", Value::Null),
            )
            .unwrap();
        let store = SessionStore::new(system_clock());
        let session = store
            .create(
                &root,
                SessionHeader::new("session-a", 1),
                SessionSource::Fresh,
            )
            .unwrap();
        Self {
            root,
            tools,
            store,
            session,
            calls: Default::default(),
        }
    }

    async fn call_as(&self, session: &Arc<LiveSession>, name: &str, args: Value) -> ToolResult {
        let n = self
            .calls
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut exec = ToolExecution::new(format!("call-{n}"), name, args, self.root.clone());
        exec.session = Some(session.clone());
        self.tools.execute(exec).await
    }

    async fn call(&self, name: &str, args: Value) -> ToolResult {
        self.call_as(&self.session, name, args).await
    }

    fn names(&self) -> Vec<String> {
        self.tools
            .schemas(&self.root)
            .into_iter()
            .map(|s| s.name)
            .collect()
    }
}

fn text(result: &ToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|b| b.as_text())
        .collect::<Vec<_>>()
        .join("")
}

fn ok(result: &ToolResult) -> String {
    assert!(!result.is_error, "unexpected error: {}", text(result));
    text(result)
}

fn err(result: &ToolResult) -> String {
    assert!(result.is_error, "expected an error, got: {}", text(result));
    text(result)
}

fn define(prefix: &str, name: &str, host: &str) -> Value {
    json!({
        "plugin": {"kind": "new", "idPrefix": prefix},
        "name": name,
        "purpose": "Exercise the lifecycle.",
        "code": {"host": host}
    })
}

const GREETER: &str = r#"
let greeted = 0;
return {
  apply(ctx) {
    ctx.tools.register({
      name: 'greet',
      description: 'Greets someone.',
      parameters: { type: 'object', properties: { who: { type: 'string' } }, required: ['who'] },
      execute(args) {
        greeted += 1;
        if (args.who === 'nobody') throw new Error('nobody to greet');
        if (args.who === 'json') return { greeted, who: args.who };
        return 'hello ' + args.who + ' #' + greeted;
      },
    });
    ctx.tools.register({
      name: 'spin',
      description: 'Never returns.',
      execute() { for (;;) {} },
    });
    ctx.tools.register({
      name: 'hoard',
      description: 'Allocates forever.',
      execute() { const a = []; for (;;) a.push('x'.repeat(1 << 16) + a.length); },
    });
    ctx.tools.register({
      name: 'wait',
      description: 'Waits on a promise nothing settles.',
      execute() { return new Promise(() => {}); },
    });
  },
};
"#;

#[tokio::test]
async fn define_run_call_stop_and_undefine() {
    let h = Harness::new(json!({"vmTimeoutMs": 300, "memoryLimitMb": 16}));

    let defined = h
        .call("cordis_define", define("greet", "Greeter", GREETER))
        .await;
    assert_eq!(
        ok(&defined),
        "Defined greet-1/pkg-1 (Greeter); it is not running yet. Use cordis_run to activate this Package."
    );
    assert_eq!(
        defined.meta,
        Some(json!({"pluginId": "greet-1", "packageId": "pkg-1"}))
    );
    assert!(!h.names().contains(&"greet".to_string()));

    let run = h
        .call(
            "cordis_run",
            json!({"pluginId": "greet-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await;
    assert_eq!(
        ok(&run),
        "greet-1/pkg-1 is running (run-1). It registered these tools, callable from the next step: greet, spin, hoard, wait."
    );
    assert_eq!(
        run.value,
        Some(json!({
            "status": "running",
            "pluginId": "greet-1",
            "packageId": "pkg-1",
            "pluginRunId": "run-1",
            "currentPackageId": "pkg-1",
            "host": {"status": "running", "provides": [], "waitingFor": []},
            "client": {"status": "absent", "waitingFor": []}
        }))
    );
    assert!(h.names().contains(&"greet".to_string()));

    // The package's tool runs its JavaScript, keeps state between calls, and reports errors.
    assert_eq!(
        ok(&h.call("greet", json!({"who": "ada"})).await),
        "hello ada #1"
    );
    let as_json = h.call("greet", json!({"who": "json"})).await;
    assert_eq!(ok(&as_json), "{\n  \"greeted\": 2,\n  \"who\": \"json\"\n}");
    assert_eq!(as_json.value, Some(json!({"greeted": 2, "who": "json"})));
    assert!(
        err(&h.call("greet", json!({"who": "nobody"})).await).starts_with(
            "Error: dynamic tool \"greet\" of plugin greet-1 failed: Error: nobody to greet"
        ),
    );
    let spun = err(&h.call("spin", json!({})).await);
    assert!(spun.contains("ran past its 300ms compute budget"), "{spun}");
    let hoarded = err(&h.call("hoard", json!({})).await);
    assert!(
        hoarded.contains("ran out of memory (16 MiB heap limit)"),
        "{hoarded}"
    );
    let waited = err(&h.call("wait", json!({})).await);
    assert!(waited.contains("never settled"), "{waited}");
    // The package survives all of that.
    assert_eq!(
        ok(&h.call("greet", json!({"who": "bob"})).await),
        "hello bob #4"
    );

    let inspected = h
        .call("cordis_inspect_self", json!({"pluginId": "greet-1"}))
        .await;
    assert_eq!(
        serde_json::from_str::<Value>(&ok(&inspected)).unwrap(),
        json!({
            "mode": "plugin",
            "pluginId": "greet-1",
            "name": "Greeter",
            "packageCount": 1,
            "state": "running",
            "currentPackageId": "pkg-1",
            "activeRun": {"pluginRunId": "run-1", "packageId": "pkg-1"},
            "packages": [{
                "packageId": "pkg-1",
                "name": "Greeter",
                "purpose": "Exercise the lifecycle.",
                "hasHostHalf": true,
                "hasClientHalf": false,
                "isCurrent": true,
                "isNext": false
            }]
        })
    );

    assert_eq!(
        ok(&h.call("cordis_stop", json!({"pluginId": "greet-1"})).await),
        "Dynamic Plugin greet-1 is stopped; its definition and versions remain."
    );
    assert!(!h.names().contains(&"greet".to_string()));
    assert!(err(&h.call("greet", json!({"who": "ada"})).await).contains("unknown tool"));
    // Stopping again is fine; running again starts a fresh engine.
    ok(&h.call("cordis_stop", json!({"pluginId": "greet-1"})).await);
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "greet-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await);
    assert_eq!(
        ok(&h.call("greet", json!({"who": "eve"})).await),
        "hello eve #1"
    );

    assert_eq!(
        ok(&h
            .call("cordis_undefine", json!({"pluginId": "greet-1"}))
            .await),
        "Removed dynamic Plugin greet-1 and all of its Packages."
    );
    assert!(!h.names().contains(&"greet".to_string()));
    assert!(
        err(&h
            .call("cordis_inspect_self", json!({"pluginId": "greet-1"}))
            .await)
        .contains("no dynamic plugin \"greet-1\"")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&ok(&h.call("cordis_inspect_self", json!({})).await))
            .unwrap(),
        json!({"mode": "plugins", "plugins": []})
    );
}

#[tokio::test]
async fn update_switches_versions_and_removes_the_old_tools() {
    let h = Harness::new(Value::Null);
    let v1 = "return { apply(ctx) { ctx.tools.register({ name: 'ver', execute: () => 'one' }) } }";
    let v2 = "return { apply(ctx) { ctx.tools.register({ name: 'ver', execute: () => 'two' }) } }";
    ok(&h
        .call("cordis_define", define("vers", "Versions", v1))
        .await);
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "vers-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await);
    let second = json!({
        "plugin": {"kind": "existing", "pluginId": "vers-1"},
        "name": "Versions",
        "purpose": "Second version.",
        "code": {"host": v2}
    });
    assert!(ok(&h.call("cordis_define", second).await).starts_with("Defined vers-1/pkg-2"));
    let wrong = err(&h
        .call(
            "cordis_run",
            json!({"pluginId": "vers-1", "packageId": "pkg-2", "mode": "run"}),
        )
        .await);
    assert!(wrong.contains("use mode \"update\""), "{wrong}");
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "vers-1", "packageId": "pkg-2", "mode": "update"}),
        )
        .await);
    assert_eq!(ok(&h.call("ver", json!({})).await), "two");
    // Rolling back is an update too.
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "vers-1", "packageId": "pkg-1", "mode": "update"}),
        )
        .await);
    assert_eq!(ok(&h.call("ver", json!({})).await), "one");
    let package = h
        .call(
            "cordis_inspect_self",
            json!({"pluginId": "vers-1", "packageId": "pkg-2"}),
        )
        .await;
    let package: Value = serde_json::from_str(&ok(&package)).unwrap();
    assert_eq!(package["code"], json!({"host": v2}));
    assert_eq!(package["runtime"]["host"]["status"], "stopped");
}

#[tokio::test]
async fn syntax_errors_are_refused_at_define() {
    let h = Harness::new(Value::Null);
    let broken = err(&h
        .call(
            "cordis_define",
            define(
                "bad",
                "Broken",
                "return { apply(ctx) { ctx.tools.register({ name: 'x' ) } }",
            ),
        )
        .await);
    assert!(
        broken.starts_with("Error: dynamic package `code.host` does not parse:\nSyntaxError"),
        "{broken}"
    );
    // Nothing was recorded.
    assert_eq!(
        serde_json::from_str::<Value>(&ok(&h.call("cordis_inspect_self", json!({})).await))
            .unwrap(),
        json!({"mode": "plugins", "plugins": []})
    );
    let typescript = err(&h
        .call(
            "cordis_define",
            define("bad", "Typed", "const x: number = 1; return { apply() {} }"),
        )
        .await);
    assert!(typescript.contains("does not parse"), "{typescript}");
    let prefix = err(&h
        .call(
            "cordis_define",
            define("Bad1", "Named", "return { apply() {} }"),
        )
        .await);
    assert!(prefix.contains("3-6 lowercase English letters"), "{prefix}");
    let no_code = err(&h
        .call(
            "cordis_define",
            json!({"plugin": {"kind": "new", "idPrefix": "none"}, "name": "x", "purpose": "y", "code": {}}),
        )
        .await);
    assert!(
        no_code.contains("needs `code.host`, `code.client`, or both"),
        "{no_code}"
    );
    let bad_args = err(&h
        .call(
            "cordis_define",
            json!({"plugin": {"kind": "old"}, "name": 3, "purpose": "y", "code": {"hots": "x"}}),
        )
        .await);
    assert!(
        bad_args.starts_with("Error: invalid arguments: "),
        "{bad_args}"
    );
}

#[tokio::test]
async fn a_package_whose_apply_never_ends_is_stopped() {
    let h = Harness::new(json!({"vmTimeoutMs": 200}));
    let looping = "return { apply(ctx) { ctx.tools.register({ name: 'early', execute: () => 'x' }); for (;;) {} } }";
    ok(&h
        .call("cordis_define", define("loop", "Loop", looping))
        .await);
    let failed = err(&h
        .call(
            "cordis_run",
            json!({"pluginId": "loop-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await);
    assert!(
        failed.contains(
            "loop-1/pkg-1 failed to start: the package ran past its 200ms compute budget"
        ),
        "{failed}"
    );
    // What it registered before the loop is gone again.
    assert!(!h.names().contains(&"early".to_string()));
    let summary: Value = serde_json::from_str(&ok(&h
        .call("cordis_inspect_self", json!({"pluginId": "loop-1"}))
        .await))
    .unwrap();
    assert_eq!(summary["state"], "failed");
    assert_eq!(summary["nextPackageId"], "pkg-1");
    let package: Value = serde_json::from_str(&ok(&h
        .call(
            "cordis_inspect_self",
            json!({"pluginId": "loop-1", "packageId": "pkg-1"}),
        )
        .await))
    .unwrap();
    assert_eq!(package["runtime"]["host"]["status"], "failed");
    assert!(
        package["runtime"]["host"]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("compute budget")
    );

    // Other start failures: a throw, a missing return, an unknown service.
    for (code, expected) in [
        (
            "return { apply() { throw new Error('boom') } }",
            "Error: boom",
        ),
        ("const x = 1;", "returned undefined"),
        ("return { inject: ['fs'], apply() {} }", "not available: fs"),
        (
            "return { apply: async () => { await new Promise(() => {}) } }",
            "nothing can settle",
        ),
    ] {
        let defined = h.call("cordis_define", define("fail", "Fails", code)).await;
        let ids = defined.meta.clone().unwrap();
        let failed = err(&h
            .call(
                "cordis_run",
                json!({"pluginId": ids["pluginId"], "packageId": ids["packageId"], "mode": "run"}),
            )
            .await);
        assert!(failed.contains(expected), "{code}: {failed}");
    }
}

#[tokio::test]
async fn unknown_ids_and_other_sessions_are_refused() {
    let h = Harness::new(Value::Null);
    let missing = |t: String| assert!(t.contains("no dynamic plugin \"nope-1\""), "{t}");
    missing(err(&h
        .call(
            "cordis_run",
            json!({"pluginId": "nope-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await));
    missing(err(&h
        .call("cordis_stop", json!({"pluginId": "nope-1"}))
        .await));
    missing(err(&h
        .call("cordis_undefine", json!({"pluginId": "nope-1"}))
        .await));
    missing(err(&h
        .call("cordis_inspect_self", json!({"pluginId": "nope-1"}))
        .await));
    assert!(
        err(&h
            .call("cordis_inspect_self", json!({"packageId": "pkg-1"}))
            .await)
        .contains("packageId needs pluginId")
    );

    ok(&h
        .call(
            "cordis_define",
            define("mine", "Mine", "return { apply() {} }"),
        )
        .await);
    assert!(
        err(&h
            .call(
                "cordis_run",
                json!({"pluginId": "mine-1", "packageId": "pkg-9", "mode": "run"}),
            )
            .await)
        .contains("plugin \"mine-1\" has no package \"pkg-9\"")
    );
    assert!(
        err(&h
            .call(
                "cordis_run",
                json!({"pluginId": "mine-1", "packageId": "pkg-1", "mode": "update"}),
            )
            .await)
        .contains("no successful version yet")
    );
    assert!(
        err(&h
            .call(
                "cordis_inspect_self",
                json!({"pluginId": "mine-1", "packageId": "pkg-9"}),
            )
            .await)
        .contains("does not exist")
    );

    // Another session neither sees nor controls the plugin.
    let other = h
        .store
        .create(
            &h.root,
            SessionHeader::new("session-b", 1),
            SessionSource::Fresh,
        )
        .unwrap();
    assert!(
        err(&h
            .call_as(&other, "cordis_undefine", json!({"pluginId": "mine-1"}))
            .await)
        .contains("no dynamic plugin \"mine-1\"")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&ok(&h
            .call_as(&other, "cordis_inspect_self", json!({}))
            .await))
        .unwrap(),
        json!({"mode": "plugins", "plugins": []})
    );
}

#[tokio::test]
async fn inspect_reports_this_runtime() {
    let h = Harness::new(Value::Null);
    let list: Value =
        serde_json::from_str(&ok(&h.call("cordis_inspect_list", json!({})).await)).unwrap();
    let ids: Vec<&str> = list["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["Service", "Event", "Builtin", "Tool", "Dynamic"]);

    let query = |provider: &str, method: &str, input: Value| {
        let mut args = json!({"platform": "host", "provider": provider, "method": method});
        if !input.is_null() {
            args["input"] = input;
        }
        h.call("cordis_inspect_query", args)
    };
    let tools: Value =
        serde_json::from_str(&ok(&query("Tool", "listTools", Value::Null).await)).unwrap();
    let names: Vec<&str> = tools["data"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"cordis_define") && names.contains(&"cordis_inspect_query"));
    let service: Value = serde_json::from_str(&ok(&query(
        "Service",
        "listService",
        json!({"service": "tools"}),
    )
    .await))
    .unwrap();
    assert_eq!(service["data"]["service"]["running"], true);
    assert_eq!(service["data"]["service"]["injectable"], true);
    let event: Value = serde_json::from_str(&ok(&query(
        "Event",
        "listEvents",
        json!({"event": "tools/pre-execute"}),
    )
    .await))
    .unwrap();
    assert_eq!(event["data"]["event"]["mode"], "waterfall");
    assert!(
        err(&query("Nope", "x", Value::Null).await).contains("no host inspect provider \"Nope\"")
    );
    assert!(
        err(&query("Service", "listService", json!({"service": "nope"})).await)
            .contains("no service \"nope\"")
    );
    assert!(
        err(&h
            .call(
                "cordis_inspect_query",
                json!({"platform": "client", "provider": "Slots", "method": "listSubTree"}),
            )
            .await)
        .contains("no client inspect providers")
    );
}

#[test]
fn schemas_match_the_pinned_fixture() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/conformance/acp/advanced-toolchain/tool-schemas.expected.json");
    let Ok(text) = std::fs::read_to_string(&path) else {
        dsh_test_support::prereq::skip(&format!("{} not found", path.display()));
        return;
    };
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| k.as_str() != "description")
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let pinned: Value = serde_json::from_str(&text).unwrap();
    let pinned: Vec<(String, String)> = pinned["initial"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with("cordis_"))
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_string(),
                serde_json::to_string(&strip(&t["parameters"])).unwrap(),
            )
        })
        .collect();
    let h = Harness::new(Value::Null);
    let ours: Vec<(String, String)> = h
        .tools
        .schemas(&h.root)
        .iter()
        .filter(|s| s.name.starts_with("cordis_"))
        .map(|s| {
            (
                s.name.clone(),
                serde_json::to_string(&strip(&s.parameters)).unwrap(),
            )
        })
        .collect();
    assert_eq!(ours, pinned);
}

#[tokio::test]
async fn console_effects_and_tools_registered_after_apply() {
    let h = Harness::new(Value::Null);
    let code = r#"
let late;
return {
  apply(ctx) {
    console.log('applying', { n: 1 });
    ctx.effect(() => { console.log('effect on'); return () => { throw new Error('disposer fails'); }; });
    ctx.tools.register({
      name: 'add_late',
      execute() {
        late = ctx.tools.register({ name: 'late', execute: () => 'late here' });
        return ctx.tools.list();
      },
    });
    ctx.tools.register({ name: 'drop_late', execute() { late(); return 'dropped'; } });
  },
};
"#;
    ok(&h.call("cordis_define", define("late", "Late", code)).await);
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "late-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await);
    assert!(!h.names().contains(&"late".to_string()));
    let listed = h.call("add_late", json!({})).await;
    ok(&listed);
    assert_eq!(listed.value, Some(json!(["add_late", "drop_late", "late"])));
    assert_eq!(ok(&h.call("late", json!({})).await), "late here");
    let package: Value = serde_json::from_str(&ok(&h
        .call(
            "cordis_inspect_self",
            json!({"pluginId": "late-1", "packageId": "pkg-1"}),
        )
        .await))
    .unwrap();
    assert_eq!(
        package["runtime"]["host"]["tools"],
        json!(["add_late", "drop_late", "late"])
    );
    assert_eq!(
        package["runtime"]["host"]["console"],
        json!(["applying {\"n\":1}", "effect on"])
    );
    assert_eq!(ok(&h.call("drop_late", json!({})).await), "dropped");
    assert!(!h.names().contains(&"late".to_string()));
    // A throwing disposer does not keep the package from stopping.
    ok(&h.call("cordis_stop", json!({"pluginId": "late-1"})).await);
    assert!(!h.names().contains(&"add_late".to_string()));
    // Registering a name a built-in tool (here a cordis tool) already holds is refused.
    let clash =
        "return { apply(ctx) { ctx.tools.register({ name: 'cordis_run', execute: () => 'x' }) } }";
    ok(&h
        .call("cordis_define", define("clash", "Clash", clash))
        .await);
    let refused = err(&h
        .call(
            "cordis_run",
            json!({"pluginId": "clash-2", "packageId": "pkg-2", "mode": "run"}),
        )
        .await);
    assert!(
        refused.contains("cannot register tool \"cordis_run\""),
        "{refused}"
    );
    // A parameter schema a provider would reject is refused at registration.
    let bad_schema = "return { apply(ctx) { ctx.tools.register({ name: 'odd', parameters: { type: 'string' }, execute: () => 'x' }) } }";
    ok(&h
        .call("cordis_define", define("odd", "Odd", bad_schema))
        .await);
    let refused = err(&h
        .call(
            "cordis_run",
            json!({"pluginId": "odd-3", "packageId": "pkg-3", "mode": "run"}),
        )
        .await);
    assert!(
        refused.contains("must be an object JSON Schema"),
        "{refused}"
    );
}

#[tokio::test]
async fn a_reference_names_the_base_package_without_source() {
    let h = Harness::new(Value::Null);
    ok(&h
        .call(
            "cordis_define",
            define("refs", "Refs", "return { apply() {} }"),
        )
        .await);
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "refs-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await);
    let runner = h.root.get::<dsh_cordis::DynamicPackages>().unwrap();
    let reference = runner.reference("session-a", "refs-1").unwrap();
    assert_eq!(
        reference,
        json!({
            "pluginId": "refs-1",
            "packageId": "pkg-1",
            "name": "Refs",
            "purpose": "Exercise the lifecycle.",
            "packageCount": 1,
            "state": "running",
            "currentPackageId": "pkg-1",
            "activeRun": {"pluginRunId": "run-1", "packageId": "pkg-1"}
        })
    );
    let text = dsh_cordis::render_reference("refs-1", Some(&reference));
    assert!(text.contains("cordis_run mode \"update\""), "{text}");
    assert!(!text.contains("apply()"), "no source: {text}");
    assert!(runner.reference("session-b", "refs-1").is_none());
    assert!(dsh_cordis::render_reference("refs-9", None).contains("no such dynamic plugin exists"));
}

#[tokio::test]
async fn cancelling_a_call_interrupts_the_package_code() {
    let h = Harness::new(json!({"vmTimeoutMs": 60000}));
    let code = "return { apply(ctx) { ctx.tools.register({ name: 'spin', execute: (a) => { if (a.stop) return 'free'; for (;;) {} } }) } }";
    ok(&h.call("cordis_define", define("spin", "Spin", code)).await);
    ok(&h
        .call(
            "cordis_run",
            json!({"pluginId": "spin-1", "packageId": "pkg-1", "mode": "run"}),
        )
        .await);
    let mut exec = ToolExecution::new("spin-call", "spin", json!({}), h.root.clone());
    exec.session = Some(h.session.clone());
    let cancel = exec.cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        cancel.cancel();
    });
    let started = std::time::Instant::now();
    let result = h.tools.execute(exec).await;
    assert!(result.is_error, "{}", text(&result));
    // Well inside the 60 s budget: the cancellation reached the engine.
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(ok(&h.call("spin", json!({"stop": true})).await), "free");
    // Stopping a package whose tool is busy interrupts it too.
    let busy = {
        let mut exec = ToolExecution::new("spin-busy", "spin", json!({}), h.root.clone());
        exec.session = Some(h.session.clone());
        let tools = h.tools.clone();
        tokio::spawn(async move { tools.execute(exec).await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    ok(&h.call("cordis_stop", json!({"pluginId": "spin-1"})).await);
    let busy = busy.await.unwrap();
    assert!(err(&busy).contains("stopping"), "{}", text(&busy));
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
}
