//! Local text-file mechanics: stat versions, whole-file text reads, atomic staged writes,
//! the literal edit critical section, the per-target lock, and the sandbox fence.

use std::collections::HashMap;
use std::fs::{File, Metadata};
use std::io::{ErrorKind, Read as _};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use dsh_kernel::BoxError;

use crate::errors;
use crate::paths::{Target, is_path_under, resolve_target};
use crate::sandbox::{ExecutionPolicy, SandboxMode};

use super::anchor::{Anchor, Parents, Walk};
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
    let file = open_checked(target)?;
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
    let mut raw = Vec::new();
    open_checked(target)?
        .read_to_end(&mut raw)
        .map_err(|e| io_error(&e, "read", &target.key))?;
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

/// Opens the target for reading and refuses it when the opened file is a secret: the check is
/// about the file that was opened, so a path segment swapped after resolution cannot lead
/// the read to the credentials.
/// Only regular files are handed out: a path swapped for a FIFO or a device after the stat
/// must not hang or flood the read.
pub(crate) fn open_checked(target: &Target) -> Result<File, BoxError> {
    use dsh_sandbox::secrets::{OpenForRead, open_for_read};
    let file = open_for_read(&target.key).map_err(|e| match e {
        OpenForRead::Secret => crate::paths::secret_refusal(&target.display),
        OpenForRead::Io(e) => io_error(&e, "open", &target.key),
    })?;
    match file.metadata() {
        Ok(meta) if meta.is_file() => Ok(file),
        Ok(_) => Err(errors::fs(
            "FS_NOT_REGULAR_FILE",
            format!("cannot read \"{}\": not a regular file", target.display),
        )),
        Err(e) => Err(io_error(&e, "stat", &target.key)),
    }
}

/// The best-effort LF-normalized diff basis of an existing file: `None` for a non-regular,
/// too large (`>= max_bytes`), binary, non-UTF-8 or unreadable file.
fn text_for_diff(anchor: &Anchor, max_bytes: u64) -> Option<String> {
    let buf = anchor.read_capped(max_bytes)?;
    if buf.contains(&0) {
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

/// Enforces the per-call policy on a mutation target and returns the target to mutate and
/// how to reach it: `read-only` refuses, `workspace-write` re-resolves the target now and
/// requires it under a writable root — then the write walks to it without following any
/// symlink, so a segment swapped after this check is refused rather than followed —,
/// `danger-full-access` passes.
pub(crate) fn fence(
    target: &Target,
    policy: Option<&ExecutionPolicy>,
) -> Result<(Target, Walk), BoxError> {
    let Some(policy) = policy else {
        return Ok((target.clone(), Walk::Follow));
    };
    let display = &target.display;
    match policy.mode {
        SandboxMode::DangerFullAccess => Ok((target.clone(), Walk::Follow)),
        SandboxMode::ReadOnly => Err(errors::fs(
            "FS_SANDBOX_DENIED",
            format!("cannot write \"{display}\": file access denied under read-only mode"),
        )),
        SandboxMode::WorkspaceWrite => {
            let fresh = resolve_target(Path::new("/"), display)?;
            if let Some(protected) = policy.protected_path_of(&fresh.key) {
                return Err(errors::fs(
                    "FS_SANDBOX_DENIED",
                    format!(
                        "cannot write \"{display}\": {} stays read-only under workspace-write mode (hooks and git configuration would run outside the sandbox later)",
                        protected.display()
                    ),
                ));
            }
            if policy
                .writable_roots()
                .iter()
                .any(|root| is_path_under(&fresh.key, root))
            {
                Ok((fresh, Walk::Strict))
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

fn version_after_write(anchor: &Anchor, target: &Target) -> Result<String, BoxError> {
    Ok(anchor
        .probe()?
        .map(|p| p.version)
        .unwrap_or_else(|| format!("missing:{}", target.key.display())))
}

/// The anchor of a mutation target, creating missing parents.
fn anchor_for_write(target: &Target, walk: Walk) -> Result<Anchor, BoxError> {
    Anchor::open(&target.key, walk, Parents::Create)?.ok_or_else(|| {
        errors::fs(
            "FS_NOT_FOUND",
            format!(
                "cannot write \"{}\": its directory could not be created",
                target.display
            ),
        )
    })
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
    let (target, walk) = fence(target, policy)?;
    let _guard = lock_target(&target.key).await;
    let checked = target.clone();
    let content_len = content.len() as u64;
    let create_if_absent = matches!(intent, Some(WriteIntent::CreateIfAbsent));
    let (existing, before) = blocking(move || {
        let display = &checked.display;
        let anchor = Anchor::open(&checked.key, walk, Parents::Existing)?;
        let existing = match &anchor {
            Some(anchor) => anchor.probe()?,
            None => None,
        };
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
        let before = match (&existing, &anchor) {
            (Some(_), Some(anchor)) if content_len < diff_basis_max_bytes => {
                text_for_diff(anchor, diff_basis_max_bytes)
            }
            _ => None,
        };
        Ok((existing, before))
    })
    .await?;
    let after = normalize_line_endings(&content);
    let version = match client.filter(|c| c.writes()) {
        Some(client) => {
            client
                .write_text(&target.key, content)
                .await
                .map_err(|e| client_error("write", &target.display, &e))?;
            let key = target.key.clone();
            blocking(move || {
                Ok(probe(&key)?
                    .map(|p| p.version)
                    .unwrap_or_else(|| format!("missing:{}", key.display())))
            })
            .await?
        }
        None => {
            let (written, mode) = (target.clone(), existing.as_ref().map(|p| p.mode));
            blocking(move || {
                let anchor = anchor_for_write(&written, walk)?;
                let guard = create_if_absent.then_some(written.display.as_str());
                anchor.publish(content.as_bytes(), mode, guard)?;
                version_after_write(&anchor, &written)
            })
            .await?
        }
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
    let (target, walk) = fence(target, policy)?;
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
            let Some(anchor) = Anchor::open(&t.key, walk, Parents::Existing)? else {
                return Err(stale());
            };
            let Some(existing) = anchor.probe()? else {
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
                Some(anchor.read_all()?)
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
    let version = match client.filter(|c| c.writes()) {
        Some(c) => {
            c.write_text(&target.key, written)
                .await
                .map_err(|e| client_error("write", &display, &e))?;
            let key = target.key.clone();
            blocking(move || {
                Ok(probe(&key)?
                    .map(|p| p.version)
                    .unwrap_or_else(|| format!("missing:{}", key.display())))
            })
            .await?
        }
        None => {
            let t = target.clone();
            blocking(move || {
                let anchor = anchor_for_write(&t, walk)?;
                anchor.publish(written.as_bytes(), Some(existing.mode), None)?;
                version_after_write(&anchor, &t)
            })
            .await?
        }
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
