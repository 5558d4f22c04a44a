//! `host.*`: what the page needs to know about this process and machine.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::rpc::{ApiError, ApiResult, Args, ErrorCode};
use crate::state::WebState;

/// Most directory entries one listing returns.
const MAX_ENTRIES: usize = 2000;

pub async fn describe(s: &WebState) -> ApiResult {
    let model = s.root.get::<dsh_policies::DefaultModel>();
    Ok(json!({
        "version": env!("CARGO_PKG_VERSION"),
        "instance": s.instance,
        "cwd": s.launch_cwd.display().to_string(),
        "home": s.home.display().to_string(),
        "provider": model.as_ref().map(|m| m.provider.clone()),
        "model": model.as_ref().map(|m| m.model.clone()),
        "attachedSessions": s.hosting.live().len(),
        "persistence": s.files.is_some(),
        "workspaces": s.workspaces.is_some(),
    }))
}

fn crumbs(path: &Path) -> Vec<Value> {
    let mut out: Vec<Value> = path
        .ancestors()
        .map(|p| {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| p.display().to_string());
            json!({"name": name, "path": p.display().to_string(), "hidden": name.starts_with('.')})
        })
        .collect();
    out.reverse();
    out
}

pub async fn list_directory(s: &WebState, p: &Value) -> ApiResult {
    let args = Args(p);
    let path = match args.opt_str("path")? {
        Some(p) if !p.trim().is_empty() => PathBuf::from(p.trim()),
        _ => s.launch_cwd.clone(),
    };
    if !path.is_absolute() {
        return Err(ApiError::bad_request("path must be absolute"));
    }
    let home = s.home.clone();
    tokio::task::spawn_blocking(move || {
        let unreadable = |e: std::io::Error| {
            ApiError::new(
                ErrorCode::DirectoryUnreadable,
                format!("{} cannot be listed: {e}", path.display()),
            )
            .with(json!({"path": path.display().to_string()}))
        };
        let canonical = std::fs::canonicalize(&path).map_err(unreadable)?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for entry in std::fs::read_dir(&canonical).map_err(unreadable)?.flatten() {
            // Directories only (symlinks to directories included).
            if !entry.path().is_dir() {
                continue;
            }
            if entries.len() >= MAX_ENTRIES {
                truncated = true;
                break;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            entries.push(json!({
                "name": name,
                "path": entry.path().display().to_string(),
                "hidden": name.starts_with('.'),
            }));
        }
        entries.sort_by(|a, b| {
            let key = |v: &Value| v["name"].as_str().unwrap_or_default().to_lowercase();
            key(a).cmp(&key(b))
        });
        Ok(json!({
            "path": canonical.display().to_string(),
            "home": home.display().to_string(),
            "crumbs": crumbs(&canonical),
            "entries": entries,
            "truncated": truncated,
        }))
    })
    .await
    .map_err(ApiError::internal)?
}
