//! What a run needs when a team worker runs it for a client: the session moved to the
//! directory the client chose, approvals answered through the gateway, and the task's
//! images stored before its message.

use std::sync::Arc;

/// Moves the session to the directory a plugin assigned before the task runs (logged, and
/// told to the model), or, when that is no existing directory inside its root, tells the
/// model that the session stays where it is. Fails only when the log refuses the change.
pub(crate) fn move_to(
    agent: &dsh_agent::AgentRef,
    wanted: &dsh_session::AssignedWorkingDirectory,
) -> Result<(), String> {
    let session = agent.session();
    let origin = session
        .header()
        .cwd
        .map_or_else(|| wanted.root.clone(), std::path::PathBuf::from);
    let current = agent.cwd().unwrap_or_else(|| origin.clone());
    let target = dsh_working_directory::resolve(&current, &wanted.path);
    let root = std::fs::canonicalize(&wanted.root).unwrap_or_else(|_| wanted.root.clone());
    let inside = std::fs::canonicalize(&target)
        .ok()
        .filter(|t| t.is_dir() && t.starts_with(&root));
    let notice = match inside {
        Some(dir) => {
            dsh_working_directory::settle(session, &current, &origin, Some(&dir.to_string_lossy()))?
                .notice
        }
        None => Some(dsh_working_directory::notice(format!(
            "The client asked to move to {}, which is not an existing directory inside the \
             workspace {}; the working directory stays {}.",
            dsh_kernel::json::to_string(&serde_json::json!(wanted.path)),
            dsh_kernel::json::to_string(&serde_json::json!(root.display().to_string())),
            dsh_kernel::json::to_string(&serde_json::json!(current.display().to_string())),
        ))),
    };
    if let Some(message) = notice {
        agent
            .send(message, dsh_session::InboxTarget::NextStep, false)
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// An approval answerer that hands each request to [`dsh_tools::RemoteApprovals`].
pub(crate) struct Remote(pub(crate) Arc<dyn dsh_tools::ApprovalService>);

impl dsh_policies::ApprovalAnswerer for Remote {
    fn ask(
        &self,
        request: dsh_tools::ApprovalRequest,
    ) -> dsh_kernel::BoxFuture<'static, dsh_tools::ApprovalOutcome> {
        self.0.request(request)
    }
}

/// Stores the task's images (whatever the route: a text-only model is shown a placeholder
/// for each, as the SDK runtime does) and answers their image blocks, in order.
pub(crate) async fn store_task_images(
    root: &dsh_kernel::Context,
    images: &dsh_session::TaskImages,
) -> Result<Vec<dsh_llm::ContentBlock>, String> {
    let mut batch = Vec::new();
    for image in &images.0 {
        let data = std::fs::read(&image.path)
            .map_err(|e| format!("cannot read the task's image {}: {e}", image.path.display()))?;
        batch.push(dsh_attachments::SaveImage {
            data,
            media_type: image.media_type.clone(),
            name: image.name.clone(),
        });
    }
    let root = root.clone();
    let refs =
        tokio::task::spawn_blocking(move || dsh_attachments::store_prompt_images(&root, &batch))
            .await
            .map_err(|e| format!("storing the task's images: {e}"))?
            .map_err(|e| format!("the task's images were refused: {}", e.message()))?;
    Ok(refs
        .into_iter()
        .map(|r| dsh_llm::ContentBlock::image(r.to_store_value()))
        .collect())
}
