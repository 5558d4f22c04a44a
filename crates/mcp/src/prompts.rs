//! An MCP server's prompts as slash commands: `/mcp__<server>__<prompt> [args]` asks the
//! server for the prompt (`prompts/get`) and sends what it returns to the model as the
//! user's message, as Claude Code and Zed offer them. Arguments are `name=value` pairs or
//! plain words, which fill the prompt's arguments in their declared order (the last one
//! takes the rest of the line).

use std::sync::Arc;
use std::time::Duration;

use dsh_commands::{CommandDefinition, CommandRegistry, CommandResult};
use dsh_kernel::Context;
use dsh_llm::Message;
use serde_json::{Map, Value, json};

use crate::rpc::request;
use crate::tools::Link;

/// One prompt's argument as the server declares it.
#[derive(Clone, Debug, PartialEq)]
struct Argument {
    name: String,
    required: bool,
}

/// The command name of `prompt` of `server`: lowercase, other characters as `_`.
fn command_name(server: &str, prompt: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                let c = c.to_ascii_lowercase();
                if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    format!("mcp__{}__{}", clean(server), clean(prompt))
}

/// The prompt's arguments from the command's input, or what is missing.
fn arguments(declared: &[Argument], input: &str) -> Result<Map<String, Value>, String> {
    let mut named = Map::new();
    let mut words = Vec::new();
    for token in input.split_whitespace() {
        match token.split_once('=') {
            Some((k, v)) if declared.iter().any(|a| a.name == k) => {
                named.insert(k.to_string(), Value::from(v));
            }
            _ => words.push(token),
        }
    }
    let open: Vec<&Argument> = declared
        .iter()
        .filter(|a| !named.contains_key(&a.name))
        .collect();
    let mut words = words.into_iter();
    for (i, arg) in open.iter().enumerate() {
        let value = if i + 1 == open.len() {
            let rest: Vec<&str> = words.by_ref().collect();
            (!rest.is_empty()).then(|| rest.join(" "))
        } else {
            words.next().map(str::to_string)
        };
        if let Some(v) = value {
            named.insert(arg.name.clone(), Value::from(v));
        }
    }
    let missing: Vec<&str> = declared
        .iter()
        .filter(|a| a.required && !named.contains_key(&a.name))
        .map(|a| a.name.as_str())
        .collect();
    if !missing.is_empty() {
        return Err(format!("missing argument {}", missing.join(", ")));
    }
    Ok(named)
}

/// The text a `prompts/get` result gives the model: its messages' texts in order.
fn prompt_text(result: &Value) -> String {
    let mut parts = Vec::new();
    for message in result["messages"].as_array().into_iter().flatten() {
        let content = &message["content"];
        let text = match content["type"].as_str() {
            Some("text") => content["text"].as_str().unwrap_or_default().to_string(),
            Some("resource") => content["resource"]["text"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| "[a resource of the prompt is not shown]".into()),
            Some(other) => format!("[{other} content of the prompt is not shown]"),
            None => continue,
        };
        if !text.is_empty() {
            parts.push(text);
        }
    }
    parts.join("\n\n")
}

/// Lists the server's prompts and registers one command each, owned by `owner`. Failures
/// are logged: the server's tools work without its prompts.
pub(crate) async fn register(
    owner: &Context,
    server: &str,
    label: &str,
    link: Arc<Link>,
    timeout: Duration,
) {
    let Some(commands) = owner.get::<CommandRegistry>() else {
        return;
    };
    let Some(peer) = link.get() else { return };
    let listed = match request(&peer, "prompts/list", json!({}), timeout, None).await {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!("{label}: its prompts are not offered as commands: {e}");
            return;
        }
    };
    for prompt in listed["prompts"].as_array().into_iter().flatten() {
        let Some(raw) = prompt["name"].as_str().map(str::to_string) else {
            continue;
        };
        let declared: Vec<Argument> = prompt["arguments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                Some(Argument {
                    name: a["name"].as_str()?.to_string(),
                    required: a["required"].as_bool().unwrap_or(false),
                })
            })
            .collect();
        let hint = (!declared.is_empty()).then(|| {
            declared
                .iter()
                .map(|a| {
                    if a.required {
                        format!("<{}>", a.name)
                    } else {
                        format!("[{}]", a.name)
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        });
        let description = prompt["description"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("The \"{raw}\" prompt of MCP server \"{server}\""));
        let (link, server_name) = (link.clone(), server.to_string());
        let definition = CommandDefinition {
            name: command_name(server, &raw),
            description,
            hint,
            record_input: true,
            handler: Arc::new(move |inv| {
                let (link, raw, declared, server) = (
                    link.clone(),
                    raw.clone(),
                    declared.clone(),
                    server_name.clone(),
                );
                Box::pin(async move {
                    let args = match arguments(&declared, &inv.raw_input) {
                        Ok(a) => a,
                        Err(e) => {
                            return Ok(CommandResult::error(format!(
                                "/{}: {e}",
                                command_name(&server, &raw)
                            )));
                        }
                    };
                    let Some(peer) = link.get() else {
                        return Ok(CommandResult::error(format!(
                            "MCP server \"{server}\" is not connected right now"
                        )));
                    };
                    let got = request(
                        &peer,
                        "prompts/get",
                        json!({"name": raw, "arguments": args}),
                        timeout,
                        Some(&inv.cancel),
                    )
                    .await;
                    let text = match got {
                        Ok(result) => prompt_text(&result),
                        Err(e) => {
                            return Ok(CommandResult::error(format!(
                                "MCP server \"{server}\" did not give the prompt \"{raw}\": {e}"
                            )));
                        }
                    };
                    if text.is_empty() {
                        return Ok(CommandResult::error(format!(
                            "the prompt \"{raw}\" of MCP server \"{server}\" is empty"
                        )));
                    }
                    match inv.agent.steer(Message::user_text(text)) {
                        Ok(()) => Ok(CommandResult::ok(format!(
                            "Sent the \"{raw}\" prompt of MCP server \"{server}\" to the model."
                        ))),
                        Err(e) => Ok(CommandResult::error(e.to_string())),
                    }
                })
            }),
        };
        if let Err(e) = commands.register(owner, definition) {
            tracing::warn!(
                "{label}: the prompt \"{}\" is not offered as a command: {e}",
                prompt["name"]
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn declared() -> Vec<Argument> {
        vec![
            Argument {
                name: "city".into(),
                required: true,
            },
            Argument {
                name: "state".into(),
                required: false,
            },
        ]
    }

    #[test]
    fn words_fill_arguments_in_order_and_names_win() {
        assert_eq!(
            arguments(&declared(), " Paris"),
            Ok(json!({"city": "Paris"}).as_object().unwrap().clone())
        );
        assert_eq!(
            arguments(&declared(), " Salt Lake City Utah"),
            Ok(json!({"city": "Salt", "state": "Lake City Utah"})
                .as_object()
                .unwrap()
                .clone())
        );
        assert_eq!(
            arguments(&declared(), " state=TX Austin"),
            Ok(json!({"state": "TX", "city": "Austin"})
                .as_object()
                .unwrap()
                .clone())
        );
        assert_eq!(
            arguments(&declared(), ""),
            Err("missing argument city".to_string())
        );
        assert_eq!(
            command_name("My Stub", "Args.Prompt"),
            "mcp__my_stub__args_prompt"
        );
    }
}
