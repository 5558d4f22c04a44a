//! `run_code` in the registry: what each mode presents, what a top-level call may name,
//! and a program's calls going through the pipeline (a pre-execute denial included).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use dsh_code_mode::{Limits, RunCodeTool};
use dsh_kernel::{BoxError, BoxFuture, Context, ListenOptions};
use dsh_llm::ToolSchema;
use dsh_tools::{
    ObjectSchema, PreExecute, PreToolDecision, Prop, Tool, ToolExecution, ToolOutput, ToolRegistry,
    ToolRunContext, ToolsMode,
};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

struct Echo(ToolSchema);

impl Tool for Echo {
    fn schema(&self) -> &ToolSchema {
        &self.0
    }
    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        Box::pin(async move {
            ctx.set_value(json!({"echoed": args["text"]}));
            Ok(ToolOutput::text("echo text"))
        })
    }
}

fn setup(mode: ToolsMode) -> (Context, Arc<ToolRegistry>) {
    let ctx = Context::new_root();
    let registry = ToolRegistry::new();
    registry.set_mode(mode);
    ctx.provide(registry.clone()).unwrap();
    for name in ["echo", "plain"] {
        let schema = ToolSchema {
            name: name.into(),
            description: "echo".into(),
            parameters: ObjectSchema::new()
                .optional("text", Prop::string("what"))
                .to_value()
                .into(),
        };
        registry.register(&ctx, Arc::new(Echo(schema))).unwrap();
    }
    registry
        .register_code_tool(
            &ctx,
            Arc::new(dsh_tools::Typed::new(RunCodeTool::new(Limits::default())).unwrap()),
        )
        .unwrap();
    (ctx, registry)
}

fn names(registry: &ToolRegistry, ctx: &Context) -> Vec<String> {
    registry.schemas(ctx).into_iter().map(|s| s.name).collect()
}

fn text(result: &dsh_tools::ToolResult) -> String {
    match &result.content[0] {
        dsh_llm::ContentBlock::Text { text } => text.clone(),
        other => format!("{other:?}"),
    }
}

#[tokio::test]
async fn each_mode_presents_its_tools() {
    let (ctx, registry) = setup(ToolsMode::Native);
    assert_eq!(names(&registry, &ctx), vec!["echo", "plain"]);
    registry.set_mode(ToolsMode::Code);
    assert_eq!(names(&registry, &ctx), vec!["run_code"]);
    registry.set_mode(ToolsMode::Both);
    assert_eq!(names(&registry, &ctx), vec!["echo", "plain", "run_code"]);
}

#[tokio::test]
async fn code_mode_refuses_direct_calls_and_runs_programs() {
    let (ctx, registry) = setup(ToolsMode::Code);
    let direct = registry
        .execute(ToolExecution::new(
            "c0",
            "echo",
            json!({"text": "x"}),
            ctx.clone(),
        ))
        .await;
    assert!(direct.is_error);
    assert_eq!(text(&direct), "Error: unknown tool \"echo\"");

    // A pre-execute policy applies to the program's calls as to native ones.
    ctx.on_waterfall::<PreExecute>(ListenOptions::default(), |exec, next| {
        let name = exec.name.clone();
        Box::pin(async move {
            if name == "plain" {
                return Ok(PreToolDecision::Deny {
                    reason: "plain is not allowed".into(),
                });
            }
            next.run().await
        })
    })
    .unwrap();
    let code = "const a = await tools.echo({text: 'hi'});\n\
        let denied; try { await tools.plain({}); } catch (e) { denied = e.message; }\n\
        let nested; try { await tools.run_code({}); } catch (e) { nested = String(e); }\n\
        return {a, denied, nested};";
    let result = registry
        .execute(ToolExecution::new(
            "c1",
            "run_code",
            json!({"code": code, "description": "Echo once"}),
            ctx.clone(),
        ))
        .await;
    assert!(!result.is_error, "{}", text(&result));
    assert_eq!(
        text(&result),
        "{\n  \"a\": {\n    \"echoed\": \"hi\"\n  },\n  \"denied\": \"plain is not allowed\",\n  \"nested\": \"TypeError: not a function\"\n}"
    );
}

#[tokio::test]
async fn a_failed_program_is_a_code_run_failure() {
    let (ctx, registry) = setup(ToolsMode::Both);
    let result = registry
        .execute(ToolExecution::new(
            "c1",
            "run_code",
            json!({"code": "console.log('a'); console.log({b: 1}); throw new Error('boom')", "description": "Fail"}),
            ctx.clone(),
        ))
        .await;
    assert!(result.is_error);
    let t = text(&result);
    assert!(
        t.starts_with("Error: code run failed (exception): Error: boom\n"),
        "{t}"
    );
    assert!(t.ends_with("\nCaptured output:\na\n{\"b\":1}"), "{t}");
    assert_eq!(
        result.error.unwrap().info.unwrap().code,
        "CODE_RUN_FAILED".to_string()
    );
    let empty = registry
        .execute(ToolExecution::new(
            "c2",
            "run_code",
            json!({"code": "", "description": "Nothing"}),
            ctx.clone(),
        ))
        .await;
    assert_eq!(text(&empty), "(run_code completed with no output)");
    let no_label = registry
        .execute(ToolExecution::new(
            "c3",
            "run_code",
            json!({"code": "", "description": "  "}),
            ctx,
        ))
        .await;
    assert_eq!(
        text(&no_label),
        "Error: description is empty: say in a few words what the program does"
    );
}
