//! `todo_write`: validation, the durable `todo/write` event and the summary text.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::support;

use pretty_assertions::assert_eq;
use serde_json::json;
use support::{Harness, ok, outcome, plain_error};

#[tokio::test]
async fn writes_the_list_to_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[(
        "@deepseek-ai/dsh-tool-todo",
        json!({"allowParallelInProgress": true}),
    )]);
    let session = h.start_session(dir.path());
    let todos = json!({"todos": [
        {"content": " Plan ", "status": "completed"},
        {"content": "Build", "status": "in_progress"},
        {"content": "Test", "status": "in_progress"},
        {"content": "Ship", "status": "pending"}]});
    assert_eq!(
        outcome(&h.call("todo_write", todos).await),
        ok("Updated todo list: 1 pending, 2 in progress, 1 completed.")
    );
    let last = session.events().last().cloned().unwrap();
    assert_eq!(last.event_type, "todo/write");
    assert_eq!(
        last.data,
        json!({"todos": [
            {"content": "Plan", "status": "completed"}, {"content": "Build", "status": "in_progress"},
            {"content": "Test", "status": "in_progress"}, {"content": "Ship", "status": "pending"}]})
    );
    assert_eq!(
        outcome(&h.call("todo_write", json!({"todos": []})).await),
        ok("Updated todo list: 0 pending, 0 in progress, 0 completed.")
    );
}

#[tokio::test]
async fn validation_errors_read_like_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let mut h = Harness::new(&[(
        "@deepseek-ai/dsh-tool-todo",
        json!({"allowParallelInProgress": false}),
    )]);
    assert_eq!(
        outcome(
            &h.call(
                "todo_write",
                json!({"todos": [{"content": "a", "status": "pending"}]})
            )
            .await
        ),
        plain_error("todo_write requires an owning agent session")
    );
    h.start_session(dir.path());
    let call = |todos| h.call("todo_write", json!({"todos": todos}));
    assert_eq!(
        outcome(&call(json!([{"content": "  ", "status": "pending"}])).await),
        plain_error("invalid todo: `content` must be a non-empty string")
    );
    assert_eq!(
        outcome(&call(json!([{"content": "a\"b", "status": "pending"}, {"content": "a\"b ", "status": "completed"}])).await),
        plain_error("invalid todos: duplicate content \"a\\\"b\"")
    );
    assert_eq!(
        outcome(&call(json!([{"content": "a", "status": "in_progress"}, {"content": "b", "status": "in_progress"}])).await),
        plain_error("invalid todos: 2 tasks are in_progress, but only one may be at a time; keep one in_progress and set the others to pending or completed")
    );
    let (is_error, message, _) = outcome(&call(json!([{"content": "a", "status": "done"}])).await);
    assert_eq!(
        (is_error, message.as_str()),
        (
            true,
            "Error: invalid arguments: \"todos[0].status\" must be one of [\"pending\",\"in_progress\",\"completed\"]"
        )
    );
    let (_, message, _) =
        outcome(&call(json!([{"content": "a", "status": "pending", "extra": 1}])).await);
    assert_eq!(
        message,
        "Error: invalid arguments: \"todos[0].extra\" is not a declared property (additionalProperties: false)"
    );
}

#[tokio::test]
async fn description_follows_the_parallel_flag() {
    let single = Harness::new(&[(
        "@deepseek-ai/dsh-tool-todo",
        json!({"allowParallelInProgress": false}),
    )]);
    let parallel = Harness::new(&[(
        "@deepseek-ai/dsh-tool-todo",
        json!({"allowParallelInProgress": true}),
    )]);
    let description = |h: &Harness| {
        h.registry
            .get(&h.root, "todo_write")
            .unwrap()
            .schema()
            .description
            .clone()
    };
    assert!(description(&single).contains("Only ONE"));
    assert!(!description(&parallel).contains("Only ONE"));
    if let Some(pinned) = support::pinned_parameters("text-turn", "todo_write") {
        assert_eq!(
            support::shape(&parallel.parameters("todo_write")),
            support::shape(&pinned)
        );
    }
}
