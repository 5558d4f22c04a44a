//! Live progress of a headless run on stderr, drawn from the session's durable events only
//! (the same events any other frontend sees). On a terminal: one status line redrawn in
//! place (turn, step, elapsed time, tokens, what the agent is doing, its reasoning collapsed
//! to one line) and one permanent line per finished tool call. `--verbose` adds a line per
//! step and per reasoning block, and prints plain lines when stderr is not a terminal.
//! stdout is never touched: it keeps only the answer.

use std::collections::HashMap;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use dsh_session::{Event, types};
use dsh_tui::summary::summarize_arguments;
use dsh_tui::summary::{format_duration, outcome_of, tokens_text, truncate};
use serde_json::Value;

/// How much progress to show (`--quiet`, default, `--verbose`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verbosity {
    Quiet,
    Normal,
    Verbose,
}

/// Where and how progress is drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Style {
    /// A terminal: a status line redrawn in place above which permanent lines scroll.
    Live,
    /// Not a terminal (`--verbose` only): plain lines, no escape sequences.
    Lines,
}

/// Picks the style for stderr, or none (progress off).
fn style_for(verbosity: Verbosity, stderr_is_terminal: bool) -> Option<Style> {
    match (verbosity, stderr_is_terminal) {
        (Verbosity::Quiet, _) => None,
        (_, true) => Some(Style::Live),
        (Verbosity::Verbose, false) => Some(Style::Lines),
        (Verbosity::Normal, false) => None,
    }
}

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// Longest collapsed reasoning kept for the status line.
const REASONING_TAIL: usize = 240;

struct Call {
    name: String,
    summary: String,
    started: Instant,
}

struct State {
    out: Box<dyn Write + Send>,
    width: usize,
    turn: u64,
    step: u64,
    activity: String,
    reasoning: String,
    calls: HashMap<String, Call>,
    input_tokens: u64,
    output_tokens: u64,
    status_shown: bool,
    frame: usize,
    finished: bool,
}

/// The progress display of one headless run.
pub struct Progress {
    style: Style,
    verbose: bool,
    started: Instant,
    state: Mutex<State>,
}

impl Progress {
    /// Progress on this process's stderr, or `None` when it is off for `verbosity`.
    pub fn for_stderr(verbosity: Verbosity) -> Option<Arc<Progress>> {
        use std::io::IsTerminal as _;
        let terminal = std::io::stderr().is_terminal();
        let style = style_for(verbosity, terminal)?;
        let width = terminal_width().unwrap_or(80);
        Some(Arc::new(Progress::new(
            style,
            verbosity == Verbosity::Verbose,
            width,
            Box::new(std::io::stderr()),
        )))
    }

    fn new(style: Style, verbose: bool, width: usize, out: Box<dyn Write + Send>) -> Self {
        Self {
            style,
            verbose,
            started: Instant::now(),
            state: Mutex::new(State {
                out,
                width: width.max(20),
                turn: 0,
                step: 0,
                activity: "starting".into(),
                reasoning: String::new(),
                calls: HashMap::new(),
                input_tokens: 0,
                output_tokens: 0,
                status_shown: false,
                frame: 0,
                finished: false,
            }),
        }
    }

    /// Redraws the status line (the spinner and the clock move): call a few times a second.
    pub fn tick(&self) {
        if self.style != Style::Live {
            return;
        }
        let Ok(mut s) = self.state.lock() else { return };
        if s.finished {
            return;
        }
        s.frame = s.frame.wrapping_add(1);
        self.draw_status(&mut s);
    }

    /// Clears the status line for good (before the answer is printed).
    pub fn finish(&self) {
        let Ok(mut s) = self.state.lock() else { return };
        if s.finished {
            return;
        }
        s.finished = true;
        if self.style == Style::Live && s.status_shown {
            let _ = s.out.write_all(b"\r\x1b[2K");
            s.status_shown = false;
        }
        if self.verbose {
            let line = format!(
                "done in {} · {}",
                format_duration(self.started.elapsed()),
                tokens_text(s.input_tokens, s.output_tokens)
            );
            let _ = writeln!(s.out, "{line}");
        }
        let _ = s.out.flush();
    }

    /// Follows one durable event of the session.
    pub fn observe(&self, e: &Event) {
        let Ok(mut s) = self.state.lock() else { return };
        if s.finished {
            return;
        }
        let data = e.data.as_value();
        match e.event_type.as_str() {
            types::TURN_START => {
                s.turn = data["turn"].as_u64().unwrap_or(s.turn + 1);
                s.step = 0;
                s.activity = "waiting for the model".into();
            }
            types::STEP_START => {
                s.step = data["step"].as_u64().unwrap_or(s.step + 1);
                s.activity = "waiting for the model".into();
                if self.verbose {
                    let line = format!("· turn {} step {}", s.turn, s.step);
                    self.permanent(&mut s, &line);
                }
            }
            types::ASSISTANT_CHUNK => match data.pointer("/chunk/type").and_then(Value::as_str) {
                Some("reasoning-delta") => {
                    let text = data.pointer("/chunk/text").and_then(Value::as_str);
                    push_collapsed(&mut s.reasoning, text.unwrap_or_default());
                    s.activity = "thinking".into();
                }
                Some("text-delta") => s.activity = "writing the answer".into(),
                Some("tool-call-delta") => {
                    if let Some(name) = data.pointer("/chunk/name").and_then(Value::as_str) {
                        s.activity = format!("preparing {name}");
                    }
                }
                _ => {}
            },
            types::ASSISTANT_MESSAGE => {
                if let Some(usage) = data.get("usage") {
                    s.input_tokens += usage["inputTokens"].as_u64().unwrap_or(0);
                    s.output_tokens += usage["outputTokens"].as_u64().unwrap_or(0);
                }
                if self.verbose && !s.reasoning.is_empty() {
                    let line = format!("thinking: {}", s.reasoning.trim());
                    self.permanent(&mut s, &line);
                }
                s.reasoning.clear();
            }
            types::TOOL_CALL => {
                let name = data["name"].as_str().unwrap_or("tool").to_string();
                let summary = summarize_arguments(&name, &data["arguments"]);
                s.activity = format!("running {name} {summary}");
                if self.verbose {
                    let line = format!("→ {name} {summary}");
                    self.permanent(&mut s, &line);
                }
                let id = data["callId"].as_str().unwrap_or_default().to_string();
                s.calls.insert(
                    id,
                    Call {
                        name,
                        summary,
                        started: Instant::now(),
                    },
                );
            }
            types::TOOL_RESULT => {
                let id = data
                    .pointer("/message/source/callId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                if let Some(call) = s.calls.remove(id) {
                    let (ok, outcome) = outcome_of(data);
                    let line = format!(
                        "{} {} {} · {} · {}",
                        if ok { '✓' } else { '✗' },
                        call.name,
                        call.summary,
                        outcome,
                        format_duration(call.started.elapsed())
                    );
                    self.permanent(&mut s, &line);
                }
                s.activity = "waiting for the model".into();
            }
            "llm/retry" => {
                s.activity = format!(
                    "retrying the model request ({})",
                    data.pointer("/error/code")
                        .and_then(Value::as_str)
                        .unwrap_or("error")
                );
            }
            _ => return,
        }
        self.draw_status(&mut s);
    }

    /// Prints a line that stays, above the status line.
    fn permanent(&self, s: &mut State, line: &str) {
        let line = truncate(line, s.width.saturating_sub(1));
        if self.style == Style::Live && s.status_shown {
            let _ = s.out.write_all(b"\r\x1b[2K");
            s.status_shown = false;
        }
        let _ = writeln!(s.out, "{line}");
        let _ = s.out.flush();
    }

    fn draw_status(&self, s: &mut State) {
        if self.style != Style::Live {
            return;
        }
        let mut line = format!(
            "{} turn {} · step {} · {} · {} · {}",
            SPINNER[s.frame % SPINNER.len()],
            s.turn,
            s.step,
            format_duration(self.started.elapsed()),
            tokens_text(s.input_tokens, s.output_tokens),
            s.activity
        );
        if s.activity == "thinking" && !s.reasoning.is_empty() {
            line.push_str(": ");
            line.push_str(s.reasoning.trim());
        }
        let line = truncate(&line, s.width.saturating_sub(1));
        let _ = write!(s.out, "\r\x1b[2K{line}");
        let _ = s.out.flush();
        s.status_shown = true;
    }
}

/// The width of the terminal on stderr.
fn terminal_width() -> Option<usize> {
    let size = rustix::termios::tcgetwinsize(std::io::stderr()).ok()?;
    (size.ws_col > 0).then_some(size.ws_col as usize)
}

/// Appends `text` to a one-line collapse of the reasoning, keeping only its tail.
fn push_collapsed(into: &mut String, text: &str) {
    for c in text.chars() {
        let c = if c.is_whitespace() { ' ' } else { c };
        if c == ' ' && (into.is_empty() || into.ends_with(' ')) {
            continue;
        }
        into.push(c);
    }
    let count = into.chars().count();
    if count > REASONING_TAIL {
        let cut = into
            .char_indices()
            .nth(count - (REASONING_TAIL - 1))
            .map_or(0, |(i, _)| i);
        into.replace_range(..cut, "…");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::{Session, SessionHeader, SurfaceIntent};
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn the_style_follows_the_flags_and_the_terminal() {
        assert_eq!(style_for(Verbosity::Normal, true), Some(Style::Live));
        assert_eq!(style_for(Verbosity::Normal, false), None);
        assert_eq!(style_for(Verbosity::Verbose, false), Some(Style::Lines));
        assert_eq!(style_for(Verbosity::Quiet, true), None);
    }

    #[test]
    fn arguments_are_summarized_on_one_line() {
        assert_eq!(
            summarize_arguments("bash", &json!({"command": "cargo test\n  --all"})),
            "cargo test --all"
        );
        assert_eq!(
            summarize_arguments("read", &json!("{\"path\":\"src/main.rs\"}")),
            "src/main.rs"
        );
        assert_eq!(
            summarize_arguments("grep", &json!({"pattern": "fn main", "path": "src"})),
            "fn main in src"
        );
        assert_eq!(
            summarize_arguments("todo", &json!({"items": [1]})),
            "{\"items\":[1]}"
        );
        assert_eq!(summarize_arguments("x", &json!({})), "");
    }

    #[test]
    fn reasoning_collapses_to_a_bounded_line() {
        let mut r = String::new();
        push_collapsed(&mut r, "  first\n\nsecond  ");
        push_collapsed(&mut r, "third");
        assert_eq!(r, "first second third");
        push_collapsed(&mut r, &"x".repeat(1000));
        assert_eq!(r.chars().count(), REASONING_TAIL);
        assert!(r.starts_with('…'));
    }

    fn result(text: &str, is_error: bool, error: Option<Value>) -> Value {
        let mut data = json!({"message": {"content": [{"type": "tool-result", "isError": is_error,
            "content": [{"type": "text", "text": text}]}]}});
        if let Some(e) = error {
            data["error"] = e;
        }
        data
    }

    #[test]
    fn outcomes_read_the_shell_markers() {
        assert_eq!(outcome_of(&result("hi", false, None)), (true, "ok".into()));
        assert_eq!(
            outcome_of(&result("boom\n[exit code: 2]", false, None)),
            (false, "exit code: 2".into())
        );
        assert_eq!(
            outcome_of(&result(
                "x\n[timed out after 10ms]\n[killed by signal: SIGKILL]",
                false,
                None
            )),
            (false, "killed by signal: SIGKILL".into())
        );
        assert_eq!(
            outcome_of(&result(
                "no such file",
                true,
                Some(json!({"code": "FS_NOT_FOUND"}))
            )),
            (false, "error FS_NOT_FOUND".into())
        );
    }

    fn events() -> Vec<Arc<Event>> {
        let mut s = Session::new(SessionHeader::new("p", 0));
        let mut add = |t: &str, data: Value, surface: Option<SurfaceIntent>| {
            s.append_at(t, data, surface, 0).unwrap();
        };
        add(types::TURN_START, json!({"turn": 1}), None);
        add(types::STEP_START, json!({"turn": 1, "step": 1}), None);
        add(
            types::ASSISTANT_CHUNK,
            json!({"turn": 1, "step": 1, "chunk": {"type": "reasoning-delta", "index": 0, "text": "list the\nfiles"}}),
            None,
        );
        add(
            types::ASSISTANT_MESSAGE,
            json!({"turn": 1, "step": 1, "usage": {"inputTokens": 1200, "outputTokens": 30},
                "message": {"role": "assistant", "id": "a", "source": {"kind": "model", "provider": "p", "model": "m"},
                "content": [{"type": "tool-call", "id": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}]}}),
            Some(SurfaceIntent::append_citing(vec![2])),
        );
        add(
            types::TOOL_CALL,
            json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": "{\"command\":\"ls\"}"}),
            None,
        );
        add(
            types::TOOL_RESULT,
            json!({"turn": 1, "step": 1, "message": {"role": "user", "id": "r", "source": {"kind": "tool", "callId": "c1"},
                "content": [{"type": "tool-result", "toolCallId": "c1", "content": [{"type": "text", "text": "a\nb"}]}]}}),
            Some(SurfaceIntent::append_citing(vec![4])),
        );
        s.events().to_vec()
    }

    #[test]
    fn a_terminal_sees_a_status_line_and_one_line_per_tool() {
        let sink = Sink::default();
        let p = Progress::new(Style::Live, false, 100, Box::new(sink.clone()));
        for e in events() {
            p.observe(&e);
        }
        p.finish();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(text.contains("turn 1 · step 1"), "{text:?}");
        assert!(text.contains("thinking: list the files"), "{text:?}");
        assert!(text.contains("1.2k in / 30 out tokens"), "{text:?}");
        assert!(text.contains("\r\x1b[2K✓ bash ls · ok · "), "{text:?}");
        assert!(
            text.ends_with("\r\x1b[2K"),
            "the status line is cleared: {text:?}"
        );
    }

    #[test]
    fn verbose_lines_carry_no_escapes() {
        let sink = Sink::default();
        let p = Progress::new(Style::Lines, true, 100, Box::new(sink.clone()));
        for e in events() {
            p.observe(&e);
        }
        p.tick();
        p.finish();
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains('\x1b'), "{text:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "· turn 1 step 1");
        assert_eq!(lines[1], "thinking: list the files");
        assert_eq!(lines[2], "→ bash ls");
        assert!(lines[3].starts_with("✓ bash ls · ok · "), "{}", lines[3]);
        assert!(lines[4].starts_with("done in "), "{}", lines[4]);
    }
}
