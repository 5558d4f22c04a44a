//! The system-prompt section that tells the model how to write a program and declares the
//! tools it can call, as generated TypeScript: `ToolArgsMap` (each tool's parameters),
//! `ToolOutputMap` (what each call resolves to), `ToolName`, `ToolCallError` and `tools`.
//!
//! A tool's `ToolOutputMap` entry is rendered from the output schema it declares
//! (`Tool::output_schema`, kept out of the provider-facing `ToolSchema`); a tool that declares
//! none is `JsonValue`. Tools are declared in lexicographic order, so an unchanged tool set
//! renders byte-identical text.

use std::collections::BTreeMap;

use dsh_llm::ToolSchema;
use dsh_tools::{RUN_CODE, ToolsMode};
use serde_json::Value;

use crate::ts_types::{doc_line, json_schema_to_ts, render_key};

const INSTRUCTIONS: &str = "## Writing code for run_code

`run_code` takes `code`, the body of an async TypeScript function, and `description`, a short \
summary of what it does. Types are only erased before the program runs, never checked, so \
write erasable TypeScript: annotations, interfaces, type aliases, generics, `as` and `!` are \
fine; `enum`, `namespace` and constructor parameter properties are refused. In the program:

- Call a tool as `await tools.name(args)`, or `tools[\"odd-name\"](args)` when the name is not \
an identifier. A call resolves to the tool's JSON value (a tool without a typed value resolves \
to its result text). Arguments must be plain JSON.
- A failed call rejects with a `ToolCallError` (`toolName` names the tool, `message` says what \
went wrong); catch it to carry on.
- Calls that only read (reading files, searching, subagents, web tools) may run together under \
`Promise.all`; any other call waits for the calls before it and runs alone, in the order the \
program made them. Use `await` to order dependent steps.
- The output is what you `console.log(...)` and what you `return`. An image a tool returns is \
attached after the run, so you see it at your next step; nothing else a tool returns reaches \
the conversation unless you print or return it, so print only what you need.
- The program has no filesystem, network, timers or modules of its own: do all IO through the \
tools. A program that runs too long or allocates too much is stopped.

The tools it can call:";

const JSON_VALUE: &str = "type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }";

/// The section for `mode` declaring `tools` (the visible native tools; `run_code` itself is
/// left out). `outputs` maps a tool name to its declared output schema; a tool absent from
/// it resolves to `JsonValue`.
pub fn render_sdk(
    mode: ToolsMode,
    tools: &[ToolSchema],
    outputs: &BTreeMap<String, Value>,
) -> String {
    let mut sorted: Vec<&ToolSchema> = tools.iter().filter(|t| t.name != RUN_CODE).collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let mut args = String::new();
    let mut output_entries = String::new();
    for tool in &sorted {
        let key = render_key(&tool.name);
        if let Some(doc) = doc_line(
            Some(&serde_json::Value::String(tool.description.clone())),
            1,
        ) {
            args.push_str(&doc);
            args.push('\n');
        }
        args.push_str(&format!(
            "  {key}: {};\n",
            json_schema_to_ts(&tool.parameters, 1)
        ));
        let output = match outputs.get(&tool.name) {
            Some(schema) => json_schema_to_ts(schema, 1),
            None => "JsonValue".to_string(),
        };
        output_entries.push_str(&format!("  {key}: {output};\n"));
    }
    let block = |name: &str, body: &str| {
        if body.is_empty() {
            format!("interface {name} {{}}")
        } else {
            format!("interface {name} {{\n{body}}}")
        }
    };
    let mut out = String::new();
    if mode == ToolsMode::Code {
        out.push_str(
            "`run_code` is the only tool you can call directly; a call naming any other tool \
fails. Call the tools declared below from inside the program.\n\n",
        );
    }
    out.push_str(INSTRUCTIONS);
    out.push_str("\n\n```ts\n");
    out.push_str(JSON_VALUE);
    out.push_str("\n\n");
    out.push_str(&block("ToolArgsMap", &args));
    out.push_str("\n\n");
    out.push_str(&block("ToolOutputMap", &output_entries));
    out.push_str(
        "\n\ntype ToolName = keyof ToolOutputMap\n\n\
declare class ToolCallError extends Error {\n  readonly name: \"ToolCallError\";\n  readonly toolName: ToolName;\n}\n\n\
declare const tools: {\n  [K in ToolName]: (args: ToolArgsMap[K]) => Promise<ToolOutputMap[K]>;\n}\n```",
    );
    out
}
