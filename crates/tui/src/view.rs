//! Drawing: the header, the conversation (only the items on screen are laid out; each
//! item's layout is kept until it or the width changes), the todo list, the approval
//! panel, the menus, the composer and the status line.

use std::collections::HashMap;

use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use similar::{ChangeTag, TextDiff};
use unicode_width::UnicodeWidthChar;

use crate::app::{App, Overlay};
use crate::markdown::{self, Theme};
use crate::summary::{format_duration, tokens_text};
use crate::transcript::{Hunk, Item};

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];
/// Lines of live output a running call shows.
const LIVE_LINES: usize = 8;
/// Tools whose successful results are not shown (only their size).
const QUIET_TOOLS: &[&str] = &[
    "read",
    "glob",
    "grep",
    "ls",
    "list",
    "recall",
    "read_image",
    "skill",
];
/// Lines of a finished call's result shown under its card.
const RESULT_LINES: usize = 4;

/// Wraps styled lines to `width` columns, breaking between words where it can.
pub fn wrap(lines: Vec<Line<'static>>, width: usize) -> Vec<Line<'static>> {
    let width = width.max(1);
    let mut out = Vec::new();
    for line in lines {
        let mut row: Vec<Span<'static>> = Vec::new();
        let mut col = 0usize;
        for span in line.spans {
            let style = span.style;
            // Words with their trailing spaces, so a break lands between words.
            let mut words: Vec<String> = Vec::new();
            let mut word = String::new();
            for c in span.content.chars() {
                word.push(c);
                if c == ' ' {
                    words.push(std::mem::take(&mut word));
                }
            }
            if !word.is_empty() {
                words.push(word);
            }
            for w in words {
                let visible: usize = w.trim_end().chars().map(|c| c.width().unwrap_or(0)).sum();
                if col > 0 && col + visible > width {
                    out.push(Line::from(std::mem::take(&mut row)));
                    col = 0;
                }
                if col + visible <= width {
                    col += w.chars().map(|c| c.width().unwrap_or(0)).sum::<usize>();
                    row.push(Span::styled(w, style));
                    continue;
                }
                // A word longer than the row: split it by characters.
                let mut part = String::new();
                for c in w.chars() {
                    let cw = c.width().unwrap_or(0);
                    if col + cw > width {
                        if !part.is_empty() {
                            row.push(Span::styled(std::mem::take(&mut part), style));
                        }
                        out.push(Line::from(std::mem::take(&mut row)));
                        col = 0;
                    }
                    part.push(c);
                    col += cw;
                }
                if !part.is_empty() {
                    row.push(Span::styled(part, style));
                }
            }
        }
        out.push(Line::from(row));
    }
    out
}

fn prefixed(prefix: Span<'static>, rest: Vec<Line<'static>>, width: usize) -> Vec<Line<'static>> {
    let pw = prefix.content.chars().count();
    let indent = Span::raw(" ".repeat(pw));
    wrap(rest, width.saturating_sub(pw).max(1))
        .into_iter()
        .enumerate()
        .map(|(i, l)| {
            let mut spans = vec![if i == 0 {
                prefix.clone()
            } else {
                indent.clone()
            }];
            spans.extend(l.spans);
            Line::from(spans)
        })
        .collect()
}

/// `gutter` before every row of `lines` wrapped to what is left of `width`.
fn guttered(gutter: &Span<'static>, lines: Vec<Line<'static>>, width: usize) -> Vec<Line<'static>> {
    let gw = gutter.content.chars().count();
    wrap(lines, width.saturating_sub(gw).max(1))
        .into_iter()
        .map(|l| {
            let mut spans = vec![gutter.clone()];
            spans.extend(l.spans);
            Line::from(spans)
        })
        .collect()
}

fn text_lines(text: &str, style: Style) -> Vec<Line<'static>> {
    text.lines()
        .map(|l| Line::from(Span::styled(l.to_string(), style)))
        .collect()
}

fn tail(text: &str, n: usize) -> (usize, Vec<&str>) {
    let all: Vec<&str> = text.lines().collect();
    let skip = all.len().saturating_sub(n);
    (skip, all[skip..].to_vec())
}

/// The lines of one hunk: line numbers, `-` and `+` in red and green, context muted.
fn hunk_lines(h: &Hunk, theme: Theme) -> Vec<Line<'static>> {
    let start = h.start_line.filter(|n| *n > 0);
    let mut out = vec![Line::from(Span::styled(
        match start {
            Some(n) => format!("{}:{n}", h.path),
            None => h.path.clone(),
        },
        theme.muted().add_modifier(Modifier::BOLD),
    ))];
    let old = h.old.clone().unwrap_or_default();
    let diff = TextDiff::from_lines(&old, &h.new);
    let (mut o, mut n) = (start.unwrap_or(0), start.unwrap_or(0));
    let number = |k: usize| match start {
        Some(_) => format!("{k:>5} "),
        None => String::new(),
    };
    for change in diff.iter_all_changes() {
        let text = change.value().trim_end_matches('\n').to_string();
        let (mark, style, num) = match change.tag() {
            ChangeTag::Delete => {
                o += 1;
                ("-", theme.fg(Color::Red), number(o - 1))
            }
            ChangeTag::Insert => {
                n += 1;
                ("+", theme.fg(Color::Green), number(n - 1))
            }
            ChangeTag::Equal => {
                o += 1;
                n += 1;
                (" ", theme.muted(), number(n - 1))
            }
        };
        let style = if theme.color {
            style
        } else if mark == " " {
            Style::default()
        } else {
            Style::default().add_modifier(Modifier::BOLD)
        };
        out.push(Line::from(vec![
            Span::styled(num, theme.muted()),
            Span::styled(format!("{mark} {text}"), style),
        ]));
    }
    out
}

/// The lines of one item at `width`.
pub fn item_lines(item: &Item, width: usize, theme: Theme, expand: bool) -> Vec<Line<'static>> {
    let mut out = vec![Line::default()];
    match item {
        Item::User(text) => {
            let bar = Span::styled("› ", theme.fg(Color::Cyan).add_modifier(Modifier::BOLD));
            out.extend(prefixed(
                bar,
                text_lines(text, Style::default().add_modifier(Modifier::BOLD)),
                width,
            ));
        }
        Item::Reasoning { text, done } => {
            let style = theme.muted().add_modifier(Modifier::ITALIC);
            let count = text.lines().filter(|l| !l.trim().is_empty()).count();
            if expand {
                out.push(Line::from(Span::styled("▾ thinking", style)));
                out.extend(prefixed(Span::raw("  "), text_lines(text, style), width));
            } else {
                let last = text
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                let head = if *done {
                    format!(
                        "▸ thought for {count} line{} (Ctrl-O shows it)",
                        if count == 1 { "" } else { "s" }
                    )
                } else {
                    format!("▸ thinking… {}", last.trim())
                };
                let mut line = wrap(vec![Line::from(Span::styled(head, style))], width);
                line.truncate(1);
                out.extend(line);
            }
        }
        Item::Assistant { text, .. } => {
            out.extend(wrap(markdown::render(text, theme), width));
        }
        Item::Tool {
            name,
            summary,
            output,
            end,
            hunks,
            ..
        } => {
            let (mark, style) = match end {
                None => ("◌ ", theme.fg(Color::Yellow)),
                Some(e) if e.ok => ("✓ ", theme.fg(Color::Green)),
                Some(_) => ("✗ ", theme.fg(Color::Red)),
            };
            let mut head = vec![
                Span::styled(mark, style.add_modifier(Modifier::BOLD)),
                Span::styled(name.clone(), Style::default().add_modifier(Modifier::BOLD)),
            ];
            if !summary.is_empty() {
                // One row: the summary gives way to the outcome.
                let outcome = end.as_ref().map_or(0, |e| e.outcome.chars().count() + 3);
                let room = width.saturating_sub(3 + name.chars().count() + outcome);
                head.push(Span::raw(format!(
                    " {}",
                    crate::summary::truncate(summary, room.max(8))
                )));
            }
            if let Some(e) = end
                && e.outcome != "ok"
            {
                head.push(Span::styled(format!(" · {}", e.outcome), style));
            }
            out.extend(wrap(vec![Line::from(head)], width));
            let gutter = Span::styled("  │ ", theme.muted());
            match end {
                None if !output.is_empty() => {
                    let (skipped, lines) = tail(output, LIVE_LINES);
                    if skipped > 0 {
                        out.push(Line::from(vec![
                            gutter.clone(),
                            Span::styled(format!("… {skipped} lines above"), theme.muted()),
                        ]));
                    }
                    for l in lines {
                        out.extend(prefixed(
                            gutter.clone(),
                            vec![Line::from(l.to_string())],
                            width,
                        ));
                    }
                }
                Some(_) if !hunks.is_empty() => {
                    for h in hunks {
                        out.extend(guttered(&gutter, hunk_lines(h, theme), width));
                    }
                }
                // What reading tools return is for the model; the card says how much.
                Some(e) if e.ok && QUIET_TOOLS.contains(&name.as_str()) => {
                    let n = e.text.lines().count();
                    out.push(Line::from(vec![
                        gutter.clone(),
                        Span::styled(
                            format!("{n} line{}", if n == 1 { "" } else { "s" }),
                            theme.muted(),
                        ),
                    ]));
                }
                Some(e) if !e.text.trim().is_empty() => {
                    let (skipped, lines) = tail(e.text.trim_end(), RESULT_LINES);
                    if skipped > 0 {
                        out.push(Line::from(vec![
                            gutter.clone(),
                            Span::styled(format!("… {skipped} lines above"), theme.muted()),
                        ]));
                    }
                    let style = if e.ok {
                        theme.muted()
                    } else {
                        theme.fg(Color::Red)
                    };
                    for l in lines {
                        let mut w = wrap(
                            vec![Line::from(Span::styled(l.to_string(), style))],
                            width.saturating_sub(4),
                        );
                        w.truncate(2);
                        for row in w {
                            let mut spans = vec![gutter.clone()];
                            spans.extend(row.spans);
                            out.push(Line::from(spans));
                        }
                    }
                }
                _ => {}
            }
        }
        Item::Notice { error, text } => {
            let (mark, style) = if *error {
                ("! ", theme.fg(Color::Red))
            } else {
                ("· ", theme.muted())
            };
            out.extend(prefixed(
                Span::styled(mark, style),
                text_lines(text, style),
                width,
            ));
        }
    }
    out
}

/// One item's layout: (revision, width, reasoning expanded, lines).
type Cached = (u64, usize, bool, std::rc::Rc<Vec<Line<'static>>>);

/// Item layouts kept between frames: item index → (revision, width, expanded, lines).
#[derive(Default)]
pub struct LayoutCache {
    items: HashMap<usize, Cached>,
}

impl LayoutCache {
    fn lines(
        &mut self,
        at: usize,
        rev: u64,
        item: &Item,
        width: usize,
        theme: Theme,
        expand: bool,
    ) -> std::rc::Rc<Vec<Line<'static>>> {
        if let Some((r, w, e, lines)) = self.items.get(&at)
            && *r == rev
            && *w == width
            && *e == expand
        {
            return lines.clone();
        }
        let lines = std::rc::Rc::new(item_lines(item, width, theme, expand));
        self.items.insert(at, (rev, width, expand, lines.clone()));
        lines
    }
}

/// The rows of the conversation that fit `height`, `scroll` rows up from the bottom;
/// returns them and whether more lie above.
pub fn conversation(app: &mut App, width: usize, height: usize) -> (Vec<Line<'static>>, bool) {
    let want = height + app.scroll;
    let mut rows: Vec<Line<'static>> = Vec::new();
    let theme = app.theme;
    let expand = app.expand_reasoning;
    let mut more = false;
    for at in (0..app.transcript.items.len()).rev() {
        if rows.len() >= want {
            more = true;
            break;
        }
        let (rev, item) = &app.transcript.items[at];
        let lines = app.layout.lines(at, *rev, item, width, theme, expand);
        let mut block: Vec<Line<'static>> = lines.iter().cloned().collect();
        block.append(&mut rows);
        rows = block;
    }
    // The scroll cannot pass the top.
    let max_scroll = rows.len().saturating_sub(height);
    if !more && app.scroll > max_scroll {
        app.scroll = max_scroll;
    }
    let end = rows.len().saturating_sub(app.scroll);
    let start = end.saturating_sub(height);
    more |= start > 0;
    (rows[start..end].to_vec(), more)
}

fn header(app: &App, width: usize) -> Line<'static> {
    let theme = app.theme;
    let t = &app.transcript;
    let meter = match app.context_window {
        Some(w) if w > 0 => format!(
            " ctx {}/{} {}% ",
            compact(t.context_tokens),
            compact(w),
            (t.context_tokens * 100 / w).min(100)
        ),
        _ => format!(" ctx {} ", compact(t.context_tokens)),
    };
    let model = app.model_label();
    let model = model.rsplit(" / ").next().unwrap_or(&model).to_string();
    let fixed =
        6 + 4 + model.chars().count() + 2 + app.mode.chars().count() + meter.chars().count();
    let title = t.title.clone().unwrap_or_else(|| "new session".into());
    let room = width.saturating_sub(fixed).max(8);
    let title = crate::summary::truncate(&title, room);
    let mut spans = vec![Span::styled(
        " dsh ",
        if theme.color {
            Style::default()
                .fg(Color::Black)
                .bg(Color::Cyan)
                .add_modifier(Modifier::BOLD)
        } else {
            Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        },
    )];
    spans.push(Span::raw(" "));
    let used = 6 + title.chars().count();
    spans.push(Span::styled(
        title,
        Style::default().add_modifier(Modifier::BOLD),
    ));
    spans.push(Span::styled(format!(" · {model} "), theme.muted()));
    spans.push(Span::styled(
        format!("[{}]", app.mode),
        theme.fg(Color::Magenta).add_modifier(Modifier::BOLD),
    ));
    let used = used + 4 + model.chars().count() + 2 + app.mode.chars().count();
    let pad = width.saturating_sub(used + meter.chars().count());
    spans.push(Span::raw(" ".repeat(pad)));
    spans.push(Span::styled(meter, theme.muted()));
    Line::from(spans)
}

fn status(app: &App) -> Line<'static> {
    let theme = app.theme;
    let mut spans = Vec::new();
    if let Some((text, error)) = app.flash() {
        let style = if error {
            theme.fg(Color::Red)
        } else {
            theme.fg(Color::Yellow)
        };
        spans.push(Span::styled(text, style));
        return Line::from(spans);
    }
    let t = &app.transcript;
    if app.running {
        let elapsed = app
            .turn_started
            .map(|s| format_duration(s.elapsed()))
            .unwrap_or_default();
        spans.push(Span::styled(
            format!(
                "{} working · step {} · {elapsed}",
                SPINNER[app.frame % SPINNER.len()],
                t.step
            ),
            theme.fg(Color::Yellow),
        ));
        spans.push(Span::styled(
            format!(
                " · Esc cancels · typing {}",
                if app.steer { "steers" } else { "queues" }
            ),
            theme.muted(),
        ));
    } else {
        spans.push(Span::styled("ready", theme.fg(Color::Green)));
        spans.push(Span::styled(
            format!(" · {}", app.session_id),
            theme.muted(),
        ));
        spans.push(Span::styled(
            format!(" · {}", tokens_text(t.input_total, t.output_total)),
            theme.muted(),
        ));
    }
    if app.queued > 0 {
        spans.push(Span::styled(
            format!(" · {} queued", app.queued),
            theme.fg(Color::Cyan),
        ));
    }
    Line::from(spans)
}

fn compact(n: u64) -> String {
    if n >= 1_000_000 {
        let m = n as f64 / 1_000_000.0;
        if n.is_multiple_of(1_000_000) {
            format!("{}M", n / 1_000_000)
        } else {
            format!("{m:.1}M")
        }
    } else if n >= 10_000 {
        format!("{}k", n / 1000)
    } else if n >= 1000 {
        format!("{:.1}k", n as f64 / 1000.0)
    } else {
        n.to_string()
    }
}

fn todo_lines(app: &App) -> Vec<Line<'static>> {
    let theme = app.theme;
    let todos = &app.transcript.todos;
    if todos.is_empty() || todos.iter().all(|t| t.status == "completed") {
        return Vec::new();
    }
    let done = todos.iter().filter(|t| t.status == "completed").count();
    let mut out = vec![Line::from(Span::styled(
        format!("plan · {done}/{} done", todos.len()),
        theme.muted().add_modifier(Modifier::BOLD),
    ))];
    for t in todos.iter().take(6) {
        let (mark, style) = match t.status.as_str() {
            "completed" => ("✓ ", theme.fg(Color::Green)),
            "in_progress" => ("▶ ", theme.fg(Color::Yellow).add_modifier(Modifier::BOLD)),
            _ => ("○ ", Style::default()),
        };
        out.push(Line::from(vec![
            Span::styled(mark, style),
            Span::styled(t.content.clone(), style),
        ]));
    }
    out
}

fn button(label: &str, focused: bool, theme: Theme) -> Span<'static> {
    let style = if focused {
        Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
    } else {
        theme.muted()
    };
    Span::styled(format!("[ {label} ]"), style)
}

fn approval_lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let theme = app.theme;
    let Some(a) = app.approvals.front() else {
        return Vec::new();
    };
    let mut out = vec![Line::from(vec![
        Span::styled(
            "approval needed · ",
            theme.fg(Color::Yellow).add_modifier(Modifier::BOLD),
        ),
        Span::styled(
            a.tool_name.clone(),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        if app.approvals.len() > 1 {
            Span::styled(
                format!(" (+{} waiting)", app.approvals.len() - 1),
                theme.muted(),
            )
        } else {
            Span::raw("")
        },
    ])];
    let mut body: Vec<Line<'static>> = Vec::new();
    for l in a.detail.lines().take(10) {
        body.push(Line::from(Span::raw(l.to_string())));
    }
    if a.detail.lines().count() > 10 {
        body.push(Line::from(Span::styled("…", theme.muted())));
    }
    out.extend(prefixed(Span::styled("  $ ", theme.muted()), body, width));
    if !a.reason.is_empty() {
        out.extend(prefixed(
            Span::styled("  why: ", theme.muted()),
            text_lines(&a.reason, Style::default()),
            width,
        ));
    }
    out.push(Line::from(vec![
        Span::raw("  "),
        button("Reject (n)", app.approval_focus == 0, theme),
        Span::raw("  "),
        button("Allow once (y)", app.approval_focus == 1, theme),
        Span::styled("  ←/→ Enter · Esc rejects", theme.muted()),
    ]));
    out
}

fn question_lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let theme = app.theme;
    let Some(q) = app.questions.front() else {
        return Vec::new();
    };
    let Some(current) = q.current() else {
        return Vec::new();
    };
    let mut head = vec![Span::styled(
        "question",
        theme.fg(Color::Cyan).add_modifier(Modifier::BOLD),
    )];
    if q.questions.len() > 1 {
        head.push(Span::styled(
            format!(" {}/{}", q.at + 1, q.questions.len()),
            theme.muted(),
        ));
    }
    if let Some(h) = &current.header {
        head.push(Span::styled(
            format!(" · {h}"),
            Style::default().add_modifier(Modifier::BOLD),
        ));
    }
    let mut out = vec![Line::from(head)];
    out.extend(prefixed(
        Span::raw("  "),
        text_lines(
            &current.question,
            Style::default().add_modifier(Modifier::BOLD),
        ),
        width,
    ));
    if let Some(d) = &current.detail {
        out.extend(prefixed(
            Span::raw("  "),
            text_lines(d, theme.muted()),
            width,
        ));
    }
    let multi = current.multi_select.unwrap_or(false);
    for (i, o) in current.options.iter().flatten().enumerate() {
        let chosen = q.chosen.get(i).copied().unwrap_or(false);
        let mark = match (multi, chosen) {
            (true, true) => "[x] ",
            (true, false) => "[ ] ",
            (false, true) => "(•) ",
            (false, false) => "( ) ",
        };
        let style = if q.cursor == i {
            Style::default().add_modifier(Modifier::REVERSED)
        } else {
            Style::default()
        };
        let mut spans = vec![
            Span::raw(if q.cursor == i { "› " } else { "  " }),
            Span::styled(format!("{mark}{}", o.label), style),
        ];
        if let Some(d) = &o.description {
            spans.push(Span::styled(format!("  {d}"), theme.muted()));
        }
        out.push(Line::from(spans));
    }
    let free = q.cursor >= q.option_count();
    out.push(Line::from(vec![
        Span::raw(if free { "› " } else { "  " }),
        Span::styled("other: ", theme.muted()),
        Span::styled(
            if q.custom.is_empty() {
                "type an answer".to_string()
            } else {
                q.custom.clone()
            },
            if q.custom.is_empty() {
                theme.muted()
            } else {
                Style::default()
            },
        ),
    ]));
    out.push(Line::from(Span::styled(
        "  ↑/↓ · Space marks · Enter answers · Esc: reply in the chat",
        theme.muted(),
    )));
    out
}

pub fn draw(f: &mut Frame<'_>, app: &mut App) {
    let area = f.area();
    let width = area.width as usize;
    let (rows, cursor) = app.composer.layout(width.saturating_sub(4));
    let composer_height = (rows.len().min(8) + 2) as u16;
    let todos = todo_lines(app);
    let mut approval = approval_lines(app, width.saturating_sub(2));
    if approval.is_empty() {
        approval = question_lines(app, width.saturating_sub(2));
    }
    let approval_height = if approval.is_empty() {
        0
    } else {
        approval.len() as u16 + 2
    };
    let todo_height = (todos.len() as u16).min(area.height / 4);
    let chunks = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(1),
        Constraint::Length(todo_height),
        Constraint::Length(approval_height),
        Constraint::Length(composer_height),
        Constraint::Length(1),
    ])
    .split(area);
    f.render_widget(Paragraph::new(header(app, width)), chunks[0]);
    let (lines, more) = conversation(app, width, chunks[1].height as usize);
    f.render_widget(Paragraph::new(lines), chunks[1]);
    if more && app.scroll > 0 {
        let hint = Span::styled(
            format!(" ↑ {} lines below · PgDn ", app.scroll),
            app.theme.muted().add_modifier(Modifier::REVERSED),
        );
        let w = hint.content.chars().count() as u16;
        let r = Rect::new(
            chunks[1].right().saturating_sub(w),
            chunks[1].bottom().saturating_sub(1),
            w.min(chunks[1].width),
            1,
        )
        .intersection(area);
        f.render_widget(Paragraph::new(Line::from(hint)), r);
    }
    if todo_height > 0 {
        f.render_widget(Paragraph::new(todos), chunks[2]);
    }
    if approval_height > 0 {
        let block = Block::default()
            .borders(Borders::ALL)
            .border_style(app.theme.fg(Color::Yellow));
        f.render_widget(Paragraph::new(approval).block(block), chunks[3]);
    }
    // The composer.
    let visible = rows.len().min(8);
    let first = cursor.0.saturating_sub(visible.saturating_sub(1));
    let text: Vec<Line<'static>> = rows
        .iter()
        .skip(first)
        .take(visible)
        .map(|r| Line::from(r.clone()))
        .collect();
    let title = if app.running {
        if app.steer {
            " steer the running turn "
        } else {
            " queue a message "
        }
    } else {
        " message "
    };
    let focused = app.approvals.is_empty() && app.questions.is_empty() && app.overlay.is_none();
    let block = Block::default()
        .borders(Borders::ALL)
        .title(Span::styled(title, app.theme.muted()))
        .border_style(if focused {
            app.theme.fg(Color::Cyan)
        } else {
            app.theme.muted()
        });
    let placeholder = app.composer.is_empty();
    let body = if placeholder {
        Paragraph::new(Line::from(Span::styled(
            "Ask dsh to do something… (/ commands · @ files · Alt-Enter new line)",
            app.theme.muted(),
        )))
    } else {
        Paragraph::new(text)
    };
    f.render_widget(body.block(block), chunks[4]);
    f.render_widget(Paragraph::new(status(app)), chunks[5]);
    if focused {
        let x = (chunks[4].x + 1 + cursor.1 as u16).min(area.right().saturating_sub(1));
        let y = (chunks[4].y + 1 + (cursor.0 - first) as u16).min(area.bottom().saturating_sub(1));
        f.set_cursor_position((x, y));
    }
    // The menu above the composer.
    if let Some(menu) = &app.menu
        && !menu.items.is_empty()
    {
        let shown = menu.items.len().min(8);
        let h = shown as u16 + 2;
        let w = (area.width).min(72);
        let y = chunks[4].y.saturating_sub(h);
        let r = Rect::new(chunks[4].x, y, w, h).intersection(area);
        let first = menu.selected.saturating_sub(shown - 1);
        let lines: Vec<Line<'static>> = menu
            .items
            .iter()
            .enumerate()
            .skip(first)
            .take(shown)
            .map(|(i, item)| {
                let style = if i == menu.selected {
                    Style::default().add_modifier(Modifier::REVERSED)
                } else {
                    Style::default()
                };
                Line::from(vec![
                    Span::styled(item.label.clone(), style.add_modifier(Modifier::BOLD)),
                    Span::styled(format!("  {}", item.detail), app.theme.muted()),
                ])
            })
            .collect();
        f.render_widget(Clear, r);
        let block = Block::default()
            .borders(Borders::ALL)
            .title(Span::styled(menu.title, app.theme.muted()));
        f.render_widget(Paragraph::new(lines).block(block), r);
    }
    if let Some(overlay) = &app.overlay {
        draw_overlay(f, app, overlay, area);
    }
}

fn draw_overlay(f: &mut Frame<'_>, app: &App, overlay: &Overlay, area: Rect) {
    let theme = app.theme;
    let w = area.width.saturating_sub(4).min(100);
    let wanted = match overlay {
        Overlay::Sessions(p) => p.filtered().len().max(1) as u16 + 4,
        Overlay::Help(text) => text.lines().count() as u16 + 2,
    };
    let h = area.height.saturating_sub(4).min(wanted.max(6));
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    )
    .intersection(area);
    f.render_widget(Clear, r);
    match overlay {
        Overlay::Sessions(p) => {
            let mut lines = vec![Line::from(vec![
                Span::styled(
                    if p.show_archived {
                        "archived · search: "
                    } else {
                        "search: "
                    },
                    theme.muted(),
                ),
                Span::raw(p.query.clone()),
                Span::styled("▏", theme.fg(Color::Cyan)),
            ])];
            let rows = h.saturating_sub(4) as usize;
            let shown = p.filtered();
            let first = p.selected.saturating_sub(rows.saturating_sub(1));
            for (i, s) in shown.iter().enumerate().skip(first).take(rows) {
                let style = if i == p.selected {
                    Style::default().add_modifier(Modifier::REVERSED)
                } else {
                    Style::default()
                };
                let indent = if s.depth > 0 {
                    format!("{}↳ ", "  ".repeat(s.depth - 1))
                } else {
                    String::new()
                };
                let inner = w.saturating_sub(2) as usize;
                // The id whole when it fits beside a readable title, else its start.
                let id = if inner >= s.id.chars().count() + s.when.chars().count() + 30 {
                    s.id.clone()
                } else {
                    crate::summary::truncate(&s.id, 18)
                };
                let tail = format!("  {} · {id}", s.when);
                let room = inner.saturating_sub(tail.chars().count() + indent.chars().count());
                let title = crate::summary::truncate(&s.title, room.max(4));
                lines.push(Line::from(vec![
                    Span::styled(
                        format!("{indent}{title}"),
                        style.add_modifier(Modifier::BOLD),
                    ),
                    Span::styled(tail, theme.muted()),
                ]));
            }
            if shown.is_empty() {
                lines.push(Line::from(Span::styled(
                    "no stored session matches",
                    theme.muted(),
                )));
            }
            lines.push(Line::from(Span::styled(
                if p.show_archived {
                    "Enter open · ^A restore · ^D delete · Tab the others · Esc close"
                } else {
                    "Enter open · ^F fork · ^A archive · ^D delete · Tab archived · Esc close"
                },
                theme.muted(),
            )));
            let block = Block::default()
                .borders(Borders::ALL)
                .title(" sessions ")
                .border_style(theme.fg(Color::Cyan));
            f.render_widget(Paragraph::new(lines).block(block), r);
        }
        Overlay::Help(text) => {
            let block = Block::default()
                .borders(Borders::ALL)
                .title(" help · Esc closes ")
                .border_style(theme.fg(Color::Cyan));
            f.render_widget(
                Paragraph::new(text_lines(text, Style::default())).block(block),
                r,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::markdown::tests::plain;
    use pretty_assertions::assert_eq;

    #[test]
    fn wrapping_breaks_between_words_and_splits_long_ones() {
        let out = wrap(vec![Line::from("the quick brown fox")], 10);
        assert_eq!(plain(&out), vec!["the quick ", "brown fox"]);
        let out = wrap(vec![Line::from("abcdefghijkl")], 5);
        assert_eq!(plain(&out), vec!["abcde", "fghij", "kl"]);
        let out = wrap(vec![Line::from("")], 5);
        assert_eq!(plain(&out), vec![""]);
    }

    /// Every panel at once, from a 1×1 terminal to a wide one: nothing panics.
    #[test]
    fn any_size_draws_without_panicking() {
        use ratatui::Terminal;
        use ratatui::backend::TestBackend;
        for (w, h) in [(1, 1), (4, 3), (10, 4), (20, 6), (80, 24), (200, 60)] {
            let mut app = crate::app::tests::busy_app();
            let mut terminal =
                Terminal::new(TestBackend::new(w, h)).unwrap_or_else(|e| panic!("{e}"));
            for overlay in [false, true] {
                if overlay {
                    crate::app::tests::open_help(&mut app);
                }
                terminal
                    .draw(|f| draw(f, &mut app))
                    .unwrap_or_else(|e| panic!("{w}x{h}: {e}"));
            }
        }
    }

    #[test]
    fn a_hunk_shows_line_numbers() {
        let h = Hunk {
            path: "a.txt".into(),
            old: Some("one\ntwo\nthree".into()),
            new: "one\n2\nthree".into(),
            start_line: Some(10),
        };
        let out = hunk_lines(&h, Theme { color: false });
        assert_eq!(
            plain(&out),
            vec![
                "a.txt:10",
                "   10   one",
                "   11 - two",
                "   11 + 2",
                "   12   three",
            ]
        );
    }
}
