//! Finding stored logs under a root: lookup by id across project directories, and the
//! header-only listing.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use dsh_session::SessionHeader;

use crate::error::PersistenceError;
use crate::files::SessionFiles;
use crate::frames;
use crate::fsio;
use crate::layout::{self, Compression};
use crate::scan;

/// Largest header line or header frame a listing reads.
const MAX_HEADER_BYTES: usize = 1 << 20;

impl SessionFiles {
    /// The log of `id` in any project directory. Errors on an id present in several
    /// project directories, on a log of the other encoding, and on a flat legacy file.
    pub fn find(&self, id: &str) -> Result<Option<PathBuf>, PersistenceError> {
        let segment = layout::encode_segment(id)?;
        let mut hits = Vec::new();
        for project in self.project_dirs()? {
            for compression in [Compression::Zstd, Compression::None] {
                let flat = project.join(format!("{segment}{}", compression.suffix()));
                if fsio::exists(&flat)? {
                    return Err(PersistenceError::LegacyLayout { path: flat });
                }
            }
            let dir = project.join(&segment);
            if let Some((_, opposite)) =
                layout::generations(&dir, self.compression.opposite()).pop()
            {
                return Err(self.encoding_mismatch(opposite));
            }
            // The highest generation is the session's log; older ones are history.
            if let Some((_, path)) = layout::generations(&dir, self.compression).pop() {
                hits.push(path);
            }
        }
        match hits.len() {
            0 => Ok(None),
            1 => Ok(hits.pop()),
            _ => Err(PersistenceError::DuplicateId {
                id: id.to_string(),
                paths: hits,
            }),
        }
    }

    /// The headers of all stored sessions (reading only each log's first line or frame),
    /// ordered by creation time then id. Sessions whose log cannot be read, that sit in the
    /// wrong place, use the other encoding or repeat an id are skipped with a warning.
    pub fn list(&self) -> Result<Vec<(SessionHeader, PathBuf)>, PersistenceError> {
        let mut out: Vec<(SessionHeader, PathBuf)> = Vec::new();
        for project in self.project_dirs()? {
            let entries = match fs::read_dir(&project) {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::warn!(dir = %project.display(), error = %e, "skipping unreadable project directory");
                    continue;
                }
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if !path.is_dir() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if name.ends_with(".jsonl") || name.ends_with(".jsonl.zstd") {
                        tracing::warn!("{}", PersistenceError::LegacyLayout { path });
                    }
                    continue;
                }
                crate::lock::sweep_temp_files(&path);
                if let Some((_, opposite)) =
                    layout::generations(&path, self.compression.opposite()).pop()
                {
                    tracing::warn!("skipping session: {}", self.encoding_mismatch(opposite));
                    continue;
                }
                let Some((_, log)) = layout::generations(&path, self.compression).pop() else {
                    continue;
                };
                match self.read_header(&log) {
                    Ok(None) => {} // empty or half-written: not a session yet
                    Ok(Some(header)) => {
                        if let Err(e) = self.check_identity(&log, &header, &header.id) {
                            tracing::warn!("skipping session: {e}");
                        } else if let Some((_, first)) = out.iter().find(|(h, _)| h.id == header.id)
                        {
                            tracing::warn!(
                                "skipping session: {}",
                                PersistenceError::DuplicateId {
                                    id: header.id.clone(),
                                    paths: vec![first.clone(), log]
                                }
                            );
                        } else {
                            out.push((header, log));
                        }
                    }
                    Err(e) => tracing::warn!("skipping session: {e}"),
                }
            }
        }
        out.sort_by(|(a, _), (b, _)| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        Ok(out)
    }

    /// The header of a log from its first line (plain) or first frame (zstd); `None` when
    /// the file does not hold a complete first record yet.
    fn read_header(&self, path: &Path) -> Result<Option<SessionHeader>, PersistenceError> {
        let first_line = match self.compression {
            Compression::None => {
                let prefix = fsio::read_prefix(path, |buf| buf.contains(&b'\n'), MAX_HEADER_BYTES)?;
                let Some(end) = prefix.iter().position(|b| *b == b'\n') else {
                    if prefix.len() >= MAX_HEADER_BYTES {
                        return Err(PersistenceError::corrupt(
                            path,
                            format!("the header line is longer than {MAX_HEADER_BYTES} bytes"),
                        ));
                    }
                    return Ok(None);
                };
                prefix[..end].to_vec()
            }
            Compression::Zstd => {
                let one_frame = |buf: &[u8]| matches!(frames::scan_frames(buf, 1), Ok(s) if !s.frames.is_empty());
                let prefix = fsio::read_prefix(path, one_frame, MAX_HEADER_BYTES)?;
                let scan = frames::scan_frames(&prefix, 1)
                    .map_err(|e| PersistenceError::corrupt(path, e.message))?;
                let Some(&(start, end)) = scan.frames.first() else {
                    return Ok(None);
                };
                let mut plain = Vec::new();
                let mut budget = frames::Budget::for_log(end, self.inflate_limits()?);
                frames::decode_bounded(&prefix[..end], &[(start, end)], &mut plain, &mut budget)
                    .map_err(|e| match e {
                        frames::DecodeError::Invalid { message, .. }
                        | frames::DecodeError::TooLarge { message } => {
                            PersistenceError::corrupt(path, message)
                        }
                    })?;
                match plain.iter().position(|b| *b == b'\n') {
                    Some(i) if i + 1 == plain.len() => plain.truncate(i),
                    _ => {
                        return Err(PersistenceError::corrupt(
                            path,
                            "Zstandard header frame must hold exactly one line",
                        ));
                    }
                }
                plain
            }
        };
        let header =
            scan::header_of(&first_line).map_err(|e| PersistenceError::from_storage(path, e))?;
        check_generation(path, &header, self.compression)?;
        Ok(Some(header))
    }

    fn project_dirs(&self) -> Result<Vec<PathBuf>, PersistenceError> {
        let entries = match fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(PersistenceError::io(
                    "cannot read session root",
                    &self.root,
                    e,
                ));
            }
        };
        let mut dirs = Vec::new();
        for entry in entries {
            let entry = entry
                .map_err(|e| PersistenceError::io("cannot read session root", &self.root, e))?;
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                dirs.push(entry.path());
            }
        }
        dirs.sort();
        Ok(dirs)
    }

    pub(crate) fn encoding_mismatch(&self, path: PathBuf) -> PersistenceError {
        PersistenceError::EncodingMismatch {
            path,
            found: self.compression.opposite().suffix(),
            configured: self.compression.as_str(),
        }
    }
}

/// The version in a log's file name must be the one its header states.
pub(crate) fn check_generation(
    path: &Path,
    header: &SessionHeader,
    compression: Compression,
) -> Result<(), PersistenceError> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let detected = layout::generation_of(&name, compression)
        .or_else(|| layout::generation_of(&name, compression.opposite()));
    match detected {
        Some(v) if v != header.version => Err(PersistenceError::corrupt(
            path,
            format!(
                "the file name says format v{v} but the header says v{}",
                header.version
            ),
        )),
        _ => Ok(()),
    }
}
