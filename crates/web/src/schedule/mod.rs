//! Scheduled reminders (0.2.1's `@deepseek-ai/dsh-schedule` and `@deepseek-ai/dsh-tool-schedule`):
//! the model creates reminders in its own session with `schedule_create` and manages them
//! with `schedule_list`, `schedule_update` and `schedule_delete`; when one is due, dsh web
//! delivers its prompt into the session as a user message (`source: {kind: "schedule"}`),
//! which starts a turn as a typed message would.
//!
//! Tasks live outside any session, in `<storages>/schedule.json` (unit `schedule` v1,
//! `tables.tasks.<id> = {sessionId, record, status, lastDelivery?, deliveryHistory}`), so a
//! reminder fires even when its session is not open. The file is rewritten whole (temp file,
//! fsync, rename); a task this build cannot read is reported and left as it is. A delivery
//! is committed after the session flushed the message, so a crash in between can deliver it
//! twice but never loses it. After downtime a recurring reminder delivers only its latest
//! missed occurrence.

mod driver;
pub(crate) mod rule;
mod tools;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_kernel::{BoxError, Context, Plugin, PluginConfig};
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::{Map, Value, json};

pub(crate) use driver::drive;
use rule::{InputError, Record, Timing, input};

/// Delivery records kept per task, unless the row says otherwise (0.2.1's defaults).
const DEFAULT_HISTORY_DAYS: u64 = 30;
const DEFAULT_HISTORY_RECORDS: u64 = 200;

/// Why a schedule operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// The request cannot become a reminder (0.2.1's public codes). Not retryable as is.
    #[error("{}", .0.message)]
    Input(InputError),
    /// The store cannot be read or written. Retryable.
    #[error("reminder store {path}: {detail}")]
    Store { path: String, detail: String },
}

impl From<InputError> for ScheduleError {
    fn from(e: InputError) -> Self {
        ScheduleError::Input(e)
    }
}

/// One stored task.
#[derive(Clone, Debug)]
pub struct Task {
    pub session_id: String,
    pub record: Record,
    pub active: bool,
    pub last_delivery: Option<Value>,
}

impl Task {
    /// What the page shows: the view plus session, status and the last delivery.
    pub fn to_page_json(&self, now: Timestamp) -> Value {
        let mut v = self.record.view(now);
        v["sessionId"] = json!(self.session_id);
        v["status"] = json!(if self.active { "active" } else { "inactive" });
        if let Some(d) = &self.last_delivery {
            v["lastDelivery"] = d.clone();
        }
        v
    }
}

/// What `update` did.
pub enum Updated {
    Done(Box<Record>),
    NotFound,
    Ended,
}

/// A change to apply in `update`.
#[derive(Default)]
pub struct Change {
    pub title: Option<String>,
    pub prompt: Option<String>,
    pub timing: Option<(Timing, Timestamp)>,
}

/// The reminder store and the wake-up signal of the delivery loop.
pub struct ScheduleService {
    path: PathBuf,
    lock: Mutex<()>,
    history_days: u64,
    history_records: usize,
    pub(crate) wake: tokio::sync::Notify,
    /// Task ids already reported unreadable (reported once per process).
    reported: Mutex<Vec<String>>,
}

fn empty_document() -> Value {
    json!({"unit": {"name": "schedule", "version": 1}, "global": {}, "tables": {"tasks": {}}})
}

impl ScheduleService {
    pub fn new(root: &Path, history_days: u64, history_records: u64) -> Self {
        Self {
            path: root.join("schedule.json"),
            lock: Mutex::new(()),
            history_days,
            history_records: history_records as usize,
            wake: tokio::sync::Notify::new(),
            reported: Mutex::default(),
        }
    }

    fn store_error(&self, detail: impl Into<String>) -> ScheduleError {
        ScheduleError::Store {
            path: self.path.display().to_string(),
            detail: detail.into(),
        }
    }

    fn read(&self) -> Result<Value, ScheduleError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(empty_document()),
            Err(e) => return Err(self.store_error(e.to_string())),
        };
        let doc: Value = serde_json::from_str(&text)
            .map_err(|e| self.store_error(format!("not JSON ({e}); fix or remove the file")))?;
        if doc.pointer("/unit/name").and_then(Value::as_str) != Some("schedule") {
            return Err(self.store_error("its unit is not \"schedule\""));
        }
        let version = doc.pointer("/unit/version").and_then(Value::as_u64);
        if version != Some(1) {
            return Err(self.store_error(format!(
                "unit version {} is not the one this build reads (1)",
                version.map_or("missing".into(), |v| v.to_string())
            )));
        }
        Ok(doc)
    }

    fn write(&self, doc: &Value) -> Result<(), ScheduleError> {
        if let Some(dir) = self.path.parent()
            && !dir.exists()
        {
            std::fs::create_dir_all(dir).map_err(|e| self.store_error(e.to_string()))?;
        }
        let text = serde_json::to_string_pretty(doc).unwrap_or_default() + "\n";
        crate::workspaces::write_private(&self.path, text.as_bytes())
            .map_err(|e| self.store_error(e.to_string()))
    }

    /// Runs `f` on the task table; writes when it says it changed something.
    fn update<R>(
        &self,
        f: impl FnOnce(&mut Map<String, Value>) -> Result<(R, bool), ScheduleError>,
    ) -> Result<R, ScheduleError> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = self.read()?;
        let table = table(&mut doc);
        let (result, changed) = f(table)?;
        if changed {
            self.write(&doc)?;
            self.wake.notify_one();
        }
        Ok(result)
    }

    fn parse(&self, id: &str, raw: &Value) -> Option<Task> {
        let parsed = (|| -> Result<Task, String> {
            let record = Record::from_json(raw.get("record").unwrap_or(&Value::Null))?;
            if record.id != id {
                return Err(format!(
                    "its record id \"{}\" differs from its key",
                    record.id
                ));
            }
            Ok(Task {
                session_id: raw
                    .get("sessionId")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .ok_or("`sessionId` must be a non-empty string")?
                    .to_string(),
                active: raw.get("status").and_then(Value::as_str) != Some("inactive"),
                last_delivery: raw.get("lastDelivery").cloned(),
                record,
            })
        })();
        match parsed {
            Ok(t) => Some(t),
            Err(e) => {
                let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
                if !reported.iter().any(|r| r == id) {
                    reported.push(id.to_string());
                    tracing::warn!(
                        "reminders: task \"{id}\" in {} cannot be read ({e}); it is left as it is and never fires",
                        self.path.display()
                    );
                }
                None
            }
        }
    }

    /// Every readable task.
    pub fn catalog(&self) -> Result<Vec<Task>, ScheduleError> {
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let mut doc = self.read()?;
        let mut tasks: Vec<Task> = table(&mut doc)
            .iter()
            .filter_map(|(id, raw)| self.parse(id, raw))
            .collect();
        tasks.sort_by_key(|t| t.record.scheduled_at);
        Ok(tasks)
    }

    /// The active reminders of one session, soonest first.
    pub fn list(&self, session: &str) -> Result<Vec<Record>, ScheduleError> {
        Ok(self
            .catalog()?
            .into_iter()
            .filter(|t| t.active && t.session_id == session)
            .map(|t| t.record)
            .collect())
    }

    pub fn create(
        &self,
        session: &str,
        title: String,
        prompt: String,
        (timing, at): (Timing, Timestamp),
    ) -> Result<Record, ScheduleError> {
        let record = Record {
            id: format!("schedule-{}", uuid::Uuid::new_v4()),
            title,
            prompt,
            timing,
            scheduled_at: at,
        };
        self.update(|tasks| {
            tasks.insert(
                record.id.clone(),
                json!({
                    "sessionId": session,
                    "record": record.to_json(),
                    "status": "active",
                    "deliveryHistory": {"records": [], "earlierRecordsUnavailable": false},
                }),
            );
            Ok((record.clone(), true))
        })
    }

    /// Deletes a task, active or not; with `session`, only one of that session.
    pub fn delete(&self, session: Option<&str>, id: &str) -> Result<bool, ScheduleError> {
        self.update(|tasks| {
            let owned = tasks.get(id).is_some_and(|t| {
                session.is_none_or(|s| t.get("sessionId").and_then(Value::as_str) == Some(s))
            });
            if owned {
                tasks.remove(id);
            }
            Ok((owned, owned))
        })
    }

    /// Deletes every task of a deleted session.
    pub fn forget_session(&self, session: &str) -> Result<usize, ScheduleError> {
        self.update(|tasks| {
            let before = tasks.len();
            tasks.retain(|_, t| t.get("sessionId").and_then(Value::as_str) != Some(session));
            let gone = before - tasks.len();
            Ok((gone, gone > 0))
        })
    }

    /// Changes a task of `session` in place (id kept).
    pub fn change(
        &self,
        session: &str,
        id: &str,
        change: Change,
    ) -> Result<Updated, ScheduleError> {
        self.update(|tasks| {
            let Some(raw) = tasks.get(id) else {
                return Ok((Updated::NotFound, false));
            };
            let Some(task) = self.parse(id, raw) else {
                return Ok((Updated::NotFound, false));
            };
            if task.session_id != session {
                return Ok((Updated::NotFound, false));
            }
            if !task.active {
                return Ok((Updated::Ended, false));
            }
            let mut record = task.record;
            if let Some(t) = change.title {
                record.title = t;
            }
            if let Some(p) = change.prompt {
                record.prompt = p;
            }
            if let Some((timing, at)) = change.timing {
                record.timing = timing;
                record.scheduled_at = at;
            }
            if let Some(raw) = tasks.get_mut(id) {
                raw["record"] = record.to_json();
            }
            Ok((Updated::Done(Box::new(record)), true))
        })
    }

    /// Active tasks due at `now`.
    pub fn due(&self, now: Timestamp) -> Result<Vec<Task>, ScheduleError> {
        Ok(self
            .catalog()?
            .into_iter()
            .filter(|t| t.active && t.record.scheduled_at <= now)
            .collect())
    }

    /// Commits one delivery: the receipt joins the history (bounded by the retention
    /// settings), the target moves to `next` or the task ends.
    pub fn delivered(
        &self,
        id: &str,
        occurrence: Timestamp,
        delivered_at: Timestamp,
        message_id: &str,
        next: Option<Timestamp>,
    ) -> Result<(), ScheduleError> {
        let days = self.history_days;
        let cap = self.history_records;
        self.update(|tasks| {
            let Some(raw) = tasks.get_mut(id) else {
                // Deleted while its message was being delivered: nothing to record.
                return Ok(((), false));
            };
            let receipt = json!({
                "scheduledAt": rule::instant(occurrence),
                "deliveredAt": rule::instant(delivered_at),
                "messageId": message_id,
            });
            let history = raw
                .get("deliveryHistory")
                .cloned()
                .unwrap_or_else(|| json!({"records": [], "earlierRecordsUnavailable": false}));
            let mut records: Vec<Value> = history
                .get("records")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            records.push(receipt.clone());
            let floor = delivered_at
                .checked_sub(jiff::SignedDuration::from_hours(24 * days as i64))
                .unwrap_or(delivered_at);
            let before = records.len();
            records.retain(|r| {
                r.get("deliveredAt")
                    .and_then(Value::as_str)
                    .and_then(|t| t.parse::<Timestamp>().ok())
                    .is_none_or(|t| t >= floor)
            });
            if records.len() > cap {
                records.drain(..records.len() - cap);
            }
            let pruned = records.len() < before
                || history.get("earlierRecordsPruned").and_then(Value::as_bool) == Some(true);
            let mut history_out = json!({
                "records": records,
                "earlierRecordsUnavailable": history.get("earlierRecordsUnavailable").and_then(Value::as_bool).unwrap_or(false),
            });
            if pruned {
                history_out["earlierRecordsPruned"] = json!(true);
            }
            raw["deliveryHistory"] = history_out;
            raw["lastDelivery"] = receipt;
            match next {
                Some(at) => {
                    if let Some(r) = raw.get_mut("record") {
                        r["scheduledAt"] = json!(rule::instant(at));
                    }
                }
                None => raw["status"] = json!("inactive"),
            }
            Ok(((), true))
        })
    }
}

fn table(doc: &mut Value) -> &mut Map<String, Value> {
    fn object(v: &mut Value) -> &mut Map<String, Value> {
        if !v.is_object() {
            *v = json!({});
        }
        match v {
            Value::Object(m) => m,
            _ => unreachable!("just made an object"),
        }
    }
    let root = object(doc);
    let tables = object(root.entry("tables").or_insert_with(|| json!({})));
    object(tables.entry("tasks").or_insert_with(|| json!({})))
}

/// Checks a title as 0.2.1 does: required, non-blank, at most 120 characters.
pub(crate) fn title_of(v: Option<&Value>) -> Result<String, InputError> {
    let t = v.and_then(Value::as_str).map(str::trim).unwrap_or_default();
    if t.is_empty() {
        return Err(input(
            "invalid_prompt",
            "title is required and cannot be blank",
        ));
    }
    if t.chars().count() > rule::MAX_TITLE_CHARS {
        return Err(input(
            "invalid_prompt",
            format!("title is longer than {} characters", rule::MAX_TITLE_CHARS),
        ));
    }
    Ok(t.to_string())
}

pub(crate) fn prompt_of(v: Option<&Value>) -> Result<String, InputError> {
    let p = v.and_then(Value::as_str).map(str::trim).unwrap_or_default();
    if p.is_empty() {
        return Err(input("invalid_prompt", "prompt cannot be blank"));
    }
    Ok(p.to_string())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ScheduleRow {
    delivery_history_days: Option<u64>,
    delivery_history_records: Option<u64>,
}

/// `@deepseek-ai/dsh-schedule`: the reminder store and the delivery loop (run by `dsh web`).
pub struct SchedulePlugin;

impl Plugin for SchedulePlugin {
    fn name(&self) -> &'static str {
        "@deepseek-ai/dsh-schedule"
    }

    fn apply(&self, ctx: &Context, config: &PluginConfig) -> Result<(), BoxError> {
        let row: ScheduleRow = config.parse()?;
        let days = row.delivery_history_days.unwrap_or(DEFAULT_HISTORY_DAYS);
        let records = row
            .delivery_history_records
            .unwrap_or(DEFAULT_HISTORY_RECORDS);
        if !(1..=3650).contains(&days) {
            return Err(
                format!("schedule: deliveryHistoryDays must be 1 to 3650, got {days}").into(),
            );
        }
        if !(1..=10_000).contains(&records) {
            return Err(format!(
                "schedule: deliveryHistoryRecords must be 1 to 10000, got {records}"
            )
            .into());
        }
        let root = ctx
            .require::<crate::StorageRoot>()
            .map_err(|_| "schedule: needs the storage-json row (storage root)")?;
        ctx.provide(Arc::new(ScheduleService::new(&root.0, days, records)))?;
        Ok(())
    }
}

pub use tools::ToolSchedulePlugin;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn tasks_are_created_listed_changed_delivered_and_deleted() {
        let dir = tempfile::tempdir().unwrap();
        let svc = ScheduleService::new(dir.path(), 30, 2);
        let now: Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        let every = rule::timing_from_args(&json!({"every_seconds": 60}), now).unwrap();
        let r = svc
            .create("s1", "Check CI".into(), "look at CI".into(), every)
            .unwrap();
        assert!(r.id.starts_with("schedule-"));
        assert_eq!(svc.list("s1").unwrap().len(), 1);
        assert!(svc.list("s2").unwrap().is_empty());
        let raw: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("schedule.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(raw["unit"], json!({"name": "schedule", "version": 1}));
        assert_eq!(raw["tables"]["tasks"][&r.id]["sessionId"], "s1");

        // Three deliveries with a cap of two keep the last two receipts.
        for i in 0..3 {
            let at: Timestamp = format!("2026-12-04T10:0{}:00Z", i + 1).parse().unwrap();
            svc.delivered(
                &r.id,
                at,
                at,
                &format!("m{i}"),
                Some(at + jiff::SignedDuration::from_secs(60)),
            )
            .unwrap();
        }
        let raw: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("schedule.json")).unwrap(),
        )
        .unwrap();
        let task = &raw["tables"]["tasks"][&r.id];
        assert_eq!(
            task["deliveryHistory"]["records"].as_array().unwrap().len(),
            2
        );
        assert_eq!(task["lastDelivery"]["messageId"], "m2");
        assert_eq!(task["record"]["scheduledAt"], "2026-12-04T10:04:00.000Z");

        assert!(matches!(
            svc.change("s2", &r.id, Change::default()).unwrap(),
            Updated::NotFound
        ));
        let Updated::Done(changed) = svc
            .change(
                "s1",
                &r.id,
                Change {
                    title: Some("CI".into()),
                    ..Change::default()
                },
            )
            .unwrap()
        else {
            panic!("not changed")
        };
        assert_eq!(changed.title, "CI");
        assert!(!svc.delete(Some("s2"), &r.id).unwrap());
        assert!(svc.delete(Some("s1"), &r.id).unwrap());
        assert!(svc.catalog().unwrap().is_empty());
    }

    #[test]
    fn an_unreadable_task_is_kept_and_others_still_work() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("schedule.json"),
            r#"{"unit":{"name":"schedule","version":1},"tables":{"tasks":{"bad":{"sessionId":"s","record":{"kind":"nope"}}}}}"#,
        )
        .unwrap();
        let svc = ScheduleService::new(dir.path(), 30, 200);
        let now = Timestamp::now();
        let t = rule::timing_from_args(&json!({"after_seconds": 5}), now).unwrap();
        svc.create("s", "T".into(), "p".into(), t).unwrap();
        assert_eq!(svc.catalog().unwrap().len(), 1);
        let raw: Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("schedule.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(raw["tables"]["tasks"]["bad"]["record"]["kind"], "nope");
        std::fs::write(dir.path().join("schedule.json"), "{").unwrap();
        let e = svc.catalog().unwrap_err().to_string();
        assert!(e.contains("not JSON"), "{e}");
    }
}
