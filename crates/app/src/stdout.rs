//! Standard output when its reader may be gone (`dsh … | head -c 10`).
//!
//! Rust ignores SIGPIPE, so a write to a closed pipe fails with `BrokenPipe` (and `print!`
//! panics on it). Every write of the binary to stdout goes through here instead: a closed
//! pipe ends the command quietly with status 141 — what a shell reports for a process that
//! SIGPIPE ended, so pipelines read it as usual — and any other failure (a full disk behind a
//! redirect) is one line on stderr and status 1.

use std::io::Write as _;
use std::process::ExitCode;

/// The status after the reader of stdout went away (128 + SIGPIPE).
pub const CLOSED_EXIT: u8 = 141;

/// Why stdout took no more output.
#[derive(Debug)]
pub enum StdoutError {
    /// The reader closed the pipe: end quietly.
    Closed,
    /// Any other write failure.
    Failed(std::io::Error),
}

impl From<std::io::Error> for StdoutError {
    fn from(e: std::io::Error) -> Self {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            StdoutError::Closed
        } else {
            StdoutError::Failed(e)
        }
    }
}

impl StdoutError {
    /// The exit status for this failure (reporting a real failure on stderr once).
    pub fn exit_code(&self) -> ExitCode {
        match self {
            StdoutError::Closed => ExitCode::from(CLOSED_EXIT),
            StdoutError::Failed(e) => {
                eprintln!("dsh: cannot write to standard output: {e}");
                ExitCode::from(1)
            }
        }
    }
}

/// Writes `text` and flushes.
pub fn write(text: &str) -> Result<(), StdoutError> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Writes `text`; `status` when that worked, else the status of the failure.
pub fn print_then(text: &str, status: ExitCode) -> ExitCode {
    match write(text) {
        Ok(()) => status,
        Err(e) => e.exit_code(),
    }
}

/// Writes `text` and reports success (help and version texts).
pub fn print(text: &str) -> ExitCode {
    print_then(text, ExitCode::SUCCESS)
}

/// A stdout writer for commands that print many lines: the first failure is kept and every
/// later write is dropped without another attempt (no error per line), and
/// [`Guarded::finish`] turns it into the exit status.
pub struct Guarded {
    out: std::io::StdoutLock<'static>,
    failed: Option<StdoutError>,
}

impl Default for Guarded {
    fn default() -> Self {
        Self::new()
    }
}

impl Guarded {
    pub fn new() -> Self {
        Self {
            out: std::io::stdout().lock(),
            failed: None,
        }
    }

    /// `status`, unless a write failed.
    pub fn finish(mut self, status: ExitCode) -> ExitCode {
        let _ = std::io::Write::flush(&mut self);
        match self.failed {
            Some(e) => e.exit_code(),
            None => status,
        }
    }
}

impl std::io::Write for Guarded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.failed.is_none()
            && let Err(e) = self.out.write_all(buf)
        {
            self.failed = Some(e.into());
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.failed.is_none()
            && let Err(e) = self.out.flush()
        {
            self.failed = Some(e.into());
        }
        Ok(())
    }
}
