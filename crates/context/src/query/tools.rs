//! The five model tools: `session_search`, `session_event_search`, `session_trace`,
//! `session_event_trace`, `session_event_read`. Names and parameter shapes are upstream's;
//! the descriptions in `schemas.json` are ours.

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, HarnessError};
use dsh_llm::ToolSchema;
use dsh_session::{SessionHeader, types};
use dsh_tools::{Tool, ToolOutput, ToolRunContext};
use serde_json::{Map, Value};

use super::extract::{SurfaceClass, event_text, iso_millis, parse_iso};
use super::format::{event_object, to_string_pretty};
use super::index::EventFilters;
use super::service::{QueryError, SessionQuery, SessionView, availability, trace_event};

const SCHEMAS: &str = include_str!("schemas.json");

const CAP_REACHED: &str = "There are more matches than this list shows. Use a more specific query or add filters to see the rest.";

/// Settings of the `tool-session-query` row.
#[derive(Clone, Copy, Debug)]
pub struct ToolConfig {
    pub max_search_results: usize,
    pub search_timeout_ms: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Search,
    EventSearch,
    Trace,
    EventTrace,
    EventRead,
}

/// One session-query tool.
pub struct QueryTool {
    kind: Kind,
    schema: ToolSchema,
    service: Arc<SessionQuery>,
    config: ToolConfig,
}

/// The five tools over `service`.
pub fn tools(service: &Arc<SessionQuery>, config: ToolConfig) -> Result<Vec<QueryTool>, BoxError> {
    let schemas: Vec<Value> = serde_json::from_str(SCHEMAS)?;
    let mut out = Vec::new();
    for s in schemas {
        let name = s
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let kind = match name.as_str() {
            "session_search" => Kind::Search,
            "session_event_search" => Kind::EventSearch,
            "session_trace" => Kind::Trace,
            "session_event_trace" => Kind::EventTrace,
            "session_event_read" => Kind::EventRead,
            other => return Err(format!("unknown session tool schema {other}").into()),
        };
        out.push(QueryTool {
            kind,
            schema: ToolSchema {
                name,
                description: s
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .into(),
                parameters: Arc::new(s.get("parameters").cloned().unwrap_or(Value::Null)),
            },
            service: service.clone(),
            config,
        });
    }
    Ok(out)
}

fn invalid(code: &'static str, message: impl Into<String>) -> BoxError {
    Box::new(HarnessError::new("HarnessError", code, message))
}

fn filter_error(message: impl Into<String>) -> BoxError {
    invalid("SESSION_QUERY_INVALID_FILTER", message)
}

/// A query failure as the tool's error.
fn query_err(e: QueryError) -> BoxError {
    Box::new(e.into_error())
}

struct Args<'a>(&'a Map<String, Value>);

impl Args<'_> {
    fn string(&self, key: &str) -> Result<Option<String>, BoxError> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(filter_error(format!("{key} must be a string"))),
        }
    }

    fn integer(&self, key: &str) -> Result<Option<u64>, BoxError> {
        match self.0.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f <= 9_007_199_254_740_991.0)
                        .map(|f| f as u64)
                })
                .map(Some)
                .ok_or_else(|| filter_error(format!("{key} must be a non-negative safe integer"))),
        }
    }

    fn strings(&self, key: &str) -> Result<Option<Vec<String>>, BoxError> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) if !items.is_empty() => items
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_owned)
                        .ok_or_else(|| filter_error(format!("{key} must contain only strings")))
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
            Some(_) => Err(filter_error(format!("{key} must be a non-empty array"))),
        }
    }

    fn time(&self, key: &str) -> Result<Option<i64>, BoxError> {
        match self.string(key)? {
            None => Ok(None),
            Some(s) => parse_iso(&s).map(Some).ok_or_else(|| {
                filter_error(format!("{key} must be a timezone-qualified ISO 8601 time"))
            }),
        }
    }

    fn surfaces(&self, key: &str) -> Result<Option<Vec<SurfaceClass>>, BoxError> {
        match self.strings(key)? {
            None => Ok(None),
            Some(list) => list
                .iter()
                .map(|s| {
                    SurfaceClass::parse(s).ok_or_else(|| {
                        filter_error(format!("{key} has an unknown surface \"{s}\""))
                    })
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Some),
        }
    }

    fn query(&self) -> Result<String, BoxError> {
        let raw = self.string("query")?.unwrap_or_default();
        let normalized = raw.split_whitespace().collect::<Vec<_>>().join(" ");
        if normalized.is_empty() || normalized.contains('\0') {
            return Err(invalid(
                "SESSION_QUERY_INVALID_QUERY",
                "session-search query must contain non-whitespace text",
            ));
        }
        Ok(normalized)
    }
}

fn range<T: PartialOrd + Copy>(from: Option<T>, to: Option<T>, what: &str) -> Result<(), BoxError> {
    match (from, to) {
        (Some(f), Some(t)) if f > t => Err(filter_error(format!(
            "{what} lower bound exceeds its upper bound"
        ))),
        _ => Ok(()),
    }
}

fn header_line(view: &SessionView) -> String {
    format!("Session {} — {}", view.header.id, view.title_text())
}

impl QueryTool {
    fn run(&self, args: &Value, caller: &SessionHeader) -> Result<String, BoxError> {
        let empty = Map::new();
        let args = Args(args.as_object().unwrap_or(&empty));
        match self.kind {
            Kind::EventRead => self.event_read(&args, caller),
            Kind::EventTrace => self.event_trace(&args, caller),
            Kind::Trace => self.trace(&args, caller),
            Kind::EventSearch => self.event_search(&args, caller),
            Kind::Search => self.search(&args, caller),
        }
    }

    /// The session the call names (`session_id`, else the caller's), if the caller may read it.
    fn session_view(
        &self,
        args: &Args<'_>,
        caller: &SessionHeader,
    ) -> Result<SessionView, BoxError> {
        self.service
            .authorized(caller, args.string("session_id")?.as_deref())
            .map_err(query_err)
    }

    /// The `session_event_read` tool: one event with its neighbours.
    fn event_read(&self, args: &Args<'_>, caller: &SessionHeader) -> Result<String, BoxError> {
        let q = &self.service;
        let view = self.session_view(args, caller)?;
        let seq = args
            .integer("seq")?
            .ok_or_else(|| filter_error("seq is required"))?;
        let max = q.config.read_window_max;
        let window = |key: &str| -> Result<u64, BoxError> {
            match args.integer(key) {
                Ok(Some(n)) if n <= max => Ok(n),
                Ok(None) => Ok(0),
                _ => Err(invalid(
                    "SESSION_QUERY_INVALID_WINDOW",
                    format!("{key} must be an integer between 0 and {max}"),
                )),
            }
        };
        let (before, after) = (window("before")?, window("after")?);
        let target = view
            .events
            .get(seq as usize)
            .ok_or_else(|| query_err(QueryError::EventNotFound))?;
        let mut lines = vec![
            header_line(&view),
            format!("Target event seq {seq}:"),
            "```json".into(),
            to_string_pretty(&event_object(target)),
            "```".into(),
        ];
        let neighbour = |e: &dsh_session::Event| {
            let text = event_text(e);
            let head = format!(
                "- seq {} | {} | {}",
                e.seq,
                e.event_type,
                iso_millis(e.time)
            );
            if text.is_empty() {
                format!("{head} | (no semantic text)")
            } else {
                format!("{head}\n  {}", text.replace('\n', "\n  "))
            }
        };
        let first = seq.saturating_sub(before) as usize;
        if first < seq as usize {
            lines.push(String::new());
            lines.push("Before:".into());
            lines.extend(
                view.events[first..seq as usize]
                    .iter()
                    .map(|e| neighbour(e)),
            );
        }
        let last = (seq as usize)
            .saturating_add(after as usize)
            .min(view.events.len() - 1);
        if last > seq as usize {
            lines.push(String::new());
            lines.push("After:".into());
            lines.extend(
                view.events[seq as usize + 1..=last]
                    .iter()
                    .map(|e| neighbour(e)),
            );
        }
        Ok(lines.join("\n"))
    }

    /// The `session_event_trace` tool: one event and the events linked to it.
    fn event_trace(&self, args: &Args<'_>, caller: &SessionHeader) -> Result<String, BoxError> {
        let view = self.session_view(args, caller)?;
        let seq = args
            .integer("seq")?
            .ok_or_else(|| filter_error("seq is required"))?;
        let trace =
            trace_event(&view.events, seq).ok_or_else(|| query_err(QueryError::EventNotFound))?;
        let target = &view.events[seq as usize];
        let list = |v: &[u64]| {
            if v.is_empty() {
                "none".to_string()
            } else {
                v.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
            }
        };
        Ok([
            header_line(&view),
            format!(
                "Target: seq {seq} | {} | {} | {}",
                target.event_type,
                trace.class.as_str(),
                iso_millis(target.time)
            ),
            format!(
                "Replaced by: {}",
                trace.replaced_by.map_or("none".into(), |s| s.to_string())
            ),
            format!("Replacement chain: {}", list(&trace.chain)),
            format!("Events replaced by target: {}", list(&trace.replaced)),
            format!("Events cited directly as sources: {}", list(&trace.sources)),
            format!("Direct derived events: {}", list(&trace.derived)),
        ]
        .join("\n"))
    }

    /// The `session_trace` tool.
    fn trace(&self, args: &Args<'_>, caller: &SessionHeader) -> Result<String, BoxError> {
        let q = &self.service;
        let view = self.session_view(args, caller)?;
        let records = q.records().map_err(query_err)?;
        let cwd = &view.header.cwd;
        let title_of = |id: &str| {
            q.view(id)
                .map(|v| v.title_text())
                .unwrap_or_else(|e| format!("untitled (title unavailable: {})", e.code()))
        };
        let mut lines = vec![
            header_line(&view),
            format!("Created: {}", iso_millis(view.header.created_at as i64)),
            format!("Availability: {}", view.availability()),
            String::new(),
            "Ancestors (nearest first):".into(),
        ];
        let mut parent = view.header.parent_session.clone();
        if parent.is_none() {
            lines.push("- none (target is a root session)".into());
        }
        let mut hops = 0;
        while let Some(pid) = parent.take() {
            hops += 1;
            match records.iter().find(|r| r.header.id == pid) {
                Some(r) if &r.header.cwd == cwd && hops <= records.len() => {
                    lines.push(format!(
                        "- {} — {} | {} | {}",
                        pid,
                        title_of(&pid),
                        iso_millis(r.header.created_at as i64),
                        availability(r.live, r.persisted)
                    ));
                    parent = r.header.parent_session.clone();
                }
                _ => lines.push("- [outside workspace boundary]".into()),
            }
        }
        lines.push(String::new());
        lines.push("Descendants:".into());
        let before = lines.len();
        let mut stack: Vec<(String, usize)> = vec![(view.header.id.clone(), 0)];
        let mut seen = std::collections::HashSet::new();
        while let Some((id, depth)) = stack.pop() {
            if !seen.insert(id.clone()) {
                continue;
            }
            let mut children: Vec<_> = records
                .iter()
                .filter(|r| r.header.parent_session.as_deref() == Some(id.as_str()))
                .collect();
            children.sort_by(|a, b| {
                b.header
                    .created_at
                    .cmp(&a.header.created_at)
                    .then(b.header.id.cmp(&a.header.id))
            });
            for c in children {
                stack.push((c.header.id.clone(), depth + 1));
            }
            if depth == 0 {
                continue;
            }
            let indent = "  ".repeat(depth - 1);
            match records.iter().find(|r| r.header.id == id) {
                Some(r) if &r.header.cwd == cwd => lines.push(format!(
                    "{indent}- {id} — {} | {} | {}",
                    title_of(&id),
                    iso_millis(r.header.created_at as i64),
                    availability(r.live, r.persisted)
                )),
                _ => lines.push(format!("{indent}- [outside workspace subtree]")),
            }
        }
        if lines.len() == before {
            lines.push("- none".into());
        }
        Ok(lines.join("\n"))
    }

    /// The `session_event_search` tool.
    fn event_search(&self, args: &Args<'_>, caller: &SessionHeader) -> Result<String, BoxError> {
        let q = &self.service;
        let target = args.string("session_id")?;
        let query = args.query()?;
        let filters = EventFilters {
            seq_from: args.integer("seq_from")?,
            seq_to: args.integer("seq_to")?,
            time_from: args.time("time_from")?,
            time_to: args.time("time_to")?,
            types: args.strings("event_types")?,
            surfaces: args.surfaces("surfaces")?,
        };
        range(filters.seq_from, filters.seq_to, "seq")?;
        range(filters.time_from, filters.time_to, "time")?;
        let view = q.authorized(caller, target.as_deref()).map_err(query_err)?;
        let mut filters = filters;
        if view.header.id == caller.id {
            // The calling step cannot find itself.
            let step = view
                .events
                .iter()
                .rev()
                .find(|e| e.is(types::STEP_START))
                .ok_or_else(|| query_err(QueryError::NoCurrentStep))?;
            let bound = step.seq.saturating_sub(1);
            filters.seq_to = Some(filters.seq_to.map_or(bound, |t| t.min(bound)));
            if step.seq == 0 || filters.seq_from.is_some_and(|f| f > bound) {
                return Ok(format!(
                    "{}\n\nNo prior event matches found.",
                    header_line(&view)
                ));
            }
        }
        let cap = self.config.max_search_results;
        let mut hits = q
            .search_events(&view, &query, &filters, cap + 1)
            .map_err(query_err)?;
        let capped = hits.len() > cap;
        hits.truncate(cap);
        let mut lines = vec![header_line(&view), String::new()];
        if hits.is_empty() {
            lines.push("No prior event matches found.".into());
            return Ok(lines.join("\n"));
        }
        lines.push(format!("Event search results ({}):", hits.len()));
        for (i, h) in hits.iter().enumerate() {
            lines.push(format!(
                "{}. seq {} | {} | {} | {}",
                i + 1,
                h.seq,
                h.event_type,
                h.surface.as_str(),
                iso_millis(h.time)
            ));
            lines.push(format!("   Snippet: {}", h.snippet));
        }
        if capped {
            lines.push(String::new());
            lines.push(CAP_REACHED.into());
        }
        Ok(lines.join("\n"))
    }

    /// The `session_search` tool.
    fn search(&self, args: &Args<'_>, caller: &SessionHeader) -> Result<String, BoxError> {
        let q = &self.service;
        let query = args.query()?;
        let ids = args.strings("session_ids")?;
        let created_from = args.time("created_at_from")?;
        let created_to = args.time("created_at_to")?;
        let parents = args.strings("parent_session_ids")?;
        let include_roots = match args.0.get("include_root_sessions") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => return Err(filter_error("include_root_sessions must be a boolean")),
        };
        let availability_filter = args.strings("availability")?;
        if let Some(a) = &availability_filter
            && a.iter().any(|x| x != "live" && x != "persisted")
        {
            return Err(filter_error("availability must list live or persisted"));
        }
        let filters = EventFilters {
            seq_from: args.integer("event_seq_from")?,
            seq_to: args.integer("event_seq_to")?,
            time_from: args.time("event_time_from")?,
            time_to: args.time("event_time_to")?,
            types: args.strings("event_types")?,
            surfaces: args.surfaces("event_surfaces")?,
        };
        range(created_from, created_to, "created_at")?;
        range(filters.seq_from, filters.seq_to, "event seq")?;
        range(filters.time_from, filters.time_to, "event time")?;
        if caller.cwd.is_none() {
            return Err(invalid(
                "SESSION_QUERY_TOOL_UNAUTHORIZED",
                "session_search only covers sessions of the caller's workspace, and the calling session has none; use session_event_search to search the current session",
            ));
        }
        let all = q.records().map_err(query_err)?;
        let records: Vec<_> = all
            .iter()
            .filter(|r| r.header.id != caller.id && r.header.cwd == caller.cwd)
            .filter(|r| ids.as_ref().is_none_or(|ids| ids.contains(&r.header.id)))
            .filter(|r| created_from.is_none_or(|f| r.header.created_at as i64 >= f))
            .filter(|r| created_to.is_none_or(|t| r.header.created_at as i64 <= t))
            .filter(
                |r| match (&parents, include_roots, &r.header.parent_session) {
                    (None, None | Some(true), _) => true,
                    (None, Some(false), p) => p.is_some(),
                    (Some(_), Some(true), None) => true,
                    (Some(ps), _, Some(p)) => ps.contains(p),
                    (Some(_), _, None) => false,
                },
            )
            .filter(|r| {
                availability_filter.as_ref().is_none_or(|a| {
                    (r.live && a.iter().any(|x| x == "live"))
                        || (r.persisted && a.iter().any(|x| x == "persisted"))
                })
            })
            .cloned()
            .collect();
        let cap = self.config.max_search_results;
        let mut hits = q
            .search_sessions(&records, &query, &filters, cap + 1)
            .map_err(query_err)?;
        let capped = hits.len() > cap;
        hits.truncate(cap);
        if hits.is_empty() {
            return Ok("No prior session matches found.".into());
        }
        let mut lines = vec![format!("Session search results ({}):", hits.len())];
        for (i, h) in hits.iter().enumerate() {
            let Some(r) = records.iter().find(|r| r.header.id == h.session_id) else {
                continue;
            };
            let parent = match &r.header.parent_session {
                None => "root".to_string(),
                Some(p)
                    if all
                        .iter()
                        .any(|x| &x.header.id == p && x.header.cwd == caller.cwd) =>
                {
                    p.clone()
                }
                Some(_) => "[outside workspace]".into(),
            };
            let title = q
                .view(&h.session_id)
                .map(|v| v.title_text())
                .unwrap_or_else(|e| format!("untitled (title unavailable: {})", e.code()));
            lines.extend([
                String::new(),
                format!("{}. Session {} — {title}", i + 1, h.session_id),
                format!("   Created: {}", iso_millis(r.header.created_at as i64)),
                format!("   Parent: {parent}"),
                format!("   Availability: {}", availability(r.live, r.persisted)),
                format!(
                    "   Best match: seq {} | {} | {} | {}",
                    h.seq,
                    h.event_type,
                    h.surface.as_str(),
                    iso_millis(h.time)
                ),
                format!("   Snippet: {}", h.snippet),
            ]);
        }
        if capped {
            lines.push(String::new());
            lines.push(CAP_REACHED.into());
        }
        Ok(lines.join("\n"))
    }
}

impl Tool for QueryTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn concurrency_safe(&self, _args: &Value) -> bool {
        matches!(self.kind, Kind::Trace | Kind::EventTrace | Kind::EventRead)
    }

    fn timeout_ms(&self) -> Option<u64> {
        matches!(self.kind, Kind::Search | Kind::EventSearch)
            .then_some(self.config.search_timeout_ms)
    }

    fn execute(
        &self,
        args: Value,
        run: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let this = QueryTool {
            kind: self.kind,
            schema: self.schema.clone(),
            service: self.service.clone(),
            config: self.config,
        };
        Box::pin(async move {
            let Some(session) = run.session.clone() else {
                return Err(Box::new(QueryError::MissingAgent.into_error()) as BoxError);
            };
            let caller = session.header();
            let cancel = run.cancel.clone();
            let work = tokio::task::spawn_blocking(move || this.run(&args, &caller));
            tokio::select! {
                joined = work => match joined {
                    Ok(result) => result.map(ToolOutput::text),
                    Err(e) => Err(format!("session query task failed: {e}").into()),
                },
                () = cancel.cancelled() => Err(Box::new(QueryError::Aborted.into_error()) as BoxError),
            }
        })
    }
}
