//! `@deepseek-ai/dsh-mcp-resources` (row `mcp-resources`, in upstream 0.2's base bundle):
//! the resources of connected MCP servers, for the model. While at least one server that
//! offers resources is connected in an agent's scope, the agent has three tools —
//! `list_mcp_resources`, `list_mcp_resource_templates`, `read_mcp_resource` (0.2.1's names
//! and parameters: `server`, `cursor` / `uri`) — and a prompt section naming the servers.
//! Results are the server's JSON, attributed to the server; binary contents are described,
//! not pasted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use dsh_kernel::{BoxError, BoxFuture, Context, EffectHandle, Plugin, PluginConfig, ScopeId};
use dsh_llm::{ContentBlock, ToolSchema};
use dsh_tools::{ObjectSchema, Prop, Tool, ToolOutput, ToolRegistry, ToolRunContext};
use serde_json::{Value, json};

use crate::rpc::request;
use crate::tools::Link;

/// One connected server that offers resources.
struct Entry {
    id: u64,
    scope: Option<dsh_kernel::Scope>,
    name: String,
    link: Arc<Link>,
    timeout: Duration,
}

/// The service the `mcp-resources` row provides; MCP connections register with it.
pub struct McpResources {
    ctx: Context,
    entries: Mutex<Vec<Entry>>,
    /// The tools registered for each scope that has servers.
    tools: Mutex<HashMap<Option<ScopeId>, Vec<EffectHandle>>>,
    next: std::sync::atomic::AtomicU64,
}

impl McpResources {
    /// Adds server `name` (connected through `link`) for `owner`'s scope until `owner`
    /// unloads; the scope's first server brings the tools.
    pub(crate) fn add(
        self: &Arc<Self>,
        owner: &Context,
        name: &str,
        link: Arc<Link>,
        timeout: Duration,
    ) -> Result<(), BoxError> {
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let scope = owner.scope().cloned();
        let key = scope.as_ref().map(|s| s.id());
        let first = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            let first = !entries
                .iter()
                .any(|e| e.scope.as_ref().map(|s| s.id()) == key);
            entries.push(Entry {
                id,
                scope: scope.clone(),
                name: name.to_string(),
                link,
                timeout,
            });
            first
        };
        if first {
            let registry = self.ctx.require::<ToolRegistry>()?;
            let at = self.ctx.with_scope(scope);
            let mut handles = Vec::new();
            for kind in [Kind::List, Kind::Templates, Kind::Read] {
                handles.push(
                    registry
                        .register(&at, Arc::new(ResourceTool::new(kind, Arc::downgrade(self))))?,
                );
            }
            self.tools
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key, handles);
        }
        let service = Arc::downgrade(self);
        owner.effect("mcp-resources.server", move || {
            if let Some(service) = service.upgrade() {
                service.remove(id, key);
            }
        })?;
        Ok(())
    }

    fn remove(&self, id: u64, key: Option<ScopeId>) {
        let last = {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            entries.retain(|e| e.id != id);
            !entries
                .iter()
                .any(|e| e.scope.as_ref().map(|s| s.id()) == key)
        };
        if last
            && let Some(handles) = self
                .tools
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&key)
        {
            for handle in handles {
                handle.dispose();
            }
        }
    }

    /// The servers an agent in `caller`'s scope sees (its own scope's and enclosing ones').
    fn visible(&self, caller: &Context) -> Vec<(String, Arc<Link>, Duration)> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .filter(|e| match (&e.scope, caller.scope()) {
                (None, _) => true,
                (Some(s), Some(c)) => c.admits(s.id()),
                (Some(_), None) => false,
            })
            .map(|e| (e.name.clone(), e.link.clone(), e.timeout))
            .collect()
    }
}

/// One resource a connected server lists (what the page offers as an `@` reference).
#[derive(Clone, Debug, PartialEq)]
pub struct ResourceEntry {
    pub server: String,
    pub uri: String,
    pub name: String,
    pub mime_type: Option<String>,
}

/// Resources taken from each server's first page for the `@` menu.
const CATALOG_PER_SERVER: usize = 200;
/// Text of one referenced resource kept in a prompt.
pub const MAX_REFERENCE_CHARS: usize = 64 * 1024;

impl McpResources {
    /// The names of the servers with resources visible from `caller`.
    pub fn servers(&self, caller: &Context) -> Vec<String> {
        self.visible(caller)
            .into_iter()
            .map(|(n, _, _)| n)
            .collect()
    }

    /// The resources the servers visible from `caller` list (each server's first page; a
    /// server that does not answer in time is left out).
    pub async fn catalog(&self, caller: &Context) -> Vec<ResourceEntry> {
        let mut out = Vec::new();
        for (server, link, timeout) in self.visible(caller) {
            let Some(peer) = link.get() else { continue };
            let Ok(result) = request(&peer, "resources/list", json!({}), timeout, None).await
            else {
                continue;
            };
            for r in result["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .take(CATALOG_PER_SERVER)
            {
                let Some(uri) = r["uri"].as_str() else {
                    continue;
                };
                out.push(ResourceEntry {
                    server: server.clone(),
                    uri: uri.to_string(),
                    name: r["name"].as_str().unwrap_or(uri).to_string(),
                    mime_type: r["mimeType"].as_str().map(str::to_owned),
                });
            }
        }
        out
    }

    /// The text of resource `uri` of `server` as the model should see it in a prompt: each
    /// text content with its URI and type, binary ones described, cut at
    /// [`MAX_REFERENCE_CHARS`].
    pub async fn read_for_prompt(
        &self,
        caller: &Context,
        server: &str,
        uri: &str,
    ) -> Result<String, String> {
        let visible = self.visible(caller);
        let (_, link, timeout) = visible
            .iter()
            .find(|(n, _, _)| n == server)
            .ok_or_else(|| format!("no MCP server \"{server}\" with resources is connected"))?;
        let peer = link
            .get()
            .ok_or_else(|| format!("MCP server \"{server}\" is not connected right now"))?;
        let result = request(&peer, "resources/read", json!({"uri": uri}), *timeout, None)
            .await
            .map_err(|e| format!("MCP server \"{server}\" could not read {uri}: {e}"))?;
        let mut text = String::new();
        for c in result["contents"].as_array().into_iter().flatten() {
            let at = c["uri"].as_str().unwrap_or(uri);
            let mime = c["mimeType"].as_str().unwrap_or("unknown type");
            match (c["text"].as_str(), c["blob"].as_str()) {
                (Some(t), _) => text.push_str(&format!("Resource {at} ({mime}) from MCP server {server}:\n{t}\n")),
                (None, Some(b)) => text.push_str(&format!(
                    "Resource {at} ({mime}) from MCP server {server}: binary, {} base64 characters, not shown\n",
                    b.len()
                )),
                _ => {}
            }
        }
        if text.chars().count() > MAX_REFERENCE_CHARS {
            text = text.chars().take(MAX_REFERENCE_CHARS).collect();
            text.push_str("\n… (cut: the resource is longer)\n");
        }
        if text.is_empty() {
            return Err(format!("{uri} on MCP server \"{server}\" has no contents"));
        }
        Ok(text)
    }
}

#[derive(Clone, Copy)]
enum Kind {
    List,
    Templates,
    Read,
}

struct ResourceTool {
    kind: Kind,
    schema: ToolSchema,
    service: Weak<McpResources>,
}

impl ResourceTool {
    fn new(kind: Kind, service: Weak<McpResources>) -> Self {
        let server =
            || Prop::string("The name of a connected MCP server, as the prompt lists them.");
        let (name, description, params) = match kind {
            Kind::List => (
                "list_mcp_resources",
                "List the resources an MCP server offers (URI, name, type).",
                ObjectSchema::new().required("server", server()).optional(
                    "cursor",
                    Prop::string("The cursor a previous page of this server returned."),
                ),
            ),
            Kind::Templates => (
                "list_mcp_resource_templates",
                "List an MCP server's resource URI templates (fill one in to read a resource).",
                ObjectSchema::new().required("server", server()).optional(
                    "cursor",
                    Prop::string("The cursor a previous page of this server returned."),
                ),
            ),
            Kind::Read => (
                "read_mcp_resource",
                "Read one resource of an MCP server by its URI (a listed one or a filled-in template).",
                ObjectSchema::new()
                    .required("server", server())
                    .required("uri", Prop::string("The URI of the resource.")),
            ),
        };
        Self {
            kind,
            schema: ToolSchema {
                name: name.into(),
                description: description.into(),
                parameters: Arc::new(params.to_value()),
            },
            service,
        }
    }
}

impl Tool for ResourceTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn concurrency_safe(&self, _args: &Value) -> bool {
        true
    }

    fn execute(
        &self,
        args: Value,
        run: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let kind = self.kind;
        let service = self.service.clone();
        Box::pin(async move {
            let service = service
                .upgrade()
                .ok_or("the MCP resource service is unloaded")?;
            let server = args["server"].as_str().unwrap_or_default().to_string();
            let visible = service.visible(&run.ctx);
            let Some((_, link, timeout)) = visible.iter().find(|(n, _, _)| *n == server) else {
                let mut names: Vec<&str> = visible.iter().map(|(n, _, _)| n.as_str()).collect();
                names.sort_unstable();
                return Err(format!(
                    "no MCP server \"{server}\" with resources is connected here (connected: {})",
                    if names.is_empty() {
                        "none".to_string()
                    } else {
                        names.join(", ")
                    }
                )
                .into());
            };
            let (method, params) = match kind {
                Kind::List => ("resources/list", cursor(&args)),
                Kind::Templates => ("resources/templates/list", cursor(&args)),
                Kind::Read => ("resources/read", json!({"uri": args["uri"]})),
            };
            let peer = link
                .get()
                .ok_or_else(|| format!("MCP server \"{server}\" is not connected right now"))?;
            let result = request(&peer, method, params, *timeout, Some(&run.cancel))
                .await
                .map_err(|e| -> BoxError {
                    if e == crate::rpc::RpcError::closed() {
                        link.lost.notify_waiters();
                    }
                    e.to_string().into()
                })?;
            Ok(ToolOutput {
                content: vec![ContentBlock::text(render(&server, &result))],
                meta: None,
            })
        })
    }
}

fn cursor(args: &Value) -> Value {
    match args.get("cursor").and_then(Value::as_str) {
        Some(c) => json!({"cursor": c}),
        None => json!({}),
    }
}

/// `MCP server: <name>` and the result's JSON, each binary `blob` replaced by its size.
fn render(server: &str, result: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| match (k.as_str(), v) {
                        ("blob", Value::String(b)) => (
                            k.clone(),
                            Value::String(format!(
                                "[binary contents: {} base64 characters, not shown]",
                                b.len()
                            )),
                        ),
                        _ => (k.clone(), strip(v)),
                    })
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    format!("MCP server: {server}\n{}", strip(result))
}

/// The row.
pub struct McpResourcesPlugin;

impl Plugin for McpResourcesPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-mcp-resources"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        ctx.require::<ToolRegistry>()?;
        let service = Arc::new(McpResources {
            ctx: ctx.clone(),
            entries: Mutex::new(Vec::new()),
            tools: Mutex::new(HashMap::new()),
            next: std::sync::atomic::AtomicU64::new(1),
        });
        if let Some(prompt) = ctx.get::<dsh_prompt::SystemPrompt>() {
            let weak = Arc::downgrade(&service);
            prompt.section(
                ctx,
                "mcp-resource-servers",
                149.0,
                Arc::new(move |a| {
                    let Some(service) = weak.upgrade() else {
                        return String::new();
                    };
                    let mut names: Vec<String> =
                        service.visible(&a.ctx).into_iter().map(|(n, _, _)| n).collect();
                    names.sort();
                    names.dedup();
                    if names.is_empty() {
                        return String::new();
                    }
                    format!(
                        "MCP servers with resources: {}. list_mcp_resources and list_mcp_resource_templates show what each offers; read_mcp_resource reads one by URI (pass the server's name as `server`).",
                        names.join(", ")
                    )
                }),
            )?;
        }
        ctx.provide(service)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_contents_are_described_not_pasted() {
        let r = json!({"contents": [{"uri": "u", "blob": "AAAA"}, {"uri": "t", "text": "hi"}]});
        assert_eq!(
            render("s", &r),
            "MCP server: s\n{\"contents\":[{\"uri\":\"u\",\"blob\":\"[binary contents: 4 base64 characters, not shown]\"},{\"uri\":\"t\",\"text\":\"hi\"}]}"
        );
    }
}
