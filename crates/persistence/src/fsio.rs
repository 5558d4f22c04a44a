//! Durable file mechanics: private directories, publish-once materialization, appends that
//! roll back on failure, truncation, and reads that are stable against a concurrent writer.
//! Everything here blocks; async callers run it on the blocking pool.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use crate::error::PersistenceError;

/// Attempts of a stable read before giving up on a file that keeps changing.
const STABLE_READ_ATTEMPTS: usize = 64;

/// Creates `dir` (and missing parents) with mode 0700, then fsyncs its parent so the new
/// entry survives a power loss.
pub(crate) fn ensure_private_dir(dir: &Path) -> Result<(), PersistenceError> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| PersistenceError::io("cannot create directory", dir, e))?;
    if let Some(parent) = dir.parent() {
        sync_dir(parent)?;
    }
    Ok(())
}

/// fsyncs a directory so entries just created in it are durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<(), PersistenceError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| PersistenceError::io("cannot fsync directory", dir, e))
}

/// Whether a path exists. Only "not found" means absent; other failures (permissions, a
/// file where a directory should be) surface so a collision check never passes by mistake.
pub(crate) fn exists(path: &Path) -> Result<bool, PersistenceError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) if e.kind() == io::ErrorKind::NotADirectory => Ok(false),
        Err(e) => Err(PersistenceError::io("cannot stat", path, e)),
    }
}

/// Publishes `content` as the new file `final_path`, never replacing an existing one:
/// write a private temp file (`O_EXCL`, 0600), fsync it, `link()` it into place (fails if
/// the name exists), fsync the directory, then remove the temp name.
pub(crate) fn publish_new_file(
    id: &str,
    final_path: &Path,
    content: &[u8],
) -> Result<(), PersistenceError> {
    let suffix = uuid::Uuid::new_v4().simple().to_string();
    let mut tmp_name = final_path.as_os_str().to_owned();
    tmp_name.push(format!(".{}.tmp", &suffix[..12]));
    let tmp = Path::new(&tmp_name);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(tmp)
        .and_then(|mut f| {
            f.write_all(content)?;
            f.sync_all()
        });
    if let Err(e) = written {
        let _ = fs::remove_file(tmp);
        return Err(PersistenceError::io("cannot write temporary log", tmp, e));
    }
    if let Err(e) = fs::hard_link(tmp, final_path) {
        let _ = fs::remove_file(tmp);
        if e.kind() == io::ErrorKind::AlreadyExists {
            return Err(PersistenceError::AlreadyPersisted {
                id: id.to_string(),
                path: final_path.to_path_buf(),
            });
        }
        return Err(PersistenceError::io("cannot publish log", final_path, e));
    }
    if let Some(dir) = final_path.parent() {
        sync_dir(dir)?;
    }
    // The log is published and durable; a leftover temp name is only clutter.
    if let Err(e) = fs::remove_file(tmp) {
        tracing::warn!(path = %tmp.display(), error = %e, "cannot remove temporary log file");
    }
    Ok(())
}

/// When an append counts as durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Durability {
    /// After `fdatasync`: survives a power loss (upstream's behaviour; the default).
    Fsync,
    /// After `write` reached the kernel: survives any crash or kill of the process, not a
    /// power loss. The log is fsynced when its session closes.
    Os,
}

impl Durability {
    /// The config spelling (`"fsync"` / `"os"`).
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Os => "os",
        }
    }
}

/// Appends `content` to an existing file (and fsyncs it under [`Durability::Fsync`]). On
/// failure the file is truncated back to its previous length so a retry cannot duplicate
/// records.
pub(crate) fn append_durably(
    path: &Path,
    content: &[u8],
    durability: Durability,
) -> Result<(), PersistenceError> {
    let mut file = OpenOptions::new()
        .append(true)
        .open(path)
        .map_err(|e| PersistenceError::io("cannot open log for append", path, e))?;
    let before = file
        .metadata()
        .map_err(|e| PersistenceError::io("cannot stat log", path, e))?
        .len();
    let written = file.write_all(content).and_then(|()| match durability {
        Durability::Fsync => file.sync_data(),
        Durability::Os => Ok(()),
    });
    let Err(write) = written else {
        return Ok(());
    };
    drop(file);
    match truncate_durably(path, before) {
        Ok(()) => Err(PersistenceError::io("cannot append to log", path, write)),
        Err(PersistenceError::Io {
            source: rollback, ..
        }) => Err(PersistenceError::RollbackFailed {
            path: path.to_path_buf(),
            write,
            rollback,
        }),
        Err(other) => Err(other),
    }
}

/// Cuts a file to `len` bytes and fsyncs it.
pub(crate) fn truncate_durably(path: &Path, len: u64) -> Result<(), PersistenceError> {
    OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| {
            f.set_len(len)?;
            f.sync_all()
        })
        .map_err(|e| PersistenceError::io("cannot truncate log", path, e))
}

/// Identity of a file's content: device, inode, size, mtime, ctime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Revision {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

fn revision(path: &Path) -> Result<Revision, PersistenceError> {
    let m = fs::metadata(path).map_err(|e| PersistenceError::io("cannot stat log", path, e))?;
    Ok(Revision {
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime: (m.mtime(), m.mtime_nsec()),
        ctime: (m.ctime(), m.ctime_nsec()),
    })
}

/// Reads a whole file, retrying while a concurrent writer changes it between the stat
/// before and the stat after the read.
pub(crate) fn read_stable(path: &Path) -> Result<Vec<u8>, PersistenceError> {
    for _ in 0..STABLE_READ_ATTEMPTS {
        let before = revision(path)?;
        let bytes = fs::read(path).map_err(|e| PersistenceError::io("cannot read log", path, e))?;
        if revision(path)? == before {
            return Ok(bytes);
        }
    }
    Err(PersistenceError::io(
        "cannot read log",
        path,
        io::Error::other(format!(
            "the file kept changing during {STABLE_READ_ATTEMPTS} read attempts"
        )),
    ))
}

/// Reads the beginning of a file until `enough` says the prefix suffices, EOF, or `limit`
/// bytes were read. Used to read only a log's header line or header frame.
pub(crate) fn read_prefix(
    path: &Path,
    enough: impl Fn(&[u8]) -> bool,
    limit: usize,
) -> Result<Vec<u8>, PersistenceError> {
    let mut file =
        File::open(path).map_err(|e| PersistenceError::io("cannot open log", path, e))?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        let n = file
            .read(&mut chunk)
            .map_err(|e| PersistenceError::io("cannot read log", path, e))?;
        if n == 0 {
            return Ok(buf);
        }
        buf.extend_from_slice(&chunk[..n]);
        if enough(&buf) || buf.len() >= limit {
            return Ok(buf);
        }
    }
}

/// fsyncs an existing file's data.
pub(crate) fn sync_file(path: &Path) -> Result<(), PersistenceError> {
    File::open(path)
        .and_then(|f| f.sync_data())
        .map_err(|e| PersistenceError::io("cannot fsync log", path, e))
}
