//! The tool bridge: listing a server's tools into one generation of definitions, and the
//! [`McpTool`] that calls one of them by its raw name.

use std::collections::HashSet;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture};
use dsh_llm::{ContentBlock, ToolSchema};
use dsh_tools::{Tool, ToolOutput, ToolRunContext};
use rmcp::RoleClient;
use rmcp::service::Peer;
use serde_json::{Value, json};

use crate::content::{CallOutcome, StoredImages, project_result_with, result_images};
use crate::naming::public_tool_name;
use crate::rpc::{RpcError, request};

/// A bad server could page forever; no real server lists more pages than this.
const MAX_LIST_PAGES: usize = 1000;

/// The live peer of a server, swapped by its supervisor on every (re)connection. During an
/// outage it is empty and calls fail with `Connection closed`, as upstream's do.
#[derive(Default)]
pub(crate) struct Link {
    peer: RwLock<Option<Peer<RoleClient>>>,
    /// A call found the connection closed. A stdio server's exit ends its transport, which
    /// the supervisor sees; a streamable-HTTP server that restarted forgets the session
    /// while the client's transport stays up, so only a failed call tells.
    pub(crate) lost: tokio::sync::Notify,
    /// Calls in flight that show progress, by the progress token sent with them.
    progress: std::sync::Mutex<std::collections::HashMap<String, dsh_tools::OutputTap>>,
}

impl Link {
    /// A `notifications/progress` of the server: shown as output of the call it belongs to.
    pub(crate) fn progress(
        &self,
        token: &str,
        progress: f64,
        total: Option<f64>,
        message: Option<&str>,
    ) {
        let mut calls = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        let Some(tap) = calls.get_mut(token) else {
            return;
        };
        let amount = match total {
            Some(total) => format!("{progress}/{total}"),
            None => format!("{progress}"),
        };
        let line = match message {
            Some(message) => format!("[progress {amount}] {message}\n"),
            None => format!("[progress {amount}]\n"),
        };
        tap.push(line.as_bytes());
    }

    pub(crate) fn set(&self, peer: Option<Peer<RoleClient>>) {
        *self.peer.write().unwrap_or_else(|p| p.into_inner()) = peer;
    }

    pub(crate) fn get(&self) -> Option<Peer<RoleClient>> {
        self.peer.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// One listed tool, ready to register.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ToolDef {
    pub public_name: String,
    pub raw_name: String,
    pub description: String,
    pub input_schema: Value,
    pub task_required: bool,
}

/// Drains `tools/list` pagination into the next generation. Any failure (transport, an
/// invalid entry, a raw name listed twice) rejects the whole list.
pub(crate) async fn fetch_tools(
    peer: &Peer<RoleClient>,
    server_name: &str,
    timeout: Duration,
) -> Result<Vec<ToolDef>, String> {
    let label = format!("mcp-client({server_name})");
    let mut defs: Vec<ToolDef> = Vec::new();
    let mut names: HashSet<String> = HashSet::new();
    let mut cursors: HashSet<String> = HashSet::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_LIST_PAGES {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let page = request(peer, "tools/list", params, timeout, None)
            .await
            .map_err(|e| e.to_string())?;
        let Some(tools) = page.get("tools").and_then(Value::as_array) else {
            return Err(format!(
                "{label}: tools/list answered without a `tools` array"
            ));
        };
        for (i, tool) in tools.iter().enumerate() {
            let def = tool_def(tool, server_name)
                .map_err(|e| format!("{label}: invalid tool list: tools[{i}] {e}"))?;
            if !names.insert(def.public_name.clone()) {
                return Err(format!(
                    "{label}: server listed tool \"{}\" more than once — invalid tool list",
                    def.raw_name
                ));
            }
            defs.push(def);
        }
        match page.get("nextCursor") {
            None | Some(Value::Null) => return Ok(defs),
            Some(Value::String(next)) if next.is_empty() => return Ok(defs),
            Some(Value::String(next)) => {
                if !cursors.insert(next.clone()) {
                    return Err(format!("{label}: tools/list repeated cursor \"{next}\""));
                }
                cursor = Some(next.clone());
            }
            Some(_) => return Err(format!("{label}: tools/list nextCursor is not a string")),
        }
    }
    Err(format!(
        "{label}: tools/list did not end within {MAX_LIST_PAGES} pages"
    ))
}

/// Checks one listed tool the way the MCP schema does (a name, an object input schema).
fn tool_def(tool: &Value, server_name: &str) -> Result<ToolDef, String> {
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or("has no name")?;
    let description = match tool.get("description") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(format!("\"{name}\": description is not a string")),
    };
    let schema = tool
        .get("inputSchema")
        .filter(|s| s.get("type").and_then(Value::as_str) == Some("object"))
        .ok_or_else(|| format!("\"{name}\": inputSchema is not an object schema"))?;
    let task_required = tool
        .get("execution")
        .and_then(|e| e.get("taskSupport"))
        .and_then(Value::as_str)
        == Some("required");
    Ok(ToolDef {
        public_name: public_tool_name(server_name, name),
        raw_name: name.to_string(),
        description,
        input_schema: schema.clone(),
        task_required,
    })
}

/// One MCP tool under its public name. The raw name is what goes on the wire; the public
/// name is never parsed back.
pub(crate) struct McpTool {
    schema: ToolSchema,
    raw_name: String,
    task_required: bool,
    link: Arc<Link>,
    timeout: Duration,
}

impl McpTool {
    pub(crate) fn new(def: ToolDef, link: Arc<Link>, timeout: Duration) -> Self {
        Self {
            schema: ToolSchema {
                name: def.public_name,
                description: def.description,
                parameters: Arc::new(def.input_schema),
            },
            raw_name: def.raw_name,
            task_required: def.task_required,
            link,
            timeout,
        }
    }
}

/// Stores the images of a result in the attachment store (when the tree has one), so the
/// model sees them as images; a refused image says why.
async fn store_images(ctx: &ToolRunContext, result: &Value, raw: &str) -> StoredImages {
    let wanted = result_images(result);
    let Some(store) = ctx.ctx.get::<dsh_attachments::AttachmentStore>() else {
        return StoredImages::new();
    };
    if wanted.is_empty() {
        return StoredImages::new();
    }
    let name = raw.to_string();
    let saved = tokio::task::spawn_blocking(move || {
        wanted
            .into_iter()
            .map(|(index, media_type, data)| {
                // Servers do send PNGs with a damaged colour profile or metadata chunk;
                // those chunks are dropped, as image readers do, rather than the image.
                let data =
                    dsh_attachments::drop_damaged_ancillary_png_chunks(&data).unwrap_or(data);
                let saved = store
                    .save_image(&dsh_attachments::SaveImage {
                        data,
                        media_type,
                        name: Some(name.clone()),
                    })
                    .map(|image| ContentBlock::image(image.to_tool_value()))
                    .map_err(|e| e.to_string());
                (index, saved)
            })
            .collect::<StoredImages>()
    })
    .await;
    saved.unwrap_or_default()
}

impl Tool for McpTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn execute(
        &self,
        args: Value,
        ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let raw = self.raw_name.clone();
        let link = self.link.clone();
        let timeout = self.timeout;
        let task_required = self.task_required;
        Box::pin(async move {
            if task_required {
                return Err(format!(
                    "Tool \"{raw}\" requires task-based execution, which this bridge does not support"
                )
                .into());
            }
            // A model that sends a bare value gets the server's own "missing parameter"
            // error rather than ours (upstream's choice).
            let arguments = match args {
                Value::Object(map) => Value::Object(map),
                _ => json!({}),
            };
            let peer = link.get().ok_or_else(|| RpcError::closed().to_string())?;
            // The server may report progress on the call; it is shown as the call's output.
            let mut params = json!({"name": raw, "arguments": arguments});
            let token = format!("dsh-{}", ctx.call_id);
            let tracked =
                match dsh_tools::OutputTap::for_call(&ctx, dsh_tools::OutputStream::Stdout) {
                    Some(tap) => {
                        link.progress
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(token.clone(), tap);
                        params["_meta"] = json!({"progressToken": token});
                        true
                    }
                    None => false,
                };
            let result = request(&peer, "tools/call", params, timeout, Some(&ctx.cancel)).await;
            if tracked {
                link.progress
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&token);
            }
            let result = result.map_err(|e| -> BoxError {
                if e == RpcError::closed() {
                    link.lost.notify_waiters();
                }
                e.to_string().into()
            })?;
            let images = store_images(&ctx, &result, &raw).await;
            match project_result_with(&result, &raw, &images) {
                CallOutcome::Success(content) => Ok(ToolOutput {
                    content,
                    meta: None,
                }),
                CallOutcome::ToolError(text) => Err(text.into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn listed_tools_are_checked() {
        let ok = tool_def(
            &json!({"name": "echo", "description": "Echo", "inputSchema": {"type": "object", "properties": {}}}),
            "e",
        )
        .unwrap();
        assert_eq!(ok.public_name, "mcp__e__echo");
        assert_eq!(
            tool_def(
                &json!({"name": "x", "inputSchema": {"type": "string"}}),
                "e"
            )
            .unwrap_err(),
            "\"x\": inputSchema is not an object schema"
        );
        assert_eq!(
            tool_def(&json!({"inputSchema": {}}), "e").unwrap_err(),
            "has no name"
        );
        assert!(
            tool_def(
                &json!({"name": "t", "inputSchema": {"type": "object"}, "execution": {"taskSupport": "required"}}),
                "e"
            )
            .unwrap()
            .task_required
        );
    }
}
