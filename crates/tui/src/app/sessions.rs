//! Sessions: the picker's rows, forks, and switching the open session.

use super::*;

/// Stored sessions, newest first, each followed by its children (subagents, forks).
pub(super) fn session_rows(root: &Context, archived: &[String]) -> Vec<SessionRow> {
    let Some(files) = root.get::<dsh_persistence::SessionFiles>() else {
        return Vec::new();
    };
    let mut summaries: Vec<dsh_persistence::SessionSummary> = files
        .log_paths()
        .into_iter()
        .filter_map(|p| files.summarize_file(&p).ok())
        .filter(|s| !s.blank)
        .collect();
    summaries.sort_by_key(|s| std::cmp::Reverse(s.updated_at));
    let ids: std::collections::HashSet<String> =
        summaries.iter().map(|s| s.header.id.clone()).collect();
    let mut children: std::collections::HashMap<String, Vec<usize>> = Default::default();
    let mut roots = Vec::new();
    for (i, s) in summaries.iter().enumerate() {
        match &s.header.parent_session {
            Some(p) if ids.contains(p) => children.entry(p.clone()).or_default().push(i),
            _ => roots.push(i),
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|i| (i, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        let s = &summaries[i];
        let title = if s.title.is_empty() {
            s.text
                .lines()
                .next()
                .unwrap_or("(untitled)")
                .chars()
                .take(60)
                .collect()
        } else {
            s.title.clone()
        };
        out.push(SessionRow {
            id: s.header.id.clone(),
            search: format!("{} {} {}", s.header.id, title, s.text).to_lowercase(),
            title,
            when: ago(s.updated_at),
            depth,
            archived: archived.contains(&s.header.id),
        });
        if depth < 8
            && let Some(kids) = children.get(&s.header.id)
        {
            stack.extend(kids.iter().rev().map(|k| (*k, depth + 1)));
        }
    }
    out
}

pub(super) fn ago(ms: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let s = (now - ms).max(0) / 1000;
    match s {
        0..60 => "just now".into(),
        60..3600 => format!("{}m ago", s / 60),
        3600..86400 => format!("{}h ago", s / 3600),
        _ => format!("{}d ago", s / 86400),
    }
}

/// The newest stored top-level session started in `cwd`.
pub(super) fn last_session(root: &Context, cwd: &std::path::Path) -> Option<String> {
    let files = root.get::<dsh_persistence::SessionFiles>()?;
    let mut list = files.list().ok()?;
    list.retain(|(h, _)| {
        h.parent_session.is_none() && h.cwd.as_deref().map(std::path::Path::new) == Some(cwd)
    });
    list.sort_by_key(|(h, _)| h.created_at);
    list.last().map(|(h, _)| h.id.clone())
}

/// Forks stored session `id` after its last completed turn; the new session's id.
pub(super) fn fork(root: &Context, id: &str) -> Result<String, String> {
    let files = root
        .get::<dsh_persistence::SessionFiles>()
        .ok_or("no session storage")?;
    let loaded = files.inspect(id).map_err(|e| e.to_string())?;
    let cut = dsh_persistence::fork_cut(&loaded.events, None)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    let mut header =
        dsh_session::SessionHeader::new(format!("session-{}", uuid::Uuid::new_v4()), now);
    header.cwd = loaded.header.cwd.clone();
    header.parent_session = Some(loaded.header.id.clone());
    header.seed_length = Some(cut as u64);
    header.agent_preset = loaded.header.agent_preset.clone();
    let child =
        dsh_session::Session::with_seed(header.clone(), loaded.events[..cut].to_vec(), now as i64)
            .map_err(|e| e.to_string())?;
    files
        .create(&header, child.events())
        .map_err(|e| e.to_string())?;
    Ok(header.id)
}

/// Puts another session on screen (`None`: a fresh one); the one left is saved and closed.
pub(super) async fn switch(
    app: &mut App,
    root: &Context,
    agent: &mut AgentRef,
    feed: &Feed,
    to: Option<&str>,
) {
    if agent.status() == AgentStatus::Running {
        app.say("a turn is running; cancel it (Esc) before switching", true);
        return;
    }
    let cwd = agent.cwd().or_else(|| std::env::current_dir().ok());
    let old = agent.clone();
    let _ = old.session().flush().await;
    old.dispose().await;
    match create_agent(root, to, cwd.clone()) {
        Ok(next) => {
            *feed.current.lock().unwrap_or_else(|p| p.into_inner()) = next.id().to_string();
            *agent = next;
            *app.choice.lock().unwrap_or_else(|p| p.into_inner()) = None;
            load_transcript(app, root, agent);
        }
        Err(e) => {
            app.say(e, true);
            // Back to a fresh session rather than none.
            if let Ok(next) = create_agent(root, None, cwd) {
                *feed.current.lock().unwrap_or_else(|p| p.into_inner()) = next.id().to_string();
                *agent = next;
                load_transcript(app, root, agent);
            }
        }
    }
}

/// The session the app starts on.
pub(super) fn create_agent(
    root: &Context,
    resume: Option<&str>,
    cwd: Option<PathBuf>,
) -> Result<AgentRef, String> {
    let agents = root.require::<Agents>().map_err(|e| e.to_string())?;
    let mut request = crate::session::fresh_request(root, cwd);
    if let Some(id) = resume {
        let files = root.get::<dsh_persistence::SessionFiles>().ok_or(
            "resuming needs session persistence (the session-persistence-jsonl row is disabled)",
        )?;
        let loaded = files
            .load(id)
            .map_err(|e| format!("cannot resume {id}: {e}"))?;
        crate::session::resume_into(&mut request, loaded);
    }
    agents.create(root, request).map_err(|e| e.to_string())
}
