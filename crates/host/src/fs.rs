//! Whole-file replacement that a crash cannot tear: settings, credentials, the memory files
//! and the web's workspace registry are rewritten through [`write_private`].

use std::io::Write as _;
use std::path::Path;

/// Replaces `path` with `bytes`: a temporary file beside it (mode 0600, created by
/// `tempfile`), written and synced, renamed over `path`, then the directory synced. A
/// reader sees the old content or the new, never a mix; the file is readable by its owner
/// only; on failure the temporary file is removed and `path` is untouched. The directory
/// is created when missing.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    replace(path, bytes, None)
}

/// [`write_private`] for files that are not secret (the memory files): the new file keeps
/// the permissions of the one it replaces, or gets 0644 when there was none.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = std::fs::metadata(path).map_or(0o644, |m| m.permissions().mode() & 0o7777);
    replace(path, bytes, Some(mode))
}

fn replace(path: &Path, bytes: &[u8], mode: Option<u32>) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    std::fs::create_dir_all(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".dsh-write-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt as _;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(mode))?;
    }
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn replaces_whole_files_owner_only_and_leaves_no_temporary() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/settings.yaml");
        write_private(&path, b"one").unwrap();
        write_private(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("sub"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["settings.yaml"]);
        // Files that are not secret keep their mode, or get 0644.
        let open = dir.path().join("memory.md");
        write_atomic(&open, b"a").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&open), 0o644);
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&open, b"b").unwrap();
        assert_eq!(
            (mode(&open), std::fs::read(&open).unwrap()),
            (0o640, b"b".to_vec())
        );
        // A path whose directory cannot be made fails without touching anything.
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        assert!(write_private(&dir.path().join("file/inner"), b"y").is_err());
    }
}
