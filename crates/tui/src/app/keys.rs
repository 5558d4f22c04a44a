//! Keys: the composer, the approval and question panels, the slash and file menus, and the
//! session picker.

use super::*;

pub(super) async fn on_key(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    tx: &mpsc::UnboundedSender<Incoming>,
    key: KeyEvent,
) -> bool {
    // Ctrl-C: clear, cancel, or (twice) quit.
    if ctrl(&key, 'c') {
        if app.quit_armed.is_some_and(|t| t.elapsed() < QUIT_WINDOW) {
            return true;
        }
        app.quit_armed = Some(Instant::now());
        if !app.composer.is_empty() {
            app.composer.clear();
            app.menu = None;
        } else if app.running {
            agent.cancel(CancelCause::User, true);
        }
        app.say("press Ctrl-C again to quit", false);
        return false;
    }
    if ctrl(&key, 'd') && app.composer.is_empty() && app.overlay.is_none() {
        return true;
    }
    if app.overlay.is_some() {
        on_overlay_key(app, root, agent, feed, key).await;
        return false;
    }
    if !app.approvals.is_empty() {
        on_approval_key(app, key);
        return false;
    }
    if !app.questions.is_empty() {
        on_question_key(app, key);
        return false;
    }
    if app.menu.is_some() && on_menu_key(app, root, agent, key) {
        return false;
    }
    let alt = key.modifiers.contains(KeyModifiers::ALT);
    let shift = key.modifiers.contains(KeyModifiers::SHIFT);
    match key.code {
        KeyCode::Enter if alt || shift => app.composer.insert("\n"),
        KeyCode::Char('j') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.composer.insert("\n")
        }
        KeyCode::Enter => {
            let text = app.composer.take();
            app.menu = None;
            if !text.trim().is_empty() {
                app.scroll = 0;
                submit(app, root, agent, feed, tx, text).await;
            }
        }
        KeyCode::Esc if app.running => {
            agent.cancel(CancelCause::User, true);
            app.say("cancelling the turn…", false);
        }
        KeyCode::Char('t') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.steer = !app.steer;
            let how = if app.steer {
                "messages typed during a turn steer it"
            } else {
                "messages typed during a turn wait for the next turn"
            };
            app.say(how, false);
        }
        KeyCode::Char('o') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.expand_reasoning = !app.expand_reasoning;
        }
        KeyCode::Char('r') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            open_picker(app, root);
        }
        KeyCode::Char('w') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.composer.delete_word()
        }
        KeyCode::Char('u') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.composer.delete_to_line_start()
        }
        KeyCode::Char('a') if key.modifiers.contains(KeyModifiers::CONTROL) => app.composer.home(),
        KeyCode::Char('e') if key.modifiers.contains(KeyModifiers::CONTROL) => app.composer.end(),
        KeyCode::Char('l') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            app.layout = LayoutCache::default();
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            let mut b = [0u8; 4];
            app.composer.insert(c.encode_utf8(&mut b));
        }
        KeyCode::Backspace => app.composer.backspace(),
        KeyCode::Delete => app.composer.delete(),
        KeyCode::Left => app.composer.left(),
        KeyCode::Right => app.composer.right(),
        KeyCode::Home => app.composer.home(),
        KeyCode::End => app.composer.end(),
        KeyCode::Up => app.composer.up(),
        KeyCode::Down => app.composer.down(),
        KeyCode::PageUp => app.scroll += 10,
        KeyCode::PageDown => app.scroll = app.scroll.saturating_sub(10),
        _ => {}
    }
    update_menu(app, root, agent);
    false
}

pub(super) fn on_approval_key(app: &mut App, key: KeyEvent) {
    let decision = match key.code {
        KeyCode::Left | KeyCode::Right | KeyCode::Tab | KeyCode::BackTab => {
            app.approval_focus = 1 - app.approval_focus.min(1);
            None
        }
        KeyCode::Enter => Some(if app.approval_focus == 1 {
            ApprovalOutcome::AllowedOnce
        } else {
            ApprovalOutcome::Rejected
        }),
        KeyCode::Char('y') => Some(ApprovalOutcome::AllowedOnce),
        KeyCode::Char('n') | KeyCode::Esc => Some(ApprovalOutcome::Rejected),
        _ => None,
    };
    if let Some(outcome) = decision
        && let Some(mut a) = app.approvals.pop_front()
    {
        if let Some(tx) = a.answer.take() {
            let _ = tx.send(outcome);
        }
        app.approval_focus = 0;
        let word = if outcome == ApprovalOutcome::AllowedOnce {
            "allowed"
        } else {
            "rejected"
        };
        app.say(format!("{word}: {}", a.tool_name), false);
    }
}

/// Keys of the question panel: ↑/↓ move, Space chooses (several when allowed), Enter
/// confirms the question, typing writes a free answer, Esc closes the questions.
pub(super) fn on_question_key(app: &mut App, key: KeyEvent) {
    let Some(q) = app.questions.front_mut() else {
        return;
    };
    let options = q.option_count();
    let multi = q.current().and_then(|c| c.multi_select).unwrap_or(false);
    match key.code {
        KeyCode::Up => q.cursor = q.cursor.saturating_sub(1),
        KeyCode::Down => q.cursor = (q.cursor + 1).min(options),
        KeyCode::Char(' ') if q.cursor < options => {
            if !multi {
                q.chosen.iter_mut().for_each(|c| *c = false);
            }
            if let Some(c) = q.chosen.get_mut(q.cursor) {
                *c = !*c;
            }
        }
        KeyCode::Esc => {
            if let Some(mut q) = app.questions.pop_front()
                && let Some(tx) = q.reply.take()
            {
                let _ = tx.send(None);
            }
            app.say("question closed; answer in the conversation", false);
        }
        KeyCode::Backspace => {
            q.custom.pop();
        }
        KeyCode::Enter => {
            let Some(current) = q.current().cloned() else {
                return;
            };
            let labels: Vec<String> = current
                .options
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|o| o.label)
                .collect();
            let mut selected: Vec<String> = labels
                .iter()
                .zip(&q.chosen)
                .filter(|(_, c)| **c)
                .map(|(l, _)| l.clone())
                .collect();
            // Enter on an option with nothing chosen picks it.
            if selected.is_empty() && q.cursor < labels.len() {
                selected.push(labels[q.cursor].clone());
            }
            let custom = (!q.custom.trim().is_empty()).then(|| q.custom.trim().to_string());
            if selected.is_empty() && custom.is_none() {
                app.say("choose an option or type an answer", true);
                return;
            }
            q.answers.push(AnswerItem {
                id: current.id.clone(),
                selected,
                custom,
            });
            q.at += 1;
            q.cursor = 0;
            q.custom.clear();
            q.chosen = vec![false; q.option_count()];
            if q.at >= q.questions.len()
                && let Some(mut done) = app.questions.pop_front()
            {
                let answer = Answer {
                    answers: std::mem::take(&mut done.answers),
                };
                if let Some(tx) = done.reply.take() {
                    let _ = tx.send(Some(answer));
                }
            }
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            q.cursor = options;
            q.custom.push(c);
        }
        _ => {}
    }
}

/// Menu keys; true when the key was the menu's.
pub(super) fn on_menu_key(app: &mut App, root: &Context, agent: &AgentRef, key: KeyEvent) -> bool {
    let Some(menu) = &mut app.menu else {
        return false;
    };
    match key.code {
        KeyCode::Up => {
            menu.selected = menu
                .selected
                .checked_sub(1)
                .unwrap_or(menu.items.len().saturating_sub(1));
            true
        }
        KeyCode::Down => {
            menu.selected = if menu.selected + 1 >= menu.items.len() {
                0
            } else {
                menu.selected + 1
            };
            true
        }
        KeyCode::Esc => {
            app.menu = None;
            true
        }
        KeyCode::Tab | KeyCode::Enter => {
            let Some(item) = menu.items.get(menu.selected).cloned() else {
                app.menu = None;
                return false;
            };
            let start = menu.start;
            // Enter on a complete command runs it; otherwise it completes.
            let before = &app.composer.text()[start..app.composer.cursor()];
            if key.code == KeyCode::Enter && before.trim_end() == item.insert.trim_end() {
                app.menu = None;
                return false;
            }
            app.composer.complete(start, &item.insert);
            app.menu = None;
            update_menu(app, root, agent);
            if app
                .menu
                .as_ref()
                .is_some_and(|m| m.items.len() == 1 && m.items[0].insert == item.insert)
            {
                app.menu = None;
            }
            true
        }
        _ => false,
    }
}

/// The user-invocable skills the session on screen sees, as `/name` entries.
pub(super) fn skill_items(agent: &AgentRef) -> Vec<MenuItem> {
    let Some(skills) = agent.ctx().get::<dsh_skills::SkillRegistry>() else {
        return Vec::new();
    };
    let lookup = dsh_skills::Lookup { cwd: agent.cwd() };
    skills
        .list(agent.ctx(), &lookup)
        .into_iter()
        .filter(|s| s.invocation.user_invocable)
        .map(|s| MenuItem {
            label: format!("/{}", s.name),
            insert: format!("/{} ", s.name),
            detail: format!("skill: {}", s.description),
        })
        .collect()
}

pub(super) fn command_items(root: &Context) -> Vec<MenuItem> {
    let mut items: Vec<MenuItem> = root
        .get::<dsh_commands::CommandRegistry>()
        .map(|r| r.list())
        .unwrap_or_default()
        .into_iter()
        .map(|c| MenuItem {
            label: format!(
                "/{}{}",
                c.name,
                c.hint
                    .as_deref()
                    .map(|h| format!(" {h}"))
                    .unwrap_or_default()
            ),
            insert: format!("/{} ", c.name),
            detail: c.description,
        })
        .collect();
    for (name, detail) in LOCAL_COMMANDS {
        if !items.iter().any(|i| i.insert == format!("/{name} ")) {
            items.push(MenuItem {
                label: format!("/{name}"),
                insert: format!("/{name} "),
                detail: (*detail).to_string(),
            });
        }
    }
    if !items.iter().any(|i| i.insert == "/help ") {
        items.push(MenuItem {
            label: "/help".into(),
            insert: "/help ".into(),
            detail: "Keys and the commands this session offers".into(),
        });
    }
    items.sort_by(|a, b| a.label.cmp(&b.label));
    items
}

pub(super) fn update_menu(app: &mut App, root: &Context, agent: &AgentRef) {
    let selected = app.menu.as_ref().map_or(0, |m| m.selected);
    app.menu = match app.composer.token() {
        Some(Token::Slash { start, word }) if !app.composer.text().contains(' ') => {
            let mut all = command_items(root);
            for skill in skill_items(agent) {
                if !all.iter().any(|i| i.insert == skill.insert) {
                    all.push(skill);
                }
            }
            all.sort_by(|a, b| a.label.cmp(&b.label));
            let items: Vec<MenuItem> = all
                .into_iter()
                .filter(|i| i.insert[1..].starts_with(&word))
                .collect();
            Some(Menu {
                title: " commands ",
                selected: selected.min(items.len().saturating_sub(1)),
                items,
                start,
            })
        }
        Some(Token::Mention { start, word }) => {
            let items = app
                .files
                .matches(&word, 50)
                .into_iter()
                .map(|path| MenuItem {
                    label: format!("@{path}"),
                    insert: format!("@{path} "),
                    detail: String::new(),
                })
                .collect::<Vec<_>>();
            Some(Menu {
                title: " files ",
                selected: selected.min(items.len().saturating_sub(1)),
                items,
                start,
            })
        }
        _ => None,
    };
    if app.menu.as_ref().is_some_and(|m| m.items.is_empty()) {
        app.menu = None;
    }
}

pub(super) fn open_picker(app: &mut App, root: &Context) {
    app.menu = None;
    let archived = app
        .archive
        .as_ref()
        .and_then(|a| a.archived().ok())
        .unwrap_or_default();
    app.overlay = Some(Overlay::Sessions(Picker {
        query: String::new(),
        all: session_rows(root, &archived),
        selected: 0,
        show_archived: false,
    }));
}

pub(super) async fn on_overlay_key(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    key: KeyEvent,
) {
    let Some(overlay) = &mut app.overlay else {
        return;
    };
    let picker = match overlay {
        Overlay::Help(_) => {
            if matches!(key.code, KeyCode::Esc | KeyCode::Enter | KeyCode::Char('q')) {
                app.overlay = None;
            }
            return;
        }
        Overlay::Sessions(p) => p,
    };
    let count = picker.filtered().len();
    match key.code {
        KeyCode::Esc => app.overlay = None,
        KeyCode::Up => picker.selected = picker.selected.saturating_sub(1),
        KeyCode::Down => picker.selected = (picker.selected + 1).min(count.saturating_sub(1)),
        KeyCode::Backspace => {
            picker.query.pop();
            picker.selected = 0;
        }
        KeyCode::Char('f') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            match fork(root, &id) {
                Ok(child) => {
                    app.overlay = None;
                    switch(app, root, agent, feed, Some(&child)).await;
                    app.say(format!("forked {id} into {child}"), false);
                }
                Err(e) => app.say(e, true),
            }
        }
        KeyCode::Tab => {
            picker.show_archived = !picker.show_archived;
            picker.selected = 0;
        }
        KeyCode::Char('a') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            let Some(archive) = app.archive.clone() else {
                app.say("archiving needs the session archive of dsh web", true);
                return;
            };
            let to = !picker.show_archived;
            match archive.set_archived(&id, to) {
                Ok(()) => {
                    for s in picker.all.iter_mut().filter(|s| s.id == id) {
                        s.archived = to;
                    }
                    picker.selected = picker
                        .selected
                        .min(picker.filtered().len().saturating_sub(1));
                    app.say(
                        format!("{} {id}", if to { "archived" } else { "restored" }),
                        false,
                    );
                }
                Err(e) => app.say(format!("cannot archive {id}: {e}"), true),
            }
        }
        KeyCode::Char('d') if key.modifiers.contains(KeyModifiers::CONTROL) => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            if id == agent.id() {
                app.say(
                    "this session is open here; switch to another one first",
                    true,
                );
                return;
            }
            let deleted = root
                .get::<dsh_persistence::SessionFiles>()
                .ok_or_else(|| "no session storage".to_string())
                .and_then(|f| f.delete(&id).map_err(|e| e.to_string()));
            match deleted {
                Ok(_) => {
                    picker.all.retain(|s| s.id != id);
                    picker.selected = picker
                        .selected
                        .min(picker.filtered().len().saturating_sub(1));
                    app.say(format!("deleted {id}"), false);
                }
                Err(e) => app.say(e, true),
            }
        }
        KeyCode::Enter => {
            let Some(id) = picker.filtered().get(picker.selected).map(|s| s.id.clone()) else {
                return;
            };
            app.overlay = None;
            if id != agent.id() {
                switch(app, root, agent, feed, Some(&id)).await;
            }
        }
        KeyCode::Char(c) if !key.modifiers.contains(KeyModifiers::CONTROL) => {
            picker.query.push(c);
            picker.selected = 0;
        }
        _ => {}
    }
}

pub(super) fn ctrl(key: &KeyEvent, c: char) -> bool {
    key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char(c)
}
