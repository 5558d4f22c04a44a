//! Sending what the composer holds: local commands, image mentions, steering or queueing, and
//! /model.

use super::*;

/// Sends what the user typed: a local command, a session command, or a message (steering
/// or queued while a turn runs).
pub(super) async fn submit(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    tx: &mpsc::UnboundedSender<Incoming>,
    text: String,
) {
    let trimmed = text.trim();
    if let Some((name, rest)) = dsh_commands::parse_command(trimmed) {
        let rest = rest.trim();
        match name {
            "quit" | "exit" => {
                app.quit_requested = true;
                return;
            }
            "sessions" | "resume" => {
                open_picker(app, root);
                return;
            }
            "new" | "clear" => {
                switch(app, root, agent, feed, None).await;
                app.say("new session", false);
                return;
            }
            "steer" | "queue" => {
                app.steer = name == "steer";
                app.say(
                    format!(
                        "typing during a turn now {}s",
                        if app.steer { "steer" } else { "queue" }
                    ),
                    false,
                );
                return;
            }
            "model" => {
                model_command(app, root, rest);
                return;
            }
            "retry" => {
                let last = app
                    .transcript
                    .items
                    .iter()
                    .rev()
                    .find_map(|(_, i)| match i {
                        crate::transcript::Item::User(t) => Some(t.clone()),
                        _ => None,
                    });
                match last {
                    Some(text) => {
                        if let Err(e) = send_message(agent, text, false) {
                            app.say(e, true);
                        }
                        refresh(app, root, agent);
                    }
                    None => app.say("there is no earlier message to send again", true),
                }
                return;
            }
            "help"
                if root
                    .get::<dsh_commands::CommandRegistry>()
                    .is_none_or(|r| r.list().iter().all(|c| c.name != "help")) =>
            {
                let mut text = String::from(KEYS_HELP);
                text.push_str("\n\nCommands\n");
                for item in command_items(root) {
                    text.push_str(&format!("  {:<16} {}\n", item.label, item.detail));
                }
                app.overlay = Some(Overlay::Help(text));
                return;
            }
            _ => {}
        }
        if let Some(commands) = root.get::<dsh_commands::CommandRegistry>() {
            let agent = agent.clone();
            let tx = tx.clone();
            let line = trimmed.to_string();
            tokio::spawn(async move {
                let outcome = commands
                    .dispatch_line(&agent, &line, tokio_util::sync::CancellationToken::new())
                    .await;
                // Executed commands are logged (their reply comes with `command/done`).
                let (text, error) = match &outcome {
                    dsh_commands::LineOutcome::NotACommand => {
                        if let Err(e) = send_message(&agent, line, false) {
                            let _ = tx.send(Incoming::Reply {
                                text: e,
                                error: true,
                            });
                        }
                        return;
                    }
                    dsh_commands::LineOutcome::Executed { .. } => return,
                    dsh_commands::LineOutcome::Unknown { .. } => (outcome.reply(), true),
                    dsh_commands::LineOutcome::Help { .. } => (outcome.reply(), false),
                };
                let _ = tx.send(Incoming::Reply { text, error });
            });
            return;
        }
    }
    let running = agent.status() == AgentStatus::Running;
    let base = agent
        .cwd()
        .or_else(|| std::env::current_dir().ok())
        .unwrap_or_default();
    let images = image_mentions(&text, &base);
    let mut message = Message::user_text(text.clone());
    if !images.is_empty() {
        let chosen = app.choice.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let (provider, model) = chosen.unwrap_or_else(|| {
            let o = agent.options();
            agent.current_route((
                o.provider.as_deref().unwrap_or_default(),
                o.model.as_deref().unwrap_or_default(),
            ))
        });
        let root2 = root.clone();
        let stored =
            tokio::task::spawn_blocking(move || attach_images(&root2, &provider, &model, &images))
                .await
                .unwrap_or_else(|_| Err("the images could not be read".into()));
        match stored {
            Ok(blocks) => message.content.extend(blocks),
            Err(e) => {
                // Nothing is sent: the text comes back to the composer to edit.
                app.composer.set(text);
                app.say(e, true);
                return;
            }
        }
    }
    match send(agent, message, running && app.steer) {
        Ok(()) => {
            if running && !app.steer {
                app.say("queued for the next turn", false);
            }
        }
        Err(e) => app.say(e, true),
    }
    refresh(app, root, agent);
}

/// `@path` mentions of image files that exist under `base`.
pub(super) fn image_mentions(text: &str, base: &std::path::Path) -> Vec<PathBuf> {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix('@'))
        .filter(|p| dsh_attachments::media_type_for_path(p).is_some())
        .map(|p| base.join(p))
        .filter(|p| p.is_file())
        .collect()
}

/// Stores the mentioned images for the route (refused when the model takes no images);
/// the content blocks that reference them.
pub(super) fn attach_images(
    root: &Context,
    provider: &str,
    model: &str,
    paths: &[PathBuf],
) -> Result<Vec<dsh_llm::ContentBlock>, String> {
    let mut images = Vec::new();
    for path in paths {
        let shown = path.display();
        let size = std::fs::metadata(path)
            .map_err(|e| format!("cannot read {shown}: {e}"))?
            .len();
        if size > MAX_IMAGE_FILE {
            return Err(format!(
                "{shown} is larger than {} MiB",
                MAX_IMAGE_FILE >> 20
            ));
        }
        let data = std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))?;
        let media_type = dsh_attachments::sniff(&data)
            .ok_or_else(|| format!("{shown} is not a PNG, JPEG, WebP or GIF image"))?;
        images.push(dsh_attachments::SaveImage {
            data,
            media_type: media_type.to_string(),
            name: path.file_name().map(|n| n.to_string_lossy().into_owned()),
        });
    }
    let refs = dsh_attachments::admit_prompt_images(root, provider, model, &images)
        .map_err(|e| format!("the image was not sent: {}", e.message()))?;
    Ok(refs
        .into_iter()
        .map(|r| dsh_llm::ContentBlock::image(r.to_store_value()))
        .collect())
}

pub(super) fn send_message(agent: &AgentRef, text: String, steer: bool) -> Result<(), String> {
    send(agent, Message::user_text(text), steer)
}

pub(super) fn send(agent: &AgentRef, message: Message, steer: bool) -> Result<(), String> {
    let sent = if steer {
        agent.steer(message)
    } else {
        agent.followup(message)
    };
    sent.map_err(|e| format!("the message was not sent: {e}"))
}

/// `/model`: lists the configured models, or routes the next requests to one.
pub(super) fn model_command(app: &mut App, root: &Context, arg: &str) {
    let Some(llm) = root.get::<dsh_llm::LlmRuntime>() else {
        app.say("this profile has no model runtime", true);
        return;
    };
    let mut all: Vec<(String, String)> = Vec::new();
    for route in llm.routes() {
        for m in llm.models(&route) {
            all.push((route.clone(), m.id));
        }
    }
    if arg.is_empty() {
        let mut text =
            String::from("Models (choose with /model <route>/<model> or /model <model>)\n\n");
        for (route, model) in &all {
            text.push_str(&format!("  {route}/{model}\n"));
        }
        text.push_str(&format!("\nNow: {}", app.model_label()));
        app.overlay = Some(Overlay::Help(text));
        return;
    }
    let found = match arg.split_once('/') {
        Some((route, model)) if all.iter().any(|(r, _)| r == route) => {
            Some((route.to_string(), model.to_string()))
        }
        _ => all.iter().find(|(_, m)| m == arg).cloned(),
    };
    match found {
        Some((route, model)) => {
            app.transcript.model = Some(format!("{route} / {model}"));
            *app.choice.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((route.clone(), model.clone()));
            app.context_window = llm
                .model_info(&route, &model)
                .ok()
                .and_then(|m| m.context_window);
            app.say(format!("the next requests go to {route} / {model}"), false);
        }
        None => app.say(
            format!("no configured model is called \"{arg}\" (/model lists them)"),
            true,
        ),
    }
}
