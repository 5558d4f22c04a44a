//! `present` (`@deepseek-ai/dsh-tool-present`, config `{maxFiles}`): the model names
//! existing files as the turn's deliverables; the page shows them as cards the user opens or
//! downloads. The tool only records references (`deliverables/presented {turn, callId,
//! files}`); the page serves a file only when that session presented it.

use std::path::Path;
use std::sync::Arc;

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use dsh_tools::{Reply, ToolRegistry, ToolRunContext, Typed, TypedTool, args_error};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// The durable event the page renders as deliverable cards.
pub const PRESENTED: &str = "deliverables/presented";

/// Files per call, unless the row says otherwise (upstream's default).
const DEFAULT_MAX_FILES: u64 = 8;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Row {
    max_files: Option<u64>,
}

/// `@deepseek-ai/dsh-tool-present`.
pub struct PresentPlugin;

impl Plugin for PresentPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-present"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: Row = config.parse()?;
        let max_files = row.max_files.unwrap_or(DEFAULT_MAX_FILES);
        if max_files == 0 {
            return Err("tool-present: maxFiles must be at least 1".into());
        }
        let tools = ctx.require::<ToolRegistry>()?;
        tools.register(
            ctx,
            Arc::new(Typed::new(PresentTool::new(max_files as usize))?),
        )?;
        Ok(())
    }
}

const DESCRIPTION: &str = "Hand files to the user as the result of the task, shown as cards they can open or download. Worth it for a file the user needs as such (a document, spreadsheet, slide deck, archive, image); when your answer can simply say it, say it instead. Only references are recorded: the user gets the file as it is on disk when they open it.";

struct PresentTool {
    max_files: usize,
}

impl PresentTool {
    fn new(max_files: usize) -> Self {
        Self { max_files }
    }
}

// The arguments (no doc: upstream's parameter object carries no description).
#[derive(Deserialize, JsonSchema)]
struct PresentArgs {
    /// The deliverables, most important first: usually one or two, four at most per call.
    files: Vec<PresentFile>,
}

// One deliverable (no doc: the item object carries no description; closed).
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PresentFile {
    /// An existing regular file; a relative path starts at the session's working directory.
    path: String,
    /// One line telling the user what the file is.
    description: Option<String>,
}

impl TypedTool for PresentTool {
    type Args = PresentArgs;
    type Value = Value;

    fn name(&self) -> String {
        "present".into()
    }

    fn description(&self) -> String {
        DESCRIPTION.into()
    }

    // No declared output schema (the value stays untyped), as before.

    async fn run(
        self: Arc<Self>,
        args: PresentArgs,
        run: ToolRunContext,
    ) -> Result<Reply<Value>, BoxError> {
        let max = self.max_files;
        let session = run
            .session
            .clone()
            .ok_or("present needs a session to record the deliverables in")?;
        let turn = session
            .read(|log| log.open_turn())
            .ok_or("present works only inside a running turn")?;
        let wanted = args.files;
        if wanted.is_empty() || wanted.len() > max {
            return Err(args_error(format!(
                "present takes 1 to {max} files per call, got {}",
                wanted.len()
            )));
        }
        let cwd = run.cwd.clone();
        let mut files = Vec::new();
        for f in &wanted {
            let given = f.path.as_str();
            if given.trim().is_empty() {
                return Err(args_error("every file needs a non-empty path"));
            }
            let path = resolve(cwd.as_deref(), given)?;
            let mut entry = json!({"path": path});
            if let Some(d) = f.description.as_deref().filter(|d| !d.trim().is_empty()) {
                entry["description"] = json!(d);
            }
            files.push(entry);
        }
        session.append(
            PRESENTED,
            json!({"turn": turn, "callId": run.call_id, "files": files}),
            None,
        )?;
        let text = files
            .iter()
            .map(|f| format!("Presented {}", f["path"].as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n");
        let value = json!({"turn": turn, "files": files});
        Ok(Reply::text(text).with_value(value))
    }
}

/// The absolute path of an existing regular file (symlinks followed); the error says what
/// to change.
fn resolve(cwd: Option<&Path>, given: &str) -> Result<String, BoxError> {
    let raw = Path::new(given);
    let joined = match (raw.is_absolute(), cwd) {
        (true, _) => raw.to_path_buf(),
        (false, Some(cwd)) => cwd.join(raw),
        (false, None) => {
            return Err(format!("{given} is relative and this session has no working directory; give an absolute path").into());
        }
    };
    let path = std::fs::canonicalize(&joined).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            format!("{given} does not exist; create it first or fix the path")
        } else {
            format!("{given} cannot be used: {e}")
        }
    })?;
    if !path.is_file() {
        return Err(
            format!("{given} is not a regular file; present files, not directories").into(),
        );
    }
    Ok(path.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_tools::{ObjectSchema, Prop};

    #[test]
    fn the_parameter_schema_is_unchanged() {
        let file = ObjectSchema::new()
            .required(
                "path",
                Prop::string(
                    "An existing regular file; a relative path starts at the session's working directory.",
                ),
            )
            .optional(
                "description",
                Prop::string("One line telling the user what the file is."),
            )
            .closed();
        let params = ObjectSchema::new().required(
            "files",
            Prop::array(
                "The deliverables, most important first: usually one or two, four at most per call.",
                Prop::Object(file),
            ),
        );
        assert_eq!(
            dsh_kernel::json::to_string(
                &dsh_tools::params_schema::<PresentArgs>()
                    .unwrap()
                    .to_value()
            ),
            dsh_kernel::json::to_string(&params.to_value())
        );
    }
}
