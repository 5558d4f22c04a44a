//! The engine on its own: a fake host answers tool calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use dsh_code_mode::{FailureKind, HostReply, Limits, RunOutcome, run_program};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

/// Runs `program` with one binding, `echo`, that resolves to `{echo: args}` (or rejects
/// when `args.fail` is set).
fn run(program: &str, limits: Limits) -> (RunOutcome, Vec<Value>) {
    let (call_tx, mut call_rx) = tokio::sync::mpsc::unbounded_channel();
    let (reply_tx, reply_rx) = std::sync::mpsc::channel();
    let program = program.to_string();
    let engine = std::thread::spawn(move || {
        run_program(
            &program,
            &["echo".to_string()],
            &limits,
            call_tx,
            reply_rx,
            Arc::new(AtomicBool::new(false)),
        )
    });
    let mut seen = Vec::new();
    while let Some(call) = call_rx.blocking_recv() {
        seen.push(call.arguments.clone());
        let reply = if call.arguments.get("fail").is_some() {
            HostReply::Rejected {
                id: call.id,
                message: "it failed".into(),
            }
        } else {
            HostReply::Resolved {
                id: call.id,
                value: json!({"echo": call.arguments}),
            }
        };
        let _ = reply_tx.send(reply);
    }
    (engine.join().unwrap(), seen)
}

#[test]
fn a_program_calls_a_tool_logs_and_returns() {
    let (out, calls) = run(
        "const a = await tools.echo({x: 1});\nconsole.log('captured', 2);\nconst [b, c] = await Promise.all([tools.echo({x: 2}), tools.echo({x: 3})]);\nreturn a.echo.x + b.echo.x + c.echo.x;",
        Limits::default(),
    );
    assert_eq!(
        out,
        RunOutcome {
            logs: vec!["captured 2".into()],
            value: Some(json!(6)),
            error: None
        }
    );
    assert_eq!(
        calls,
        vec![json!({"x": 1}), json!({"x": 2}), json!({"x": 3})]
    );
}

#[test]
fn a_rejected_call_is_a_catchable_tool_call_error() {
    let (out, _) = run(
        "try { await tools.echo({fail: true}); } catch (e) { return [e.name, e.toolName, e.message, e instanceof ToolCallError]; }",
        Limits::default(),
    );
    assert_eq!(
        out.value,
        Some(json!(["ToolCallError", "echo", "it failed", true]))
    );
}

#[test]
fn a_thrown_error_is_an_exception_with_the_logs() {
    let (out, _) = run(
        "console.log('before'); throw new TypeError('boom');",
        Limits::default(),
    );
    assert_eq!(out.logs, vec!["before".to_string()]);
    let error = out.error.unwrap();
    assert_eq!(error.kind, FailureKind::Exception);
    assert!(
        error.message.starts_with("TypeError: boom"),
        "{}",
        error.message
    );
}

#[test]
fn a_syntax_error_is_an_exception() {
    let (out, _) = run("return )(;", Limits::default());
    let error = out.error.unwrap();
    assert_eq!(error.kind, FailureKind::Exception);
    assert!(
        error.message.starts_with("SyntaxError"),
        "{}",
        error.message
    );
}

#[test]
fn an_infinite_loop_is_stopped_at_its_compute_budget() {
    let limits = Limits {
        compute: Duration::from_millis(200),
        ..Limits::default()
    };
    let started = std::time::Instant::now();
    let (out, _) = run("console.log('spin'); while (true) {}", limits);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(out.logs, vec!["spin".to_string()]);
    assert_eq!(
        out.error.unwrap(),
        dsh_code_mode::RunFailure {
            kind: FailureKind::Timeout,
            message: "compute budget exhausted (200ms busy)".into()
        }
    );
}

#[test]
fn a_loop_that_catches_the_interrupt_is_still_stopped() {
    let limits = Limits {
        compute: Duration::from_millis(200),
        ..Limits::default()
    };
    let (out, _) = run("for (;;) { try { while (true) {} } catch (e) {} }", limits);
    assert_eq!(out.error.unwrap().kind, FailureKind::Timeout);
}

/// Stopped inside a promise job (after an `await`): the engine must survive its own
/// teardown (rquickjs 0.9 hands out an unowned context for a failed job).
#[test]
fn a_loop_after_an_await_is_stopped_without_aborting() {
    let limits = Limits {
        compute: Duration::from_millis(200),
        ..Limits::default()
    };
    let (out, _) = run("await null; for (;;) {}", limits);
    assert_eq!(out.error.unwrap().kind, FailureKind::Timeout);
    let (out, _) = run("await null; return 7;", Limits::default());
    assert!(out.error.is_none());
}

#[test]
fn unbounded_allocation_is_stopped_at_the_memory_limit() {
    let limits = Limits {
        memory_bytes: 16 * 1024 * 1024,
        ..Limits::default()
    };
    let (out, _) = run(
        "const a = []; for (;;) { a.push('x'.repeat(1024) + a.length); }",
        limits,
    );
    let error = out.error.unwrap();
    assert_eq!(error.kind, FailureKind::WorkerExit, "{}", error.message);
    assert_eq!(
        error.message,
        "memory limit reached (16 MiB heap); the program was stopped"
    );
}

#[test]
fn no_filesystem_network_or_timers_exist() {
    let (out, _) = run(
        "return [typeof require, typeof fetch, typeof setTimeout, typeof std, typeof os, typeof process];",
        Limits::default(),
    );
    assert_eq!(
        out.value,
        Some(json!([
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined",
            "undefined"
        ]))
    );
}

#[test]
fn an_unsettlable_promise_and_bad_output_are_reported() {
    let (out, _) = run("await new Promise(() => {});", Limits::default());
    assert_eq!(out.error.unwrap().kind, FailureKind::Exception);
    let (out, _) = run("return undefined;", Limits::default());
    assert_eq!(out, RunOutcome::default());
    let (out, _) = run("return 1n;", Limits::default());
    assert_eq!(out.error.unwrap().kind, FailureKind::InvalidOutput);
}

#[test]
fn a_typescript_program_runs_type_stripped() {
    let (out, calls) = run(
        "interface Echoed { echo: { x: number } }\n\
         type Pair = [number, number];\n\
         const twice = async (x: number): Promise<number> => {\n\
           const r = (await tools.echo({ x })) as Echoed;\n\
           return r.echo.x * 2;\n\
         };\n\
         class Acc<T> { private items: T[] = []; add(item: T): this { this.items.push(item); return this; } get size(): number { return this.items.length; } }\n\
         const pair: Pair = [await twice(1), await twice(2)];\n\
         const acc = new Acc<number>().add(pair[0]!).add(pair[1]!);\n\
         console.log(`size: ${acc.size as number}`);\n\
         return { pair, ok: pair.every((n: number) => n > 0 ? true : false) } satisfies Record<string, unknown>;",
        Limits::default(),
    );
    assert_eq!(out.error, None, "{out:?}");
    assert_eq!(out.logs, vec!["size: 2".to_string()]);
    assert_eq!(out.value, Some(json!({"pair": [2, 4], "ok": true})));
    assert_eq!(calls, vec![json!({"x": 1}), json!({"x": 2})]);
}

#[test]
fn errors_in_a_typescript_program_keep_their_line() {
    let (out, _) = run(
        "const a: number = 1;\nconst b = a as any;\nnull.boom;",
        Limits::default(),
    );
    let error = out.error.unwrap();
    assert_eq!(error.kind, FailureKind::Exception);
    // The program's third line is the wrapper's fourth.
    assert!(
        error.message.contains("eval_script:4:1"),
        "{}",
        error.message
    );
}

#[test]
fn an_enum_is_refused_by_name() {
    let (out, calls) = run(
        "await tools.echo({});\nenum Color { Red }\nreturn Color.Red;",
        Limits::default(),
    );
    let error = out.error.unwrap();
    assert_eq!(error.kind, FailureKind::Exception);
    assert!(
        error
            .message
            .starts_with("SyntaxError: TypeScript enum (line 2, column 1)"),
        "{}",
        error.message
    );
    assert!(calls.is_empty(), "nothing ran");
}
