//! `schedule_create`, `schedule_list`, `schedule_update`, `schedule_delete`: the model's
//! handle on the reminders of its own session. Names, parameters and result shapes are
//! 0.2.1's; a refused request answers `{code, message}` as a normal result (the model reads
//! it and corrects the call), as 0.2.1 does.

use std::sync::Arc;

use dsh_kernel::{BoxError, BoxFuture, Context, Plugin, PluginConfig};
use dsh_llm::ToolSchema;
use dsh_tools::{Tool, ToolOutput, ToolRegistry, ToolRunContext};
use jiff::Timestamp;
use serde_json::{Value, json};

use super::rule::{self, InputError, MIN_EVERY_SECONDS, input};
use super::{Change, ScheduleError, ScheduleService, Updated, prompt_of, title_of};

/// `@deepseek-ai/dsh-tool-schedule`: registers the four tools when the schedule service
/// is on (without it the row is inert, as in 0.2.1).
pub struct ToolSchedulePlugin;

impl Plugin for ToolSchedulePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-tool-schedule"
    }

    fn apply(&self, ctx: &Context, _config: &PluginConfig) -> Result<(), BoxError> {
        let Some(service) = ctx.get::<ScheduleService>() else {
            return Ok(());
        };
        let tools = ctx.require::<ToolRegistry>()?;
        for op in [Op::Create, Op::List, Op::Update, Op::Delete] {
            tools.register(
                ctx,
                Arc::new(ScheduleTool {
                    op,
                    schema: schema(op),
                    service: service.clone(),
                }),
            )?;
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum Op {
    Create,
    List,
    Update,
    Delete,
}

struct ScheduleTool {
    op: Op,
    schema: ToolSchema,
    service: Arc<ScheduleService>,
}

const ZONE: &str = "UTC or an IANA zone name such as Europe/Paris.";

/// The timing parameters `schedule_create` and `schedule_update` share, in 0.2.1's order.
fn timing_properties(props: &mut serde_json::Map<String, Value>) {
    props.insert(
        "every_seconds".into(),
        json!({"type": "number", "description": format!("Repeat every this many seconds (at least {MIN_EVERY_SECONDS}), counted from when the reminder is saved.")}),
    );
    props.insert(
        "daily".into(),
        json!({"type": "object", "description": "Once a day at a local time.", "additionalProperties": false,
            "properties": {
                "time": {"type": "string", "description": "Local time as HH:MM:SS (fractions of a second allowed), e.g. 18:30:00."},
                "time_zone": {"type": "string", "description": ZONE}},
            "required": ["time", "time_zone"]}),
    );
    props.insert(
        "weekly".into(),
        json!({"type": "object", "description": "On chosen days of the week at a local time.", "additionalProperties": false,
            "properties": {
                "time": {"type": "string", "description": "Local time as HH:MM:SS, e.g. 08:00:00."},
                "time_zone": {"type": "string", "description": ZONE},
                "weekdays": {"type": "array", "description": "Days as ISO numbers, 1 for Monday to 7 for Sunday, each at most once.", "items": {"type": "integer"}}},
            "required": ["time", "time_zone", "weekdays"]}),
    );
    props.insert(
        "cron".into(),
        json!({"type": "object", "description": "A classic five-field cron rule evaluated in a time zone.", "additionalProperties": false,
            "properties": {
                "expression": {"type": "string", "description": "Fields minute, hour, day of month, month, day of week, e.g. \"0 9 * * 1-5\" for weekdays at nine. If both day fields are restricted, either one matching is enough."},
                "time_zone": {"type": "string", "description": ZONE}},
            "required": ["expression", "time_zone"]}),
    );
    props.insert(
        "at".into(),
        json!({"description": "One fixed moment: an RFC 3339 date-time with its offset (2027-01-05T09:00:00+01:00), or a local date and time in a named zone.",
            "oneOf": [{"type": "string"}, {"type": "object", "additionalProperties": false,
                "properties": {"date": {"type": "string"}, "time": {"type": "string"}, "time_zone": {"type": "string"}},
                "required": ["date", "time", "time_zone"]}]}),
    );
}

fn schema(op: Op) -> ToolSchema {
    let mut props = serde_json::Map::new();
    let (name, description, required): (&str, &str, Vec<&str>) = match op {
        Op::Create => {
            props.insert("prompt".into(), json!({"type": "string", "description": "What you will be told when the reminder comes due: write it as an instruction to your future self."}));
            props.insert("title".into(), json!({"type": "string", "description": format!("A short name for the task in the user's language, {} characters at most: the action and its object only (keep identifiers such as a PR number or branch). Leave timing, time zones, status and how-to details out; they belong in the timing parameters and the prompt.", rule::MAX_TITLE_CHARS)}));
            props.insert("after_seconds".into(), json!({"type": "number", "description": "Fire once, this many whole seconds from now."}));
            timing_properties(&mut props);
            (
                "schedule_create",
                "Set a reminder in this session: when it comes due, its prompt arrives here as a new message and you continue from it. Give exactly one timing: after_seconds, at, every_seconds, daily, weekly or cron. A local time skipped by a daylight-saving change does not fire that day; one that happens twice fires the first time. If the machine was off, a repeating reminder delivers only the most recent missed time. Rarely, a crash can deliver a reminder twice.",
                vec!["prompt", "title"],
            )
        }
        Op::List => (
            "schedule_list",
            "Show the reminders of this session that are still pending.",
            vec![],
        ),
        Op::Update => {
            props.insert("id".into(), json!({"type": "string", "description": "The reminder's id, as schedule_list shows it."}));
            props.insert("title".into(), json!({"type": "string", "description": "A new name, under the same rules as in schedule_create."}));
            props.insert(
                "prompt".into(),
                json!({"type": "string", "description": "A new reminder text."}),
            );
            timing_properties(&mut props);
            (
                "schedule_update",
                "Edit a pending reminder without changing its id: a new title, a new prompt, or one new timing; what you leave out stays. A delay from now (after_seconds) cannot be edited: delete the reminder and create a new one.",
                vec!["id"],
            )
        }
        Op::Delete => {
            props.insert(
                "id".into(),
                json!({"type": "string", "description": "The reminder's exact id."}),
            );
            (
                "schedule_delete",
                "Remove a reminder of this session, pending or finished. A reminder message already delivered stays in the conversation.",
                vec!["id"],
            )
        }
    };
    let mut parameters = json!({"type": "object", "properties": props});
    if !required.is_empty() {
        parameters["required"] = json!(required);
    }
    ToolSchema {
        name: name.into(),
        description: description.into(),
        parameters: parameters.into(),
    }
}

fn refusal(e: &InputError) -> Value {
    json!({"code": e.code, "message": e.message})
}

fn internal(e: &ScheduleError) -> Value {
    match e {
        ScheduleError::Input(i) => refusal(i),
        ScheduleError::Store { .. } => {
            tracing::warn!("reminders: {e}");
            json!({"code": "internal_error", "message": "the reminder store could not be used; try again later"})
        }
    }
}

/// Arguments beyond `allowed` are refused (the root schema is open, as 0.2.1's).
fn only(args: &Value, allowed: &[&str], tool: &str) -> Result<(), InputError> {
    match args.as_object() {
        None => Err(input(
            "invalid_selector",
            format!("{tool} takes an object of arguments"),
        )),
        Some(m) => match m.keys().find(|k| !allowed.contains(&k.as_str())) {
            Some(k) => Err(input(
                "invalid_selector",
                format!(
                    "{tool} has no parameter \"{k}\"; it takes {}",
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        },
    }
}

fn id_of(args: &Value, tool: &str) -> Result<String, InputError> {
    let id = args.get("id").and_then(Value::as_str).unwrap_or_default();
    if id.is_empty() || id.trim() != id {
        return Err(input(
            "invalid_rule",
            format!("{tool} needs the reminder's exact id (non-empty, no surrounding spaces)"),
        ));
    }
    Ok(id.to_string())
}

const UPDATE_KEYS: [&str; 8] = [
    "id",
    "title",
    "prompt",
    "at",
    "every_seconds",
    "daily",
    "weekly",
    "cron",
];

fn run(op: Op, service: &ScheduleService, session: &str, args: &Value) -> Value {
    let now = Timestamp::now();
    let attempt = || -> Result<Value, ScheduleError> {
        match op {
            Op::Create => {
                only(
                    args,
                    &[
                        "prompt",
                        "title",
                        "after_seconds",
                        "at",
                        "every_seconds",
                        "daily",
                        "weekly",
                        "cron",
                    ],
                    "schedule_create",
                )?;
                let prompt = prompt_of(args.get("prompt"))?;
                let title = title_of(args.get("title"))?;
                let timing = rule::timing_from_args(args, now)?;
                Ok(service.create(session, title, prompt, timing)?.view(now))
            }
            Op::List => Ok(Value::Array(
                service.list(session)?.iter().map(|r| r.view(now)).collect(),
            )),
            Op::Delete => {
                let id = id_of(args, "schedule_delete")?;
                Ok(if service.delete(Some(session), &id)? {
                    json!({"id": id, "deleted": true})
                } else {
                    json!({"id": id, "deleted": false, "code": "schedule_not_found"})
                })
            }
            Op::Update => {
                only(args, &UPDATE_KEYS, "schedule_update")?;
                let id = id_of(args, "schedule_update")?;
                let timings: Vec<&str> = UPDATE_KEYS[3..]
                    .iter()
                    .copied()
                    .filter(|k| args.get(*k).is_some_and(|v| !v.is_null()))
                    .collect();
                if timings.len() > 1 {
                    return Err(input(
                        "invalid_selector",
                        format!(
                            "schedule_update takes at most one new timing, got {}",
                            timings.join(", ")
                        ),
                    )
                    .into());
                }
                let mut change = Change::default();
                if args.get("title").is_some() {
                    change.title = Some(title_of(args.get("title"))?);
                }
                if args.get("prompt").is_some() {
                    change.prompt = Some(prompt_of(args.get("prompt"))?);
                }
                if let Some(key) = timings.first() {
                    change.timing = Some(rule::timing_of(key, &args[*key], now)?);
                }
                if change.title.is_none() && change.prompt.is_none() && change.timing.is_none() {
                    return Err(input(
                        "invalid_selector",
                        "schedule_update needs a new title, prompt or timing",
                    )
                    .into());
                }
                Ok(match service.change(session, &id, change)? {
                    Updated::Done(r) => r.view(now),
                    Updated::NotFound => {
                        json!({"id": id, "updated": false, "code": "schedule_not_found"})
                    }
                    Updated::Ended => json!({"id": id, "updated": false, "code": "schedule_ended"}),
                })
            }
        }
    };
    attempt().unwrap_or_else(|e| internal(&e))
}

impl Tool for ScheduleTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn execute(
        &self,
        args: Value,
        run_ctx: ToolRunContext,
    ) -> BoxFuture<'static, Result<ToolOutput, BoxError>> {
        let op = self.op;
        let service = self.service.clone();
        Box::pin(async move {
            let session = run_ctx
                .session
                .clone()
                .ok_or("reminders belong to a session; this call has none")?;
            let value = if session.header().delegation_depth > 0 {
                json!({"code": "subagent_session", "message": "a subagent cannot set or manage reminders; leave that to the main session"})
            } else {
                let id = session.id();
                tokio::task::spawn_blocking(move || run(op, &service, &id, &args))
                    .await
                    .map_err(|e| format!("the reminder operation stopped: {e}"))?
            };
            let text = dsh_kernel::json::to_string(&value);
            run_ctx.set_value(value);
            Ok(ToolOutput::text(text))
        })
    }
}
