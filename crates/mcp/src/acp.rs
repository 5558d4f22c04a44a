//! ACP `mcpServers` (on `session/new` and `session/load`): the client's servers, connected
//! for that session only.
//!
//! ACP's shapes: stdio `{name, command, args, env: [{name, value}]}` (no `type`, or
//! `"stdio"`), HTTP `{type: "http", name, url, headers: [{name, value}]}`; SSE is not offered
//! (`mcpCapabilities.sse` is false). Each becomes a server with upstream's defaults. ACP
//! names are free text, so the `serverName` is the name with every character outside
//! `[A-Za-z0-9_-]` replaced by `_`, cut to 32 characters.

use dsh_kernel::Context;
use serde_json::Value;

use crate::config::{ReconnectPolicy, ServerConfig, StartupFailure, Transport, valid_server_name};
use crate::server::{ConnectError, DEFAULT_REQUEST_TIMEOUT, ServerHandle, connect};

/// What an ACP agent advertises in `agentCapabilities.mcpCapabilities`.
pub fn capabilities() -> Value {
    serde_json::json!({"http": true, "sse": false})
}

/// The `serverName` for an ACP server name.
pub fn server_name(name: &str) -> String {
    let mut out: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(32)
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

fn pairs(v: Option<&Value>, what: &str, server: &str) -> Result<Vec<(String, String)>, String> {
    let Some(v) = v else { return Ok(Vec::new()) };
    let items = v
        .as_array()
        .ok_or_else(|| format!("mcpServers \"{server}\": {what} must be an array"))?;
    items
        .iter()
        .map(|item| {
            match (
                item.get("name").and_then(Value::as_str),
                item.get("value").and_then(Value::as_str),
            ) {
                (Some(n), Some(v)) => Ok((n.to_string(), v.to_string())),
                _ => Err(format!(
                    "mcpServers \"{server}\": each {what} entry needs string `name` and `value`"
                )),
            }
        })
        .collect()
}

/// Parses `mcpServers`; the message of an error is ready for an `invalid params` answer.
pub fn parse_servers(servers: &[Value]) -> Result<Vec<ServerConfig>, String> {
    let mut out: Vec<ServerConfig> = Vec::new();
    for s in servers {
        let name = s
            .get("name")
            .and_then(Value::as_str)
            .ok_or("mcpServers: every server needs a string `name`")?;
        let server_name = server_name(name);
        if !valid_server_name(&server_name) {
            return Err(format!("mcpServers: invalid server name \"{name}\""));
        }
        if out.iter().any(|c| c.server_name == server_name) {
            return Err(format!(
                "mcpServers: two servers are named \"{server_name}\" (names must stay distinct once reduced to [A-Za-z0-9_-]{{1,32}})"
            ));
        }
        let transport = match s.get("type").and_then(Value::as_str) {
            None | Some("stdio") => {
                let command = s
                    .get("command")
                    .and_then(Value::as_str)
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| format!("mcpServers \"{name}\": `command` is required"))?;
                let args = match s.get("args") {
                    None => Vec::new(),
                    Some(Value::Array(a)) => a
                        .iter()
                        .map(|x| x.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| format!("mcpServers \"{name}\": `args` must be strings"))?,
                    Some(_) => {
                        return Err(format!("mcpServers \"{name}\": `args` must be an array"));
                    }
                };
                Transport::Stdio {
                    command: command.to_string(),
                    args,
                    env: pairs(s.get("env"), "env", name)?,
                    cwd: String::new(),
                }
            }
            Some("http") => {
                let url = s
                    .get("url")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("mcpServers \"{name}\": `url` is required"))?;
                match reqwest::Url::parse(url) {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                    _ => {
                        return Err(format!(
                            "mcpServers \"{name}\": url \"{url}\" is not an http(s) URL"
                        ));
                    }
                }
                Transport::StreamableHttp {
                    url: url.to_string(),
                    headers: pairs(s.get("headers"), "headers", name)?,
                }
            }
            Some(other) => {
                return Err(format!(
                    "mcpServers \"{name}\": transport \"{other}\" is not supported (this agent offers stdio and http)"
                ));
            }
        };
        out.push(ServerConfig {
            server_name,
            transport,
            tool_call_timeout: std::time::Duration::from_secs(60),
            startup_failure: StartupFailure::Contain,
            reconnect: ReconnectPolicy::default(),
        });
    }
    Ok(out)
}

/// Connects `servers` for the agent scope `owner`, concurrently; each registers its tools in
/// that scope and is undone when the agent is disposed. A server whose first attempt failed
/// is still returned (its failure logged, retried in the background).
pub async fn attach(
    owner: &Context,
    servers: Vec<ServerConfig>,
) -> Vec<Result<ServerHandle, ConnectError>> {
    futures::future::join_all(
        servers
            .into_iter()
            .map(|config| connect(owner, config, DEFAULT_REQUEST_TIMEOUT)),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn acp_servers_parse() {
        let parsed = parse_servers(&[
            json!({"name": "my files", "command": "node", "args": ["a"], "env": [{"name": "K", "value": "v"}]}),
            json!({"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": [{"name": "X", "value": "1"}]}),
        ])
        .unwrap();
        assert_eq!(parsed[0].server_name, "my_files");
        assert_eq!(
            parsed[0].transport,
            Transport::Stdio {
                command: "node".into(),
                args: vec!["a".into()],
                env: vec![("K".into(), "v".into())],
                cwd: String::new()
            }
        );
        assert_eq!(
            parsed[1].transport,
            Transport::StreamableHttp {
                url: "http://127.0.0.1:9/mcp".into(),
                headers: vec![("X".into(), "1".into())]
            }
        );
        assert_eq!(
            parse_servers(&[json!({"type": "sse", "name": "s", "url": "http://x"})]).unwrap_err(),
            "mcpServers \"s\": transport \"sse\" is not supported (this agent offers stdio and http)"
        );
        assert!(
            parse_servers(&[
                json!({"name": "a.b", "command": "x"}),
                json!({"name": "a b", "command": "y"})
            ])
            .is_err()
        );
        assert!(parse_servers(&[json!({"command": "x"})]).is_err());
        assert_eq!(server_name(&"x".repeat(40)).len(), 32);
    }
}
