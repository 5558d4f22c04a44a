//! The `tools:code-mode` section: JSON Schema rendered as TypeScript, tools declared in
//! lexicographic order, byte-identical for the same tool set.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use dsh_code_mode::{json_schema_to_ts, render_sdk};
use dsh_llm::ToolSchema;
use dsh_tools::{ObjectSchema, Prop, RUN_CODE, ToolsMode};
use pretty_assertions::assert_eq;
use serde_json::json;

fn ts(schema: serde_json::Value) -> String {
    json_schema_to_ts(&schema, 0)
}

#[test]
fn scalars_literals_and_unions() {
    let cases = [
        (json!({"type": "string"}), "string"),
        (json!({"type": "number"}), "number"),
        (json!({"type": "integer"}), "number"),
        (json!({"type": "boolean"}), "boolean"),
        (json!({"type": "null"}), "null"),
        (
            json!({"type": "string", "enum": ["a", "b"]}),
            "\"a\" | \"b\"",
        ),
        (
            json!({"enum": [1, "x", null, true]}),
            "1 | \"x\" | null | true",
        ),
        (json!({"type": "string", "const": "only"}), "\"only\""),
        (json!({"const": 3}), "3"),
        (json!({"type": ["string", "null"]}), "string | null"),
        (
            json!({"oneOf": [{"type": "string"}, {"type": "number"}]}),
            "string | number",
        ),
        (
            json!({"anyOf": [{"const": "a"}, {"type": "boolean"}]}),
            "\"a\" | boolean",
        ),
        (json!({}), "JsonValue"),
        (json!({"description": "anything"}), "JsonValue"),
        (json!(true), "JsonValue"),
    ];
    for (schema, want) in cases {
        assert_eq!(ts(schema.clone()), want, "{schema}");
    }
}

#[test]
fn arrays_and_objects() {
    assert_eq!(ts(json!({"type": "array"})), "JsonValue[]");
    assert_eq!(
        ts(json!({"type": "array", "items": {"type": "string"}})),
        "string[]"
    );
    assert_eq!(
        ts(json!({"type": "array", "items": {"enum": ["a", "b"]}})),
        "(\"a\" | \"b\")[]"
    );
    assert_eq!(
        ts(json!({"type": "array", "items": {"type": "array", "items": {"type": "number"}}})),
        "number[][]"
    );
    assert_eq!(ts(json!({"type": "object"})), "Record<string, JsonValue>");
    assert_eq!(
        ts(json!({"type": "object", "additionalProperties": false})),
        "Record<string, never>"
    );
    let schema = json!({
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Where   it is.\n  Second line */ end"},
            "my-key": {"type": "integer"},
            "nested": {
                "type": "object",
                "additionalProperties": false,
                "properties": {"flag": {"type": "boolean", "description": "On?"}},
                "required": ["flag"]
            }
        },
        "required": ["path"]
    });
    assert_eq!(
        ts(schema),
        "{\n  /** Where it is. Second line *\\/ end */\n  path: string;\n  \"my-key\"?: number;\n  nested?: {\n    /** On? */\n    flag: boolean;\n  };\n} & Record<string, JsonValue>"
    );
    assert_eq!(
        json_schema_to_ts(
            &json!({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": false}),
            1
        ),
        "{\n    a?: string;\n  }"
    );
}

#[test]
fn unsupported_nodes_degrade_to_unknown() {
    let cases = [
        json!({"$ref": "#/defs/x"}),
        json!({"allOf": [{"type": "string"}]}),
        json!({"not": {"type": "string"}}),
        json!({"type": "date"}),
        json!({"type": 5}),
        json!({"enum": [{"a": 1}]}),
        json!({"oneOf": []}),
        json!("string"),
        json!(null),
    ];
    for schema in cases {
        assert_eq!(ts(schema.clone()), "unknown", "{schema}");
    }
    // Only the unsupported node degrades.
    assert_eq!(
        ts(json!({"type": "array", "items": {"$ref": "#/x"}})),
        "unknown[]"
    );
    // Nesting past any sane depth is cut off, never a stack overflow.
    let mut deep = json!({"type": "string"});
    for _ in 0..500 {
        deep = json!({"type": "array", "items": deep});
    }
    assert!(ts(deep).contains("unknown"));
}

fn tool(name: &str, description: &str) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: description.into(),
        parameters: ObjectSchema::new()
            .required("file_path", Prop::string("Path to read."))
            .optional("limit", Prop::integer("How many lines."))
            .to_value()
            .into(),
    }
}

#[test]
fn the_section_declares_every_tool_in_order() {
    let tools = vec![
        tool("read", "Read a file.\nMore detail."),
        tool("my-tool", "An exotic name."),
        tool(RUN_CODE, "Not declared."),
        tool("bash", "Run a command."),
    ];
    // `read` declares an output schema; the others resolve to `JsonValue`.
    let outputs = BTreeMap::from([(
        "read".to_string(),
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": ["path", "lines"],
            "properties": {
                "path": {"type": "string"},
                "lines": {"type": "array", "items": {
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["number", "text"],
                    "properties": {"number": {"type": "integer"}, "text": {"type": "string"}}
                }},
                "note": {"oneOf": [{"type": "string"}, {"type": "null"}]}
            }
        }),
    )]);
    let section = render_sdk(ToolsMode::Code, &tools, &outputs);
    assert!(section.starts_with("`run_code` is the only tool you can call directly"));
    assert!(section.contains("async TypeScript function"));
    assert!(section.contains("ToolCallError"));
    assert!(section.contains("Promise.all"));
    assert!(section.contains("no filesystem, network, timers or modules"));
    assert!(section.contains("attached after the run"));
    let code = section.split("```ts\n").nth(1).unwrap();
    let want = "type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue }

interface ToolArgsMap {
  /** Run a command. */
  bash: {
    /** Path to read. */
    file_path: string;
    /** How many lines. */
    limit?: number;
  } & Record<string, JsonValue>;
  /** An exotic name. */
  \"my-tool\": {
    /** Path to read. */
    file_path: string;
    /** How many lines. */
    limit?: number;
  } & Record<string, JsonValue>;
  /** Read a file. More detail. */
  read: {
    /** Path to read. */
    file_path: string;
    /** How many lines. */
    limit?: number;
  } & Record<string, JsonValue>;
}

interface ToolOutputMap {
  bash: JsonValue;
  \"my-tool\": JsonValue;
  read: {
    path: string;
    lines: {
      number: number;
      text: string;
    }[];
    note?: string | null;
  };
}

type ToolName = keyof ToolOutputMap

declare class ToolCallError extends Error {
  readonly name: \"ToolCallError\";
  readonly toolName: ToolName;
}

declare const tools: {
  [K in ToolName]: (args: ToolArgsMap[K]) => Promise<ToolOutputMap[K]>;
}
```";
    assert_eq!(code, want);

    // Deterministic: any input order renders the same bytes.
    let mut reversed = tools.clone();
    reversed.reverse();
    assert_eq!(render_sdk(ToolsMode::Code, &reversed, &outputs), section);
    assert_eq!(render_sdk(ToolsMode::Code, &tools, &outputs), section);

    // Under `both` the model may also call the tools directly.
    let both = render_sdk(ToolsMode::Both, &tools, &outputs);
    assert!(both.starts_with("## Writing code for run_code"));
}

#[test]
fn an_empty_tool_set_still_declares_the_api() {
    let section = render_sdk(ToolsMode::Both, &[], &BTreeMap::new());
    assert!(section.contains("interface ToolArgsMap {}\n\ninterface ToolOutputMap {}"));
}

#[test]
fn the_declarations_themselves_strip_to_nothing() {
    // The declaration block is valid erasable TypeScript: a model pasting it into a program
    // gets a program that still runs.
    let section = render_sdk(
        ToolsMode::Both,
        &[tool("read", "Read a file.")],
        &BTreeMap::from([(
            "read".to_string(),
            json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        )]),
    );
    let code = section
        .split("```ts\n")
        .nth(1)
        .unwrap()
        .trim_end_matches("```");
    let stripped = dsh_code_mode::strip_types(code).unwrap();
    assert_eq!(stripped.trim(), "");
}
