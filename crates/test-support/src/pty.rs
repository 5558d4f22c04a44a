//! A program driven through a real pseudo-terminal: keys go in as a terminal sends them,
//! the screen comes back through a VT parser. For the terminal UI's tests and benchmark.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, MasterPty, PtySize, native_pty_system};

pub use portable_pty::CommandBuilder as Command;

/// A program in a pseudo-terminal and its parsed screen.
pub struct PtyApp {
    parser: Arc<Mutex<vt100::Parser>>,
    writer: Box<dyn Write + Send>,
    child: Box<dyn portable_pty::Child + Send + Sync>,
    _master: Box<dyn MasterPty + Send>,
    exited: Option<u32>,
    /// When the last bytes arrived from the program.
    last_output: Arc<Mutex<Instant>>,
}

impl PtyApp {
    /// Starts `cmd` in a `cols`×`rows` terminal. Panics when no pty can be opened.
    pub fn spawn(cmd: CommandBuilder, cols: u16, rows: u16) -> Self {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap_or_else(|e| panic!("cannot open a pseudo-terminal: {e}"));
        let child = pair
            .slave
            .spawn_command(cmd)
            .unwrap_or_else(|e| panic!("cannot start the program in the pty: {e}"));
        drop(pair.slave);
        let rows_nz = rows.try_into().unwrap_or(std::num::NonZeroU16::MIN);
        let cols_nz = cols.try_into().unwrap_or(std::num::NonZeroU16::MIN);
        let parser = Arc::new(Mutex::new(vt100::Parser::new(rows_nz, cols_nz, 0)));
        let last_output = Arc::new(Mutex::new(Instant::now()));
        let mut reader = pair
            .master
            .try_clone_reader()
            .unwrap_or_else(|e| panic!("cannot read the pty: {e}"));
        let (p, last) = (parser.clone(), last_output.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 16384];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                p.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .process(&buf[..n]);
                *last.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
            }
        });
        let writer = pair
            .master
            .take_writer()
            .unwrap_or_else(|e| panic!("cannot write to the pty: {e}"));
        Self {
            parser,
            writer,
            child,
            _master: pair.master,
            exited: None,
            last_output,
        }
    }

    /// The screen's rows as text (trailing blanks trimmed per row).
    pub fn screen(&self) -> String {
        let parser = self.parser.lock().unwrap_or_else(|e| e.into_inner());
        let screen = parser.screen();
        let (_, cols) = screen.size();
        screen.rows(0, cols.into()).collect::<Vec<_>>().join("\n")
    }

    /// Runs `f` on the parsed screen (cells, colours).
    pub fn with_screen<T>(&self, f: impl FnOnce(&vt100::Screen) -> T) -> T {
        f(self
            .parser
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .screen())
    }

    /// Sends bytes as typed.
    pub fn send(&mut self, keys: &str) {
        let _ = self.writer.write_all(keys.as_bytes());
        let _ = self.writer.flush();
    }

    /// Types `text` a few characters at a time, as a person would.
    pub fn type_text(&mut self, text: &str) {
        for chunk in text.as_bytes().chunks(4) {
            let _ = self.writer.write_all(chunk);
            let _ = self.writer.flush();
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits (up to `timeout`) until the screen satisfies `ok`; the screen then, or `Err`
    /// with the last screen.
    pub fn wait_within(
        &self,
        timeout: Duration,
        ok: impl Fn(&str) -> bool,
    ) -> Result<String, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.screen();
            if ok(&s) {
                return Ok(s);
            }
            if Instant::now() >= deadline {
                return Err(s);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Waits (30 s at most) until the screen satisfies `ok` and the program has stopped
    /// writing for a moment (so a frame half drawn is not taken for the screen); panics
    /// naming `what`.
    pub fn wait(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let seen = self
                .wait_within(left, &ok)
                .unwrap_or_else(|s| panic!("timed out waiting for {what}; the screen:\n{s}"));
            // A frame is written at once: a short pause in the output ends it. A screen that
            // never pauses (a stream) is taken after half a second.
            let quiet = Duration::from_millis(40);
            let until = (Instant::now() + Duration::from_millis(500)).min(deadline);
            while self.last_output().elapsed() < quiet && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(5));
            }
            let settled = self.screen();
            if ok(&settled) {
                return settled;
            }
            if Instant::now() >= deadline {
                panic!("timed out waiting for {what}; the screen:\n{seen}");
            }
        }
    }

    pub fn wait_text(&self, text: &str) -> String {
        self.wait(&format!("{text:?}"), |s| s.contains(text))
    }

    /// When the program last wrote to the terminal.
    pub fn last_output(&self) -> Instant {
        *self.last_output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits for the program to end; its exit code.
    pub fn wait_exit(&mut self) -> u32 {
        if let Some(c) = self.exited {
            return c;
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                let code = status.exit_code();
                self.exited = Some(code);
                return code;
            }
            assert!(
                Instant::now() < deadline,
                "the program did not exit; screen:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.process_id().unwrap_or(0)
    }
}

impl Drop for PtyApp {
    fn drop(&mut self) {
        if self.exited.is_none() {
            let _ = self.child.kill();
        }
    }
}
