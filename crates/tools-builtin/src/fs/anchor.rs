//! Race-free mutation of one file: the parent directory is opened once, and every later step
//! (stat, read, staging, publication) works relative to that directory handle by a single
//! name. A confined process that swaps a path segment for a symlink between the sandbox
//! check and the write can no longer redirect the write: under the fence the parent is
//! reached without following any symlink, so the directory that was checked is the one that
//! is written.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{ErrorKind, Read as _, Write as _};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Component, Path, PathBuf};

use dsh_kernel::BoxError;
use rustix::fs::{AtFlags, CWD, FileType, Mode, OFlags};

use super::io::{Kind, Probe, io_error};
use crate::errors;

/// How the parent directory of a mutation is reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Walk {
    /// Segment by segment from `/`, refusing any symlink: the target's identity was resolved
    /// to a symlink-free path, so a symlink found now means a segment was swapped since the
    /// fence looked at it. Missing directories are created the same way.
    Strict,
    /// As any open does, symlinks followed (unfenced writes).
    Follow,
}

/// Whether opening an anchor creates missing parent directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Parents {
    /// Missing parents are created (publication).
    Create,
    /// A missing parent means the entry does not exist: no anchor, nothing created.
    Existing,
}

/// A file named relative to an open handle on its parent directory.
pub(crate) struct Anchor {
    dir: OwnedFd,
    name: OsString,
    /// The full path, for messages only.
    path: PathBuf,
}

fn errno(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}

fn swapped(path: &Path) -> BoxError {
    errors::fs(
        "FS_SANDBOX_DENIED",
        format!(
            "cannot write \"{}\": a directory on its path was replaced by a link while the write was being checked; nothing was written",
            path.display()
        ),
    )
}

const DIR_FLAGS: OFlags = OFlags::PATH.union(OFlags::DIRECTORY).union(OFlags::CLOEXEC);

/// Opens `dir` segment by segment without following symlinks, creating missing segments
/// (or answering `None` for a missing one when `parents` says so).
fn open_strict(dir: &Path, full: &Path, parents: Parents) -> Result<Option<OwnedFd>, BoxError> {
    let mut current = rustix::fs::open("/", DIR_FLAGS, Mode::empty())
        .map_err(|e| io_error(&errno(e), "open", Path::new("/")))?;
    let mut walked = PathBuf::from("/");
    for component in dir.components() {
        let name = match component {
            Component::Normal(name) => name,
            Component::RootDir | Component::CurDir => continue,
            // The key is normalized: `..` or a prefix here means it is not.
            Component::ParentDir | Component::Prefix(_) => return Err(swapped(full)),
        };
        walked.push(name);
        let open = |at: &OwnedFd| {
            rustix::fs::openat(at, name, DIR_FLAGS | OFlags::NOFOLLOW, Mode::empty())
        };
        let next = match open(&current) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT) if parents == Parents::Existing => return Ok(None),
            Err(rustix::io::Errno::NOENT) => {
                match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                    Err(e) => return Err(io_error(&errno(e), "mkdir", &walked)),
                }
                open(&current).map_err(|e| match e {
                    rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => swapped(full),
                    e => io_error(&errno(e), "open", &walked),
                })?
            }
            Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => return Err(swapped(full)),
            Err(e) => return Err(io_error(&errno(e), "open", &walked)),
        };
        // O_PATH with O_NOFOLLOW can hand out the link itself instead of failing: check.
        let stat = rustix::fs::fstat(&next).map_err(|e| io_error(&errno(e), "stat", &walked))?;
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            return Err(swapped(full));
        }
        current = next;
    }
    Ok(Some(current))
}

fn open_follow(dir: &Path, parents: Parents) -> Result<Option<OwnedFd>, BoxError> {
    if parents == Parents::Create {
        std::fs::create_dir_all(dir).map_err(|e| io_error(&e, "mkdir", dir))?;
    }
    match rustix::fs::openat(CWD, dir, DIR_FLAGS, Mode::empty()) {
        Ok(fd) => Ok(Some(fd)),
        Err(rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR)
            if parents == Parents::Existing =>
        {
            Ok(None)
        }
        Err(e) => Err(io_error(&errno(e), "open", dir)),
    }
}

impl Anchor {
    /// Opens the parent of `path` by `walk`; `None` when a parent is missing and `parents`
    /// does not create it.
    pub fn open(path: &Path, walk: Walk, parents: Parents) -> Result<Option<Self>, BoxError> {
        let name = path.file_name().map(OsStr::to_os_string).ok_or_else(|| {
            errors::plain(format!("cannot write \"{}\": no file name", path.display()))
        })?;
        let parent = path.parent().unwrap_or(Path::new("/"));
        let dir = match walk {
            Walk::Strict => open_strict(parent, path, parents)?,
            Walk::Follow => open_follow(parent, parents)?,
        };
        Ok(dir.map(|dir| Self {
            dir,
            name,
            path: path.to_path_buf(),
        }))
    }

    /// Stat of the entry itself (a symlink is reported as [`Kind::Other`]); `None` when absent.
    pub fn probe(&self) -> Result<Option<Probe>, BoxError> {
        match rustix::fs::statat(&self.dir, &self.name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => {
                let kind = match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile => Kind::File,
                    FileType::Directory => Kind::Directory,
                    _ => Kind::Other,
                };
                let meta = Stat(st);
                Ok(Some(Probe {
                    version: meta.version(),
                    mode: st.st_mode & 0o777,
                    kind,
                    size: st.st_size as u64,
                }))
            }
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(io_error(&errno(e), "stat", &self.path)),
        }
    }

    /// Opens the entry for reading without following a final symlink; refuses secrets.
    fn open_read(&self) -> Result<File, BoxError> {
        let fd = rustix::fs::openat(
            &self.dir,
            &self.name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| io_error(&errno(e), "open", &self.path))?;
        let file = File::from(fd);
        if dsh_sandbox::secrets::is_secret_file(&file) {
            return Err(crate::paths::secret_refusal(&self.path.to_string_lossy()));
        }
        Ok(file)
    }

    /// The whole content of the (regular) entry.
    pub fn read_all(&self) -> Result<Vec<u8>, BoxError> {
        let mut file = self.open_read()?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)
            .map_err(|e| io_error(&e, "read", &self.path))?;
        Ok(raw)
    }

    /// Up to `max_bytes` of a regular entry; `None` when it is larger, not regular or unreadable.
    pub fn read_capped(&self, max_bytes: u64) -> Option<Vec<u8>> {
        let file = self.open_read().ok()?;
        let meta = file.metadata().ok()?;
        if !meta.is_file() || meta.size() >= max_bytes {
            return None;
        }
        let mut buf = Vec::with_capacity(meta.size() as usize + 1);
        file.take(meta.size() + 1).read_to_end(&mut buf).ok()?;
        (buf.len() as u64 == meta.size()).then_some(buf)
    }

    /// Atomically publishes `content` under the entry's name through a private staging
    /// directory beside it (dir 0700, file 0600, synced, `mode` applied). With
    /// `create_if_absent` (the display path), publication is a hard link, so an existing
    /// entry is never replaced.
    pub fn publish(
        &self,
        content: &[u8],
        mode: Option<u32>,
        create_if_absent: Option<&str>,
    ) -> Result<(), BoxError> {
        let base = self.name.to_string_lossy();
        let staging = format!(
            ".{base}.{}.{}.tmpdir",
            std::process::id(),
            uuid::Uuid::new_v4()
        );
        let staging_path = self.path.with_file_name(&staging);
        rustix::fs::mkdirat(&self.dir, staging.as_str(), Mode::from_raw_mode(0o700))
            .map_err(|e| io_error(&errno(e), "mkdir", &staging_path))?;
        let temp = format!("{base}.tmp");
        let result = self.stage_and_publish(
            &staging,
            &staging_path,
            &temp,
            content,
            mode,
            create_if_absent,
        );
        // Best effort: the staging directory is private and holds at most the temp file.
        if let Ok(stage) = rustix::fs::openat(
            &self.dir,
            staging.as_str(),
            DIR_FLAGS | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            let _ = rustix::fs::unlinkat(&stage, temp.as_str(), AtFlags::empty());
        }
        let _ = rustix::fs::unlinkat(&self.dir, staging.as_str(), AtFlags::REMOVEDIR);
        result
    }

    fn stage_and_publish(
        &self,
        staging: &str,
        staging_path: &Path,
        temp: &str,
        content: &[u8],
        mode: Option<u32>,
        create_if_absent: Option<&str>,
    ) -> Result<(), BoxError> {
        let stage = rustix::fs::openat(
            &self.dir,
            staging,
            DIR_FLAGS | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| io_error(&errno(e), "open", staging_path))?;
        let temp_path = staging_path.join(temp);
        let fd = rustix::fs::openat(
            &stage,
            temp,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| io_error(&errno(e), "open", &temp_path))?;
        let mut file = File::from(fd);
        file.write_all(content)
            .map_err(|e| io_error(&e, "write", &temp_path))?;
        file.sync_all()
            .map_err(|e| io_error(&e, "fsync", &temp_path))?;
        if let Some(mode) = mode {
            file.set_permissions(std::fs::Permissions::from_mode(mode))
                .map_err(|e| io_error(&e, "fchmod", &temp_path))?;
        }
        drop(file);
        match create_if_absent {
            Some(display) => {
                rustix::fs::linkat(&stage, temp, &self.dir, &self.name, AtFlags::empty())
                    .map_err(|e| self.guarded_create_failure(&errno(e), display))
            }
            None => rustix::fs::renameat(&stage, temp, &self.dir, &self.name)
                .map_err(|e| io_error(&errno(e), "rename", &self.path)),
        }
    }

    fn guarded_create_failure(&self, error: &std::io::Error, display: &str) -> BoxError {
        let not_observed = || {
            errors::fs(
                "FS_NOT_OBSERVED",
                format!("cannot overwrite existing \"{display}\" without reading it first"),
            )
        };
        match self.probe() {
            Ok(Some(p)) if p.kind != Kind::File => errors::fs(
                "FS_NOT_REGULAR_FILE",
                format!("cannot write \"{display}\": not a regular file"),
            ),
            Ok(Some(_)) => not_observed(),
            _ if error.kind() == ErrorKind::AlreadyExists => not_observed(),
            _ => errors::fs(
                "FS_IO_ERROR",
                format!("cannot write \"{display}\": {error}"),
            ),
        }
    }
}

/// The fields of a raw stat that make a file version.
struct Stat(rustix::fs::Stat);

impl Stat {
    /// `dev:ino:size:mtimeNs:ctimeNs`, as [`super::io::version_of`] spells it.
    fn version(&self) -> String {
        let st = &self.0;
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        format!(
            "{}:{}:{}:{}:{}",
            st.st_dev,
            st.st_ino,
            st.st_size,
            ns(st.st_mtime, st.st_mtime_nsec as i64),
            ns(st.st_ctime, st.st_ctime_nsec as i64)
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_strict_walk_refuses_a_symlinked_segment_and_creates_missing_ones() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let outside = root.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        let err = Anchor::open(&root.join("link/file"), Walk::Strict, Parents::Create)
            .err()
            .unwrap();
        assert!(err.to_string().contains("replaced by a link"), "{err}");

        assert!(
            Anchor::open(&root.join("a/b/file"), Walk::Strict, Parents::Existing)
                .unwrap()
                .is_none()
        );
        assert!(!root.join("a").exists());
        let anchor = Anchor::open(&root.join("a/b/file"), Walk::Strict, Parents::Create)
            .unwrap()
            .unwrap();
        assert!(anchor.probe().unwrap().is_none());
        anchor.publish(b"hello", None, None).unwrap();
        assert_eq!(std::fs::read(root.join("a/b/file")).unwrap(), b"hello");
        assert_eq!(anchor.read_all().unwrap(), b"hello");
        let again = anchor.publish(b"x", None, Some("a/b/file")).err().unwrap();
        assert!(
            again.to_string().contains("without reading it first"),
            "{again}"
        );
        // Nothing left behind by staging.
        let names: Vec<_> = std::fs::read_dir(root.join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![OsString::from("file")]);
    }

    #[test]
    fn an_anchor_keeps_writing_into_the_directory_it_opened() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(root.join("ws")).unwrap();
        std::fs::create_dir(root.join("outside")).unwrap();
        let anchor = Anchor::open(&root.join("ws/file"), Walk::Strict, Parents::Existing)
            .unwrap()
            .unwrap();
        // The checked directory is swapped for a link to somewhere else after the open.
        std::fs::rename(root.join("ws"), root.join("moved")).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), root.join("ws")).unwrap();
        anchor.publish(b"data", None, None).unwrap();
        assert!(!root.join("outside/file").exists());
        assert_eq!(std::fs::read(root.join("moved/file")).unwrap(), b"data");
    }
}
