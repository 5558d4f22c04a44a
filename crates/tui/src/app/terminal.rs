//! The terminal while the UI runs (raw mode, alternate screen, restored on drop or panic) and
//! the frame statistics `DSH_TUI_STATS` writes.

use super::*;

/// Raw mode and the alternate screen for the app's lifetime; restored on drop (panics
/// included), so the shell gets its terminal back however the app ends.
pub(super) struct TerminalGuard {
    pub(super) terminal: Terminal<CrosstermBackend<std::io::BufWriter<std::io::Stdout>>>,
}

impl TerminalGuard {
    pub(super) fn enter() -> std::io::Result<Self> {
        enable_raw_mode()?;
        let mut out = std::io::stdout();
        if let Err(e) = execute!(out, EnterAlternateScreen, EnableBracketedPaste) {
            let _ = disable_raw_mode();
            return Err(e);
        }
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        // One write per frame: the whole frame is buffered and flushed once.
        let out = std::io::BufWriter::with_capacity(1 << 16, out);
        let terminal = Terminal::new(CrosstermBackend::new(out))?;
        Ok(Self { terminal })
    }
}

pub(super) fn restore() {
    let _ = execute!(
        std::io::stdout(),
        DisableBracketedPaste,
        LeaveAlternateScreen
    );
    let _ = disable_raw_mode();
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = self.terminal.show_cursor();
        restore();
    }
}

/// Frame times and input, written to `$DSH_TUI_STATS` at exit (for the benchmark).
#[derive(Default)]
pub(super) struct FrameStats {
    pub(super) first_frame: Option<Duration>,
    pub(super) frames: Vec<Duration>,
    pub(super) keys: usize,
}

impl FrameStats {
    pub(super) fn frame(&mut self, d: Duration) {
        if std::env::var_os("DSH_TUI_STATS").is_some() && self.frames.len() < 1_000_000 {
            self.frames.push(d);
        }
    }

    pub(super) fn key(&mut self, ev: &TermEvent) {
        if matches!(ev, TermEvent::Key(_) | TermEvent::Paste(_)) {
            self.keys += 1;
        }
    }

    pub(super) fn write(&mut self) {
        let Some(path) = std::env::var_os("DSH_TUI_STATS") else {
            return;
        };
        self.frames.sort();
        let pick = |q: f64| {
            self.frames
                .get(((self.frames.len() as f64 - 1.0) * q).round() as usize)
                .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
        };
        let doc = serde_json::json!({
            "firstFrameMs": self.first_frame.map_or(0.0, |d| d.as_secs_f64() * 1000.0),
            "frames": self.frames.len(),
            "frameP50Ms": pick(0.5),
            "frameP99Ms": pick(0.99),
            "frameMaxMs": pick(1.0),
            "keys": self.keys,
        });
        let _ = std::fs::write(path, doc.to_string());
    }
}
