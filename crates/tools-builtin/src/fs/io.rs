//! Local text-file mechanics: stat versions, whole-file text reads, atomic staged writes,
//! the literal edit critical section, the per-target lock, and the sandbox fence.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use dsh_kernel::BoxError;

use crate::errors;
use crate::paths::{Target, is_path_under, resolve_target};
use crate::sandbox::{ExecutionPolicy, SandboxMode};

use super::events::WriteIntent;
use dsh_tools::ClientFiles;

/// A failure of the client that owns the files, as a tool error.
pub(crate) fn client_error(op: &str, display: &str, e: &BoxError) -> BoxError {
    errors::fs(
        "FS_CLIENT",
        format!("cannot {op} \"{display}\" through the editor: {e}"),
    )
}

/// NUL within this many leading bytes marks a file as binary for `read`.
pub(crate) const BINARY_SAMPLE_BYTES: usize = 8192;

/// What a stat saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Probe {
    pub version: String,
    pub mode: u32,
    pub kind: Kind,
    pub size: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    File,
    Directory,
    Other,
}

/// `dev:ino:size:mtimeNs:ctimeNs` — changes on every write (atomic rename: new inode).
pub(crate) fn version_of(meta: &Metadata) -> String {
    let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    format!(
        "{}:{}:{}:{}:{}",
        meta.dev(),
        meta.ino(),
        meta.size(),
        ns(meta.mtime(), meta.mtime_nsec()),
        ns(meta.ctime(), meta.ctime_nsec())
    )
}

/// Stat following symlinks; `None` when the path (or a parent segment) does not exist.
pub(crate) fn probe(path: &Path) -> Result<Option<Probe>, BoxError> {
    match std::fs::metadata(path) {
        Ok(meta) => {
            let kind = if meta.is_file() {
                Kind::File
            } else if meta.is_dir() {
                Kind::Directory
            } else {
                Kind::Other
            };
            Ok(Some(Probe {
                version: version_of(&meta),
                mode: meta.mode() & 0o777,
                kind,
                size: meta.size(),
            }))
        }
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(io_error(&e, "stat", path)),
    }
}

/// Node's text for a raw filesystem error (`EACCES: permission denied, open '/x'`).
pub(crate) fn io_error(error: &std::io::Error, syscall: &str, path: &Path) -> BoxError {
    let (code, text) = match error.raw_os_error() {
        Some(libc::ENOENT) => ("ENOENT", "no such file or directory"),
        Some(libc::EACCES) => ("EACCES", "permission denied"),
        Some(libc::EPERM) => ("EPERM", "operation not permitted"),
        Some(libc::EEXIST) => ("EEXIST", "file already exists"),
        Some(libc::ENOTDIR) => ("ENOTDIR", "not a directory"),
        Some(libc::EISDIR) => ("EISDIR", "illegal operation on a directory"),
        Some(libc::EROFS) => ("EROFS", "read-only file system"),
        Some(libc::ENOSPC) => ("ENOSPC", "no space left on device"),
        Some(libc::EXDEV) => ("EXDEV", "cross-device link not permitted"),
        _ => return errors::plain(format!("{error}, {syscall} '{}'", path.display())),
    };
    errors::plain(format!("{code}: {text}, {syscall} '{}'", path.display()))
}

/// Decodes UTF-8 fatally, dropping a leading BOM (as a default `TextDecoder` does).
pub(crate) fn decode_utf8(bytes: Vec<u8>) -> Option<String> {
    let mut text = String::from_utf8(bytes).ok()?;
    if text.starts_with('\u{feff}') {
        text.drain(..3);
    }
    Some(text)
}

/// Collapses CRLF to LF (a lone CR stays).
pub(crate) fn normalize_line_endings(text: &str) -> String {
    text.replace("\r\n", "\n")
}

/// Lines of a text file read as a stream: the total line count (as `split('\n')` counts
/// them) and the lines from `first` (1-based) on, kept only while `keep` has room for them.
pub(crate) struct LineWindow {
    pub total: usize,
    pub lines: Vec<String>,
}

/// Streams a regular UTF-8 file (binary sample and fatal decoding as
/// [`read_whole_text`], a leading BOM dropped) and keeps only the lines of a window, up to
/// about `budget_bytes` of them: memory stays bounded whatever the file's size.
pub(crate) fn read_line_window(
    target: &Target,
    first: usize,
    budget_bytes: usize,
) -> Result<LineWindow, BoxError> {
    use std::io::BufRead as _;
    let display = &target.display;
    let not_text =
        |why: &str| errors::fs("FS_NOT_TEXT", format!("cannot read \"{display}\": {why}"));
    let file = std::fs::File::open(&target.key).map_err(|e| io_error(&e, "open", &target.key))?;
    let mut reader = std::io::BufReader::with_capacity(64 * 1024, file);
    let mut window = LineWindow {
        total: 1,
        lines: Vec::new(),
    };
    let mut line: Vec<u8> = Vec::new();
    let mut kept = 0usize;
    let mut sampled = 0usize;
    let mut at_start = true;
    // Bytes of an incomplete UTF-8 sequence carried into the next read.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let chunk = reader
            .fill_buf()
            .map_err(|e| io_error(&e, "read", &target.key))?;
        if chunk.is_empty() {
            break;
        }
        let n = chunk.len();
        if sampled < BINARY_SAMPLE_BYTES {
            let look = (BINARY_SAMPLE_BYTES - sampled).min(n);
            if chunk[..look].contains(&0) {
                return Err(errors::fs(
                    "FS_NOT_TEXT",
                    format!("cannot read \"{display}\": binary file"),
                ));
            }
            sampled += look;
        }
        let mut bytes = std::mem::take(&mut carry);
        bytes.extend_from_slice(chunk);
        reader.consume(n);
        let valid = match std::str::from_utf8(&bytes) {
            Ok(_) => bytes.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => return Err(not_text("invalid UTF-8 text")),
        };
        carry.extend_from_slice(&bytes[valid..]);
        let mut text = &bytes[..valid];
        if at_start {
            at_start = false;
            text = text.strip_prefix(&[0xEF, 0xBB, 0xBF][..]).unwrap_or(text);
        }
        for piece in text.split_inclusive(|b| *b == b'\n') {
            let ends = piece.last() == Some(&b'\n');
            let body = if ends {
                &piece[..piece.len() - 1]
            } else {
                piece
            };
            let in_window = window.total >= first && kept < budget_bytes;
            if in_window {
                let room = budget_bytes.saturating_sub(kept + line.len());
                line.extend_from_slice(&body[..body.len().min(room + 4)]);
            }
            if ends {
                if in_window {
                    kept += line.len() + 1;
                    window
                        .lines
                        .push(String::from_utf8_lossy(&line).into_owned());
                }
                line.clear();
                window.total += 1;
            }
        }
    }
    if !carry.is_empty() {
        return Err(not_text("invalid UTF-8 text"));
    }
    if window.total >= first && kept < budget_bytes {
        window
            .lines
            .push(String::from_utf8_lossy(&line).into_owned());
    }
    Ok(window)
}

/// Reads a whole regular UTF-8 file (binary sample and fatal decoding), for `view`.
pub(crate) fn read_whole_text(target: &Target) -> Result<String, BoxError> {
    let display = &target.display;
    match probe(&target.key)? {
        None => {
            return Err(errors::fs(
                "FS_NOT_FOUND",
                format!("cannot read \"{display}\": not found"),
            ));
        }
        Some(p) if p.kind != Kind::File => {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!("cannot read \"{display}\": not a regular file"),
            ));
        }
        Some(_) => {}
    }
    let raw = std::fs::read(&target.key).map_err(|e| io_error(&e, "open", &target.key))?;
    if raw[..raw.len().min(BINARY_SAMPLE_BYTES)].contains(&0) {
        return Err(errors::fs(
            "FS_NOT_TEXT",
            format!("cannot read \"{display}\": binary file"),
        ));
    }
    decode_utf8(raw).ok_or_else(|| {
        errors::fs(
            "FS_NOT_TEXT",
            format!("cannot read \"{display}\": invalid UTF-8 text"),
        )
    })
}

/// The best-effort LF-normalized diff basis of an existing file: `None` for a non-regular,
/// too large (`>= max_bytes`), binary, non-UTF-8 or unreadable file.
fn read_text_for_diff(path: &Path, max_bytes: u64) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.size() >= max_bytes {
        return None;
    }
    let mut buf = Vec::with_capacity(meta.size() as usize + 1);
    (&mut file)
        .take(meta.size() + 1)
        .read_to_end(&mut buf)
        .ok()?;
    if buf.len() as u64 != meta.size() || buf.contains(&0) {
        return None;
    }
    decode_utf8(buf).map(|t| normalize_line_endings(&t))
}

// ------------------------------------------------------------------ locks

static LOCKS: LazyLock<Mutex<HashMap<PathBuf, Weak<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(Default::default);

/// Serializes mutations of one target identity (FIFO, process-wide).
pub(crate) async fn lock_target(key: &Path) -> tokio::sync::OwnedMutexGuard<()> {
    let lock = {
        let mut map = LOCKS.lock().unwrap_or_else(|p| p.into_inner());
        map.retain(|_, weak| weak.strong_count() > 0);
        match map.get(key).and_then(Weak::upgrade) {
            Some(lock) => lock,
            None => {
                let lock = Arc::new(tokio::sync::Mutex::new(()));
                map.insert(key.to_path_buf(), Arc::downgrade(&lock));
                lock
            }
        }
    };
    lock.lock_owned().await
}

// ------------------------------------------------------------------ fence

/// Enforces the per-call policy on a mutation target and returns the target to mutate:
/// `read-only` refuses, `workspace-write` re-resolves the target now (catching a swapped
/// symlink) and requires it under a writable root, `danger-full-access` passes.
pub(crate) fn fence(target: &Target, policy: Option<&ExecutionPolicy>) -> Result<Target, BoxError> {
    let Some(policy) = policy else {
        return Ok(target.clone());
    };
    let display = &target.display;
    match policy.mode {
        SandboxMode::DangerFullAccess => Ok(target.clone()),
        SandboxMode::ReadOnly => Err(errors::fs(
            "FS_SANDBOX_DENIED",
            format!("cannot write \"{display}\": file access denied under read-only mode"),
        )),
        SandboxMode::WorkspaceWrite => {
            let fresh = resolve_target(Path::new("/"), display)?;
            if policy
                .writable_roots()
                .iter()
                .any(|root| is_path_under(&fresh.key, root))
            {
                Ok(fresh)
            } else {
                Err(errors::fs(
                    "FS_SANDBOX_DENIED",
                    format!(
                        "cannot write \"{display}\": file access denied under workspace-write mode"
                    ),
                ))
            }
        }
    }
}

// ------------------------------------------------------------------ writes

/// Atomically publishes `content` at `path` through a private staging file in the same
/// directory (dir 0700, file 0600, synced, previous mode restored). With
/// `create_if_absent`, publication is a hard link, so an existing file is never replaced.
pub(crate) fn write_atomic(
    path: &Path,
    content: &[u8],
    mode: Option<u32>,
    create_if_absent: Option<&str>,
) -> Result<(), BoxError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| io_error(&e, "mkdir", dir))?;
    let base = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = dir.join(format!(
        ".{base}.{}.{}.tmpdir",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&staging)
        .map_err(|e| io_error(&e, "mkdir", &staging))?;
    let result = stage_and_publish(path, &staging, &base, content, mode, create_if_absent);
    let _ = std::fs::remove_dir_all(&staging);
    result
}

fn stage_and_publish(
    path: &Path,
    staging: &Path,
    base: &str,
    content: &[u8],
    mode: Option<u32>,
    create_if_absent: Option<&str>,
) -> Result<(), BoxError> {
    std::fs::set_permissions(staging, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| io_error(&e, "chmod", staging))?;
    let temp = staging.join(format!("{base}.tmp"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .map_err(|e| io_error(&e, "open", &temp))?;
    file.write_all(content)
        .map_err(|e| io_error(&e, "write", &temp))?;
    file.sync_all().map_err(|e| io_error(&e, "fsync", &temp))?;
    if let Some(mode) = mode {
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| io_error(&e, "fchmod", &temp))?;
    }
    drop(file);
    match create_if_absent {
        Some(display) => {
            std::fs::hard_link(&temp, path).map_err(|e| guarded_create_failure(&e, path, display))
        }
        None => std::fs::rename(&temp, path).map_err(|e| io_error(&e, "rename", path)),
    }
}

fn guarded_create_failure(error: &std::io::Error, path: &Path, display: &str) -> BoxError {
    let not_observed = || {
        errors::fs(
            "FS_NOT_OBSERVED",
            format!("cannot overwrite existing \"{display}\" without reading it first"),
        )
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.is_file() => errors::fs(
            "FS_NOT_REGULAR_FILE",
            format!("cannot write \"{display}\": not a regular file"),
        ),
        Ok(_) => not_observed(),
        Err(_) if error.kind() == ErrorKind::AlreadyExists => not_observed(),
        Err(_) => errors::fs(
            "FS_IO_ERROR",
            format!("cannot write \"{display}\": {error}"),
        ),
    }
}

/// The outcome of a `write`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct WriteOutcome {
    pub created: bool,
    pub version: String,
    /// LF-normalized previous text, when it could serve as a diff basis.
    pub before: Option<String>,
    /// LF-normalized new text.
    pub after: String,
}

fn version_after_write(target: &Target) -> Result<String, BoxError> {
    Ok(probe(&target.key)?
        .map(|p| p.version)
        .unwrap_or_else(|| format!("missing:{}", target.key.display())))
}

/// Writes a whole file under the target lock, honouring the intent guard. With a client
/// route that writes, the checks stay here and the content goes through the client.
pub(crate) async fn write_text(
    target: &Target,
    content: String,
    intent: Option<WriteIntent>,
    policy: Option<&ExecutionPolicy>,
    diff_basis_max_bytes: u64,
    client: Option<Arc<dyn ClientFiles>>,
) -> Result<WriteOutcome, BoxError> {
    let target = fence(target, policy)?;
    let _guard = lock_target(&target.key).await;
    let checked = target.clone();
    let content_len = content.len() as u64;
    let create_if_absent = matches!(intent, Some(WriteIntent::CreateIfAbsent));
    let (existing, before) = blocking(move || {
        let display = &checked.display;
        let existing = probe(&checked.key)?;
        if let Some(p) = &existing
            && p.kind != Kind::File
        {
            return Err(errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!("cannot write \"{display}\": not a regular file"),
            ));
        }
        match (&intent, &existing) {
            (None, _) | (Some(WriteIntent::CreateIfAbsent), None) => {}
            (Some(WriteIntent::ReplaceIfVersion(_)), None) => {
                return Err(errors::fs(
                    "FS_STALE_VERSION",
                    format!("cannot write \"{display}\": file no longer exists"),
                ));
            }
            (Some(WriteIntent::ReplaceIfVersion(v)), Some(p)) => {
                if *v != p.version {
                    return Err(errors::fs(
                        "FS_STALE_VERSION",
                        format!("cannot write \"{display}\": file changed since it was read"),
                    ));
                }
            }
            (Some(WriteIntent::CreateIfAbsent), Some(_)) => {
                return Err(errors::fs(
                    "FS_NOT_OBSERVED",
                    format!("cannot overwrite existing \"{display}\" without reading it first"),
                ));
            }
        }
        let before = match &existing {
            Some(_) if content_len < diff_basis_max_bytes => {
                read_text_for_diff(&checked.key, diff_basis_max_bytes)
            }
            _ => None,
        };
        Ok((existing, before))
    })
    .await?;
    let after = normalize_line_endings(&content);
    match client.filter(|c| c.writes()) {
        Some(client) => client
            .write_text(&target.key, content)
            .await
            .map_err(|e| client_error("write", &target.display, &e))?,
        None => {
            let (written, mode) = (target.clone(), existing.as_ref().map(|p| p.mode));
            blocking(move || {
                let guard = create_if_absent.then_some(written.display.as_str());
                write_atomic(&written.key, content.as_bytes(), mode, guard)
            })
            .await?;
        }
    }
    let version = {
        let t = target.clone();
        blocking(move || version_after_write(&t)).await?
    };
    Ok(WriteOutcome {
        created: existing.is_none(),
        version,
        before,
        after,
    })
}

/// The outcome of an `edit`.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct EditOutcome {
    pub version: String,
    pub before: String,
    pub after: String,
}

/// A literal replacement request.
pub(crate) struct EditRequest {
    pub old: String,
    pub new: String,
    pub replace_all: bool,
}

/// Read-match-write under the target lock. Matching runs on LF-normalized text (CRLF in
/// the file and in both strings); a CRLF-dominant file is written back with CRLF. With a
/// client route, the text is read and written through the client (the checks stay here).
pub(crate) async fn edit_text(
    target: &Target,
    edit: EditRequest,
    expected_version: Option<String>,
    policy: Option<&ExecutionPolicy>,
    client: Option<Arc<dyn ClientFiles>>,
) -> Result<EditOutcome, BoxError> {
    let target = fence(target, policy)?;
    let _guard = lock_target(&target.key).await;
    let display = target.display.clone();
    let stale = {
        let display = display.clone();
        move || {
            errors::fs(
                "FS_STALE_VERSION",
                format!("cannot edit \"{display}\": file changed since it was read"),
            )
        }
    };
    let reads_local = !client.as_ref().is_some_and(|c| c.reads());
    let (existing, raw) = {
        let (t, stale) = (target.clone(), stale.clone());
        blocking(move || {
            let display = &t.display;
            let Some(existing) = probe(&t.key)? else {
                return Err(stale());
            };
            if existing.kind != Kind::File {
                return Err(errors::fs(
                    "FS_NOT_REGULAR_FILE",
                    format!("cannot edit \"{display}\": not a regular file"),
                ));
            }
            if expected_version
                .as_ref()
                .is_some_and(|v| *v != existing.version)
            {
                return Err(stale());
            }
            let raw = if reads_local {
                Some(std::fs::read(&t.key).map_err(|e| io_error(&e, "open", &t.key))?)
            } else {
                None
            };
            Ok((existing, raw))
        })
        .await?
    };
    let raw = match (raw, &client) {
        (Some(raw), _) => raw,
        (None, Some(c)) => c
            .read_text(&target.key)
            .await
            .map_err(|e| client_error("read", &display, &e))?
            .into_bytes(),
        (None, None) => Vec::new(),
    };
    if raw.contains(&0) {
        return Err(errors::fs(
            "FS_NOT_TEXT",
            format!("cannot edit \"{display}\": binary file"),
        ));
    }
    let raw = decode_utf8(raw).ok_or_else(|| {
        errors::fs(
            "FS_NOT_TEXT",
            format!("cannot edit \"{display}\": invalid UTF-8 text"),
        )
    })?;
    let crlf = crlf_dominant(&raw);
    let content = normalize_line_endings(&raw);
    let old = normalize_line_endings(&edit.old);
    let new = normalize_line_endings(&edit.new);
    if old.is_empty() {
        return Err(errors::fs(
            "FS_EDIT_NOT_FOUND",
            "old_string is empty: pass the exact text to replace",
        ));
    }
    let count = content.matches(old.as_str()).count();
    if count == 0 {
        return Err(errors::fs(
            "FS_EDIT_NOT_FOUND",
            format!("old_string was not found in \"{display}\""),
        ));
    }
    if !edit.replace_all && count > 1 {
        return Err(errors::fs(
            "FS_AMBIGUOUS_EDIT",
            format!(
                "old_string occurs {count} times in \"{display}\": include more of the surrounding text so it matches once, or set replace_all to true to change every occurrence"
            ),
        ));
    }
    let edited = content.replace(old.as_str(), &new);
    let written = if crlf {
        edited.split('\n').collect::<Vec<_>>().join("\r\n")
    } else {
        edited.clone()
    };
    match client.filter(|c| c.writes()) {
        Some(c) => c
            .write_text(&target.key, written)
            .await
            .map_err(|e| client_error("write", &display, &e))?,
        None => {
            let t = target.clone();
            blocking(move || write_atomic(&t.key, written.as_bytes(), Some(existing.mode), None))
                .await?;
        }
    }
    let version = {
        let t = target.clone();
        blocking(move || version_after_write(&t)).await?
    };
    Ok(EditOutcome {
        version,
        before: content,
        after: edited,
    })
}

/// Whether CRLF outnumbers lone LF in the first 4096 UTF-16 units.
fn crlf_dominant(raw: &str) -> bool {
    let mut units = 0;
    let mut end = raw.len();
    for (i, ch) in raw.char_indices() {
        if units + ch.len_utf16() > 4096 {
            end = i;
            break;
        }
        units += ch.len_utf16();
    }
    let sample = &raw[..end];
    let crlf = sample.matches("\r\n").count();
    let lf = sample.matches('\n').count() - crlf;
    crlf > lf
}

/// Runs blocking filesystem work off the async workers.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BoxError> + Send + 'static,
) -> Result<T, BoxError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| errors::plain(format!("filesystem task failed: {e}")))?
}
