//! `@deepseek-ai/dsh-time-context` (config `{timeZone?, refreshIntervalMs}`): before a step,
//! the model gets a clock reading as a user message (`source: {kind: "time-context", form:
//! "snapshot", sections: [{name, text}]}`): the time in the user's zone, the zone the
//! user's browser reported with the turn's messages (`source.clientTimeZone`, sent by the
//! page), and the time since the previous message. The reading is a durable message like
//! any other, so earlier requests stay byte-identical; a new one is added only when the
//! last is older than `refreshIntervalMs` (0: every step).

use std::sync::Arc;

use dsh_agent::{PreStep, PreStepDecision};
use dsh_kernel::{BoxError, Context, ListenOptions, Plugin, PluginConfig};
use dsh_llm::{ContentBlock, Message, MessageSource};
use dsh_session::{Event, types};
use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The source kind of the readings (0.2.1's plugin name).
pub const KIND: &str = "time-context";
/// Default refresh: a new reading at most every ten minutes.
const DEFAULT_REFRESH_MS: u64 = 600_000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Row {
    time_zone: Option<String>,
    refresh_interval_ms: Option<u64>,
}

/// `@deepseek-ai/dsh-time-context`.
pub struct TimeContextPlugin;

impl Plugin for TimeContextPlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-time-context"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: Row = config.parse()?;
        let refresh = row.refresh_interval_ms.unwrap_or(DEFAULT_REFRESH_MS);
        // The fallback zone: the row's, else this machine's (UTC when it has none).
        let fallback = match row.time_zone {
            Some(name) => {
                TimeZone::get(&name).map_err(|_| {
                    format!("time-context: timeZone \"{name}\" is not an IANA time zone")
                })?;
                name
            }
            None => TimeZone::try_system()
                .ok()
                .and_then(|tz| tz.iana_name().map(str::to_owned))
                .unwrap_or_else(|| "UTC".into()),
        };
        let fallback = Arc::new(fallback);
        ctx.on_waterfall::<PreStep>(ListenOptions::PREPEND, move |p, next| {
            let fallback = fallback.clone();
            Box::pin(async move {
                let decision = next.run().await?;
                let PreStepDecision::Enter(mut messages) = decision else {
                    return Ok(decision);
                };
                if p.cancel.is_cancelled() {
                    return Ok(PreStepDecision::Enter(messages));
                }
                let now = Timestamp::now();
                let text = p.agent.session().read(|log| {
                    reading(
                        log.events(),
                        &messages,
                        p.turn,
                        p.step,
                        now,
                        &fallback,
                        refresh,
                    )
                });
                if let Some(text) = text {
                    messages.push(Arc::new(message(text)));
                }
                Ok(PreStepDecision::Enter(messages))
            })
        })?;
        Ok(())
    }
}

fn message(text: String) -> Message {
    let mut source = Map::new();
    source.insert("kind".into(), json!(KIND));
    source.insert("form".into(), json!("snapshot"));
    source.insert("sections".into(), json!([{"name": KIND, "text": text}]));
    Message::user(vec![ContentBlock::text(text)], MessageSource::Other(source))
}

fn is_reading(e: &Event) -> bool {
    e.is(types::USER_MESSAGE)
        && e.data.pointer("/source/kind").and_then(Value::as_str) == Some(KIND)
}

/// The zone a user message's browser reported.
fn client_zone(source: &Value) -> Option<String> {
    let zone = source
        .get("clientTimeZone")
        .and_then(Value::as_str)
        .filter(|_| source.get("kind").and_then(Value::as_str) == Some("user"))?;
    TimeZone::get(zone).ok().map(|_| zone.to_string())
}

/// `1d 2h 3m 4s`, whole seconds, zero parts left out (seconds always shown).
fn elapsed(ms: i64) -> String {
    let mut s = ms.max(0) / 1000;
    let mut out = Vec::new();
    for (unit, size) in [("d", 86_400), ("h", 3_600), ("m", 60)] {
        if s >= size {
            out.push(format!("{}{unit}", s / size));
            s %= size;
        }
    }
    out.push(format!("{s}s"));
    out.join(" ")
}

/// The reading to add before this step, if one is due.
fn reading(
    events: &[Arc<Event>],
    proposed: &[Arc<Message>],
    turn: u64,
    step: u64,
    now: Timestamp,
    fallback: &str,
    refresh_ms: u64,
) -> Option<String> {
    let now_ms = now.as_millisecond();
    let last_reading = events.iter().rev().find(|e| is_reading(e)).map(|e| e.time);
    if refresh_ms > 0
        && let Some(t) = last_reading
        && now_ms >= t
        && ((now_ms - t) as u64) < refresh_ms
    {
        return None;
    }
    // This turn's events (from its turn/start on).
    let start = events
        .iter()
        .rposition(|e| {
            e.is(types::TURN_START) && e.data.get("turn").and_then(Value::as_u64) == Some(turn)
        })
        .unwrap_or(events.len());
    let this_turn = &events[start..];
    let previous = if step <= 1 {
        events[..start]
            .iter()
            .rev()
            .find(|e| {
                e.is(types::USER_MESSAGE)
                    || e.is(types::ASSISTANT_MESSAGE)
                    || e.is(types::TOOL_RESULT)
            })
            .map(|e| e.time)
    } else {
        this_turn
            .iter()
            .rev()
            .find(|e| is_reading(e))
            .map(|e| e.time)
    };
    let mut zones: Vec<String> = this_turn
        .iter()
        .filter(|e| e.is(types::USER_MESSAGE))
        .filter_map(|e| e.data.get("source").and_then(client_zone))
        .chain(proposed.iter().filter_map(|m| {
            serde_json::to_value(&m.source)
                .ok()
                .as_ref()
                .and_then(client_zone)
        }))
        .collect();
    zones.sort();
    zones.dedup();
    let shown_zone = match zones.as_slice() {
        [one] => one.as_str(),
        _ => fallback,
    };
    let tz = TimeZone::get(shown_zone).unwrap_or(TimeZone::UTC);
    let local = now.to_zoned(tz);
    let clock = format!("{}[{shown_zone}]", local.strftime("%Y-%m-%dT%H:%M:%S%:z"));
    let browser = match zones.as_slice() {
        [one] => format!(
            "The user's browser is set to {one}; read any date or time the user gives without a zone as {one} time."
        ),
        [] => "The user's browser time zone is not known; if the user gives a date or time without a zone, ask which zone they mean.".to_string(),
        many => format!(
            "This turn's messages came from browsers in different time zones ({}); if the user gives a date or time without a zone, ask which one they mean.",
            many.join(", ")
        ),
    };
    let since = match previous {
        Some(t) => elapsed(now_ms - t),
        None => "nothing earlier".to_string(),
    };
    let what = if step <= 1 {
        "previous message"
    } else {
        "previous clock reading"
    };
    Some(format!(
        "Clock at turn {turn}, step {step}: {clock}\n{browser}\nSince the {what}: {since}."
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_compactly() {
        assert_eq!(elapsed(0), "0s");
        assert_eq!(elapsed(61_000), "1m 1s");
        assert_eq!(elapsed(90_061_000), "1d 1h 1m 1s");
    }
}
