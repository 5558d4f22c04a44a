//! Reminder timing: the six selectors (`after_seconds`, `at`, `every_seconds`, `daily`,
//! `weekly`, `cron`), their stored form (0.2.1's record shapes, instants as
//! `YYYY-MM-DDTHH:MM:SS.mmmZ`), and the next occurrence in a time zone.
//!
//! Wall-clock rules are evaluated in the rule's IANA zone (jiff, the system tz database or
//! the bundled copy): a local time that falls in a DST gap does not occur that day; a local
//! time that occurs twice fires once, at the earlier instant.

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Timestamp, Zoned};
use serde_json::{Map, Value, json};

/// Shortest fixed-rate interval (0.2.1's floor).
pub const MIN_EVERY_SECONDS: u64 = 60;
/// Longest stored title, in characters.
pub const MAX_TITLE_CHARS: usize = 120;
/// Days searched ahead for a wall-clock occurrence before the rule is called impossible.
const SEARCH_DAYS: i32 = 366 * 8;

/// A rejected selector or value: `code` is one of 0.2.1's public codes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputError {
    pub code: &'static str,
    pub message: String,
}

pub(crate) fn input(code: &'static str, message: impl Into<String>) -> InputError {
    InputError {
        code,
        message: message.into(),
    }
}

/// When a reminder fires.
#[derive(Clone, Debug, PartialEq)]
pub enum Timing {
    After {
        seconds: u64,
    },
    At,
    Every {
        seconds: u64,
    },
    Daily {
        time: Time,
        zone: String,
    },
    Weekly {
        time: Time,
        zone: String,
        weekdays: Vec<i8>,
    },
    Cron {
        cron: Cron,
        zone: String,
    },
}

impl Timing {
    pub fn kind(&self) -> &'static str {
        match self {
            Timing::After { .. } => "after",
            Timing::At => "at",
            Timing::Every { .. } => "every",
            Timing::Daily { .. } => "daily",
            Timing::Weekly { .. } => "weekly",
            Timing::Cron { .. } => "cron",
        }
    }

    pub fn recurring(&self) -> bool {
        !matches!(self, Timing::After { .. } | Timing::At)
    }

    /// The first occurrence strictly after `now`; `anchor` is the current target (the
    /// fixed-rate grid runs through it). `None`: no later occurrence exists.
    pub fn next_after(&self, anchor: Timestamp, now: Timestamp) -> Option<Timestamp> {
        match self {
            Timing::After { .. } | Timing::At => None,
            Timing::Every { seconds } => {
                let step = i64::try_from(*seconds).ok()?.checked_mul(1000)?;
                let (a, n) = (anchor.as_millisecond(), now.as_millisecond());
                let k = if n < a { 0 } else { (n - a) / step + 1 };
                Timestamp::from_millisecond(a.checked_add(k.checked_mul(step)?)?).ok()
            }
            Timing::Daily { time, zone } => next_wall(zone, now, |_| true, &[*time]),
            Timing::Weekly {
                time,
                zone,
                weekdays,
            } => next_wall(
                zone,
                now,
                |d| weekdays.contains(&d.weekday().to_monday_one_offset()),
                &[*time],
            ),
            Timing::Cron { cron, zone } => {
                next_wall(zone, now, |d| cron.day_matches(d), &cron.times())
            }
        }
    }
}

/// A stored reminder (`record` in 0.2.1's task rows).
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    pub id: String,
    pub title: String,
    pub prompt: String,
    pub timing: Timing,
    /// The pending (or, once inactive, the last) occurrence.
    pub scheduled_at: Timestamp,
}

impl Record {
    /// 0.2.1's record shape, keys in its order.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("kind".into(), json!(self.timing.kind()));
        m.insert("title".into(), json!(self.title));
        m.insert("prompt".into(), json!(self.prompt));
        match &self.timing {
            Timing::After { seconds } => {
                m.insert("afterSeconds".into(), json!(seconds));
            }
            Timing::At => {}
            Timing::Every { seconds } => {
                m.insert("everySeconds".into(), json!(seconds));
            }
            Timing::Daily { time, zone } => {
                m.insert("time".into(), json!(clock(*time)));
                m.insert("timeZone".into(), json!(zone));
            }
            Timing::Weekly {
                time,
                zone,
                weekdays,
            } => {
                m.insert("time".into(), json!(clock(*time)));
                m.insert("timeZone".into(), json!(zone));
                m.insert("weekdays".into(), json!(weekdays));
            }
            Timing::Cron { cron, zone } => {
                m.insert("expression".into(), json!(cron.text));
                m.insert("timeZone".into(), json!(zone));
            }
        }
        m.insert("scheduledAt".into(), json!(instant(self.scheduled_at)));
        Value::Object(m)
    }

    /// Reads a stored record; the error names what is wrong with it.
    pub fn from_json(v: &Value) -> Result<Record, String> {
        let s = |k: &str| -> Result<String, String> {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| format!("`{k}` must be a string"))
        };
        let u = |k: &str| -> Result<u64, String> {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| format!("`{k}` must be a positive integer"))
        };
        let id = s("id")?;
        if id.is_empty() || id.trim() != id {
            return Err("`id` must be non-empty without surrounding spaces".into());
        }
        let zone = || -> Result<String, String> {
            let z = s("timeZone")?;
            zone_of(&z).map_err(|e| e.message)?;
            Ok(z)
        };
        let time =
            || -> Result<Time, String> { parse_clock(&s("time")?, "time").map_err(|e| e.message) };
        let timing = match s("kind")?.as_str() {
            "after" => Timing::After {
                seconds: u("afterSeconds")?,
            },
            "at" => Timing::At,
            "every" => Timing::Every {
                seconds: u("everySeconds")?.max(MIN_EVERY_SECONDS),
            },
            "daily" => Timing::Daily {
                time: time()?,
                zone: zone()?,
            },
            "weekly" => Timing::Weekly {
                time: time()?,
                zone: zone()?,
                weekdays: weekdays(v.get("weekdays").unwrap_or(&Value::Null))
                    .map_err(|e| e.message)?,
            },
            "cron" => Timing::Cron {
                cron: Cron::parse(&s("expression")?).map_err(|e| e.message)?,
                zone: zone()?,
            },
            other => return Err(format!("unknown kind \"{other}\"")),
        };
        let scheduled_at = s("scheduledAt")?
            .parse::<Timestamp>()
            .map_err(|e| format!("`scheduledAt` is not an instant: {e}"))?;
        Ok(Record {
            id,
            title: s("title")?,
            prompt: s("prompt")?,
            timing,
            scheduled_at,
        })
    }

    /// The management view: the record plus `state` and `deliveryMode`.
    pub fn view(&self, now: Timestamp) -> Value {
        let mut v = self.to_json();
        let state = if now >= self.scheduled_at {
            "overdue"
        } else {
            "scheduled"
        };
        v["state"] = json!(state);
        v["deliveryMode"] = json!("host");
        v
    }
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ`, the stored instant form.
pub fn instant(t: Timestamp) -> String {
    let z = t.to_zoned(TimeZone::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        z.year(),
        z.month(),
        z.day(),
        z.hour(),
        z.minute(),
        z.second(),
        z.millisecond()
    )
}

fn clock(t: Time) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}

/// A zone name the database knows: `UTC` or `Area/Location`.
pub fn zone_of(name: &str) -> Result<TimeZone, InputError> {
    let bad = || {
        input(
            "invalid_time_zone",
            format!(
                "\"{name}\" is not a time zone; use UTC or an IANA Area/Location name such as Europe/Paris"
            ),
        )
    };
    let shaped = name == "UTC"
        || (name.contains('/')
            && name.trim() == name
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/_+-.".contains(c)));
    if !shaped {
        return Err(bad());
    }
    TimeZone::get(name).map_err(|_| bad())
}

/// `HH:MM:SS` with 1–3 optional fraction digits (no leap second, no 24:00).
fn parse_clock(text: &str, field: &str) -> Result<Time, InputError> {
    let bad = || {
        input(
            "invalid_rule",
            format!("{field} must look like 09:30:00 (HH:MM:SS, optionally .SSS), got \"{text}\""),
        )
    };
    let (main, frac) = match text.split_once('.') {
        Some((m, f)) if (1..=3).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()) => {
            (m, f)
        }
        Some(_) => return Err(bad()),
        None => (text, ""),
    };
    let parts: Vec<&str> = main.split(':').collect();
    if parts.len() != 3
        || parts
            .iter()
            .any(|p| p.len() != 2 || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return Err(bad());
    }
    let num = |p: &str| p.parse::<i8>().map_err(|_| bad());
    let (h, m, s) = (num(parts[0])?, num(parts[1])?, num(parts[2])?);
    if h > 23 || m > 59 || s > 59 {
        return Err(bad());
    }
    let millis: i32 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<3}").parse().map_err(|_| bad())?
    };
    Time::new(h, m, s, millis * 1_000_000).map_err(|_| bad())
}

fn weekdays(v: &Value) -> Result<Vec<i8>, InputError> {
    let list = v.as_array().filter(|l| !l.is_empty()).ok_or_else(|| {
        input(
            "invalid_rule",
            "weekly.weekdays must be a non-empty list of ISO weekdays (1 = Monday … 7 = Sunday)",
        )
    })?;
    let mut out = Vec::new();
    for item in list {
        let day = item
            .as_i64()
            .filter(|d| (1..=7).contains(d))
            .ok_or_else(|| {
                input(
                    "invalid_rule",
                    format!("weekday {item} is not 1 (Monday) … 7 (Sunday)"),
                )
            })? as i8;
        if out.contains(&day) {
            return Err(input(
                "invalid_rule",
                format!("weekday {day} is listed twice"),
            ));
        }
        out.push(day);
    }
    out.sort_unstable();
    Ok(out)
}

/// The instant of local `dt` in `tz`: `None` in a gap, the earlier instant in a fold.
fn resolve(tz: &TimeZone, dt: DateTime) -> Option<Timestamp> {
    let offset = match tz.to_ambiguous_timestamp(dt).offset() {
        AmbiguousOffset::Unambiguous { offset } => offset,
        AmbiguousOffset::Gap { .. } => return None,
        AmbiguousOffset::Fold { before, .. } => before,
    };
    offset.to_timestamp(dt).ok()
}

/// The first local occurrence after `now` on a day `day_ok` admits, at one of `times`.
fn next_wall(
    zone: &str,
    now: Timestamp,
    day_ok: impl Fn(Date) -> bool,
    times: &[Time],
) -> Option<Timestamp> {
    let tz = TimeZone::get(zone).ok()?;
    let today: Zoned = now.to_zoned(tz.clone());
    let mut day = today.date();
    // Today's times well before the local time now cannot be next (two hours of slack
    // cover any DST shift); skipping them keeps a dense rule cheap.
    let early = today
        .time()
        .checked_sub(jiff::SignedDuration::from_hours(2))
        .ok()
        .filter(|t| *t < today.time());
    for _ in 0..SEARCH_DAYS {
        if day_ok(day) {
            for &t in times {
                if day == today.date() && early.is_some_and(|e| t < e) {
                    continue;
                }
                if let Some(at) = resolve(&tz, day.to_datetime(t))
                    && at > now
                {
                    return Some(at);
                }
            }
        }
        day = day.tomorrow().ok()?;
    }
    None
}

/// A five-field Vixie cron expression: minute, hour, day of month, month, day of week
/// (`*`, `a`, `a-b`, `*/n`, `a-b/n`, lists; month and weekday names; 7 is Sunday). When
/// both day fields are restricted, a day matches if either does.
#[derive(Clone, Debug, PartialEq)]
pub struct Cron {
    /// Canonical text: single spaces, lower-case names.
    pub text: String,
    minutes: Vec<i8>,
    hours: Vec<i8>,
    days: Vec<i8>,
    months: Vec<i8>,
    /// 0 = Sunday … 6 = Saturday.
    weekdays: Vec<i8>,
    days_any: bool,
    weekdays_any: bool,
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: [&str; 7] = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

impl Cron {
    pub fn parse(text: &str) -> Result<Cron, InputError> {
        let fields: Vec<String> = text
            .split_whitespace()
            .map(str::to_ascii_lowercase)
            .collect();
        if fields.len() != 5 {
            return Err(input(
                "invalid_rule",
                format!(
                    "a cron expression has five fields (minute hour day-of-month month day-of-week), got {}: \"{text}\"",
                    fields.len()
                ),
            ));
        }
        let minutes = field(&fields[0], "minute", 0, 59, &[])?;
        let hours = field(&fields[1], "hour", 0, 23, &[])?;
        let days = field(&fields[2], "day-of-month", 1, 31, &[])?;
        let months = field(&fields[3], "month", 1, 12, &MONTHS)?;
        let mut weekdays: Vec<i8> = field(&fields[4], "day-of-week", 0, 7, &DAYS)?
            .into_iter()
            .map(|d| d % 7)
            .collect();
        weekdays.sort_unstable();
        weekdays.dedup();
        Ok(Cron {
            text: fields.join(" "),
            minutes,
            hours,
            days,
            months,
            weekdays,
            days_any: fields[2].starts_with('*'),
            weekdays_any: fields[4].starts_with('*'),
        })
    }

    fn day_matches(&self, d: Date) -> bool {
        if !self.months.contains(&d.month()) {
            return false;
        }
        let dom = self.days.contains(&d.day());
        let dow = self.weekdays.contains(&d.weekday().to_sunday_zero_offset());
        if self.days_any || self.weekdays_any {
            dom && dow
        } else {
            dom || dow
        }
    }

    fn times(&self) -> Vec<Time> {
        let mut out = Vec::with_capacity(self.hours.len() * self.minutes.len());
        for h in &self.hours {
            for m in &self.minutes {
                if let Ok(t) = Time::new(*h, *m, 0, 0) {
                    out.push(t);
                }
            }
        }
        out
    }
}

fn field(text: &str, name: &str, lo: i8, hi: i8, names: &[&str]) -> Result<Vec<i8>, InputError> {
    let bad = |why: String| {
        input(
            "invalid_rule",
            format!("cron {name} field \"{text}\": {why}"),
        )
    };
    let value = |s: &str| -> Result<i8, InputError> {
        if let Some(i) = names.iter().position(|n| *n == s) {
            return Ok(i as i8 + lo);
        }
        let n: i8 = s
            .parse()
            .map_err(|_| bad(format!("\"{s}\" is not a number")))?;
        if n < lo || n > hi {
            return Err(bad(format!("{n} is outside {lo}–{hi}")));
        }
        Ok(n)
    };
    let mut out = Vec::new();
    for item in text.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => {
                let step: i8 = s
                    .parse()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| bad(format!("step \"{s}\" is not a positive number")))?;
                (r, step)
            }
            None => (item, 1),
        };
        let (from, to) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else {
            let v = value(range)?;
            // `a/n` runs from a to the end of the range, as in Vixie cron.
            (v, if item.contains('/') { hi } else { v })
        };
        if from > to {
            return Err(bad(format!("range {from}-{to} runs backwards")));
        }
        let mut v = from;
        while v <= to {
            out.push(v);
            match v.checked_add(step) {
                Some(n) => v = n,
                None => break,
            }
        }
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// The tool arguments' timing selector, validated, and the first occurrence after `now`.
pub fn timing_from_args(args: &Value, now: Timestamp) -> Result<(Timing, Timestamp), InputError> {
    let present: Vec<&str> = [
        "after_seconds",
        "at",
        "every_seconds",
        "daily",
        "weekly",
        "cron",
    ]
    .into_iter()
    .filter(|k| args.get(*k).is_some_and(|v| !v.is_null()))
    .collect();
    let [key] = present.as_slice() else {
        return Err(input(
            "invalid_selector",
            format!(
                "give exactly one timing: after_seconds, at, every_seconds, daily, weekly or cron (got {})",
                if present.is_empty() {
                    "none".to_string()
                } else {
                    present.join(", ")
                }
            ),
        ));
    };
    timing_of(key, &args[*key], now)
}

/// One selector's value (`key` is its argument name).
pub fn timing_of(key: &str, v: &Value, now: Timestamp) -> Result<(Timing, Timestamp), InputError> {
    let first = |t: Timing| -> Result<(Timing, Timestamp), InputError> {
        let at = t.next_after(now, now).ok_or_else(|| {
            input(
                "invalid_rule",
                "this rule never occurs (no matching local time in the next eight years)",
            )
        })?;
        Ok((t, at))
    };
    match key {
        "after_seconds" => {
            let secs = whole_seconds(v, "after_seconds")?;
            if secs == 0 {
                return Err(input("invalid_rule", "after_seconds must be at least 1"));
            }
            let at = now
                .checked_add(jiff::SignedDuration::from_secs(secs as i64))
                .map_err(|_| input("time_out_of_range", "after_seconds reaches past year 9999"))?;
            Ok((Timing::After { seconds: secs }, at))
        }
        "every_seconds" => {
            let secs = whole_seconds(v, "every_seconds")?;
            if secs < MIN_EVERY_SECONDS {
                return Err(input(
                    "frequency_too_high",
                    format!("every_seconds must be at least {MIN_EVERY_SECONDS}, got {secs}"),
                ));
            }
            let at = now
                .checked_add(jiff::SignedDuration::from_secs(secs as i64))
                .map_err(|_| input("time_out_of_range", "every_seconds reaches past year 9999"))?;
            Ok((Timing::Every { seconds: secs }, at))
        }
        "at" => Ok((Timing::At, absolute(v, now)?)),
        "daily" | "weekly" | "cron" => {
            let obj = v
                .as_object()
                .ok_or_else(|| input("invalid_rule", format!("{key} must be an object")))?;
            let allowed: &[&str] = match key {
                "daily" => &["time", "time_zone"],
                "weekly" => &["time", "time_zone", "weekdays"],
                _ => &["expression", "time_zone"],
            };
            if let Some(extra) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
                return Err(input(
                    "invalid_rule",
                    format!(
                        "{key} takes only {}; \"{extra}\" is not one of them",
                        allowed.join(", ")
                    ),
                ));
            }
            let zone = obj
                .get("time_zone")
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    input("invalid_time_zone", format!("{key}.time_zone is required"))
                })?;
            zone_of(zone)?;
            let zone = zone.to_string();
            let time = || -> Result<Time, InputError> {
                let t = obj
                    .get("time")
                    .and_then(Value::as_str)
                    .ok_or_else(|| input("invalid_rule", format!("{key}.time is required")))?;
                parse_clock(t, &format!("{key}.time"))
            };
            match key {
                "daily" => first(Timing::Daily {
                    time: time()?,
                    zone,
                }),
                "weekly" => first(Timing::Weekly {
                    time: time()?,
                    zone,
                    weekdays: weekdays(obj.get("weekdays").unwrap_or(&Value::Null))?,
                }),
                _ => {
                    let expr = obj
                        .get("expression")
                        .and_then(Value::as_str)
                        .ok_or_else(|| input("invalid_rule", "cron.expression is required"))?;
                    first(Timing::Cron {
                        cron: Cron::parse(expr)?,
                        zone,
                    })
                }
            }
        }
        other => Err(input(
            "invalid_selector",
            format!("unknown timing \"{other}\""),
        )),
    }
}

fn whole_seconds(v: &Value, name: &str) -> Result<u64, InputError> {
    v.as_f64()
        .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < 9.0e15)
        .map(|f| f as u64)
        .ok_or_else(|| {
            input(
                "invalid_rule",
                format!("{name} must be a whole number of seconds"),
            )
        })
}

/// `at`: an RFC 3339 instant with an offset, or `{date, time, time_zone}`.
fn absolute(v: &Value, now: Timestamp) -> Result<Timestamp, InputError> {
    let at = match v {
        Value::String(text) => {
            let has_offset = text.ends_with('Z')
                || text.ends_with('z')
                || text
                    .rsplit_once(['+', '-'])
                    .is_some_and(|(head, tail)| head.contains('T') && tail.contains(':'));
            if !has_offset {
                return Err(input(
                    "invalid_rule",
                    format!(
                        "at \"{text}\" has no offset; add Z or ±HH:MM, or give {{date, time, time_zone}}"
                    ),
                ));
            }
            text.parse::<Timestamp>().map_err(|e| {
                input(
                    "invalid_rule",
                    format!("at \"{text}\" is not an RFC 3339 date-time: {e}"),
                )
            })?
        }
        Value::Object(obj) => {
            if let Some(extra) = obj
                .keys()
                .find(|k| !["date", "time", "time_zone"].contains(&k.as_str()))
            {
                return Err(input(
                    "invalid_rule",
                    format!("at takes date, time and time_zone; \"{extra}\" is not one of them"),
                ));
            }
            let get = |k: &str| {
                obj.get(k)
                    .and_then(Value::as_str)
                    .ok_or_else(|| input("invalid_rule", format!("at.{k} is required")))
            };
            let zone_name = get("time_zone")
                .map_err(|_| input("invalid_time_zone", "at.time_zone is required"))?;
            let tz = zone_of(zone_name)?;
            let date_text = get("date")?;
            let date: Date = date_text
                .parse()
                .ok()
                .filter(|_| date_text.len() == 10)
                .ok_or_else(|| {
                    input(
                        "invalid_rule",
                        format!("at.date \"{date_text}\" is not a YYYY-MM-DD date"),
                    )
                })?;
            let time = parse_clock(get("time")?, "at.time")?;
            resolve(&tz, date.to_datetime(time)).ok_or_else(|| {
                input(
                    "invalid_rule",
                    format!(
                        "{date_text} {} does not exist in {zone_name} (a daylight-saving gap)",
                        clock(time)
                    ),
                )
            })?
        }
        _ => {
            return Err(input(
                "invalid_rule",
                "at must be a string or {date, time, time_zone}",
            ));
        }
    };
    if at <= now {
        return Err(input(
            "not_future",
            format!("at {} is not in the future", instant(at)),
        ));
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn cron_fields_names_steps_and_either_day_rule() {
        let c = Cron::parse("*/15 9-17 * * MON-fri").unwrap();
        assert_eq!(c.text, "*/15 9-17 * * mon-fri");
        assert_eq!(c.minutes, vec![0, 15, 30, 45]);
        // Saturday 2026-12-05 09:00 UTC → Monday 2026-12-07 09:00.
        let t = Timing::Cron {
            cron: c,
            zone: "UTC".into(),
        };
        assert_eq!(
            instant(
                t.next_after(ts("2026-12-05T09:00:00Z"), ts("2026-12-05T09:00:00Z"))
                    .unwrap()
            ),
            "2026-12-07T09:00:00.000Z"
        );
        // Both day fields restricted: the 1st of the month or any Friday.
        let c = Cron::parse("0 12 1 * 5").unwrap();
        let t = Timing::Cron {
            cron: c,
            zone: "UTC".into(),
        };
        let now = ts("2026-12-02T00:00:00Z"); // a Wednesday
        assert_eq!(
            instant(t.next_after(now, now).unwrap()),
            "2026-12-04T12:00:00.000Z"
        );
        assert!(Cron::parse("61 * * * *").is_err());
        assert!(Cron::parse("* * * *").is_err());
        assert_eq!(Cron::parse("0 0 * * 7").unwrap().weekdays, vec![0]);
    }

    #[test]
    fn wall_clock_rules_skip_gaps_and_fire_once_in_folds() {
        // Europe/Berlin springs forward 2027-03-28 02:00 → 03:00: 02:30 does not exist.
        let t = Timing::Daily {
            time: Time::new(2, 30, 0, 0).unwrap(),
            zone: "Europe/Berlin".into(),
        };
        let now = ts("2027-03-27T12:00:00Z");
        assert_eq!(
            instant(t.next_after(now, now).unwrap()),
            "2027-03-29T00:30:00.000Z"
        );
        // It falls back 2027-10-31 03:00 → 02:00: 02:30 happens twice, fires at the first.
        let now = ts("2027-10-30T12:00:00Z");
        let first = t.next_after(now, now).unwrap();
        assert_eq!(instant(first), "2027-10-31T00:30:00.000Z");
        // After the first, the next is the following day (not the repeat an hour later).
        assert_eq!(
            instant(t.next_after(first, first).unwrap()),
            "2027-11-01T01:30:00.000Z"
        );
    }

    #[test]
    fn selectors_are_checked_and_stored_in_upstream_shape() {
        let now = ts("2026-12-04T10:00:00Z");
        let (t, at) = timing_from_args(&json!({"after_seconds": 90}), now).unwrap();
        assert_eq!(instant(at), "2026-12-04T10:01:30.000Z");
        let r = Record {
            id: "s".into(),
            title: "T".into(),
            prompt: "p".into(),
            timing: t,
            scheduled_at: at,
        };
        assert_eq!(
            dsh_kernel::json::to_string(&r.to_json()),
            r#"{"id":"s","kind":"after","title":"T","prompt":"p","afterSeconds":90,"scheduledAt":"2026-12-04T10:01:30.000Z"}"#
        );
        assert_eq!(Record::from_json(&r.to_json()).unwrap(), r);
        let weekly = json!({"weekly": {"time": "09:00:00", "time_zone": "Asia/Shanghai", "weekdays": [5, 1]}});
        let (t, at) = timing_from_args(&weekly, now).unwrap();
        assert_eq!(instant(at), "2026-12-07T01:00:00.000Z");
        let r = Record {
            id: "w".into(),
            title: "T".into(),
            prompt: "p".into(),
            timing: t,
            scheduled_at: at,
        };
        assert_eq!(r.to_json()["weekdays"], json!([1, 5]));
        assert_eq!(r.to_json()["time"], json!("09:00:00.000"));
        assert_eq!(Record::from_json(&r.to_json()).unwrap(), r);

        let code = |v: Value| timing_from_args(&v, now).unwrap_err().code;
        assert_eq!(code(json!({})), "invalid_selector");
        assert_eq!(
            code(json!({"after_seconds": 5, "every_seconds": 60})),
            "invalid_selector"
        );
        assert_eq!(code(json!({"every_seconds": 30})), "frequency_too_high");
        assert_eq!(code(json!({"at": "2020-01-01T00:00:00Z"})), "not_future");
        assert_eq!(code(json!({"at": "2027-01-01T00:00:00"})), "invalid_rule");
        assert_eq!(
            code(json!({"daily": {"time": "9:00", "time_zone": "UTC"}})),
            "invalid_rule"
        );
        assert_eq!(
            code(json!({"daily": {"time": "09:00:00", "time_zone": "Mars/Olympus"}})),
            "invalid_time_zone"
        );
        assert_eq!(
            code(
                json!({"at": {"date": "2027-03-28", "time": "02:30:00", "time_zone": "Europe/Berlin"}})
            ),
            "invalid_rule"
        );
        let (_, at) = timing_from_args(
            &json!({"at": {"date": "2027-01-02", "time": "08:00:00", "time_zone": "America/New_York"}}),
            now,
        )
        .unwrap();
        assert_eq!(instant(at), "2027-01-02T13:00:00.000Z");
    }

    #[test]
    fn a_fixed_rate_keeps_its_grid() {
        let t = Timing::Every { seconds: 60 };
        let anchor = ts("2026-12-04T10:00:00Z");
        assert_eq!(
            instant(t.next_after(anchor, ts("2026-12-04T10:05:30Z")).unwrap()),
            "2026-12-04T10:06:00.000Z"
        );
        assert_eq!(
            instant(t.next_after(anchor, ts("2026-12-04T09:00:00Z")).unwrap()),
            "2026-12-04T10:00:00.000Z"
        );
    }
}
