//! The session tools over a live session: exact reads, traces, search, and their errors.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_context::query::{IndexPath, QueryConfig, SearchIndex, SessionQuery, ToolConfig, tools};
use dsh_kernel::Context;
use dsh_llm::Message;
use dsh_session::{
    LiveSession, SessionHeader, SessionSource, SessionStore, SurfaceIntent, system_clock,
};
use dsh_tools::{ToolExecution, ToolRegistry, ToolResult};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Fixture {
    root: Context,
    registry: Arc<ToolRegistry>,
    session: Arc<LiveSession>,
}

fn fixture() -> Fixture {
    let root = Context::new_root();
    let store = SessionStore::new(system_clock());
    root.provide(store.clone()).unwrap();
    let mut header = SessionHeader::new("s-1", 0);
    header.cwd = Some("/work".into());
    let session = store.create(&root, header, SessionSource::Fresh).unwrap();
    session
        .append("turn/start", json!({"turn": 1}), None)
        .unwrap();
    session
        .append("step/start", json!({"turn": 1, "step": 1}), None)
        .unwrap();
    let m = Message::user_text("please find the needle in the haystack");
    session
        .append("user/message", m.to_value(), Some(SurfaceIntent::append()))
        .unwrap();
    session
        .append(
            "session/title",
            json!({"title": "Needle hunt", "messageSeqs": [2], "source": {"kind": "fallback"}}),
            None,
        )
        .unwrap();
    session
        .append("step/end", json!({"turn": 1, "step": 1}), None)
        .unwrap();
    session
        .append("step/start", json!({"turn": 1, "step": 2}), None)
        .unwrap();
    let service = SessionQuery::new(
        root.clone(),
        QueryConfig {
            read_window_max: 50,
            snippet_chars: 240,
        },
        Some(SearchIndex::new(IndexPath::Memory)),
    );
    let registry = ToolRegistry::new();
    let config = ToolConfig {
        max_search_results: 100,
        search_timeout_ms: 30_000,
    };
    for tool in tools(&service, config).unwrap() {
        registry.register(&root, Arc::new(tool)).unwrap();
    }
    Fixture {
        root,
        registry,
        session,
    }
}

async fn call(f: &Fixture, name: &str, args: Value) -> ToolResult {
    let mut exec = ToolExecution::new("c1", name, args, f.root.clone());
    exec.session = Some(f.session.clone());
    f.registry.execute(exec).await
}

fn text(r: &ToolResult) -> String {
    r.content.iter().filter_map(|b| b.as_text()).collect()
}

#[tokio::test]
async fn event_read_prints_the_event_and_its_neighbours() {
    let f = fixture();
    let r = call(
        &f,
        "session_event_read",
        json!({"seq": 3, "before": 1, "after": 1}),
    )
    .await;
    assert!(!r.is_error, "{}", text(&r));
    let time = f.session.events()[3].time;
    let iso2 = dsh_context::query::iso_millis(f.session.events()[2].time);
    let iso4 = dsh_context::query::iso_millis(f.session.events()[4].time);
    assert_eq!(
        text(&r),
        format!(
            "Session s-1 — Needle hunt\nTarget event seq 3:\n```json\n{{\n  \"type\": \"session/title\",\n  \"seq\": 3,\n  \"time\": {time},\n  \"data\": {{\n    \"title\": \"Needle hunt\",\n    \"messageSeqs\": [\n      2\n    ],\n    \"source\": {{\n      \"kind\": \"fallback\"\n    }}\n  }}\n}}\n```\n\nBefore:\n- seq 2 | user/message | {iso2}\n  please find the needle in the haystack\n\nAfter:\n- seq 4 | step/end | {iso4} | (no semantic text)"
        )
    );
}

#[tokio::test]
async fn searches_find_earlier_events_but_not_the_calling_step() {
    let f = fixture();
    let r = call(&f, "session_event_search", json!({"query": "  NEEDLE  "})).await;
    assert!(!r.is_error, "{}", text(&r));
    let got = text(&r);
    assert!(got.starts_with("Session s-1 — Needle hunt\n\nEvent search results (1):\n1. seq 2 | user/message | current | "), "{got}");
    assert!(
        got.ends_with("   Snippet: please find the needle in the haystack"),
        "{got}"
    );
    // Events of the calling step (after the last step/start) are excluded.
    let m = Message::user_text("another needle, in the current step");
    f.session
        .append("user/message", m.to_value(), Some(SurfaceIntent::append()))
        .unwrap();
    let again = text(&call(&f, "session_event_search", json!({"query": "needle"})).await);
    assert!(again.contains("Event search results (1):"), "{again}");
    // Query syntax is data: quotes, operators and punctuation-only queries never fail.
    for q in ["\"needle", "needle OR haystack", "!!!", "NEAR(a b)", "*"] {
        let r = call(&f, "session_event_search", json!({"query": q})).await;
        assert!(!r.is_error, "{q}: {}", text(&r));
    }
    let none = text(&call(&f, "session_event_search", json!({"query": "absent words"})).await);
    assert_eq!(
        none,
        "Session s-1 — Needle hunt\n\nNo prior event matches found."
    );
}

#[tokio::test]
async fn bad_arguments_and_missing_targets_are_errors_with_codes() {
    let f = fixture();
    let cases = [
        (
            "session_event_read",
            json!({"seq": 99}),
            "SESSION_QUERY_EVENT_NOT_FOUND",
        ),
        (
            "session_event_read",
            json!({"seq": 1, "before": 51}),
            "SESSION_QUERY_INVALID_WINDOW",
        ),
        (
            "session_event_read",
            json!({"seq": 1, "session_id": "nope"}),
            "SESSION_QUERY_SESSION_NOT_FOUND",
        ),
        (
            "session_event_search",
            json!({"query": "   "}),
            "SESSION_QUERY_INVALID_QUERY",
        ),
        (
            "session_event_search",
            json!({"query": "x", "time_from": "yesterday"}),
            "SESSION_QUERY_INVALID_FILTER",
        ),
        (
            "session_event_search",
            json!({"query": "x", "seq_from": 5, "seq_to": 1}),
            "SESSION_QUERY_INVALID_FILTER",
        ),
    ];
    for (tool, args, code) in cases {
        let r = call(&f, tool, args.clone()).await;
        assert!(r.is_error, "{tool} {args}");
        let info = r.error.and_then(|e| e.info).map(|i| i.code);
        assert_eq!(info.as_deref(), Some(code), "{tool} {args}");
    }
}

#[tokio::test]
async fn traces_name_lineage_and_relationships() {
    let f = fixture();
    let r = text(&call(&f, "session_trace", json!({})).await);
    assert!(
        r.contains(
            "Ancestors (nearest first):\n- none (target is a root session)\n\nDescendants:\n- none"
        ),
        "{r}"
    );
    let e = text(&call(&f, "session_event_trace", json!({"seq": 2})).await);
    assert!(
        e.contains("Replaced by: none\nReplacement chain: none"),
        "{e}"
    );
}
