//! The system-prompt section that tells the model how to write a program and which tools
//! it can call (their parameter schemas, as JSON Schema).

use dsh_llm::ToolSchema;
use dsh_tools::{RUN_CODE, ToolsMode};

/// The section for `mode` listing `tools` (the visible native tools).
pub fn render_sdk(mode: ToolsMode, tools: &[ToolSchema]) -> String {
    let mut out = String::new();
    if mode == ToolsMode::Code {
        out.push_str(
            "`run_code` is the only tool you can call directly; a call naming any other tool \
fails. Call the tools listed below from inside the program.\n\n",
        );
    }
    out.push_str(
        "## Writing code for run_code\n\n\
`run_code` takes `code` (the body of an async JavaScript function) and `description` (a short \
summary). In the program:\n\n\
- Call a tool as `await tools.name(args)` (or `tools[\"name\"](args)`); it resolves to the \
tool's JSON value (a tool without a typed value resolves to its result text). Arguments must \
be plain JSON.\n\
- A failed call rejects with `ToolCallError` (`toolName`, `message`); catch it to go on.\n\
- Calls run one at a time in the order the program makes them.\n\
- Output is what you `console.log(...)` and `return`. Images a tool returns are attached \
after the run; every other intermediate result stays out of the conversation.\n\
- The program has no filesystem, network, timers or modules of its own: use the tools. It \
is stopped when it runs too long or allocates too much.\n\nThe available tools:\n",
    );
    for tool in tools.iter().filter(|t| t.name != RUN_CODE) {
        let params = serde_json::to_value(&tool.parameters)
            .map(|v| dsh_kernel::json::to_string(&v))
            .unwrap_or_default();
        let first_line = tool.description.lines().next().unwrap_or_default();
        out.push_str(&format!(
            "\n- `tools.{}(args)`: {first_line}\n  args: {params}\n",
            tool.name
        ));
    }
    out
}
