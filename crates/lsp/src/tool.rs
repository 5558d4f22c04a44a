//! The model-facing `lsp` tool (upstream's `tool-lsp`): one read-only tool with four
//! operations, one-based UTF-16 coordinates, the session workspace as the LSP workspace.

use std::sync::Arc;

use dsh_kernel::BoxError;
use dsh_tools::{Reply, ToolRunContext, TypedTool};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::render::{format_diagnostics, format_hover, format_locations};
use crate::service::{LspService, Operation, Position, Query, QueryResult, Range, lsp_error};

/// `tool-lsp` settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolLspConfig {
    pub max_locations: usize,
    pub max_result_chars: usize,
    pub timeout_ms: u64,
}

impl Default for ToolLspConfig {
    fn default() -> Self {
        Self {
            max_locations: 100,
            max_result_chars: 16_000,
            timeout_ms: 60_000,
        }
    }
}

/// The system-prompt guidance (`tool:lsp`).
pub const PROMPT_SECTION: &str = "For everyday navigation, search and read files. Turn to lsp when a text search gives ambiguous matches, or when a change depends on exact definitions, implementations or references. line and character are one-based, with character counted in UTF-16 units; a position that is not on a symbol can return nothing. findReferences lists the declaration too.";

const DESCRIPTION: &str = "Ask a language server about the symbol at a position: goToDefinition, findReferences, goToImplementation or hover. line and character are one-based, with character counted in UTF-16 units. findReferences lists the declaration too.";

/// The tool.
pub struct LspTool {
    service: Arc<LspService>,
    config: ToolLspConfig,
}

impl LspTool {
    pub fn new(service: Arc<LspService>, config: ToolLspConfig) -> Self {
        Self { service, config }
    }
}

// The arguments of `lsp` (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
pub struct LspArgs {
    /// goToDefinition, findReferences, goToImplementation, or hover.
    operation: LspOperation,
    /// The source file, absolute or relative to the workspace.
    file_path: String,
    /// One-based line of the cursor.
    line: f64,
    /// One-based UTF-16 column of the cursor.
    character: f64,
}

// The `lsp` operations, in `Operation::ALL`'s order (no doc: it would reach the schema).
#[derive(Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum LspOperation {
    GoToDefinition,
    FindReferences,
    GoToImplementation,
    Hover,
}

impl From<LspOperation> for Operation {
    fn from(op: LspOperation) -> Self {
        match op {
            LspOperation::GoToDefinition => Operation::GoToDefinition,
            LspOperation::FindReferences => Operation::FindReferences,
            LspOperation::GoToImplementation => Operation::GoToImplementation,
            LspOperation::Hover => Operation::Hover,
        }
    }
}

fn one_based(value: Option<f64>, name: &str) -> Result<u64, BoxError> {
    let v = value.unwrap_or(0.0);
    if v < 1.0 || v.fract() != 0.0 || v > 9_007_199_254_740_991.0 {
        return Err(format!("{name} must be a positive integer (one-based)").into());
    }
    Ok(v as u64)
}

/// The checks after the operation: a non-empty path, one-based integer coordinates.
fn checked_position(
    op: Operation,
    file_path: String,
    line: Option<f64>,
    character: Option<f64>,
) -> Result<(Operation, String, Position), BoxError> {
    if file_path.trim().is_empty() {
        return Err("file_path must be a non-empty string".into());
    }
    let line = one_based(line, "line")?;
    let character = one_based(character, "character")?;
    Ok((
        op,
        file_path,
        Position {
            line: line - 1,
            character: character - 1,
        },
    ))
}

/// Upstream's argument checks; the position becomes zero-based.
pub fn parse_args(args: &Value) -> Result<(Operation, String, Position), BoxError> {
    let op = args
        .get("operation")
        .and_then(Value::as_str)
        .and_then(Operation::parse)
        .ok_or_else(|| -> BoxError {
            "operation must be one of goToDefinition, findReferences, goToImplementation, hover"
                .into()
        })?;
    let file_path = args
        .get("file_path")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    checked_position(
        op,
        file_path,
        args.get("line").and_then(Value::as_f64),
        args.get("character").and_then(Value::as_f64),
    )
}

/// The query of a call: the session's workspace, its owner, its sandbox policy.
fn query_for(
    ctx: &ToolRunContext,
    operation: Operation,
    file_path: String,
    position: Position,
    tool: &str,
) -> Result<Query, BoxError> {
    let Some(workspace_root) = ctx.cwd.clone() else {
        return Err(lsp_error(
            "LSP_WORKSPACE_REQUIRED",
            format!("{tool} requires a session workspace cwd"),
        ));
    };
    Ok(Query {
        operation,
        file_path,
        position,
        workspace_root,
        owner: ctx.session.as_ref().map(|s| s.id()),
        policy: ctx
            .ctx
            .get::<dsh_sandbox::SandboxPolicy>()
            .map(|p| p.resolve(ctx.session.as_deref())),
    })
}

fn range_value(r: &Range) -> Value {
    json!({
        "start": {"line": r.start.line, "character": r.start.character},
        "end": {"line": r.end.line, "character": r.end.character},
    })
}

/// The canonical value: `{kind: "locations", locations: [{uri, range}], resolvedWorkspaceUri}`
/// or `{kind: "hover", hover: {contents, range?} | null}` (zero-based LSP positions).
pub(crate) fn result_value(result: &QueryResult) -> Value {
    match result {
        QueryResult::Locations {
            locations,
            workspace_uri,
        } => json!({
            "kind": "locations",
            "locations": locations
                .iter()
                .map(|l| json!({"uri": l.uri, "range": range_value(&l.range)}))
                .collect::<Vec<_>>(),
            "resolvedWorkspaceUri": workspace_uri,
        }),
        QueryResult::Hover(hover) => {
            let hover = hover.as_ref().map(|h| {
                let mut m = Map::new();
                m.insert("contents".into(), json!(h.contents));
                if let Some(r) = &h.range {
                    m.insert("range".into(), range_value(r));
                }
                Value::Object(m)
            });
            json!({"kind": "hover", "hover": hover})
        }
        QueryResult::Diagnostics(items) => {
            let items = items.as_ref().map(|list| {
                list.iter()
                    .map(|d| {
                        json!({"range": range_value(&d.range), "severity": d.severity,
                               "message": d.message, "source": d.source, "code": d.code})
                    })
                    .collect::<Vec<_>>()
            });
            json!({"kind": "diagnostics", "diagnostics": items})
        }
    }
}

/// The declared output schema of `lsp`.
fn output_schema() -> &'static Value {
    static S: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
        let object = |required: &[&str], properties: Value| {
            json!({
                "type": "object",
                "additionalProperties": false,
                "required": required,
                "properties": properties,
            })
        };
        let position = object(
            &["line", "character"],
            json!({"line": {"type": "integer"}, "character": {"type": "integer"}}),
        );
        let range = object(
            &["start", "end"],
            json!({"start": position, "end": position}),
        );
        let locations = object(
            &["kind", "locations", "resolvedWorkspaceUri"],
            json!({
                "kind": {"type": "string", "const": "locations"},
                "locations": {"type": "array", "items": object(
                    &["uri", "range"],
                    json!({"uri": {"type": "string"}, "range": range}),
                )},
                "resolvedWorkspaceUri": {"type": "string"},
            }),
        );
        let hover = object(
            &["kind", "hover"],
            json!({
                "kind": {"type": "string", "const": "hover"},
                "hover": {"oneOf": [
                    {"type": "null"},
                    object(&["contents"], json!({"contents": {"type": "string"}, "range": range})),
                ]},
            }),
        );
        json!({"oneOf": [locations, hover]})
    });
    &S
}

impl TypedTool for LspTool {
    type Args = LspArgs;
    type Value = Value;

    fn name(&self) -> String {
        "lsp".into()
    }

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    fn value_schema(&self) -> Result<Option<Value>, String> {
        Ok(Some(output_schema().clone()))
    }

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.timeout_ms)
    }

    async fn run(
        self: Arc<Self>,
        args: LspArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let service = self.service.clone();
        let config = self.config;
        let (operation, file_path, position) = checked_position(
            args.operation.into(),
            args.file_path,
            Some(args.line),
            Some(args.character),
        )?;
        let query = query_for(&ctx, operation, file_path, position, "the lsp tool")?;
        let result = service.query(query, ctx.cancel.clone()).await?;
        let value = result_value(&result);
        let text = match result {
            QueryResult::Locations {
                locations,
                workspace_uri,
            } => format_locations(
                &locations,
                &workspace_uri,
                config.max_locations,
                config.max_result_chars,
            ),
            QueryResult::Hover(h) => format_hover(h.as_ref(), config.max_result_chars),
            QueryResult::Diagnostics(d) => {
                format_diagnostics("the file", d.as_deref(), config.max_result_chars)
            }
        };
        Ok(Reply::text(text).with_value(value))
    }
}

const DIAGNOSTICS_DESCRIPTION: &str = "List the errors and warnings a language server reports for one source file as it is on disk now (for example after an edit): one line per problem with its one-based line and column. Faster than a full build for a first check; the build stays the final word.";

/// `lsp_diagnostics` (ours): a file's diagnostics from its language server.
pub struct LspDiagnosticsTool {
    service: Arc<LspService>,
    config: ToolLspConfig,
}

impl LspDiagnosticsTool {
    pub fn new(service: Arc<LspService>, config: ToolLspConfig) -> Self {
        Self { service, config }
    }
}

// The arguments of `lsp_diagnostics` (no doc: parameter objects carry no description).
#[derive(Deserialize, JsonSchema)]
pub struct LspDiagnosticsArgs {
    /// The source file, absolute or relative to the workspace.
    file_path: String,
}

impl TypedTool for LspDiagnosticsTool {
    type Args = LspDiagnosticsArgs;
    type Value = Value;

    fn name(&self) -> String {
        "lsp_diagnostics".into()
    }

    fn description(&self) -> String {
        DIAGNOSTICS_DESCRIPTION.into()
    }

    // No declared output schema (the value stays untyped), as before.

    fn concurrency_safe(&self) -> bool {
        true
    }

    fn timeout_ms(&self) -> Option<u64> {
        Some(self.config.timeout_ms)
    }

    async fn run(
        self: Arc<Self>,
        args: LspDiagnosticsArgs,
        ctx: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let service = self.service.clone();
        let config = self.config;
        let file_path = args.file_path;
        if file_path.trim().is_empty() {
            return Err("file_path must be a non-empty string".into());
        }
        let query = query_for(
            &ctx,
            Operation::Diagnostics,
            file_path.clone(),
            Position {
                line: 0,
                character: 0,
            },
            "lsp_diagnostics",
        )?;
        let result = service.query(query, ctx.cancel.clone()).await?;
        let value = result_value(&result);
        let text = match &result {
            QueryResult::Diagnostics(d) => {
                format_diagnostics(&file_path, d.as_deref(), config.max_result_chars)
            }
            _ => {
                return Err("the language server answered something other than diagnostics".into());
            }
        };
        Ok(Reply::text(text).with_value(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{Hover, Location};

    #[test]
    fn values_follow_the_declared_union() {
        let at = |line, character| Position { line, character };
        let range = Range {
            start: at(1, 2),
            end: at(1, 5),
        };
        let found = QueryResult::Locations {
            locations: vec![Location {
                uri: "file:///w/a.rs".into(),
                range,
            }],
            workspace_uri: "file:///w".into(),
        };
        assert_eq!(
            result_value(&found),
            json!({"kind": "locations", "locations": [{"uri": "file:///w/a.rs", "range": {
                "start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 5}}}],
                "resolvedWorkspaceUri": "file:///w"})
        );
        assert_eq!(
            result_value(&QueryResult::Hover(None)),
            json!({"kind": "hover", "hover": null})
        );
        let hover = QueryResult::Hover(Some(Hover {
            contents: "fn a()".into(),
            range: None,
        }));
        assert_eq!(
            result_value(&hover),
            json!({"kind": "hover", "hover": {"contents": "fn a()"}})
        );
        let branches = output_schema()["oneOf"].as_array().unwrap();
        assert_eq!(branches[0]["properties"]["kind"]["const"], "locations");
        assert_eq!(branches[1]["properties"]["kind"]["const"], "hover");
    }

    #[test]
    fn the_parameter_schemas_are_unchanged() {
        use dsh_tools::{ObjectSchema, Prop};
        let names: Vec<&str> = Operation::ALL.iter().map(|o| o.name()).collect();
        let lsp = ObjectSchema::new()
            .required(
                "operation",
                Prop::enumeration(
                    "goToDefinition, findReferences, goToImplementation, or hover.",
                    &names,
                ),
            )
            .required(
                "file_path",
                Prop::string("The source file, absolute or relative to the workspace."),
            )
            .required("line", Prop::number("One-based line of the cursor."))
            .required(
                "character",
                Prop::number("One-based UTF-16 column of the cursor."),
            );
        assert_eq!(
            dsh_kernel::json::to_string(&dsh_tools::params_schema::<LspArgs>().unwrap().to_value()),
            dsh_kernel::json::to_string(&lsp.to_value())
        );
        let diagnostics = ObjectSchema::new().required(
            "file_path",
            Prop::string("The source file, absolute or relative to the workspace."),
        );
        assert_eq!(
            dsh_kernel::json::to_string(
                &dsh_tools::params_schema::<LspDiagnosticsArgs>()
                    .unwrap()
                    .to_value()
            ),
            dsh_kernel::json::to_string(&diagnostics.to_value())
        );
    }
}
