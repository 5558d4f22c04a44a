//! The engine end to end: real children on the scripted model, caps, validation texts,
//! the JSON boundary, runaway scripts and cancellation.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dsh_workflow::{
    AgentOutcome, AgentStartInfo, EngineConfig, Meta, RunStop, StartSpec, WorkflowEngine,
    WorkflowObserver, WorkflowResult,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use support::{Harness, hang, lazy, record_sessions, text, trace};

#[derive(Default)]
struct Notes(Mutex<Vec<String>>);

impl Notes {
    fn all(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

impl WorkflowObserver for Notes {
    fn run_start(&self, _id: &str, meta: &Meta) {
        self.0.lock().unwrap().push(format!("run {}", meta.name));
    }
    fn phase(&self, t: &str) {
        self.0.lock().unwrap().push(format!("phase {t}"));
    }
    fn log(&self, m: &str) {
        self.0.lock().unwrap().push(format!("log {m}"));
    }
    fn agent_start(&self, i: &AgentStartInfo) {
        self.0.lock().unwrap().push(format!(
            "start {} {} {}",
            i.seq,
            i.label,
            i.phase.as_deref().unwrap_or("-")
        ));
    }
    fn agent_end(&self, seq: u64, o: AgentOutcome) {
        self.0
            .lock()
            .unwrap()
            .push(format!("end {seq} {}", o.as_str()));
    }
}

fn spec(h: &Harness, script: &str, notes: &Arc<Notes>) -> StartSpec {
    StartSpec {
        script: script.into(),
        meta: json!({"name": "t", "description": "test"}),
        args: None,
        subagent_provider: None,
        max_total_agents: None,
        parent: h.agent(),
        observer: Some(notes.clone()),
    }
}

async fn run_on(engine: &WorkflowEngine, spec: StartSpec) -> WorkflowResult {
    let run = engine.start(spec).await.expect("starts");
    let r = tokio::time::timeout(Duration::from_secs(30), run.result())
        .await
        .expect("settles");
    run.dispose().await;
    r
}

async fn run(h: &Harness, script: &str) -> (WorkflowResult, Arc<Notes>) {
    let notes = Arc::new(Notes::default());
    let r = run_on(&h.engine(), spec(h, script, &notes)).await;
    (r, notes)
}

async fn start_error(h: &Harness, spec: StartSpec) -> String {
    match h.engine().start(spec).await {
        Ok(_) => panic!("expected a start error"),
        Err(e) => e.to_string(),
    }
}

fn failed(r: &WorkflowResult) -> String {
    assert_eq!(r.stop_reason, RunStop::Error, "{r:?}");
    r.error.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_children_overlap_in_time() {
    let h = Harness::workflows(json!({"maxConcurrentAgents": 4}));
    let sessions = record_sessions(&h.root);
    // Each child answers only once both children have asked the model: if they ran one
    // after the other, the first would wait forever.
    let both = {
        let model = h.model.clone();
        move || {
            let reqs = model.requests.lock().unwrap();
            let mut ids: Vec<_> = reqs.iter().filter_map(|r| r.session_id.clone()).collect();
            ids.sort();
            ids.dedup();
            ids.len() >= 3 // the parent and both children
        }
    };
    let b1 = both.clone();
    h.model
        .script("Child A", vec![lazy(move || b1().then(|| text("ALPHA")))]);
    let b2 = both.clone();
    h.model
        .script("Child B", vec![lazy(move || b2().then(|| text("BETA")))]);
    // The parent must have asked the model once for the count above to include it.
    h.model.script("Parent", vec![text("ready")]);
    let parent = h.agent();
    parent
        .followup(dsh_llm::Message::user_text("Parent"))
        .unwrap();
    support::idle(&parent).await;
    let notes = Arc::new(Notes::default());
    let mut s = spec(
        &h,
        "return await parallel([() => agent('Child A'), () => agent('Child B')])",
        &notes,
    );
    s.parent = parent.clone();
    let started = Instant::now();
    let r = run_on(&h.engine(), s).await;
    assert_eq!(r.stop_reason, RunStop::Completed, "{r:?}");
    assert_eq!(r.value, json!(["ALPHA", "BETA"]));
    assert_eq!(r.agents_started, 2);
    assert!(started.elapsed() < Duration::from_secs(20));
    let children: Vec<_> = sessions
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.header().parent_session.as_deref() == Some(parent.id()))
        .cloned()
        .collect();
    assert_eq!(children.len(), 2);
    for c in &children {
        let t = trace(&c.events());
        assert!(t.contains(&"subagent/descriptor".to_string()), "{t:?}");
        assert_eq!(t.last().unwrap(), "turn/end completed");
    }
    let n = notes.all();
    assert!(n.contains(&"start 1 Child A -".to_string()), "{n:?}");
    assert!(n.contains(&"end 2 completed".to_string()), "{n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipeline_runs_each_item_through_the_stages() {
    let h = Harness::workflows(json!({"maxConcurrentAgents": 2}));
    h.model.script("Echo x", vec![text("X!")]);
    h.model.script("Echo y", vec![text("Y!")]);
    let (r, _) = run(
        &h,
        "return await pipeline(['x', 'y', 'z'], (p) => p === 'z' ? Promise.reject(new Error('skip')) : agent('Echo ' + p), (p, item, i) => item + ':' + p + ':' + i)",
    )
    .await;
    assert_eq!(r.stop_reason, RunStop::Completed, "{r:?}");
    assert_eq!(r.value, json!(["x:X!:0", "y:Y!:1", null]));
    assert_eq!(r.agents_started, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn phases_and_logs_are_narrated() {
    let h = Harness::workflows(json!({}));
    h.model.script("Do it", vec![text("done")]);
    let live = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let l = live.clone();
        h.root
            .on_emit::<dsh_workflow::WorkflowPhase>(dsh_kernel::ListenOptions::GLOBAL, move |n| {
                l.lock().unwrap().push(format!("phase {}", n.text));
                Ok(())
            })
            .unwrap();
        let l = live.clone();
        h.root
            .on_emit::<dsh_workflow::WorkflowEnd>(dsh_kernel::ListenOptions::GLOBAL, move |e| {
                l.lock().unwrap().push(format!(
                    "end {} {} {}",
                    e.info.meta.name,
                    e.stop_reason.as_str(),
                    e.agents_started
                ));
                Ok(())
            })
            .unwrap();
    }
    let (r, notes) = run(
        &h,
        "phase('Plan'); log('planning'); const a = await agent('Do it\\nsecond line'); log('got ' + a); return { a, args: args === undefined }",
    )
    .await;
    assert_eq!(r.value, json!({"a": "done", "args": true}));
    assert_eq!(
        notes.all(),
        vec![
            "run t",
            "phase Plan",
            "log planning",
            "start 1 Do it Plan",
            "end 1 completed",
            "log got done",
        ]
    );
    assert_eq!(
        *live.lock().unwrap(),
        vec!["phase Plan", "end t completed 1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn args_reach_the_script_and_undefined_returns_null() {
    let h = Harness::workflows(json!({}));
    let notes = Arc::new(Notes::default());
    let mut s = spec(&h, "log(String(args.files.length))", &notes);
    s.args = Some(json!({"files": [1, 2, 3]}));
    let r = run_on(&h.engine(), s).await;
    assert_eq!(r.stop_reason, RunStop::Completed, "{r:?}");
    assert_eq!(r.value, Value::Null);
    assert!(notes.all().contains(&"log 3".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_end_the_run() {
    let h = Harness::workflows(json!({"maxTotalAgents": 1, "maxItemsPerCall": 2}));
    h.model.script("One", vec![text("1")]);
    let (r, _) = run(
        &h,
        "await agent('One'); return await parallel([() => agent('Two')])",
    )
    .await;
    assert_eq!(
        failed(&r),
        "this run has used up its total agent limit (1), which guards against runaway loops; if the run really needs more agents, raise maxTotalAgents where it is set"
    );
    let (r, _) = run(&h, "return await parallel([() => 1, () => 2, () => 3])").await;
    assert_eq!(
        failed(&r),
        "parallel() got 3 items, more than one call may take (2); split the work into smaller calls or raise maxItemsPerCall in the engine config"
    );
    // A fatal error inside a combinator is never turned into a null item.
    let (r, _) = run(&h, "return await parallel([() => phase('')])").await;
    assert_eq!(failed(&r), "phase() requires a non-empty title string");
    // An ordinary throw is.
    let (r, _) = run(
        &h,
        "return await parallel([() => { throw new Error('x') }, () => 2])",
    )
    .await;
    assert_eq!(r.value, json!([null, 2]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_are_refused_with_upstream_texts() {
    let h = Harness::workflows(json!({}));
    let notes = Arc::new(Notes::default());
    let mut s = spec(&h, "return 1", &notes);
    s.meta = json!({"name": "x", "colour": "red"});
    assert_eq!(
        start_error(&h, s).await,
        "invalid meta: meta.colour is unknown (allowed: name, description, whenToUse, phases); meta.description must be a non-empty string"
    );
    let s = spec(&h, "return (", &notes);
    let e = start_error(&h, s).await;
    assert!(
        e.starts_with("workflow script does not parse: SyntaxError"),
        "{e}"
    );
    let mut s = spec(&h, "return 1", &notes);
    s.subagent_provider = Some("nowhere".into());
    assert_eq!(
        start_error(&h, s).await,
        "no subagent provider registered for \"nowhere\""
    );
    // Nothing was recorded for refused starts.
    assert!(notes.all().is_empty());

    let (r, _) = run(&h, "return await agent('x', { effort: 'high' })").await;
    assert_eq!(
        failed(&r),
        "agent() option \"effort\" is not supported yet (supported: label, phase, schema, provider, model)"
    );
    let (r, _) = run(&h, "return await agent('x', { colour: 1 })").await;
    assert_eq!(
        failed(&r),
        "agent() option \"colour\" is not recognized (supported: label, phase, schema, provider, model)"
    );
    let (r, _) = run(&h, "return await agent('')").await;
    assert_eq!(failed(&r), "agent() requires a non-empty prompt string");
    let (r, _) = run(&h, "return await agent('x', { label: 3 })").await;
    assert_eq!(failed(&r), "agent() option \"label\" must be a string");
    let (r, _) = run(
        &h,
        "return await agent('x', { schema: { type: 'string' } })",
    )
    .await;
    assert!(
        failed(&r).starts_with("agent() schema is outside the supported subset \u{2014} "),
        "{r:?}"
    );
    let (r, _) = run(&h, "log(3)").await;
    assert_eq!(failed(&r), "log() requires a message string");
    let (r, _) = run(&h, "return await pipeline([1], 'no')").await;
    assert_eq!(failed(&r), "pipeline() stage 0 is not a function");
    let (r, _) = run(&h, "throw new TypeError('mine')").await;
    assert_eq!(failed(&r), "TypeError: mine");
    let (r, _) = run(&h, "await new Promise(() => {})").await;
    assert!(failed(&r).contains("nothing can settle"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_plain_json_comes_back() {
    let h = Harness::workflows(json!({}));
    let (r, _) = run(&h, "return { ok: 1, f: () => 1 }").await;
    assert_eq!(
        failed(&r),
        "the workflow's return value is not plain JSON data \u{2014} workflow result.f: functions are not plain JSON data. Return only JSON-serializable objects/arrays/scalars."
    );
    let (r, _) = run(&h, "return [1, new Map()]").await;
    assert!(failed(&r).contains("workflow result[1]: only plain objects and arrays"));
    let (r, _) = run(&h, "const a = {}; a.self = a; return a").await;
    assert!(failed(&r).contains("circular references"));
    let (r, _) = run(&h, "return NaN").await;
    assert!(failed(&r).contains("non-finite numbers"));
    let (r, _) = run(&h, "return { n: 1.5, s: 'x', l: [true, null], o: { } }").await;
    assert_eq!(
        r.value,
        json!({"n": 1.5, "s": "x", "l": [true, null], "o": {}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runaway_scripts_are_stopped() {
    let h = Harness::workflows(json!({"syncTimeoutMs": 300}));
    let started = Instant::now();
    let (r, _) = run(&h, "while (true) {}").await;
    assert_eq!(
        failed(&r),
        "the workflow script ran for more than 300ms without yielding (syncTimeoutMs); it was stopped"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    let subagents = h.root.get::<dsh_subagent::Subagents>().unwrap();
    let engine = WorkflowEngine::new(
        subagents,
        EngineConfig {
            memory_bytes: 32 * 1024 * 1024,
            sync_timeout: Duration::from_secs(60),
            ..EngineConfig::default()
        },
    );
    let notes = Arc::new(Notes::default());
    let r = run_on(
        &engine,
        spec(
            &h,
            "const keep = []; while (true) keep.push(new Array(100000).fill(7));",
            &notes,
        ),
    )
    .await;
    // QuickJS usually raises its out-of-memory error; when even that error cannot be
    // allocated it throws null, which the text then names too.
    let message = failed(&r);
    assert!(
        message == "the workflow script exceeded its memory limit (32 MiB heap); it was stopped"
            || message
                == "the workflow script failed with a null error value: it threw null, or it ran out of its memory limit (32 MiB heap)",
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_children_resolve_to_their_value() {
    let h = Harness::workflows(json!({}));
    h.model.script(
        "Classify",
        vec![
            support::calls(&[("c1", "structured_output", json!({"kind": "bug"}))]),
            text("done"),
        ],
    );
    h.model.script("Quiet", vec![text("no structure")]);
    let (r, notes) = run(
        &h,
        "const schema = { type: 'object', properties: { kind: { type: 'string' } }, required: ['kind'] };\nconst a = await agent('Classify', { schema, label: 'cls' });\nconst b = await agent('Quiet', { schema });\nreturn { a, b }",
    )
    .await;
    assert_eq!(r.value, json!({"a": {"kind": "bug"}, "b": null}), "{r:?}");
    let n = notes.all();
    assert!(n.contains(&"start 1 cls -".to_string()), "{n:?}");
    assert!(n.contains(&"end 1 completed".to_string()), "{n:?}");
    assert!(n.contains(&"end 2 failed".to_string()), "{n:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_a_run_cancels_every_child() {
    let h = Harness::workflows(json!({"maxConcurrentAgents": 4}));
    let sessions = record_sessions(&h.root);
    h.model.script("Hang 1", vec![hang()]);
    h.model.script("Hang 2", vec![hang()]);
    let notes = Arc::new(Notes::default());
    let s = spec(
        &h,
        "return await parallel([() => agent('Hang 1'), () => agent('Hang 2')])",
        &notes,
    );
    let parent_id = s.parent.id().to_string();
    let run = h.engine().start(s).await.unwrap();
    support::wait_for(|| {
        notes
            .all()
            .iter()
            .filter(|n| n.starts_with("start"))
            .count()
            == 2
    })
    .await;
    run.cancel("test stop");
    run.cancel("second reason loses");
    let r = tokio::time::timeout(Duration::from_secs(10), run.result())
        .await
        .unwrap();
    assert_eq!(r.stop_reason, RunStop::Cancelled);
    assert_eq!(
        r.error.as_deref(),
        Some("workflow run cancelled: test stop")
    );
    let n = notes.all();
    assert!(n.contains(&"end 1 cancelled".to_string()), "{n:?}");
    assert!(n.contains(&"end 2 cancelled".to_string()), "{n:?}");
    let children: Vec<_> = sessions
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.header().parent_session.as_deref() == Some(parent_id.as_str()))
        .cloned()
        .collect();
    assert_eq!(children.len(), 2);
    for c in children {
        let t = trace(&c.events());
        assert!(t.last().unwrap().starts_with("turn/end aborted"), "{t:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_concurrent_agents_bounds_the_children() {
    let h = Harness::workflows(json!({"maxConcurrentAgents": 1}));
    for k in ["Job 1", "Job 2", "Job 3"] {
        h.model.script(k, vec![text("ok")]);
    }
    let (r, notes) = run(
        &h,
        "return await parallel([1, 2, 3].map((i) => () => agent('Job ' + i)))",
    )
    .await;
    assert_eq!(r.value, json!(["ok", "ok", "ok"]), "{r:?}");
    // One slot: every child ends before the next one starts.
    let lifecycle: Vec<_> = notes
        .all()
        .into_iter()
        .filter(|n| n.starts_with("start") || n.starts_with("end"))
        .map(|n| n.split(' ').next().unwrap().to_string())
        .collect();
    assert_eq!(
        lifecycle,
        vec!["start", "end", "start", "end", "start", "end"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_script_has_no_host_apis() {
    let h = Harness::workflows(json!({}));
    let (r, _) = run(
        &h,
        "return [typeof setTimeout, typeof setInterval, typeof require, typeof fetch, typeof process, typeof std, typeof os, typeof console]",
    )
    .await;
    assert_eq!(r.value, json!(vec!["undefined"; 8]), "{r:?}");
    // The hooks cannot be replaced.
    let (r, _) = run(&h, "agent = 1; return typeof agent").await;
    assert_eq!(r.value, json!("function"), "{r:?}");
}

/// `stubborn {}`: ignores cancellation and returns only when the test releases it, so its
/// child outlives the run's `disposeGraceMs`.
struct Stubborn {
    schema: dsh_llm::ToolSchema,
    entered: Arc<std::sync::atomic::AtomicBool>,
    release: Arc<tokio::sync::Notify>,
}

impl dsh_tools::Tool for Stubborn {
    fn schema(&self) -> &dsh_llm::ToolSchema {
        &self.schema
    }
    fn execute(
        &self,
        _args: Value,
        _ctx: dsh_tools::ToolRunContext,
    ) -> dsh_kernel::BoxFuture<'static, Result<dsh_tools::ToolOutput, dsh_kernel::BoxError>> {
        let (entered, release) = (self.entered.clone(), self.release.clone());
        Box::pin(async move {
            entered.store(true, std::sync::atomic::Ordering::SeqCst);
            release.notified().await;
            Ok(dsh_tools::ToolOutput::text("finally"))
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_that_outlives_the_dispose_grace_is_ended_for_the_run_and_disposed_later() {
    let h = Harness::workflows(json!({"disposeGraceMs": 100}));
    let sessions = record_sessions(&h.root);
    let entered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let release = Arc::new(tokio::sync::Notify::new());
    h.root
        .get::<dsh_tools::ToolRegistry>()
        .unwrap()
        .register(
            &h.root,
            Arc::new(Stubborn {
                schema: dsh_llm::ToolSchema {
                    name: "stubborn".into(),
                    description: "stubborn".into(),
                    parameters: json!({"type": "object", "properties": {}}).into(),
                },
                entered: entered.clone(),
                release: release.clone(),
            }),
        )
        .unwrap();
    h.model.script(
        "Straggle",
        vec![
            support::calls(&[("c1", "stubborn", json!({}))]),
            text("done"),
        ],
    );
    let notes = Arc::new(Notes::default());
    let s = spec(&h, "return await agent('Straggle')", &notes);
    let parent_id = s.parent.id().to_string();
    let run = h.engine().start(s).await.unwrap();
    support::wait_for(|| entered.load(std::sync::atomic::Ordering::SeqCst)).await;
    run.cancel("test stop");
    let r = tokio::time::timeout(Duration::from_secs(10), run.result())
        .await
        .expect("the run settles without waiting for the straggler");
    assert_eq!(r.stop_reason, RunStop::Cancelled);
    // The run reported the child ended although its tool is still running.
    assert!(
        notes.all().contains(&"end 1 cancelled".to_string()),
        "{:?}",
        notes.all()
    );
    let child = sessions
        .lock()
        .unwrap()
        .iter()
        .find(|s| s.header().parent_session.as_deref() == Some(parent_id.as_str()))
        .cloned()
        .expect("the child session");
    assert!(
        !trace(&child.events())
            .iter()
            .any(|t| t.starts_with("turn/end")),
        "the straggler is still inside its turn"
    );
    // Once the tool lets go, the child's task finishes it: its log ends, and no second end
    // reaches the run's observer.
    release.notify_one();
    support::wait_for(|| {
        trace(&child.events())
            .iter()
            .any(|t| t.starts_with("turn/end"))
    })
    .await;
    let ends = notes.all().iter().filter(|n| n.starts_with("end")).count();
    assert_eq!(ends, 1, "{:?}", notes.all());
}
